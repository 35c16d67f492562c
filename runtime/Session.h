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
#include "runtime/train/Checkpoint.h"
#include "runtime/train/LossScale.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/StepUpdate.h"
#include "runtime/train/LrSchedule.h"
#include "support/LargeAlloc.h"

#include <optional>

#include <functional>
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
  /// Update each parameter inside the step, right after the node that
  /// ends the step's use of it, where the OPTIMIZER instruction would
  /// update it without waiting for the others (Session::planParamUpdates);
  /// off: every update waits for OPTIMIZER (bitwise the same training).
  bool updateInStep = true;
  /// A step whose gradients are not all finite is skipped (no parameter or
  /// optimizer state changes; TrainStep::skipped) instead of applied. It
  /// makes the devices agree on the gradient norm before any update (the
  /// all-reduce the clipping uses), as mixed-precision trainers do.
  bool skipNonFinite = false;
  /// A distributed run (runtime/dist/Mpi.h): this process runs device `rank` of
  /// the plan only, and `transport` (not owned; one device per process,
  /// numDevices() the plan's) connects it to the processes that run the
  /// others. -1: every device, as threads of this process.
  int rank = -1;
  Transport *transport = nullptr;
  /// Run the devices on GPUs (runtime/cuda/): device i on GPU i modulo the
  /// GPUs present (all on one when there is one).
  bool cuda = false;
  /// Run the devices on the emulated GPU (runtime/EmulatedGpu.h):
  /// the GPU path's host side, resident training included, on the CPU
  /// (tests).
  bool emulateGpu = false;
  /// GPUs: matrix products on TF32 tensor cores (piperun --math tf32;
  /// inputs rounded to 10-bit mantissas, sums in fp32) instead of exact
  /// fp32. Still deterministic and independent of K.
  bool tf32 = false;
  /// Resident training where the devices' backends have it (GPUs): the
  /// parameters, gradients and optimizer state stay in device memory and
  /// the optimizer runs there (Session::residentTraining); off: the host
  /// keeps them and the devices' copies of the weights are refreshed
  /// every step (tests compare both).
  bool resident = true;
  /// GPUs: each compute instruction's kernel launches recorded once (a
  /// CUDA graph) and replayed at later steps (DeviceExecutor::
  /// setRecording); off: every kernel launched every step (piperun
  /// --no-cuda-graphs). Bitwise the same either way.
  bool recordings = true;
  /// GPUs with device messages: each receive copies on the GPU's copy
  /// stream, under the kernels before it (DeviceExecutor::setCopyQueue);
  /// off: on the compute stream at the receive (piperun --no-copy-stream).
  /// Bitwise the same either way.
  bool copyStream = true;
  /// Stage-to-stage messages between GPUs of this process (or on one GPU)
  /// stay on the devices (DeviceExecutor::setDeviceMessages); off: they
  /// pass through the host (tests compare both).
  bool deviceMessages = true;
  /// Under mpirun with GPUs: the stage-to-stage messages travel over NCCL
  /// (runtime/cuda/NcclLink.h) instead of the MPI transport staged in host
  /// memory.
  bool nccl = false;
  /// Under mpirun: this process's rank among those of its host (-1: not
  /// known); its GPU is this modulo the GPUs it sees (else the rank's).
  int localRank = -1;
};

/// The automatic spin of a waiting device whose thread has a core to itself.
inline constexpr double kAutoSpinSeconds = 20e-3;

