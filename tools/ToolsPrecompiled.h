//===- tools/ToolsPrecompiled.h - Headers the tools parse once --*- C++ -*-===//
//
// support/Precompiled.h and the command-line and JSON libraries every tool
// includes: CLI11 (Debian's header-only build) and nlohmann/json are slow
// to parse, and each tool's main.cpp would parse them again
// (bench/results/log.md). The top-level CMakeLists.txt compiles it once,
// with pipec-samples, for every executable.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Precompiled.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
