//===- support/Precompiled.h - Headers parsed once per build ----*- C++ -*-===//
//
// The standard headers and support/ headers that nearly every file of pipec
// includes, compiled once into a precompiled header (CMake's
// target_precompile_headers, the pipec_pch target of the top-level
// CMakeLists.txt) that every library reuses. Parsing them again in every
// file was a sizeable part of a first build (bench/results/log.md). Only
// stable headers belong here: a change to one rebuilds everything. Files
// still include what they use; this header only makes it cheaper.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "support/Error.h"
#include "support/Tensor.h"