class DeviceThreads;
class DeviceLink;

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
  /// Parameters updated inside the step (planParamUpdates).
  int paramsUpdatedInStep() const {
    int n = 0;
    for (const ParamState &ps : params_)
      n += ps.inStep;
    return n;
  }

  /// Descriptions of the step's inputs (micro-batches stacked).
  std::vector<TensorDesc> stepInputDescs() const;
  /// Names of graph inputs and outputs, in plan order.
  std::vector<std::string> inputNames() const;
  std::vector<std::string> outputNames() const;

  /// Runs one step of inference on every device. In a distributed run the
  /// leader's outputs are the step's; the others' hold what their device
  /// computed.
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
    /// The step's update was dropped (SessionOptions::skipNonFinite, and
    /// under loss scaling).
    bool skipped = false;
    /// The loss scale the step ran with (0: no loss scaling).
    double lossScale = 0;
  };
  /// The loss scale of the next step (0: the plan has no loss scaling).
  double lossScale() const { return scaler_.scale(); }
  /// Under a no-flush schedule (2bw) a step's update completes on the
  /// first devices during the next step: train() then reports the loss and
  /// lr of the step it ran and the gradient norm of the step before, the
  /// last whose update every device has applied (NaN for the first).
  /// Runs one training step: forward and backward of every micro-batch,
  /// (distributed: the loss, gradient norm and non-finite check are the
  /// step's on every process; the outputs, the process's device's),
  /// gradients summed in ascending micro-batch order and divided by M, then
  /// clipping and the optimizer. Training plans only.
  Expected<TrainStep> train(const std::vector<Tensor> &inputs);
  /// Forward and backward of every micro-batch, as train() runs them, but
  /// no update: each parameter's gradient of the step's loss (the mean of
  /// the micro-batches', summed in ascending order), by parameter name, in
  /// the plan's order. It counts as a step (the step count, and with it
  /// the random streams of the next, advance). For references
  /// that apply updates of their own (tests/unit/PipelineTest.cpp checks
  /// 2bw's rule with it). Flush schedules, one process.
  struct Gradients {
    double loss = 0; ///< as TrainStep::loss
    std::vector<std::pair<std::string, Tensor>> values;
  };
  Expected<Gradients> gradients(const std::vector<Tensor> &inputs);
  /// Overwrites a trained parameter (what weight() reads) with `value` of
  /// its shape and type. Not while a no-flush step is pending.
  Status setWeight(const std::string &name, const Tensor &value);
  bool isTraining() const { return lp_.plan.pipeline().training(); }
  /// Whether steps run back to back without a flush (the 2bw schedule):
  /// weights and checkpoints are final only after flush().
  bool noFlush() const { return noFlush_; }
  /// Under a no-flush schedule, runs what the last step left to do (its
  /// backward passes on the first devices and their optimizer steps), so
  /// that the weights are those after every step so far; a no-op
  /// otherwise or when nothing is pending. Training may go on after it,
  /// with the same results as without it. Returns the gradient norm of the
  /// last step through `gradNorm` when given.
  Status flush(double *gradNorm = nullptr);
  /// Data parallelism: replicas of the pipeline (1 without); the session
  /// runs stages() x replicas() devices, device r*K + s stage s of replica r.
  int replicas() const { return static_cast<int>(std::max<uint32_t>(lp_.plan.pipeline().data_parallel(), 1)); }
  int stages() const { return lp_.plan.devices_size(); }
  /// Micro-batches of a step: M per replica.
  unsigned stepMicroBatches() const {
    return lp_.plan.pipeline().num_micro_batches() * static_cast<unsigned>(replicas());
  }
  /// Writes the training state after the steps run so far (parameters,
  /// optimizer buffers, step count) to a checkpoint directory, atomically.
  /// In a distributed run every process calls it and writes its own part
  /// (runtime/train/Checkpoint.h: checkpoints in parts); any layout reads
  /// either form back, keyed by name.
  Status saveCheckpoint(const std::string &dir);
  /// Restores a checkpoint written by saveCheckpoint for this plan; the next
  /// train() call runs the step after it, as an uninterrupted run would.
  Status loadCheckpoint(const std::string &dir);
  /// Current value of a weight or constant (training updates weights).
  Expected<Tensor> weight(const std::string &name) const;
  /// The same bytes in place, not copied: valid while the session lives
  /// and runs no step (piperun --save writes them out).
  Expected<Tensor> weightView(const std::string &name) const;
  /// Whether `name` is a parameter the plan trains.
  bool isTrainedWeight(const std::string &name) const;

  /// One executor per device of the plan; in a distributed run only this
  /// process's device has one (the others are null).
  const std::vector<std::unique_ptr<DeviceExecutor>> &devices() const { return devices_; }
  /// The device this process runs in a distributed run, -1 otherwise.
  int rank() const { return opts_.rank; }
  bool distributed() const { return opts_.rank >= 0; }
  /// Whether this process reports (prints, writes outputs, checkpoints):
  /// rank 0 of a distributed run, or the only process.
  bool leader() const { return opts_.rank <= 0; }
  /// What device d measured: in a distributed run, after gatherStats() on
  /// every process, the leader has every device's.
  const DeviceStats &deviceStats(int d) const;
  const std::vector<TraceEvent> &deviceTrace(int d) const;
  /// Collective of a distributed run (every process calls it): the leader
  /// receives every device's stats and trace. A no-op otherwise.
  Status gatherStats();
  /// Collective of a distributed run: the leader receives every trained
  /// parameter and running statistic, so that weight() and a saved model
  /// hold the whole model there. A no-op otherwise.
  Status gatherTrainingState();
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
  /// Whether the training state lives in the devices' memory and the
  /// devices update it (GPUs): the host's copies of the weights and the
  /// optimizer state are brought up to date only when read (weight(),
  /// checkpoints) and sent back when written (setWeight, loadCheckpoint).
  /// Where it cannot (a parameter read on several devices, running
  /// statistics, 2bw), the host keeps the state.
  bool residentTraining() const { return resident_ != nullptr; }
  ~Session();

