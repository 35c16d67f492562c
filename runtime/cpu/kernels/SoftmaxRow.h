//===- runtime/cpu/kernels/SoftmaxRow.h - One contiguous softmax row -*- C++ -*-===//
//
// Softmax (or LogSoftmax) of n contiguous elements, shared by the Softmax
// and pipec:MaskedSoftmax kernels. The maximum and the sum are taken in
// kSoftmaxLanes interleaved partial results (lane l takes the elements i
// with i mod kSoftmaxLanes = l, in index order), which the vectorizer keeps
// in registers, then combined in a fixed tree (lane l with l + 8, then
// l + 4, ...): the same sum for any thread count and schedule. A serial
// float sum cannot be vectorized; it took 2.1 of the GPT-like model's 36
// ms. The CUDA kernels' rows add the same way (cuda::body::treeSum). For
// Softmax x and y may be the same buffer (LogSoftmax rereads x). Also the
// layout of a mask over a softmax's rows (pipec:MaskedSoftmax and
// pipec:Attention).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/VecMath.h"
#include "support/Tensor.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace pipec::cpu {

inline constexpr int kSoftmaxLanes = 16;

/// Combines the lanes in the fixed tree; `f` is max or +.
template <typename T, typename F> T combineSoftmaxLanes(T *lane, F f) {
  for (int w = kSoftmaxLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l)
      lane[l] = f(lane[l], lane[l + w]);
  return lane[0];
}

template <typename T, bool Log> void softmaxRow(const T *x, T *y, int64_t n) {
  constexpr int L = kSoftmaxLanes;
  T lane[L];
  for (int l = 0; l < L; ++l)
    lane[l] = x[0];
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l)
      lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  for (; i < n; ++i)
    lane[i % L] = x[i] > lane[i % L] ? x[i] : lane[i % L];
  const T m = combineSoftmaxLanes(lane, [](T a, T b) { return b > a ? b : a; });
  // (LogSoftmax's exps go to y only to be summed; it rereads x below.)
  for (int64_t j = 0; j < n; ++j)
    y[j] = expOf(x[j] - m);
  for (int l = 0; l < L; ++l)
    lane[l] = 0;
  for (i = 0; i + L <= n; i += L)
    for (int l = 0; l < L; ++l)
      lane[l] += y[i + l];
  for (; i < n; ++i)
    lane[i % L] += y[i];
  const T s = combineSoftmaxLanes(lane, [](T a, T b) { return a + b; });
  if constexpr (Log) {
    const T shift = m + std::log(s);
    for (int64_t j = 0; j < n; ++j)
      y[j] = x[j] - shift;
  } else {
    const T r = T(1) / s;
    for (int64_t j = 0; j < n; ++j)
      y[j] *= r;
  }
}

/// A mask broadcast (numpy, right-aligned) to `x`, read row by row (x's
/// last axis): per row of x the offset of its mask row, and the mask's
/// step along the row (1, or 0: one value for the whole row). False if the
/// mask does not broadcast to x.
inline bool maskRows(const Shape &mask, const Shape &x, std::vector<int64_t> &rowOffset, int64_t &step) {
  const int64_t rank = static_cast<int64_t>(x.size()), mr = static_cast<int64_t>(mask.size());
  if (rank < 1 || mr > rank)
    return false;
  std::vector<int64_t> st(static_cast<size_t>(rank), 0); // mask strides along x's axes
  int64_t stride = 1;
  for (int64_t a = mr - 1; a >= 0; --a) {
    const int64_t xa = a + rank - mr;
    if (mask[a] != 1 && mask[a] != x[xa])
      return false;
    st[static_cast<size_t>(xa)] = mask[a] == 1 ? 0 : stride;
    stride *= mask[a];
  }
  step = st[static_cast<size_t>(rank - 1)];
  const int64_t n = x[rank - 1], rows = n ? numElements(x) / n : 0;
  rowOffset.assign(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int64_t a = rank - 2; a >= 0; --a) {
      off += rem % x[a] * st[static_cast<size_t>(a)];
      rem /= x[a];
    }
    rowOffset[static_cast<size_t>(r)] = off;
  }
  return true;
}

} // namespace pipec::cpu
