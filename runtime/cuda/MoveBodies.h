//===- runtime/cuda/MoveBodies.h - Bodies of the CUDA indexing kernels -*- C++ -*-===//
//
// Per-element bodies of the CUDA kernels of runtime/cuda/Move.cu: Pad,
// GatherElements, Trilu, a resize pass and Mod. PIPEC_HD (runtime/cuda/Hd.h), so the CPU
// tests run them element by element against the CPU kernels
// (tests/unit/CudaBodiesTest.cpp). Element types do not matter to the
// data movers: they return offsets, and the kernels move 1, 2, 4 or 8
// bytes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/PadSpec.h"
#include "runtime/cuda/Bodies.h"

#include <cstdint>
#include <vector>

namespace pipec::cuda::body {

/// Pad: the output's dims and, per axis, the input's size, pads and
/// stride (runtime/cpu/kernels/PadSpec.h).
struct PadGeometry {
  int rank = 0;
  cpu::dm::PadMode mode = cpu::dm::PadMode::Constant;
  int64_t outDims[kMaxRank] = {}, dims[kMaxRank] = {}, begin[kMaxRank] = {}, end[kMaxRank] = {};
  int64_t inStrides[kMaxRank] = {};
};

/// The geometry of a checked Pad node (rank at most kMaxRank).
inline PadGeometry padGeometry(const cpu::dm::PadSpec &p) {
  PadGeometry g;
  g.rank = static_cast<int>(p.dims.size());
  g.mode = p.mode;
  int64_t stride = 1;
  for (int a = g.rank - 1; a >= 0; --a) {
    const size_t u = static_cast<size_t>(a);
    g.outDims[a] = p.outDims[u];
    g.dims[a] = p.dims[u];
    g.begin[a] = p.pads[u];
    g.end[a] = p.pads[u + p.dims.size()];
    g.inStrides[a] = stride;
    stride *= p.dims[u];
  }
  return g;
}

/// The input offset output element `i` copies, or -1 for the constant.
PIPEC_HD inline int64_t padOffset(const PadGeometry &g, int64_t i) {
  int64_t off = 0;
  bool fill = false;
  for (int a = g.rank - 1; a >= 0; --a) {
    const int64_t o = i % g.outDims[a];
    i /= g.outDims[a];
    const int64_t s = cpu::dm::padSource(o, g.dims[a], g.begin[a], g.end[a], g.mode);
    fill |= s < 0;
    off += s * g.inStrides[a];
  }
  return fill ? -1 : off;
}

/// GatherElements: the indices' dims and the data's strides; `axis` is
/// replaced by the index, whose range is [-dim, dim).
struct GatherElementsGeometry {
  int rank = 0, axis = 0;
  int64_t dim = 0;
  int64_t indDims[kMaxRank] = {}, dataStrides[kMaxRank] = {};
};

/// GatherElements of data shaped `data` by indices shaped `ind` (one rank,
/// at most kMaxRank) along `axis` (in [0, rank)).
inline GatherElementsGeometry gatherElementsGeometry(const std::vector<int64_t> &data, const std::vector<int64_t> &ind,
                                                     int axis) {
  GatherElementsGeometry g;
  g.rank = static_cast<int>(data.size());
  g.axis = axis;
  g.dim = data[static_cast<size_t>(axis)];
  int64_t stride = 1;
  for (int a = g.rank - 1; a >= 0; --a) {
    g.indDims[a] = ind[static_cast<size_t>(a)];
    g.dataStrides[a] = stride;
    stride *= data[static_cast<size_t>(a)];
  }
  return g;
}

/// The data offset output element `i` (index value `index`) reads, or -1
/// for an index out of range.
PIPEC_HD inline int64_t gatherElementsOffset(const GatherElementsGeometry &g, int64_t i, int64_t index) {
  if (index < -g.dim || index >= g.dim)
    return -1;
  if (index < 0)
    index += g.dim;
  int64_t off = 0;
  for (int a = g.rank - 1; a >= 0; --a) {
    const int64_t c = i % g.indDims[a];
    i /= g.indDims[a];
    off += (a == g.axis ? index : c) * g.dataStrides[a];
  }
  return off;
}

/// Trilu: whether element (row, col) of a matrix is kept: the upper
/// triangle col >= row + k, or the lower col <= row + k. k is clamped as
/// the CPU kernel clamps it (no overflow for huge k).
PIPEC_HD inline bool triluKeeps(int64_t row, int64_t col, int64_t rows, int64_t cols, int64_t k, bool upper) {
  const int64_t lo = -rows - 1, hi = cols + 1;
  const int64_t diag = (k < lo ? lo : k > hi ? hi : k) + row;
  return upper ? col >= diag : col <= diag;
}

/// One pass of a separable resize (runtime/cpu/kernels/ResizeCommon.h):
/// input [outer, nIn, inner] to output [outer, nOut, inner], output
/// coordinate o the sum of the taps idx[k], w[k] for k in [start[o],
/// start[o + 1]), in tap order (0 without taps).
struct ResizePass {
  int64_t outer = 1, nIn = 1, nOut = 1, inner = 1;
  const int64_t *start = nullptr, *idx = nullptr;
  const float *w = nullptr;
};
PIPEC_HD inline float resizePassElement(const ResizePass &p, const float *in, int64_t i) {
  const int64_t k = i % p.inner, o = (i / p.inner) % p.nOut, q = i / (p.inner * p.nOut);
  const float *base = in + q * p.nIn * p.inner + k;
  const int64_t k0 = p.start[o], k1 = p.start[o + 1];
  if (k0 == k1)
    return 0.0f;
  float acc = p.w[k0] * base[p.idx[k0] * p.inner];
  for (int64_t t = k0 + 1; t < k1; ++t)
    acc += p.w[t] * base[p.idx[t] * p.inner];
  return acc;
}

/// Mod: C's fmod (fmod=1, the dividend's sign) or Python's (the divisor's
/// sign), as runtime/cpu/kernels/Binary.cpp's FMod and PyMod: integer
/// division by 0 or -1 gives 0.
template <typename T> PIPEC_HD inline T modOf(T a, T b, bool cMod) {
  T r;
  if constexpr (sizeof(T) == 4 && T(0.5) != T(0)) {
    r = fmodf(a, b);
  } else if constexpr (T(0.5) != T(0)) {
    r = fmod(a, b);
  } else {
    if (b == T(0) || b == T(-1))
      return T(0);
    r = static_cast<T>(a % b);
  }
  if (cMod)
    return r;
  return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(r + b) : r;
}

} // namespace pipec::cuda::body
