//===- runtime/cpu/kernels/PadSpec.h - Pad's geometry, for every backend -*- C++ -*-===//
//
// What a Pad node asks for, read and checked once (runtime/cpu/kernels/
// Pad.cpp): the padded extents of every axis, the mode and the constant.
// padSource maps an output coordinate of one axis to its source coordinate;
// the CPU kernel tabulates it, the CUDA kernel (runtime/cuda/MoveBodies.h)
// calls it per element, so both backends pad by the one formula.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Kernel.h"
#include "runtime/cuda/Hd.h"

#include <cstdint>
#include <vector>

namespace pipec::cpu::dm {

enum class PadMode : int32_t { Constant, Reflect, Edge, Wrap };

PIPEC_HD inline int64_t padFloorMod(int64_t a, int64_t m) {
  const int64_t r = a % m;
  return r < 0 ? r + m : r;
}

/// Source coordinate of output coordinate `o` of an axis of size `dim`
/// padded by (begin, end) (negative: cropped); -1 for the constant.
PIPEC_HD inline int64_t padSource(int64_t o, int64_t dim, int64_t begin, int64_t end, PadMode mode) {
  const int64_t lo = begin < 0 ? -begin : 0;
  const int64_t len = dim - lo - (end < 0 ? -end : 0);
  const int64_t c = o - (begin > 0 ? begin : 0);
  if (c >= 0 && c < len)
    return lo + c;
  switch (mode) {
  case PadMode::Constant: return -1;
  case PadMode::Edge: return lo + (c < 0 ? 0 : c > len - 1 ? len - 1 : c);
  case PadMode::Wrap: return lo + padFloorMod(c, len);
  case PadMode::Reflect: {
    if (len == 1)
      return lo;
    const int64_t m = padFloorMod(c, 2 * (len - 1));
    return lo + (m < len ? m : 2 * (len - 1) - m);
  }
  }
  return -1;
}

struct PadSpec {
  Shape dims;                ///< the input's (a scalar as [1])
  std::vector<int64_t> pads; ///< begin of every axis, then end
  Shape outDims;             ///< dims[i] + begin + end
  PadMode mode = PadMode::Constant;
  size_t esize = 0;
  /// The constant's bytes (opset < 11's attribute, else zero) unless it is
  /// the run-time input 2.
  std::vector<unsigned char> value;
  bool runtimeValue = false;
};

/// Reads and checks a Pad node (opsets 2-19) against its output.
Expected<PadSpec> padSpec(const OpDesc &d);

} // namespace pipec::cpu::dm
