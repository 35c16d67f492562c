//===- runtime/cpu/kernels/Transpose16.h - 16x16 float tiles in registers -*- C++ -*-===//
//
// The 16x16 transpose of 4-byte elements that Transpose's kernel and the
// weight-gradient reorder of 1x1 convolutions (DnnlCommon.h) share.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pipec::cpu {

#if defined(__AVX512F__)
// GCC 12 warns that its own AVX-512 headers read an uninitialized value
// (the undefined pass-through operand of the unmasked shuffles).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// out[r * outStride + c] = in[c * inStride + r] for r, c < 16, 4-byte
/// elements, in registers: four rounds of unpacks and shuffles instead of
/// 256 single-element loads and stores (a 16 KiB transpose of the GPT-like
/// sample's logits took 2.6 us element by element).
inline void transpose16x16(const float *in, int64_t inStride, float *out, int64_t outStride) {
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
#endif

/// The same in plain C++ (for CPUs without AVX-512).
inline void transpose16x16Scalar(const float *in, int64_t inStride, float *out, int64_t outStride) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      out[r * outStride + c] = in[c * inStride + r];
}

/// transpose16x16 where the CPU has AVX-512, else the scalar loop.
inline void transposeTile16(const float *in, int64_t inStride, float *out, int64_t outStride) {
#if defined(__AVX512F__)
  transpose16x16(in, inStride, out, outStride);
#else
  transpose16x16Scalar(in, inStride, out, outStride);
#endif
}

} // namespace pipec::cpu
