//===- support/Precompiled.h - Headers parsed once per build ----*- C++ -*-===//
//
// The standard headers and support/ headers that nearly every file of pipec
// includes, compiled once into a precompiled header (CMake's
// target_precompile_headers, the pipec_pch target of the top-level
// CMakeLists.txt) that every library reuses. Each of them cost a file about
// a second to parse (support/Error.h alone 0.9 s), over 180 files: about 3
// of the 15 CPU-minutes of README's first build. Only stable headers
// belong here: a change to one rebuilds everything. Files still include
// what they use; this header only makes it cheaper.
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
