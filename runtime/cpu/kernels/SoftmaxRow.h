//===- runtime/cpu/kernels/SoftmaxRow.h - One contiguous softmax row -*- C++ -*-===//
//
// Softmax (or LogSoftmax) of n contiguous elements, shared by the Softmax
// and pipec:MaskedSoftmax kernels. The maximum and the sum are taken in
// kSoftmaxLanes interleaved partial results (lane l takes the elements i
// with i mod kSoftmaxLanes = l, in index order), which the vectorizer keeps
// in registers, then combined in a fixed tree (lane l with l + 8, then
// l + 4, ...): the same sum for any thread count and schedule. A serial
// float sum cannot be vectorized, and took a noticeable part of the
// GPT-like model's step (bench/results/log.md). The CUDA kernels' rows add
// the same way (cuda::body::treeSum). For Softmax x and y may be the same
// buffer (LogSoftmax rereads x). Also the layout of a mask over a
// softmax's rows (pipec:MaskedSoftmax and pipec:Attention).
//
// A float row runs as explicit vector code, chosen when the process starts
// (runtime/cpu/CpuIsa.h): with AVX-512 the 16 lanes are one register, with
// AVX2 two (lanes 0-7 and 8-15). The tree is the same pairs either way
// (the two AVX2 registers added, or the AVX-512 register's halves, then
// halvings), and the exponentials are summed as they are made: the same
// operations on the same pairs, so every path is bitwise
// softmaxRowGeneric (ElementwiseKernelsTest: SoftmaxRow.*). The vector
// rows are faster than the loops below, where the two trees, walked
// element by element through memory, and the separate passes cost more
// than the row's arithmetic (attention's 128-wide rows:
// bench/results/log.md).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/CpuIsa.h"
#include "runtime/cpu/kernels/VecMath.h"
#include "support/Tensor.h"

#include <cmath>
#include <cstdint>
#include <immintrin.h>
#include <type_traits>
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

namespace softmax_detail {
static_assert(kSoftmaxLanes == 16, "two AVX2 or one AVX-512 register of floats hold the lanes");

/// combineSoftmaxLanes on lanes 0-7 (lo) and 8-15 (hi): lane l with l + 8,
/// then l + 4, l + 2 and l + 1. max(a, b) is vmaxps's `a > b ? a : b`, so
/// max(hi, lo) is combineSoftmaxLanes's `b > a ? b : a`.
inline float treeMax8(__m256 lo, __m256 hi) {
  const __m256 m8 = _mm256_max_ps(hi, lo);
  const __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m8, 1), _mm256_castps256_ps128(m8));
  const __m128 m2 = _mm_max_ps(_mm_movehl_ps(m4, m4), m4);
  const __m128 m1 = _mm_max_ss(_mm_shuffle_ps(m2, m2, 1), m2);
  return _mm_cvtss_f32(m1);
}
inline float treeSum8(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
/// expOf on each lane (the loop vectorizes into one pass on the register).
inline __m256 exp8(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int l = 0; l < 8; ++l)
    t[l] = expOf(t[l]);
  return _mm256_load_ps(t);
}
/// The first `count` (0 to 8) lanes set: a mask for vmaskmovps.
inline __m256i firstLanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
} // namespace softmax_detail

