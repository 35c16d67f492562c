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
// With AVX-512 a float row runs as explicit vector code: the 16 lanes are
// one register, the fixed tree is three halvings of it and a last pair,
// and the exponentials are summed as they are made; the same operations
// on the same pairs, so bitwise softmaxRowGeneric (ElementwiseKernelsTest:
// SoftmaxRow.IsBitwiseThePortableRow). On
// attention's 128-wide rows it took 0.30 ns an element against 0.76 for
// the loops below, where the two trees, walked element by element through
// memory, and the separate passes cost more than the row's arithmetic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/VecMath.h"
#include "support/Tensor.h"

#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pipec::cpu {

inline constexpr int kSoftmaxLanes = 16;

/// Combines the lanes in the fixed tree; `f` is max or +.
template <typename T, typename F> T combineSoftmaxLanes(T *lane, F f) {
  for (int w = kSoftmaxLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l)
      lane[l] = f(lane[l], lane[l + w]);
  return lane[0];
}

/// The portable row: any T, any target (and softmaxRow's reference).
template <typename T, bool Log> void softmaxRowGeneric(const T *x, T *y, int64_t n) {
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

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which its
// own -Wuninitialized flags where they are inlined (fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace softmax_detail {
static_assert(kSoftmaxLanes == 16, "one AVX-512 register of floats holds the lanes");

/// combineSoftmaxLanes on the lanes of one register: lane l with l + 8,
/// then l + 4, l + 2 and l + 1. max(a, b) is vmaxps's `a > b ? a : b`.
inline float treeMax(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 m8 = _mm256_max_ps(hi, lo); // b > a ? b : a, b the lane l + 8
  const __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m8, 1), _mm256_castps256_ps128(m8));
  const __m128 m2 = _mm_max_ps(_mm_movehl_ps(m4, m4), m4);
  const __m128 m1 = _mm_max_ss(_mm_shuffle_ps(m2, m2, 1), m2);
  return _mm_cvtss_f32(m1);
}
inline float treeSum(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
/// expOf on each lane (the loop vectorizes into one pass on the register).
inline __m512 exp16(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int l = 0; l < 16; ++l)
    t[l] = expOf(t[l]);
  return _mm512_load_ps(t);
}
} // namespace softmax_detail

/// softmaxRowGeneric<float, Log>, bitwise, in AVX-512 registers.
template <bool Log> void softmaxRowAvx512(const float *x, float *y, int64_t n) {
  using namespace softmax_detail;
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  __m512 lane = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < full; i += 16)
    lane = _mm512_max_ps(_mm512_loadu_ps(x + i), lane); // x > lane ? x : lane
  if (tail)
    lane = _mm512_mask_max_ps(lane, tail, _mm512_maskz_loadu_ps(tail, x + full), lane);
  const float m = treeMax(lane);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
    if constexpr (!Log)
      _mm512_storeu_ps(y + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), mv));
    if constexpr (!Log)
      _mm512_mask_storeu_ps(y + full, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
  }
  const float s = treeSum(sum);
  if constexpr (Log) {
    const __m512 shift = _mm512_set1_ps(m + std::log(s));
    for (int64_t i = 0; i < full; i += 16)
      _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_loadu_ps(x + i), shift));
    if (tail)
      _mm512_mask_storeu_ps(y + full, tail, _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), shift));
  } else {
    const __m512 r = _mm512_set1_ps(1.0f / s);
    for (int64_t i = 0; i < full; i += 16)
      _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), r));
    if (tail)
      _mm512_mask_storeu_ps(y + full, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + full), r));
  }
}
#pragma GCC diagnostic pop
#endif

/// Softmax (Log: LogSoftmax) of x[0, n) into y, n >= 1. For Softmax x and
/// y may be the same buffer; LogSoftmax rereads x after writing y.
template <typename T, bool Log> void softmaxRow(const T *x, T *y, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    softmaxRowAvx512<Log>(x, y, n);
    return;
  }
#endif
  softmaxRowGeneric<T, Log>(x, y, n);
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
