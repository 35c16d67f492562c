//===- runtime/cuda/CudaKernels.h - Nodes as CUDA kernels ------*- C++ -*-===//
//
// The CUDA kernel of a node, behind the kernel interface
// (runtime/kernel/Kernel.h): prepared once from the node's OpDesc, then run
// on device pointers, launched on the stream of ExecContext::stream.
// Float32, but the mixed-precision pass's 16-bit product operands and
// Cast. GEMMs go through cuBLAS in its pedantic math mode (no TF32,
// no reduced-precision reductions), the rest through runtime/cuda/Kernels.h.
// createKernel() refuses a node without a CUDA kernel naming the node, its
// op type and opset. Which ops have one: the Cuda trait of ir/Ops.def
// (checked against this table by tests/unit/OpRegistryTest.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Kernel.h"

#include <string>
#include <vector>

namespace pipec::cuda {

/// Prepares the CUDA kernel of a node, or says why there is none.
Expected<kernel::KernelPtr> createKernel(const kernel::OpDesc &desc);
/// What createKernel checks before it makes the kernel: that the node's op
/// has one and takes the node's element types. Needs no GPU: the emulated
/// GPU refuses by it what a GPU would (runtime/EmulatedGpu.cpp).
Status checkKernelTypes(const kernel::OpDesc &desc);
/// Whether an op (domain, type) has a CUDA kernel.
bool hasKernel(const std::string &domain, const std::string &opType);
/// The ops with CUDA kernels ("Add", "pipec:ReluGrad", ...), sorted.
std::vector<std::string> kernelOpNames();

} // namespace pipec::cuda
