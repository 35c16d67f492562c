//===- partitioner/PipelineSim.h - Simulating a pipeline schedule -*- C++ -*-===//
//
// Runs per-device instruction streams on a clock: each instruction takes its
// predicted duration, one at a time per device; a RECV waits for the
// matching SEND (same sender, receiver, tag and micro-batch, in order) to
// finish. Gives the step's makespan, each device's busy time, the bubble
// fraction and the timeline the report draws (GPipe's figure 2). A schedule
// whose RECVs can never be satisfied is reported as a deadlock.
//
// idealSchedule() writes the programs of GPipe and 1F1B (PipeDream-Flush)
// from per-stage times, for estimating a partition before codegen runs.
//
//===----------------------------------------------------------------------===//
#pragma once

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
  double forward = 0, backward = 0, recompute = 0;
  double sendForward = 0;  ///< activations to the next stage
  double sendBackward = 0; ///< gradients to the previous stage
  double optimizer = 0;    ///< once per step
};

/// The shapes of the pipeline schedules (codegen/Schedule.h builds them),
/// shared by the cost model, the simulator and codegen:
///   scheduleWarmupForwards: forwards stage s runs before its first backward
///     in a 1F1B-like schedule: 1f1b and zbh1 min(K - s - 1, M), zbh2
///     min(2(K - s) - 2, M), gpipe M;
///   scheduleWeightGradDefer: zbh1 and zbh2 run W(mb) after B(mb + s), the
///     others right after B(mb);
///   scheduleMicroBatchesInFlight: micro-batches whose activations (or
///     weight-gradient inputs) stage s holds at most at once.
bool isScheduleName(const std::string &schedule);
unsigned scheduleWarmupForwards(const std::string &schedule, unsigned K, unsigned s, unsigned M);
unsigned scheduleWeightGradDefer(const std::string &schedule, unsigned s);
unsigned scheduleMicroBatchesInFlight(const std::string &schedule, unsigned K, unsigned s,
                                      unsigned M);

/// Programs of `schedule` (gpipe, 1f1b, zbh1, zbh2; "single" for one stage)
/// for K = times.size() stages and M micro-batches, forwards and then
/// backwards in the order scheduleWarmupForwards gives. Inference runs
/// forwards only.
Expected<std::vector<SimProgram>> idealSchedule(const std::string &schedule, int microBatches,
                                                bool training,
                                                const std::vector<StageTimes> &times);

} // namespace pipec::partitioner
