//===- runtime/cuda/Gpu.cpp - The GPUs this process sees ------------------===//
#include "runtime/cuda/Gpu.h"

#if PIPEC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace pipec::cuda {

bool built() { return PIPEC_HAVE_CUDA != 0; }

Expected<std::vector<GpuInfo>> listGpus() {
#if PIPEC_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return errorf("no CUDA device: ", cudaGetErrorString(e), " (cudaGetDeviceCount)");
  if (n == 0)
    return errorf("no CUDA device: the CUDA runtime reports none");
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess)
      return errorf("CUDA device ", i, ": ", cudaGetErrorString(e), " (cudaGetDeviceProperties)");
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.memoryBytes = p.totalGlobalMem;
    g.major = p.major;
    g.minor = p.minor;
    g.multiprocessors = p.multiProcessorCount;
    gpus.push_back(g);
  }
  return gpus;
#else
  return errorf("this pipec was built without CUDA (no CUDA toolkit was found when it was configured; "
                "see docs/cuda.md)");
#endif
}

} // namespace pipec::cuda