private:
  Session();
  /// Step shape of tensor t: [M*b, ...] if it has a leading axis and M > 1.
  TensorDesc stepDesc(int32_t t) const;
  Status prepareTraining();
  /// Where a device's OPTIMIZER would update its parameters one by one,
  /// with nothing to wait for (no clipping, no skipping of non-finite
  /// steps, no collective, one pipeline, a flush schedule, CPU devices),
  /// each parameter whose gradient its kernel sums in place and that no
  /// other device reads is updated right after the last node of its
  /// device's program that reads the weight (or a view of it) or adds to
  /// its gradient, among the backward pass's nodes rather than after all
  /// of them (faster on two threads; docs/runtime.md has the figures).
  /// Sets ParamState::inStep and the devices' DeviceExecutor::setParamUpdates.
  Status planParamUpdates();
  /// Resident training (residentTraining()): device buffers for the
  /// gradients and optimizer state, the gradients summed on the devices,
  /// an updater per device. Leaves resident_ null where it cannot.
  Status prepareResident();
  /// Resident training: the host's copies of the weights and optimizer
  /// state from the devices (when a step changed them), or to them
  /// (`only` >= 0: that parameter's weight alone).
  Status pullResident() const;
  Status pushResident(int only = -1);
  /// Resident training: the step's gradients to the host's accumulators
  /// (gradients()).
  Status pullResidentGradients();
  /// Resident training, after a step: the parameters' squared sums and
  /// whether the devices skipped the step.
  void residentStepResults(const train::UpdateRule &rule, std::vector<double> &squares, bool &skipped);
  /// Resident training: device d's OPTIMIZER, enqueued on its stream.
  Status optimizeResident(int d, const train::UpdateRule &rule, int64_t stepNumber, float lr, Transport *tr);
  /// Resident data parallelism, at device d's OPTIMIZER: its gradient sums
  /// to the parameters' updaters, and the sums in replica order of those
  /// it updates; after the update, the new weights to the other replicas'
  /// devices and theirs from them.
  Status reduceResidentGradients(int d, Transport &tr);
  Status syncResidentWeights(int d, Transport &tr);
  /// The devices run on GPUs, or the emulated one.
  bool onGpus() const { return opts_.cuda || opts_.emulateGpu; }
  /// The checkpoint's tensors: all (owner -1) or those device `owner`
  /// updates or computes.
  Expected<train::Checkpoint> checkpointContents(int owner) const;
  /// Distributed: every process passes its own status; each returns its
  /// own error, or one naming the first process that failed, or ok.
  Status agree(const Status &mine, const std::string &what);
  /// One step's inputs and outputs (Session.cpp).
  struct StepIo;
  /// Checks a step's inputs and prepares its outputs (reusing the last
  /// step's where the caller let go of them).
  Expected<std::unique_ptr<StepIo>> beginStep(const std::vector<Tensor> &inputs, bool training, bool drain);
  /// The executors' feed and collect: input t of micro-batch mb into dst;
  /// a value computed for micro-batch mb into the step's output, the
  /// gradient sums or the running statistics.
  Status feed(const StepIo &io, int32_t t, unsigned mb, void *dst) const;
  Status collect(StepIo &io, int32_t t, unsigned mb, const void *src);
  /// Runs `runDevice` for every device of this process (on their threads)
  /// and returns the first failure, which breaks the session.
  Status runDevices(const std::function<Status(int)> &runDevice);
  /// 2bw, after the devices ran: the gradient norm of the step whose
  /// updates every device has now applied.
  Status finishNoFlushStep(bool drain, uint64_t call);
  /// The step's outputs that no device produced: inputs and constants.
  Status collectUnproduced(StepIo &io);
  /// Runs every device's program; `training` accumulates gradients and
  /// applies the optimizer. `drain`: a no-flush plan's previous-step
  /// instructions alone, with no inputs or outputs (flush()).
  Expected<std::vector<Tensor>> runProgram(const std::vector<Tensor> &inputs, bool training,
                                           TrainStep *train, bool drain = false);

  using ParamState = train::ParamState;
  /// No-flush schedule (2bw): whether this plan runs one, and whether the
  /// last step's previous-step part is still to run (flush()).
  bool noFlush_ = false, drainPending_ = false;
  /// gradients(): the optimizer callback scales the gradients, no update.
  bool gradientsOnly_ = false;
  /// 2bw: the gradient norm of the last step every device updated.
  double lastNoFlushNorm_ = 0;
  /// The parameter state of a weight tensor, or null.
  const ParamState *paramOfWeight(int32_t tensor) const;
  /// 2bw: per step parity, the squared sums of the step's gradients, slot
  /// per parameter, as the devices' optimizer steps write them.
  std::vector<double> stepSquares_[2];

  plan::LoadedPlan lp_;
  SessionOptions opts_;
  /// The plan's dynamic loss scaling (none: disabled) and its seed tensor.
  train::LossScaler scaler_;
  int32_t lossScaleSeed_ = -1;
  /// The seed's value this step: the source of the devices' copies'
  /// uploads, valid until the step's end.
  float seedValue_ = 1.0f;
  std::vector<std::unique_ptr<DeviceExecutor>> devices_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<DeviceThreads> threads_;
  /// Set when a step failed: the devices' state is undefined afterwards.
  Status broken_ = Status::ok();
  uint64_t steps_ = 0, measuredSteps_ = 0;
  double stepSeconds_ = 0;
  /// The first device of this process holding each tensor instance
  /// (outputs), -1 if none.
  int deviceHolding(int32_t tensor, unsigned mb) const;
  /// A weight or constant's data: the process's one copy of the weight
  /// files, which every device of the process reads. Null for others.
  void *residentData(int32_t tensor) const;
  /// Devices this process runs.
  std::vector<int> localDevices_;
  bool isLocal(int d) const { return d >= 0 && d < static_cast<int>(devices_.size()) && devices_[d]; }
  Transport *transport() const { return opts_.transport ? opts_.transport : transport_.get(); }
  /// Distributed: per graph output, the device that produces it (-1: none).
  std::vector<int> outputProducer_;
  /// Distributed: per trained parameter, the devices that hold its weight
  /// besides the one that updates it (they receive it after each update).
  std::vector<std::vector<int>> otherHolders_;
  /// The GPUs' messages over NCCL (SessionOptions::nccl).
  std::unique_ptr<DeviceLink> link_;
  /// Distributed: per state update, the device that computes it.
  std::vector<int> stateProducer_;
  /// Distributed: every device's stats and trace, on the leader.
  std::vector<DeviceStats> gatheredStats_;
  std::vector<std::vector<TraceEvent>> gatheredTrace_;
  std::optional<train::Optimizer> optimizer_;
  train::LrSchedule lrSchedule_;
  std::vector<ParamState> params_;
  /// The last step's outputs, shared with the caller: the next step writes
  /// into those the caller has let go of (fresh buffers for the logits
  /// every step cost page faults and zeroing).
  std::vector<Tensor> lastOutputs_;
  std::vector<int> paramOfGrad_; ///< tensor -> index into params_, -1
  /// Some trained parameter is resident on more than one device.
  bool sharedParams_ = false;
  /// Per tensor: where a StateUpdate value is copied (the resident state
  /// constant), null for other tensors.
  std::vector<void *> stateDst_;
  struct Resident;
  std::unique_ptr<Resident> resident_;
};

} // namespace pipec::runtime