/// softmaxRowGeneric<float, Log>, bitwise, in two AVX2 registers (the
/// build's baseline). The tail (n mod 16 elements) goes through the lanes
/// held in memory, as the generic row takes it.
template <bool Log> void softmaxRowAvx2(const float *x, float *y, int64_t n) {
  using namespace softmax_detail;
  const int64_t full = n / 16 * 16;
  __m256 lo = _mm256_set1_ps(x[0]), hi = lo;
  for (int64_t i = 0; i < full; i += 16) {
    lo = _mm256_max_ps(_mm256_loadu_ps(x + i), lo); // x > lane ? x : lane
    hi = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), hi);
  }
  float m;
  if (full == n) {
    m = treeMax8(lo, hi);
  } else {
    alignas(32) float lane[16];
    _mm256_store_ps(lane, lo);
    _mm256_store_ps(lane + 8, hi);
    for (int64_t i = full; i < n; ++i)
      lane[i - full] = x[i] > lane[i - full] ? x[i] : lane[i - full];
    m = combineSoftmaxLanes(lane, [](float a, float b) { return b > a ? b : a; });
  }
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sumLo = _mm256_setzero_ps(), sumHi = sumLo;
  for (int64_t i = 0; i < full; i += 16) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mv));
    if constexpr (!Log) {
      _mm256_storeu_ps(y + i, e0);
      _mm256_storeu_ps(y + i + 8, e1);
    }
    sumLo = _mm256_add_ps(sumLo, e0);
    sumHi = _mm256_add_ps(sumHi, e1);
  }
  float s;
  if (full == n) {
    s = treeSum8(sumLo, sumHi);
  } else {
    alignas(32) float lane[16];
    _mm256_store_ps(lane, sumLo);
    _mm256_store_ps(lane + 8, sumHi);
    for (int64_t i = full; i < n; ++i) {
      const float e = expOf(x[i] - m);
      if constexpr (!Log)
        y[i] = e;
      lane[i - full] += e;
    }
    s = combineSoftmaxLanes(lane, [](float a, float b) { return a + b; });
  }
  const int64_t body = n / 8 * 8;
  const __m256i tail = firstLanes(n - body);
  if constexpr (Log) {
    const __m256 shift = _mm256_set1_ps(m + std::log(s));
    for (int64_t i = 0; i < body; i += 8)
      _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), shift));
    if (body < n)
      _mm256_maskstore_ps(y + body, tail, _mm256_sub_ps(_mm256_maskload_ps(x + body, tail), shift));
  } else {
    const __m256 r = _mm256_set1_ps(1.0f / s);
    for (int64_t i = 0; i < body; i += 8)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), r));
    if (body < n)
      _mm256_maskstore_ps(y + body, tail, _mm256_mul_ps(_mm256_maskload_ps(y + body, tail), r));
  }
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which its
// own -Wuninitialized flags where they are inlined (fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace softmax_detail {
/// treeMax8 / treeSum8 on the halves of one register.
PIPEC_TARGET_AVX512 inline float treeMax16(__m512 v) {
  return treeMax8(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
PIPEC_TARGET_AVX512 inline float treeSum16(__m512 v) {
  return treeSum8(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
PIPEC_TARGET_AVX512 inline __m512 exp16(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int l = 0; l < 16; ++l)
    t[l] = expOf(t[l]);
  return _mm512_load_ps(t);
}
} // namespace softmax_detail

/// softmaxRowGeneric<float, Log>, bitwise, in AVX-512 registers (only
/// where cpuHas(CpuIsa::Avx512)).
template <bool Log> PIPEC_TARGET_AVX512 void softmaxRowAvx512(const float *x, float *y, int64_t n) {
  using namespace softmax_detail;
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  __m512 lane = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < full; i += 16)
    lane = _mm512_max_ps(_mm512_loadu_ps(x + i), lane); // x > lane ? x : lane
  if (tail)
    lane = _mm512_mask_max_ps(lane, tail, _mm512_maskz_loadu_ps(tail, x + full), lane);
  const float m = treeMax16(lane);
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
  const float s = treeSum16(sum);
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

/// Softmax (Log: LogSoftmax) of x[0, n) into y, n >= 1, on the widest path
/// cpuIsa() allows. For Softmax x and y may be the same buffer; LogSoftmax
/// rereads x after writing y.
template <typename T, bool Log> void softmaxRow(const T *x, T *y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpuHas(CpuIsa::Avx512))
      softmaxRowAvx512<Log>(x, y, n);
    else
      softmaxRowAvx2<Log>(x, y, n);
  } else {
    softmaxRowGeneric<T, Log>(x, y, n);
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
