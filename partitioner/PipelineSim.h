//===- partitioner/PipelineSim.h - Simulating a pipeline schedule -*- C++ -*-===//
//
// Runs per-device instruction streams on a clock: each instruction takes its
// predicted duration, one at a time per device; a RECV waits for the
// matching SEND (same sender, receiver, tag and micro-batch, in order) to
// finish. Gives the step's makespan, each device's busy time, the bubble
// fraction and the timeline the report draws (GPipe's figure 2). A schedule
// whose RECVs can never be satisfied is reported as a deadlock.
//
// idealSchedule() writes the programs of any pipeline schedule from
// per-stage times, for estimating a partition before codegen runs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "pipeline/Schedule.h"
#include "support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::partitioner {

enum class SimOp { Forward, Backward, WeightGrad, Recompute, Send, Recv, Optimizer };
/// "F", "B", "W", "R", "send", "recv", "opt".
const char *simOpName(SimOp op);

struct SimInstr {
  SimOp op = SimOp::Forward;
  int microBatch = 0;
  double duration = 0; ///< seconds (a RECV's own cost after its data arrived)
  int peer = -1;       ///< SEND: receiver; RECV: sender
  int64_t tag = 0;     ///< matches a SEND with its RECV (tensor id)
};
using SimProgram = std::vector<SimInstr>;

struct SimEvent {
  size_t instr = 0;
  double start = 0, end = 0;
};

struct SimResult {
  /// Per device, one event per instruction, in program order.
  std::vector<std::vector<SimEvent>> events;
  double makespan = 0;
  /// Per device: seconds spent in F/B/W/R/optimizer instructions.
  std::vector<double> busy;
  /// 1 - sum(busy) / (devices * makespan): the share of device time idle or
  /// communicating.
  double bubbleFraction = 0;
};

Expected<SimResult> simulate(const std::vector<SimProgram> &programs);

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

/// The programs `schedule` runs (pipeline/Schedule.h builds its slots) for
/// times.size() stages on times.size() / stagesPerDevice() devices and M
/// micro-batches: a RECV before a slot whose stage's input comes from
/// another device, a SEND after it; consecutive stages on one device (the
/// turn of zbv's V) pass their tensors in memory. Inference runs forwards
/// only; the optimizer runs once per device, for all its stages.
Expected<std::vector<SimProgram>> idealSchedule(const pipeline::Schedule &schedule,
                                                int microBatches, bool training,
                                                const std::vector<StageTimes> &times);

} // namespace pipec::partitioner
