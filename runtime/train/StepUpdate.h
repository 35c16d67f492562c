//===- runtime/train/StepUpdate.h - A training step's parameter updates -*- C++ -*-===//
//
// What a device does with its parameters once their gradients are summed
// over the step's micro-batches: the mean over micro-batches, the global
// gradient norm's squared sums, the non-finite check, clipping and the
// optimizer step (train::Optimizer), either at the program's OPTIMIZER
// instruction or, for parameters planned that way, inside the step right
// after their last use (Session::planParamUpdates); and PipeDream-2BW's
// rule, which updates into the other of two weight versions one step late.
// runtime/Session.cpp drives it; moving bytes between devices (replica
// gradients, tied weights, the norm's all-reduce) is runtime/dist/'s.
//
// Every path gives bitwise the same result for any partition, schedule
// and device layout: each parameter is updated by one device that
// computes its gradient (ParamState::updater), and norms are summed slot
// by slot in parameter order.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/train/LrSchedule.h"
#include "runtime/train/Optimizer.h"
#include "support/Error.h"
#include "support/LargeAlloc.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace pipec::train {

/// A trained parameter as the session holds it.
struct ParamState {
  int32_t weight = -1, grad = -1;
  int device = 0;        ///< the device whose program produces the gradient
  /// The replica whose device of the stage updates the parameter and
  /// keeps its optimizer state (a sharded optimizer's Parameter.shard;
  /// else 0), and that device: owner * K + device.
  int owner = 0, updater = 0;
  float *data = nullptr; ///< the resident weight, updated in place
  int64_t n = 0;
  LargeVector<float> accum;
  /// The gradients of replicas 1 .. D-1 (data parallelism), summed into
  /// accum in replica order at the OPTIMIZER instruction.
  std::vector<LargeVector<float>> replicaAccum;
  float *accumOf(int replica) {
    return replica == 0 ? accum.data() : replicaAccum[static_cast<size_t>(replica - 1)].data();
  }
  /// The gradient the update reads: the owner's, the replicas' summed in.
  float *gradient() { return accumOf(owner); }
  /// Updated inside the step (Session::planParamUpdates), not at OPTIMIZER.
  bool inStep = false;
  /// The plan's Parameter.accumulate_in_place.
  bool planInPlace = false;
  /// The gradient's kernel sums into accum itself
  /// (DeviceExecutor::accumulateInto); the session's collect never sees it.
  bool inPlace = false;
  std::vector<LargeVector<float>> state;
  /// No-flush schedules (2bw): the second weight version. Version v of
  /// the weight (W(-1) = W(0) the loaded one) lives in data for even v,
  /// in second for odd v.
  LargeVector<float> second;
  float *version(int64_t v) { return !second.empty() && (v % 2 + 2) % 2 ? second.data() : data; }
  const float *version(int64_t v) const {
    return !second.empty() && (v % 2 + 2) % 2 ? second.data() : data;
  }
  /// The optimizer's state buffers, as Optimizer::step takes them.
  std::vector<float *> stateBuffers() {
    std::vector<float *> r;
    for (auto &s : state)
      r.push_back(s.data());
    return r;
  }
};

/// How a step's gradients become updates, fixed for the step.
struct UpdateRule {
  /// Clip the gradients to this global norm (0: no clipping).
  double clip = 0;
  /// A step whose gradients are not all finite changes nothing.
  bool skipNonFinite = false;
  /// The devices agree on the squared sums (an all-reduce) before any of
  /// them updates: needed for clipping and skipping across devices, and
  /// where a parameter is read by another device than its updater.
  bool collective = false;
  /// Session::gradients: scale the gradients, update nothing.
  bool gradientsOnly = false;
  /// Parameters with ParamState::inStep were updated inside the program.
  bool inStep = false;
};

/// One flush step's updates (a schedule that ends its step with every
/// update done). Device threads call it concurrently, each for its own
/// device: each writes only its own parameters and their slots of
/// squares().
class StepUpdate {
public:
  /// `microBatches`: the step's, over which gradients are averaged;
  /// `lastLocalDevice`: the device of this process that records the
  /// agreed squared sums and the skip decision.
  /// `lossScale`: the loss scale S of the step (a power of two; 1 for
  /// none): the gradients are divided by M S.
  StepUpdate(const Optimizer &optimizer, std::vector<ParamState> &params, const UpdateRule &rule,
             int64_t stepNumber, float lr, unsigned microBatches, int lastLocalDevice, float lossScale = 1.0f);

  /// Parameter i's mean, squared sum and update in one pass, chunk by
  /// chunk while it is in cache (bitwise the three passes of optimize's
  /// other path).
  Status updateOne(size_t i);
  /// The updates planned inside device d's program (the rule's inStep).
  Status updateInStep(const std::vector<int> &which);
  /// Device d's OPTIMIZER, its gradients complete (replicas' summed in):
  /// the updates of the parameters it owns. `allReduce` sums n doubles
  /// over every device (the rule's collective path only). False when the
  /// step is skipped (non-finite gradients; every device decides alike)
  /// and nothing changed.
  Expected<bool> optimize(int d, const std::function<Status(double *, size_t)> &allReduce);

  /// Per parameter, the squared sum of its mean gradient (after the step).
  std::vector<double> &squares() { return sq_; }
  /// The step's gradients were not finite and nothing was updated.
  bool skipped() const { return skip_; }

private:
  const Optimizer &opt_;
  std::vector<ParamState> &params_;
  const UpdateRule rule_;
  const int64_t stepNumber_;
  const float lr_;
  const unsigned microBatches_;
  const float invM_; ///< 1 / (M S)
  const bool scaled_; ///< S != 1: the gradients are divided even with M = 1
  const int lastLocal_;
  std::vector<double> sq_;
  bool skip_ = false;
};

/// PipeDream-2BW: device d's update of step s, W(s+1) = W(s) - update(the
/// gradient of step s), written into the other version (the step's
/// instructions before it read W(s-1), the next step's W(s)), with the
/// learning rate of step s + 1 in `schedule`'s numbering. The mean over
/// `microBatches`, the squared sum (into squares[i]), the copy and the
/// update: one pass, chunk by chunk.
Status updateNoFlush(const Optimizer &optimizer, std::vector<ParamState> &params, const LrSchedule &schedule,
                     int d, uint64_t s, unsigned microBatches, std::vector<double> &squares);

} // namespace pipec::train
