//===- runtime/cpu/Kernel.h - The CPU kernel table -------------*- C++ -*-===//
//
// The CPU backend's kernels implement runtime/kernel/Kernel.h; this header
// gives them their names in namespace pipec::cpu and declares the table
// (runtime/cpu/KernelTable.cpp, built from runtime/cpu/KernelTable.def),
// one file per kernel family in runtime/cpu/kernels/.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Kernel.h"

#include <string>
#include <vector>

namespace pipec::cpu {

using kernel::ExecContext;
using kernel::Kernel;
using kernel::KernelFactory;
using kernel::KernelPtr;
using kernel::OpDesc;

/// Prepares the kernel for a node, or says why pipec has none for it.
Expected<KernelPtr> createKernel(const OpDesc &desc);
/// Whether the table lists a kernel for the op (any version).
bool hasKernel(const std::string &domain, const std::string &opType);
/// Names of the ops with kernels ("Add", "pipec:SgdStep"...), sorted.
std::vector<std::string> kernelOpNames();

/// Evaluates a node on host tensors: prepares its kernel, allocates outputs
/// of the described types and runs it once. Used by constant folding and by
/// tests as the reference path.
Expected<std::vector<Tensor>> evaluate(const OpDesc &desc,
                                       const std::vector<Tensor> &inputs,
                                       ExecContext ctx = {});

} // namespace pipec::cpu
