//===- runtime/cpu/ElementwiseJit.h - Fused elementwise loops with LLVM -*- C++ -*-===//
//
// A pipec:FusedElementwise node (support/ElementwiseProgram.h) runs one
// loop over its elements. This file makes that loop: generated as LLVM IR
// (one load per input, the program's operations with no fast-math flags,
// one store), optimized at O3 for the CPU the runtime runs on (the JIT
// targets the host's features, less those PIPEC_MAX_CPU_ISA caps:
// runtime/cpu/CpuIsa.h; LLVM's loop vectorizer widens the loop) and compiled with LLVM 14's ORC JIT when a plan is
// loaded; the plan itself holds only the program, so it stays portable.
// The same program interpreted one element at a time is the reference
// path (PIPEC_NO_CODEGEN, piperun --no-codegen): both, and the unfused
// kernels, give bitwise the same values (ElementwiseJitTest).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/ElementwiseProgram.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::cpu {

/// out[j] = program(in[0][j * s0], in[1][j * s1], ...) for j in [0, n),
/// each input's step s_k 0 (one value for the whole loop) or 1.
using EwLoop = void (*)(const float *const *in, float *out, int64_t n);

/// The loop compiled for this machine with LLVM, cached per program and
/// steps (a plan's nodes with one program share it); thread-safe.
Expected<EwLoop> compileElementwiseLoop(const EwProgram &p, const std::vector<uint8_t> &steps);

/// The same loop interpreted: the reference path.
void interpretElementwiseLoop(const EwProgram &p, const uint8_t *steps, const float *const *in, float *out,
                              int64_t n);

/// False when the environment sets PIPEC_NO_CODEGEN (to anything but "0"):
/// fused elementwise nodes are then interpreted. Read when a kernel is
/// prepared.
bool codegenEnabled();

/// What the JIT compiles for: "x86_64-unknown-linux-gnu, CPU generic,
/// features +avx512f,...", or why it cannot.
std::string codegenTarget();

} // namespace pipec::cpu
