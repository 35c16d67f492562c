//===- partitioner/PipelineSim.h - A partition's ideal programs -*- C++ -*-===//
//
// The simulator itself is pipeline/Simulate.h.
//
// idealSchedule() writes the programs of any pipeline schedule from
// per-stage times, for estimating a partition before codegen runs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "pipeline/Schedule.h"
#include "pipeline/Simulate.h"
#include "support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::partitioner {

/// Per-stage, per-micro-batch times for idealSchedule.
struct StageTimes {
  double forward = 0;
  double backward = 0;   ///< input gradients (B), or all of the backward if weightGrad is 0
  double weightGrad = 0; ///< weight gradients (W)
  double recompute = 0;
  double sendForward = 0;  ///< activations to the next stage
  double sendBackward = 0; ///< gradients to the previous stage
  double optimizer = 0;    ///< once per step
};

/// What a schedule built by list scheduling (zbv) orders by: B with the
/// recompute before it.
pipeline::StageCost stageCost(const StageTimes &t);

/// The programs `schedule` runs (pipeline/Schedule.h builds its slots) for
/// times.size() stages on times.size() / stagesPerDevice() devices and M
/// micro-batches: a RECV before a slot whose stage's input comes from
/// another device, a SEND after it; consecutive stages on one device (the
/// turn of zbv's V) pass their tensors in memory. Inference runs forwards
/// only; the optimizer runs once per device, for all its stages.
Expected<std::vector<pipeline::SimProgram>> idealSchedule(const pipeline::Schedule &schedule,
                                                int microBatches, bool training,
                                                const std::vector<StageTimes> &times);

} // namespace pipec::partitioner
