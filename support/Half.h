//===- support/Half.h - float16 and bfloat16 bits ---------------*- C++ -*-===//
//
// The 16-bit float formats pipec stores reduced-precision tensors in
// (`pipec --precision`, docs/precision.md): IEEE binary16 (f16) and
// bfloat16 (bf16, float32's upper half). Conversions from float round to
// nearest, ties to even; NaN stays a (quiet) NaN, f16 overflows to
// infinity. Conversions to float are exact. The functions compile for the
// GPU too (nvcc: host and device), so the CUDA Cast kernel
// (runtime/cuda/Move.cu) rounds as the CPU's.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PIPEC_HALF_HD __host__ __device__
#else
#define PIPEC_HALF_HD
#endif

namespace pipec {

PIPEC_HALF_HD inline uint32_t halfBitsOf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
PIPEC_HALF_HD inline float halfFloatOf(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

PIPEC_HALF_HD inline uint16_t floatToBf16(float f) {
  // Branch-free (a select), so that loops of it vectorize: a NaN keeps its
  // sign and top payload and is made quiet.
  const uint32_t x = halfBitsOf(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

PIPEC_HALF_HD inline float bf16ToFloat(uint16_t h) { return halfFloatOf(static_cast<uint32_t>(h) << 16); }

/// float rounded to the nearest bfloat16, as a float.
PIPEC_HALF_HD inline float roundToBf16(float f) { return bf16ToFloat(floatToBf16(f)); }

PIPEC_HALF_HD inline uint16_t floatToHalf(float f) {
  const uint32_t x = halfBitsOf(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) // inf or nan
    return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (a >= 0x477ff000u) // rounds to at least 65536: overflow
    return sign | 0x7c00u;
  if (a < 0x38800000u) // below 2^-14: a half subnormal (exact scaling)
    return sign | static_cast<uint16_t>(nearbyintf(halfFloatOf(a) * 16777216.0f));
  uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffffu) >> 13));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}

PIPEC_HALF_HD inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) // zero or subnormal: m * 2^-24, exact
    return halfFloatOf(sign | halfBitsOf(static_cast<float>(m) * 5.9604644775390625e-8f));
  if (e == 31)
    return halfFloatOf(sign | 0x7f800000u | (m << 13));
  return halfFloatOf(sign | ((e - 15 + 127) << 23) | (m << 13));
}

} // namespace pipec
