//===- tools/ToolsPrecompiled.h - Headers the tools parse once --*- C++ -*-===//
//
// support/Precompiled.h and the command-line and JSON libraries every tool
// includes: CLI11 (Debian's header-only build) took 8.5 s to parse in each
// tool's main.cpp, nlohmann/json 2.6 s. The top-level CMakeLists.txt
// compiles it once, with pipec-samples, for every executable.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Precompiled.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
