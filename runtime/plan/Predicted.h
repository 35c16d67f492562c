//===- runtime/plan/Predicted.h - A plan's predicted timeline ---*- C++ -*-===//
//
// The programs of a plan with the durations the compiler predicted
// (Instruction.predicted_seconds), for pipeline/Simulate.h: what pipec's
// report draws and what piperun puts beside its measurements.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "pipeline/Simulate.h"
#include "runtime/plan/plan.pb.h"

#include <vector>

namespace pipec::plan {

pipeline::SimOp simOpOf(Instruction::Kind k);

/// An instruction's predicted seconds: its predicted_seconds, or (plans
/// without them) the sum of its nodes' predicted_seconds; 0 for a RECV.
double predictedSeconds(const Device &dev, const Instruction &ins);

/// Per device of the plan, its program with predictedSeconds durations.
/// SEND and RECV are matched by tensor id.
std::vector<pipeline::SimProgram> predictedPrograms(const Plan &p);

} // namespace pipec::plan
