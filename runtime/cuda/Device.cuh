//===- runtime/cuda/Device.cuh - What the .cu files share -------*- CUDA -*-===//
//
// The grid-stride loop's first item and stride (runtime/cuda/Launch.h's
// shapes), the stream behind ExecContext::stream's void *, and a launch's
// error as a Status: the helpers every kernel file of runtime/cuda/ uses.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace pipec::cuda {

/// This thread's first item of a grid-stride loop, and the loop's stride.
__device__ inline int64_t firstItem() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t itemStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

inline cudaStream_t asStream(void *s) { return static_cast<cudaStream_t>(s); }

/// The last launch's error (cudaGetLastError), naming the kernel.
inline Status launched(const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return errorf("CUDA kernel ", what, ": ", cudaGetErrorString(e));
  return Status::ok();
}

} // namespace pipec::cuda
