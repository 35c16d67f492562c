//===- pipeline/Schedule.h - Pipeline schedules, one concept ----*- C++ -*-===//
//
// A pipeline schedule says, per device, the order in which the device runs
// its work for each micro-batch and each stage it holds: forward F(mb),
// recompute R(mb), input gradients B(mb), weight gradients W(mb), and the
// optimizer step at the end. It is data (Slot lists), built here once and
// read by everything that needs the schedule's shape:
//   - the simulator (partitioner/PipelineSim.h) times the slots;
//   - the memory model (partitioner/StageModel.h) takes each stage's
//     micro-batches in flight from the slots (microBatchesInFlight);
//   - the plan emitter (codegen/PlanEmitter.h) turns slots into
//     instructions, with the sends and receives the cut tensors need;
//   - the validator (runtime/plan/ScheduleCheck.h) checks a plan's schedule
//     name and its weight-gradient order.
// This library depends on support/ alone.
//
//   gpipe        all forwards in micro-batch order, then R B W of every
//                micro-batch in ascending order (the flush); M micro-batches
//                of activations are in flight on every stage.
//   1f1b         PipeDream-Flush: stage i runs min(K-i-1, M) warm-up
//                forwards, then alternates one forward and one backward,
//                then drains; min(K-i, M) micro-batches in flight (default).
//   interleaved  interleaved 1F1B (Narayanan et al. 2021, Megatron-LM):
//                v stages per device, stage s on device s mod K; the
//                micro-batches run in groups of K, each group through a
//                device's stages in turn; device d warms up with
//                2(K-d-1) + (v-1)K forwards. Bubble (K-1)/(vM) of the
//                ideal step on equal stages, against 1F1B's (K-1)/M.
//                Needs M a multiple of K.
//   zbh1         1F1B whose stage i runs each W(mb) after B(mb + i) (ZB-H1
//                of Qi et al., "Zero Bubble Pipeline Parallelism", 2023).
//   zbh2         zbh1 with ZB-H2's warm-up: min(2(K-i)-2, M) forwards.
//   zbv          ZB-V (Qi et al. 2024): two stages per device in a V,
//                device d holds stages d and 2K-1-d (the first device also
//                runs the last stage and the loss); input and weight
//                gradients split. The order comes from list scheduling on
//                the stages' predicted times (unit times without them): a
//                ready B first, then a ready F, then a W; a device holds at
//                most 2K half-size stage activations (1F1B's peak).
//   2bw          PipeDream-2BW (Narayanan et al. 2021): 1F1B without the
//                flush. Steps run back to back: device d's program for step
//                t pairs each forward F(t, j) with the backward the 1F1B
//                steady state runs next, B(t, j - w) with w = K - d - 1, or
//                for j < w B(t-1, M - w + j) of the step before (a slot with
//                previousStep set). The device's optimizer step for step t
//                follows its last B of step t. Micro-batches of step t run
//                on weights W(t-1); W(t+1) = W(t) - update(gradient of step
//                t), with W(-1) = W(0) (docs/training.md). The first step
//                skips the previous-step slots; a drain after the last step
//                runs them alone. Training only; needs M >= K.
//
// Every schedule runs each stage's forwards, backwards and weight gradients
// in ascending micro-batch order, so weight gradients accumulate in the
// same order whatever K, the schedule and v are: flush schedules train
// bitwise alike. Inference plans run the forwards only. 2bw runs the same
// per-stage order over the concatenation of its steps.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <string>
#include <vector>

namespace pipec::pipeline {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZBH1, ZBH2, ZBV, TwoBW };

enum class Work { Forward, Recompute, Backward, WeightGrad, Optimizer };

struct Slot {
  Work work = Work::Forward;
  unsigned microBatch = 0;
  unsigned stage = 0; ///< the stage whose nodes run (0 for the optimizer)
  /// 2bw: the slot belongs to the step before the one the program's
  /// forwards run (its micro-batch is that step's).
  bool previousStep = false;
};

/// Per device, the slots in execution order.
using Slots = std::vector<std::vector<Slot>>;

/// Seconds (or any unit) one stage's work takes per micro-batch: what an
/// order built by list scheduling (zbv) is built on.
struct StageCost {
  double forward = 1, backward = 1, weightGrad = 1;
  double sendForward = 0, sendBackward = 0; ///< to the next / previous stage
};

class Schedule {
public:
  /// 1f1b.
  Schedule() = default;

  /// A schedule by name (names()). `virtualStages` is interleaved's v (at
  /// least 2; 0 picks 2) and must be 0 or 1 for the others.
  static Expected<Schedule> parse(const std::string &name, unsigned virtualStages = 0);
  /// The schedule a plan names, with the plan's stages per device (only
  /// interleaved's is a choice: its v).
  static Expected<Schedule> ofPlan(const std::string &name, unsigned stagesPerDevice) {
    return parse(name, name == "interleaved" ? stagesPerDevice : 0);
  }
  static const std::vector<std::string> &names();
  /// "gpipe, 1f1b, interleaved, zbh1, zbh2, zbv or 2bw", for error messages.
  static std::string namesText();

  ScheduleKind kind() const { return kind_; }
  const std::string &name() const;
  /// Stages per device: v for interleaved, 2 for zbv, else 1.
  unsigned stagesPerDevice() const { return perDevice_; }
  unsigned numStages(unsigned devices) const { return devices * perDevice_; }
  /// The device that runs stage `stage` of numStages(devices).
  unsigned deviceOf(unsigned stage, unsigned devices) const;

  /// Whether `devices` devices can run `microBatches` micro-batches this
  /// way: interleaved and zbv need two devices or more, interleaved M a
  /// multiple of K, 2bw M >= K and training; at least one of each
  /// everywhere.
  Status check(unsigned devices, unsigned microBatches, bool training = true) const;
  /// Whether steps run back to back without a flush (2bw): the programs
  /// hold previous-step slots and the weights come in two versions.
  bool noFlush() const { return kind_ == ScheduleKind::TwoBW; }
  /// Copies of each parameter a device holds: 2 for 2bw, else 1.
  unsigned weightVersions() const { return noFlush() ? 2 : 1; }

  /// Per device, the slots in execution order (after check()). zbv's
  /// order is list-scheduled on `costs` (per stage; unit times where
  /// missing); the other schedules' orders do not depend on times.
  Expected<Slots> build(unsigned devices, unsigned microBatches, bool training,
                        const std::vector<StageCost> &costs = {}) const;

  /// Per stage of numStages(devices): the micro-batches whose activations
  /// (or weight-gradient inputs) the stage holds at most at once, counted
  /// from the slots (built on unit times): forwards run less weight
  /// gradients done, counting those a previous-step slot still owes. 1 for
  /// inference. Memoized by the caller if it is
  /// called often. zbv's orders on other times keep the same per-device
  /// bound, not necessarily the same per-stage counts.
  Expected<std::vector<unsigned>> microBatchesInFlight(unsigned devices, unsigned microBatches,
                                                       bool training) const;

  bool operator==(const Schedule &o) const {
    return kind_ == o.kind_ && perDevice_ == o.perDevice_;
  }
  bool operator!=(const Schedule &o) const { return !(*this == o); }

private:
  ScheduleKind kind_ = ScheduleKind::OneFOneB;
  unsigned perDevice_ = 1;
};

/// Micro-batches in flight per stage of `slots` (see
/// Schedule::microBatchesInFlight), for `stages` stages.
std::vector<unsigned> microBatchesInFlight(const Slots &slots, unsigned stages, bool training);

const char *workName(Work w); ///< "F", "R", "B", "W", "opt"

} // namespace pipec::pipeline
