//===- runtime/cpu/kernels/Transpose16.h - 16x16 float tiles in registers -*- C++ -*-===//
//
// The 16x16 transpose of 4-byte elements that Transpose's kernel and the
// weight-gradient reorder of 1x1 convolutions (DnnlCommon.h) share, in
// registers instead of 256 single-element loads and stores (which made
// the GPT-like sample's transpose of its logits slow: bench/results/log.md):
// one AVX-512 pass where the CPU has it (runtime/cpu/CpuIsa.h),
// else four 8x8 AVX2 blocks. A transpose moves bits: every path gives the
// same result (ElementwiseKernelsTest: Transpose16.*).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/CpuIsa.h"

#include <cstdint>
#include <immintrin.h>

namespace pipec::cpu {

/// The reference: out[r * outStride + c] = in[c * inStride + r] for
/// r, c < 16, element by element.
inline void transpose16x16Scalar(const float *in, int64_t inStride, float *out, int64_t outStride) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      out[r * outStride + c] = in[c * inStride + r];
}

/// out[r * outStride + c] = in[c * inStride + r] for r, c < 8: unpacks,
/// shuffles and lane swaps of eight AVX2 registers.
inline void transpose8x8Avx2(const float *in, int64_t inStride, float *out, int64_t outStride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(in + i * inStride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
    t[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i)
    _mm256_storeu_ps(out + i * outStride, t[i]);
}

/// The 16x16 transpose as four 8x8 AVX2 blocks.
inline void transpose16x16Avx2(const float *in, int64_t inStride, float *out, int64_t outStride) {
  for (int i0 = 0; i0 < 16; i0 += 8)
    for (int j0 = 0; j0 < 16; j0 += 8)
      transpose8x8Avx2(in + j0 * inStride + i0, inStride, out + i0 * outStride + j0, outStride);
}

// GCC 12 warns that its own AVX-512 headers read an uninitialized value
// (the undefined pass-through operand of the unmasked shuffles).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// The 16x16 transpose in AVX-512 registers: four rounds of unpacks and
/// shuffles. Only where cpuHas(CpuIsa::Avx512).
PIPEC_TARGET_AVX512 inline void transpose16x16Avx512(const float *in, int64_t inStride, float *out,
                                                     int64_t outStride) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_loadu_ps(in + i * inStride);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xDD);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
  }
  for (int i = 0; i < 16; ++i)
    _mm512_storeu_ps(out + i * outStride, r[i]);
}
#pragma GCC diagnostic pop

/// The 16x16 transpose on the widest path cpuIsa() allows.
inline void transposeTile16(const float *in, int64_t inStride, float *out, int64_t outStride) {
  if (cpuHas(CpuIsa::Avx512))
    transpose16x16Avx512(in, inStride, out, outStride);
  else
    transpose16x16Avx2(in, inStride, out, outStride);
}

} // namespace pipec::cpu
