//===- support/Limits.h - The largest inputs pipec accepts -----*- C++ -*-===//
//
// Sizes that come from a model, a command line or a plan are checked against
// these before anything is allocated or multiplied by them, so that a hostile
// or mistaken input gets a one-line error instead of an overflow, a giant
// allocation or a compile that does not end. pipec (compile time) and
// piperun (plan loading) check the same limits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace pipec {

/// Elements of one tensor: 2^48, so that byte counts, arena offsets and their
/// sums stay far from int64's limit.
constexpr int64_t kMaxTensorElements = int64_t(1) << 48;
/// Micro-batches per step. Compile time grows with M (the schedule and the
/// memory planner see M instances of every activation).
constexpr uint32_t kMaxMicroBatches = 1u << 14;
/// Pipeline stages (devices) of one plan.
constexpr uint32_t kMaxStages = 1u << 14;

} // namespace pipec
