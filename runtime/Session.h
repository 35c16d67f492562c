//===- runtime/Session.h - A loaded plan, ready to run ---------*- C++ -*-===//
//
// Opens a plan directory, prepares one executor per device and runs steps:
// a step feeds every graph input for all M micro-batches and returns every
// graph output. Inputs are given per step with M micro-batches stacked on
// axis 0 (or, for M = 1 or a tensor without a batch axis, in the compiled
// shape, fed to every micro-batch); outputs come back stacked the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Executor.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/Schedule.h"

#include <optional>

#include <memory>
#include <string>
#include <vector>

namespace pipec::runtime {

struct SessionOptions {
  int threadsPerDevice = 1;
  uint64_t seed = 0;
  /// Record a TraceEvent per executed instruction on every device.
  bool trace = false;
  /// Tests of error propagation: device `failDevice` fails before its
  /// instruction `failAtInstruction` in every step.
  int failDevice = -1;
  int failAtInstruction = -1;
  /// How long a device waiting for a message, or for the next step, spins
  /// before it sleeps (makeInProcessTransport, DeviceThreads); negative:
  /// kAutoSpinSeconds when the devices' threads fit the machine's cores,
  /// else none.
  double spinSeconds = -1;
  /// Let the kernels that compute parameter gradients sum the micro-batches
  /// in place where they can (DeviceExecutor::accumulateInto); off: every
  /// gradient is collected and added per micro-batch (tests compare both).
  bool accumulateInPlace = true;
  /// A step whose gradients are not all finite is skipped (no parameter or
  /// optimizer state changes; TrainStep::skipped) instead of applied. It
  /// makes the devices agree on the gradient norm before any update (the
  /// all-reduce the clipping uses), as mixed-precision trainers do.
  bool skipNonFinite = false;
};

/// The automatic spin of a waiting device whose thread has a core to itself.
inline constexpr double kAutoSpinSeconds = 20e-3;

class DeviceThreads;

class Session {
public:
  static Expected<std::unique_ptr<Session>> open(const std::string &planDir,
                                                 const SessionOptions &opts);
  const plan::Plan &plan() const { return lp_.plan; }
  /// Parameters whose gradient kernel sums the micro-batches in place.
  int gradientsAccumulatedInPlace() const {
    int n = 0;
    for (const ParamState &ps : params_)
      n += ps.inPlace;
    return n;
  }

  /// Descriptions of the step's inputs and outputs (micro-batches stacked).
  std::vector<TensorDesc> stepInputDescs() const;
  std::vector<TensorDesc> stepOutputDescs() const;
  /// Names of graph inputs and outputs, in plan order.
  std::vector<std::string> inputNames() const;
  std::vector<std::string> outputNames() const;

  /// Runs one step of inference on every device.
  Expected<std::vector<Tensor>> run(const std::vector<Tensor> &inputs);

  /// What one training step measured.
  struct TrainStep {
    std::vector<Tensor> outputs;
    double loss = 0;     ///< mean of the micro-batches' losses
    float lr = 0;        ///< learning rate applied
    double gradNorm = 0; ///< global gradient norm before clipping
    /// The first parameter (in the plan's order) whose gradient holds a NaN
    /// or an infinity; empty when every gradient is finite.
    std::string firstNonFinite;
    /// The step's update was dropped (SessionOptions::skipNonFinite).
    bool skipped = false;
  };
  /// Runs one training step: forward and backward of every micro-batch,
  /// gradients summed in ascending micro-batch order and divided by M, then
  /// clipping and the optimizer. Training plans only.
  Expected<TrainStep> train(const std::vector<Tensor> &inputs);
  bool isTraining() const { return lp_.plan.pipeline().training(); }
  /// Writes the training state after the steps run so far (parameters,
  /// optimizer buffers, step count) to a checkpoint directory, atomically.
  Status saveCheckpoint(const std::string &dir) const;
  /// Restores a checkpoint written by saveCheckpoint for this plan; the next
  /// train() call runs the step after it, as an uninterrupted run would.
  Status loadCheckpoint(const std::string &dir);
  /// Current value of a weight or constant (training updates weights).
  Expected<Tensor> weight(const std::string &name) const;

  const std::vector<std::unique_ptr<DeviceExecutor>> &devices() const { return devices_; }
  /// Steps run so far (with a resumed checkpoint's).
  uint64_t stepsRun() const { return steps_; }
  /// Wall-clock seconds of the steps measured so far (since the session
  /// opened or resetMeasurements()), each from the start of the first
  /// device to the end of the last, and how many steps that was.
  double stepSeconds() const { return stepSeconds_; }
  uint64_t measuredSteps() const { return measuredSteps_; }
  /// stepSeconds() over measuredSteps() (0 before any).
  double meanStepSeconds() const {
    return measuredSteps_ ? stepSeconds_ / static_cast<double>(measuredSteps_) : 0.0;
  }
  /// Starts the measurements afresh (after warm-up steps): step times and
  /// every device's stats, node times and trace.
  void resetMeasurements();
  /// Bytes the device holds outside its arena and weights for training:
  /// the gradient accumulator and optimizer state of the parameters it
  /// updates.
  uint64_t trainingStateBytes(int device) const;
  ~Session();

private:
  Session();
  /// Step shape of tensor t: [M*b, ...] if it has a leading axis and M > 1.
  TensorDesc stepDesc(int32_t t) const;
  Status prepareTraining();
  /// Runs every device's program; `training` accumulates gradients and
  /// applies the optimizer.
  Expected<std::vector<Tensor>> runProgram(const std::vector<Tensor> &inputs, bool training,
                                           TrainStep *train);

  struct ParamState {
    int32_t weight = -1, grad = -1;
    int device = 0;        ///< the device whose program produces the gradient
    float *data = nullptr; ///< the resident weight, updated in place
    int64_t n = 0;
    std::vector<float> accum;
    /// The gradient's kernel sums into accum itself
    /// (DeviceExecutor::accumulateInto); collect() never sees it.
    bool inPlace = false;
    std::vector<std::vector<float>> state;
  };

  plan::LoadedPlan lp_;
  SessionOptions opts_;
  std::vector<std::unique_ptr<DeviceExecutor>> devices_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<DeviceThreads> threads_;
  /// Set when a step failed: the devices' state is undefined afterwards.
  Status broken_ = Status::ok();
  uint64_t steps_ = 0, measuredSteps_ = 0;
  double stepSeconds_ = 0;
  /// The first device holding each tensor (weights, outputs), -1 if none.
  int deviceHolding(int32_t tensor, unsigned mb) const;
  std::optional<train::Optimizer> optimizer_;
  train::Schedule schedule_;
  std::vector<ParamState> params_;
  /// The last step's outputs, shared with the caller: the next step writes
  /// into those the caller has let go of (a fresh quarter-megabyte of
  /// logits per step cost page faults and zeroing, 7% of a step).
  std::vector<Tensor> lastOutputs_;
  std::vector<int> paramOfGrad_; ///< tensor -> index into params_, -1
  /// Some trained parameter is resident on more than one device.
  bool sharedParams_ = false;
  /// Per tensor: where a StateUpdate value is copied (the resident state
  /// constant), null for other tensors.
  std::vector<void *> stateDst_;
};

} // namespace pipec::runtime
