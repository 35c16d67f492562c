//===- codegen/Schedule.h - Pipeline schedules as data ---------*- C++ -*-===//
//
// A schedule is, per stage, the order in which the stage runs its work for
// each micro-batch: forward F(mb), recompute R(mb), input gradients B(mb),
// weight gradients W(mb), and the optimizer step at the end. The plan
// emitter turns the slots into instructions and inserts the sends and
// receives that the cut tensors need; runtime/plan/ScheduleCheck.h proves
// the result cannot deadlock.
//
//   gpipe  all forwards in micro-batch order, then R B W of every
//          micro-batch in ascending order (the flush); M micro-batches of
//          activations are in flight on every stage.
//   1f1b   PipeDream-Flush: stage i runs min(K-i-1, M) warm-up forwards,
//          then alternates one forward and one backward, then drains; at
//          most min(K-i, M) micro-batches are in flight on stage i.
//   zbh1   1F1B whose stage i runs each W(mb) after B(mb + i) (ZB-H1 of
//          Qi et al., "Zero Bubble Pipeline Parallelism", 2023): a later
//          stage sends the input gradients of its last micro-batches
//          without first computing weight gradients, which shortens the
//          drain by about (K-1) W passes; stage i keeps the W inputs of up
//          to i more micro-batches, min(K, M) in all, no more than stage 0
//          keeps under 1F1B.
//   zbh2   zbh1 whose stage i runs min(2(K-i)-2, M) warm-up forwards, K-i-1
//          more (the warm-up of ZB-H2 in the same paper): stage 0 holds up
//          to 2K-1 micro-batches, and a stage is up to K-i-1 forwards ahead
//          of the next, so a late backward there stalls it less.
//
// Backwards and weight gradients run in ascending micro-batch order in all
// four, so weight gradients accumulate in ascending order whatever K and
// the schedule are. The warm-up counts and the in-flight bounds are
// partitioner/PipelineSim.h's, which the cost model uses too.
// Inference plans run the forwards only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <string>
#include <vector>

namespace pipec::codegen {

enum class Work { Forward, Recompute, Backward, WeightGrad, Optimizer };

struct Slot {
  Work work;
  unsigned microBatch = 0;
};

/// The names accepted by buildSchedule.
const std::vector<std::string> &scheduleNames();

/// Per stage, the slots in execution order.
Expected<std::vector<std::vector<Slot>>> buildSchedule(const std::string &name, unsigned stages,
                                                       unsigned microBatches, bool training);

/// Micro-batches whose activations stage `stage` holds at most at once.
unsigned microBatchesInFlight(const std::string &name, unsigned stages, unsigned stage,
                              unsigned microBatches);

} // namespace pipec::codegen
