//===- runtime/cpu/kernels/VecMath.h - Vectorizable float math -*- C++ -*-===//
//
// Float exp, tanh and erf as branch-free inline code that GCC's loop
// vectorizer turns into SIMD. libm's expf / tanhf / erff are scalar calls
// (glibc's vector variants are only used under -ffast-math, which we do not
// build with), so a loop that calls them does not vectorize and runs
// element by element (bench/results/log.md). Selects are written as
// `?:` on values computed unconditionally, and bit tricks use std::bit_cast
// on unsigned integers (floatBits, bitsFloat: runtime/cuda/Hd.h). The
// functions are PIPEC_HD: the CUDA kernels run the same code.
//
// Accuracy, measured on every one of the 2^32 float inputs against
// std::exp / std::tanh in double, as |result - exact| over the ulp of the
// float at the exact value (2^-149 where that is denormal). GCC contracts
// a * b + c into one FMA from -O2 on where the target has it (-march=native
// on x86 since Haswell), so the bits depend on the build; the figures are
// for that code. Without contraction (-O1, or no FMA) erfRational's error
// grows to 4.2e-7, past the test's 4e-7.
//  - expApprox: at most 1.009 ulp (relative 8.5e-8) where exp(x) is a
//    normal float, the worst at x = -27.379; at most 0.75 ulp where it is
//    denormal. It is +inf exactly from x = 88.7228394 (the first x whose
//    correctly rounded exp overflows) and 0 exactly below -103.972076.
//  - tanhApprox: at most 1.332 ulp (relative 1.4e-7), the worst at
//    x = +-0.631, just past the switch to the exp form; exact for |x| below
//    about 2^-12 (including denormals).
//  - erfRational: 3.8e-7 absolute over [-10, 10] (see its comment).
// ElementwiseKernelsTest (VecMath.*) repeats the sweep on every 257th bit
// pattern plus the edge ranges and asserts 1.1, 0.8 and 1.5 ulp.
//
// expOf, tanhOf and erfOf pick these for float and the std:: functions for
// other types (double keeps libm's accuracy).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/Hd.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace pipec::cpu {

/// exp(x) for float. x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2;
/// exp(r) by a degree-6 minimax polynomial 1 + r + r^2 (c2 + ... + c6 r^4)
/// (relative error 3.1e-9 before float rounding); the result is scaled by
/// 2^n as two exact powers of two 2^n1 * 2^n2, each a normal float, so that
/// only the last multiply rounds: it overflows to +inf and underflows
/// gradually through the denormals. NaN stays NaN.
PIPEC_HD inline float expApprox(float x) {
  // Comparisons are false for NaN, so NaN passes both clamps. Below -104
  // the result rounds to 0, above 89 to +inf.
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  // Adding 1.5 * 2^23 rounds to an integer (to nearest even) held in the
  // low mantissa bits: n in [-150, 128].
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const uint32_t nBits = floatBits(t) - floatBits(kRound);
  // ln2 = kLn2Hi + kLn2Lo with kLn2Hi exact in 15 bits: n * kLn2Hi and
  // x - n * kLn2Hi are exact for |n| < 512.
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.428606765330187e-6f;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.381458473e-3f;
  p = p * r + 8.368724149e-3f;
  p = p * r + 4.166838874e-2f;
  p = p * r + 1.666652057e-1f;
  p = p * r + 4.999999344e-1f;
  const float e = 1.0f + (r + (r * r) * p);
  // 2^n = 2^n1 * 2^n2 with n1 = floor(n / 2), n2 = n - n1, both in
  // [-75, 64]: biased = n + 256 > 0, half = n1 + 128.
  const uint32_t biased = nBits + 256u;
  const uint32_t half = biased >> 1;
  const float s1 = bitsFloat((half - 1u) << 23);          // n1 + 127
  const float s2 = bitsFloat((biased - half - 1u) << 23); // n2 + 127
  return (e * s1) * s2;
}

/// tanh(x) for float, from a = |x|. a < 0.625: the odd minimax polynomial
/// a + a^3 (c0 + c1 a^2 + ... + c4 a^8) (relative error 4.4e-9 before float
/// rounding); otherwise 1 - 2 / (exp(2a) + 1), which reaches 1 from
/// a = 9.0109 on. Both are computed and one is selected; the sign of x is
/// put back last, so tanh(-0) = -0. NaN stays NaN.
PIPEC_HD inline float tanhApprox(float x) {
  const float a = std::fabs(x);
  const float s = a * a;
  float p = -5.704982925e-3f;
  p = p * s + 2.063908375e-2f;
  p = p * s - 5.373971406e-2f;
  p = p * s + 1.333144219e-1f;
  p = p * s - 3.333328194e-1f;
  const float small = a + (a * s) * p;
  const float large = 1.0f - 2.0f / (expApprox(a + a) + 1.0f);
  return std::copysign(a < 0.625f ? small : large, x); // NaN: `large` is NaN
}

/// erf for float as a rational function of x on [-4, 4] (erf(4) rounds to
/// 1 in float): branch-free, so the loop vectorizes, where libm's erff is a
/// scalar call per element. Largest error against erf in double: 3.8e-7
/// absolute, measured over [-10, 10] in steps of 5e-6 (ElementwiseKernelsTest
/// checks it). Doubles use std::erf.
PIPEC_HD inline float erfRational(float x) {
  // std::min(4, std::max(-4, x)), written out for the device: a NaN
  // gives -4 as there.
  x = -4.0f < x ? x : -4.0f;
  x = x < 4.0f ? x : 4.0f;
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

/// exp: expApprox for float, std::exp otherwise.
template <typename T> PIPEC_HD inline T expOf(T x) {
  if constexpr (std::is_same_v<T, float>)
    return expApprox(x);
  else
    return std::exp(x);
}

/// tanh: tanhApprox for float, std::tanh otherwise.
template <typename T> PIPEC_HD inline T tanhOf(T x) {
  if constexpr (std::is_same_v<T, float>)
    return tanhApprox(x);
  else
    return std::tanh(x);
}

/// erf: erfRational for float, std::erf otherwise.
template <typename T> PIPEC_HD inline T erfOf(T x) {
  if constexpr (std::is_same_v<T, float>)
    return erfRational(x);
  else
    return std::erf(x);
}

/// GELU, exact (erf) form: x/2 (1 + erf(x / sqrt 2)). The Gelu kernel and
/// the GEMM epilogue (LinalgCommon.h) both use it.
template <typename T> PIPEC_HD inline T geluErfOf(T x) {
  return T(0.5) * x * (T(1) + erfOf(x * T(0.70710678118654752440)));
}

/// GELU, tanh form: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T> PIPEC_HD inline T geluTanhOf(T x) {
  const T k = T(0.79788456080286535588); // sqrt(2/pi)
  return T(0.5) * x * (T(1) + tanhOf(k * (x + T(0.044715) * x * x * x)));
}

/// Relu; a NaN passes through (as PyTorch's relu): a diverging run shows
/// NaN instead of quietly training on zeros.
template <typename T> PIPEC_HD inline T reluOf(T x) { return x < T(0) ? T(0) : x; }

} // namespace pipec::cpu
