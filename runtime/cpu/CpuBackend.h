//===- runtime/cpu/CpuBackend.h - Plan devices on CPU threads --*- C++ -*-===//
//
// The CPU backend (runtime/kernel/Backend.h): kernels from the CPU table
// (runtime/cpu/KernelTable.def), memory from the host's allocator on huge
// pages (support/LargeAlloc.h), weights read in place from the loaded
// weight file, and no copies between host and device.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Backend.h"

namespace pipec::cpu {

kernel::BackendPtr makeCpuBackend();

} // namespace pipec::cpu
