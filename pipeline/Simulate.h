//===- pipeline/Simulate.h - Timing per-device programs ---------*- C++ -*-===//
//
// Runs per-device instruction streams on a clock: each instruction takes its
// predicted duration, one at a time per device; a RECV waits for the
// matching SEND (same sender, receiver, tag and micro-batch, in order) to
// finish. Gives the step's makespan, each device's busy time, the bubble
// fraction and the timeline the reports draw (GPipe's figure 2). A schedule
// whose RECVs can never be satisfied is reported as a deadlock.
//
// The compiler simulates a partition's ideal programs
// (partitioner/PipelineSim.h) and the plans it emits (codegen/Report.h);
// piperun simulates the plan it runs, to put the prediction beside what it
// measured (runtime/RunReport.h). So this library depends on support/ only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::pipeline {

enum class SimOp { Forward, Backward, WeightGrad, Recompute, Send, Recv, Optimizer };
/// "F", "B", "W", "R", "send", "recv", "opt".
const char *simOpName(SimOp op);

struct SimInstr {
  SimOp op = SimOp::Forward;
  int microBatch = 0;
  double duration = 0; ///< seconds (a RECV's own cost after its data arrived)
  int peer = -1;       ///< SEND: receiver; RECV: sender
  int64_t tag = 0;     ///< matches a SEND with its RECV (tensor id)
  /// A no-flush schedule's (2bw) instruction of the step before the one
  /// the program's forwards run (pipeline/Schedule.h).
  bool previousStep = false;
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

/// Programs with previous-step instructions are one step of a pipeline
/// without flushes: they are timed in the steady state, as the period
/// between two consecutive steps of the programs run back to back (the
/// first step without its previous-step instructions, a drain of those
/// alone after the last). The result's makespan is that period, its
/// events those of one steady step from the step's first start, and its
/// bubble 1 - busy / (devices x period).
Expected<SimResult> simulate(const std::vector<SimProgram> &programs);

} // namespace pipec::pipeline
