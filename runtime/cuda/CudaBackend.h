//===- runtime/cuda/CudaBackend.h - Plan devices on GPUs -------*- C++ -*-===//
//
// The CUDA backend (runtime/kernel/Backend.h): a GpuDevice (runtime/cuda/
// Gpu.h) for the device's memory, stream and pinned staging buffer, and
// kernels from the CUDA table (runtime/cuda/CudaKernels.cpp). Weights live
// in GPU memory, copied from the host's at load and again at every step
// whose weights the host's optimizer changed; the host reads and writes
// the device's memory through the staging buffer, synchronously. Compiled
// into every build: without the toolkit, makeCudaBackend says why there is
// no GPU.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Backend.h"

namespace pipec::cuda {

/// A backend on GPU `gpu` (an index into listGpus()); `tf32`: its
/// matrix products on TF32 tensor cores (else exact fp32).
Expected<kernel::BackendPtr> makeCudaBackend(int gpu, bool tf32 = false);

} // namespace pipec::cuda
