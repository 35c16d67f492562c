//===- runtime/cuda/Hd.h - Code for the host and the GPU -------*- C++ -*-===//
//
// PIPEC_HD marks a function that nvcc compiles for both the host and the
// device; the host compiler sees a plain inline function. Kernel bodies
// (runtime/cuda/Bodies.h) are written this way so that the CPU test
// binaries run the very code the GPU kernels run and check it against the
// CPU kernels, on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define PIPEC_HD __host__ __device__
#else
#define PIPEC_HD
#endif

namespace pipec {

/// The bits of a float, and the float of some bits (std::bit_cast is not
/// device code).
PIPEC_HD inline uint32_t floatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
PIPEC_HD inline float bitsFloat(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}

} // namespace pipec
