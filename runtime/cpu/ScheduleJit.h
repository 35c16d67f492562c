//===- runtime/cpu/ScheduleJit.h - A device's program as native code -*- C++ -*-===//
//
// The executor (runtime/Executor.h) can run a device's program as one
// function generated with LLVM when the plan is loaded: straight-line code
// that makes, in program order, the calls the interpreter would make (each
// instruction's start and end, each node's kernel with its operand
// addresses), every argument a constant resolved at load time. No loop, no
// dispatch on the instruction's kind, no operand lookup is left at run
// time. The functions called are the interpreter's own, so both paths give
// bitwise the same results; `piperun --no-codegen` (PIPEC_NO_CODEGEN)
// interprets. The code is compiled for the CPU it runs on, from the plan's
// program: plans stay portable.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::cpu {

/// One call of a compiled schedule: fn(state, a, b, c), its arguments
/// fixed at compile time; made only in runs whose part mask meets `parts`
/// (bit 0: the current step's instructions, bit 1: the previous step's).
struct ScheduleCall {
  using Fn = int32_t (*)(void *state, void *a, void *b, void *c);
  Fn fn = nullptr;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  uint32_t parts = 3;
};

/// Makes the calls in order, those whose parts meet `parts`, until one
/// returns non-zero; returns 0, or that call's index + 1.
using CompiledSchedule = int64_t (*)(void *state, uint32_t parts);

/// At most this many calls are compiled into one function (about 30
/// bytes of code each); a longer program is interpreted.
inline constexpr size_t kMaxScheduleCalls = 1u << 18;

/// The calls as one native function for this machine (LLVM 14, ORC JIT).
/// `name` names it in errors.
Expected<CompiledSchedule> compileSchedule(const std::vector<ScheduleCall> &calls, const std::string &name);

} // namespace pipec::cpu
