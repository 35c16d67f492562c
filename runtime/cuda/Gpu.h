//===- runtime/cuda/Gpu.h - The GPUs this process sees ---------*- C++ -*-===//
//
// Whether this build has the CUDA backend and which GPUs the CUDA runtime
// reports. Compiled into every build: without the toolkit (or on a machine
// without a GPU or driver) listGpus() says why there is none, so that
// `piperun --device cuda` gives a clear error rather than a crash.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t memoryBytes = 0;
  int major = 0, minor = 0; ///< compute capability
  int multiprocessors = 0;
};

/// Whether pipec was built with the CUDA backend (the toolkit was found).
bool built();

/// The GPUs the CUDA runtime reports, or an error saying why there are
/// none: the build has no CUDA, no driver, no device.
Expected<std::vector<GpuInfo>> listGpus();

} // namespace pipec::cuda
