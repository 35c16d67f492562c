//===- runtime/cuda/CudaKernels.h - Nodes as CUDA kernels ------*- C++ -*-===//
//
// The CUDA kernel of a node, behind the CPU kernels' interface
// (runtime/cpu/Kernel.h): prepared once from the node's OpDesc, then run
// on device pointers, launched on the stream of ExecContext::stream.
// Float32 only. GEMMs go through cuBLAS in its pedantic math mode (no TF32,
// no reduced-precision reductions), the rest through runtime/cuda/Kernels.h.
// createKernel() refuses a node without a CUDA kernel naming the node, its
// op type and opset.
//
// Ops so far: Relu, Neg, Sigmoid, Tanh, Exp, Erf, Gelu, pipec:GeluGrad, pipec:ReluGrad,
// Add, Sub, Mul, Div (numpy broadcasting), Softmax, LogSoftmax,
// pipec:SoftmaxGrad, MatMul (2-D and batched of equal batch), Gemm, Einsum
// (batched matrix products), ReduceSum, Transpose, Concat, Split, Gather
// and pipec:GatherGrad (int64 indices), LayerNormalization and its two
// gradients, SoftmaxCrossEntropyLoss and pipec:SoftmaxCrossEntropyLossGrad
// (int64 targets; no class weights, ignore_index or log_prob output): the
// MLP and GPT-like samples' training plans.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Kernel.h"

#include <string>
#include <vector>

namespace pipec::cuda {

/// Prepares the CUDA kernel of a node, or says why there is none.
Expected<cpu::KernelPtr> createKernel(const cpu::OpDesc &desc);
/// Whether an op (domain, type) has a CUDA kernel.
bool hasKernel(const std::string &domain, const std::string &opType);
/// The ops with CUDA kernels ("Add", "pipec:ReluGrad", ...), sorted.
std::vector<std::string> kernelOpNames();

} // namespace pipec::cuda
