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
// Softmax x and y may be the same buffer (LogSoftmax rereads x).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/VecMath.h"

#include <cmath>
#include <cstdint>

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

} // namespace pipec::cpu
