//===- runtime/Executor.h - Runs one device's instruction stream -*- C++ -*-===//
//
// A DeviceExecutor owns one device's arena, its resident weights and a
// prepared kernel per node, and runs the device's program. It reads only
// the plan (runtime/plan), never compiler code.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/Transport.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/ScheduleJit.h"
#include "runtime/kernel/Backend.h"
#include "runtime/plan/PlanIO.h"
#include "support/LargeAlloc.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pipec::runtime {

/// Measurements of one device over the runs so far.
struct DeviceStats {
  double busySeconds = 0;     ///< time inside kernels (compute instructions)
  double waitSeconds = 0;     ///< time blocked in receives and collectives
  double commSeconds = 0;     ///< time spent copying in sends and receives
  double optimizerSeconds = 0;
  uint64_t instructions = 0;  ///< instructions executed
  uint64_t nodesRun = 0;
  /// Nodes not run because a guard's condition said their outputs are
  /// not needed (plan::Node.guards).
  uint64_t nodesSkipped = 0;
  uint64_t bytesSent = 0;
  uint64_t arenaBytes = 0;    ///< the arena actually allocated
  /// Highest arena byte a tensor instance of this device occupied during
  /// the runs (measured from the allocations the instructions touched).
  uint64_t arenaHighWater = 0;
};

/// One executed instruction, for traces (times from the session's epoch).
struct TraceEvent {
  int kind;            ///< plan::Instruction::Kind
  uint32_t microBatch;
  int32_t tensor;      ///< SEND/RECV: the tensor; else -1
  int32_t peer;
  double start, end;   ///< seconds
  /// Seconds of the span spent in parameter updates made inside the step
  /// (setParamUpdates), which the plan counts in the OPTIMIZER's time.
  double updateSeconds = 0;
};

/// Where a device runs: the CPU, GPU `gpu` (>= 0), or the emulated GPU of
/// runtime/EmulatedGpu.h (tests of the GPU path's host side); `tf32`:
/// a GPU's matrix products on TF32 tensor cores.
struct DevicePlacement {
  int gpu = -1;
  bool emulateGpu = false;
  bool tf32 = false;
};

class DeviceLink;

class DeviceExecutor {
public:
  /// Prepares kernels and memory for device `index` of a loaded plan: stage
  /// index % K of replica index / K (data parallelism; replica 0 alone
  /// without it), whose peers are the stages of its own replica. The
  /// LoadedPlan must outlive the executor. The device runs on the CPU
  /// (runtime/cpu/CpuBackend.h) or, with `gpu` >= 0, on that GPU
  /// (runtime/cuda/CudaBackend.h): its arena and weights in the backend's
  /// memory, its nodes as the backend's kernels; inputs, outputs, messages
  /// and gradients pass between host and device through the backend
  /// (runtime/kernel/Backend.h).
  static Expected<std::unique_ptr<DeviceExecutor>> create(const plan::LoadedPlan &lp, int index,
                                                          const DevicePlacement &where = DevicePlacement());
  /// Whether the host can read address()'s memory directly (the CPU).
  bool hostAddressable() const { return backend_->hostAddressable(); }
  /// The device's backend: its memory, copies and parameter updater
  /// (resident training, Session).
  kernel::Backend &backend() { return *backend_; }
  /// The device's copy of a weight or constant it reads, or null.
  void *weightAddress(int32_t tensor) const { return weightAddr_[static_cast<size_t>(tensor)]; }
  /// Resident training: the weights change on the device (the backend's
  /// ParamUpdater), not on the host, so a step does not refresh the
  /// device's copies from the host's.
  void setResidentWeights(bool on) { residentWeights_ = on; }
  /// Stage-to-stage messages between devices of this process stay on the
  /// devices (Backend::deviceMessages): SEND copies the tensor into a
  /// mailbox of the sender's memory on its stream and passes the
  /// mailbox's address and an event through the transport; RECV has its
  /// stream wait for the event and copy the mailbox into the arena. No
  /// host waits for a device. Every device of the process must agree.
  void setDeviceMessages(bool on) { deviceMessages_ = on; }
  bool deviceMessages() const { return deviceMessages_; }
  /// Receives on the copy queue (with device messages): a RECV's copy runs
  /// on the backend's Copy queue (a GPU's copy stream), which waits for
  /// the sender's event and for the point of the program after which no
  /// instruction before the RECV touches the received bytes' place in the
  /// arena; the compute queue waits for the copy only before the first
  /// instruction that touches that place (or at the step's end). So the
  /// copy runs under the kernels between those points. On by default;
  /// off: the copy runs on the compute queue at the RECV (piperun
  /// --no-copy-stream). Bitwise the same either way.
  void setCopyQueue(bool on) { copyQueueOn_ = on; }
  /// Waits for the device's queued work, the copies of receives in flight
  /// included (after a step that failed; before the devices' memory is
  /// freed).
  Status quiesce() {
    PIPEC_TRY(awaitCopies(-1));
    return backend_->sync();
  }
  /// Messages to and from the GPUs of other processes enqueued on the
  /// device's stream over `link` (runtime/dist/DeviceLink.h: NCCL): SEND
  /// copies the tensor into its mailbox and sends that; RECV receives into
  /// the arena. The transport then carries no tensor.
  void setDeviceLink(DeviceLink *link) { link_ = link; }
  /// Device memory between the devices of a run, besides the plan's
  /// messages (resident data parallelism: the replicas' gradient sums and
  /// the updated weights), by the route the stage-to-stage messages take:
  /// with device messages, the address and an event recorded on this
  /// device's stream now, so the receiver's stream copies from `src`
  /// (which must not change before the step ends); with a DeviceLink
  /// (NCCL), on the replica channel to or from that rank; else the bytes
  /// through the host (the transport's staging). recvMemory writes `dst`
  /// (this device's memory), ordered before what its stream enqueues next.
  Status sendMemory(Transport &tr, int to, uint64_t tag, const void *src, uint64_t bytes);
  Status recvMemory(Transport &tr, int from, uint64_t tag, void *dst, uint64_t bytes);

  /// Feeds, runs and collects: `feed(tensorId, microBatch, dst)` fills a graph
  /// input instance before the first instruction that reads it;
  /// `collect(tensorId, microBatch, src)` receives a graph output, or a
  /// parameter gradient, after the instruction that produced it; `optimize()`
  /// runs at the OPTIMIZER instruction of a training plan.
  using FeedFn = std::function<Status(int32_t tensor, unsigned mb, void *dst)>;
  using CollectFn = std::function<Status(int32_t tensor, unsigned mb, const void *src)>;
  /// `previousStep`: the OPTIMIZER instruction is a no-flush plan's
  /// previous-step one (it updates with the step before's gradients).
  using OptimizeFn = std::function<Status(int device, bool previousStep)>;
  /// Updates `params` (indices the session chose, setParamUpdates) on
  /// `device` in the middle of its program.
  using UpdateFn = std::function<Status(int device, const std::vector<int> &params)>;
  struct StepIO {
    FeedFn feed;
    CollectFn collect;
    OptimizeFn optimize; ///< null for inference
    /// Runs the parameter updates setParamUpdates placed; null: they do
    /// not run (and OPTIMIZER must update those parameters itself).
    UpdateFn update;
    /// Moves SEND/RECV tensors; may be null for a single-device plan.
    Transport *transport = nullptr;
    /// Fails the device with an injected error before this instruction
    /// (tests of error propagation); -1 for none.
    int failAtInstruction = -1;
    /// A no-flush plan (2bw) runs its program's current-step instructions
    /// alone in its first step, all of them in the steps after, and the
    /// previous-step ones alone in the drain after the last step.
    enum class Part { All, CurrentStep, PreviousStep } part = Part::All;
    /// With two weight versions (setSecondWeightVersion): the version the
    /// current step's instructions read (0: the loaded weights, 1: the
    /// second copy); previous-step instructions read the other one.
    int weightVersion = 0;
  };
  /// Runs the device's program once. Previous-step instructions see
  /// ctx.step - 1 (their step's random streams and cached weight layouts).
  Status runStep(cpu::ExecContext ctx, const StepIO &io);

  /// A second copy of the device's parameters for a no-flush plan: `addr`
  /// maps each parameter tensor this device reads to its second version,
  /// which the instructions read when StepIO::weightVersion says so.
  void setSecondWeightVersion(const std::vector<std::pair<int32_t, void *>> &addr);

  /// Records a TraceEvent per instruction from now on, times relative to
  /// `epoch`.
  void enableTrace(std::chrono::steady_clock::time_point epoch) {
    tracing_ = true;
    epoch_ = epoch;
  }
  const std::vector<TraceEvent> &trace() const { return trace_; }
  int index() const { return index_; }
  int stage() const { return stage_; }

  const DeviceStats &stats() const { return stats_; }
  /// Forgets what the runs so far measured (times, counts, node times,
  /// trace), as after warm-up steps; the arena high-water mark stays.
  void resetMeasurements();
  /// Times every node run from now on (a clock read per node).
  void enableNodeProfile() { nodeSeconds_.assign(kernels_.size(), 0.0); }
  /// Seconds spent in each node (index into the device's nodes) so far;
  /// empty unless profiling was enabled.
  const std::vector<double> &nodeSeconds() const { return nodeSeconds_; }
  /// Address of a tensor instance (arena or weights); null if not resident.
  void *address(int32_t tensor, unsigned mb);

  /// Sums a parameter gradient over the step's micro-batches in place: the
  /// node that computes `tensor` writes its first run of a step into `dst`
  /// and adds every later run to it (cpu::ExecContext::accumulate), so the
  /// gradient is no longer collected per micro-batch. Possible when that
  /// kernel canAccumulate(), the tensor is its only output and nothing else
  /// on the device reads, sends or returns it; returns whether it was done.
  /// Runs in micro-batch order add in micro-batch order, as collect() does.
  /// `deviceMemory`: `dst` is the backend's memory (resident training),
  /// not the host's.
  bool accumulateInto(int32_t tensor, void *dst, bool deviceMemory = false);
  /// Resident training, for a gradient accumulateInto cannot take: after
  /// each instruction that computes `tensor`, the backend sums it into
  /// `dst` (device memory; Backend::accumulate) instead of the host's
  /// collect. False where the tensor is not the device's to sum.
  bool accumulateOnDevice(int32_t tensor, float *dst);

  /// Parameters updated inside the step: `params` right after `node` of
  /// instruction `instruction` has run (StepIO::update), where the step is
  /// done with them (Session::planParamUpdates).
  struct ParamUpdate {
    int instruction;
    int32_t node;
    std::vector<int> params;
  };
  /// Sets the updates (replacing earlier ones); `node` must be a kernel
  /// node of `instruction`, a compute instruction.
  Status setParamUpdates(std::vector<ParamUpdate> updates);

  /// Recorded instructions: on a backend that canRecord (a GPU: CUDA
  /// graphs), a compute instruction's kernel launches are recorded at its
  /// second run (the first is eager: kernels make handles lazily) and the
  /// recording replayed at every later one, one call where there was one
  /// per kernel. An instruction stays eager where a node's kernel is not
  /// replayable(), a parameter update runs inside it, nodes are timed, or
  /// the recording fails twice (the reason is in hostSchedule()). Feeds, collects, gradient sums, messages and the
  /// optimizer stay outside, as before. On by default; off runs every
  /// kernel every step (piperun --no-cuda-graphs).
  void setRecording(bool on) { recordOn_ = on; }

  /// Compiles the program into native code (runtime/cpu/ScheduleJit.h)
  /// now rather than at the first run, where the compiled schedule can
  /// serve (a CPU device, codegen enabled, one weight version).
  void prepareSchedule();
  /// How runStep runs the program: "compiled (N calls)", or "interpreted"
  /// and why (known after prepareSchedule or the first step); on a
  /// recording backend, how many compute instructions replay recordings;
  /// with device messages, where the receives copy (setCopyQueue).
  std::string hostSchedule() const;

private:
  DeviceExecutor(const plan::LoadedPlan &lp, int index, int stage)
      : lp_(lp), index_(index), stage_(stage), replicaBase_(index - stage) {}
  Status prepare();

  const plan::LoadedPlan &lp_;
  int index_;       ///< the device: replica * K + stage
  int stage_;       ///< the plan device whose program it runs
  int replicaBase_; ///< replica * K: the device of its replica's stage 0
  std::shared_ptr<void> arena_;
  std::vector<int64_t> offsetOf_;       ///< tensor * M + mb -> arena offset, -1 if none
  std::vector<void *> weightAddr_;      ///< tensor -> resident weight data
  /// Tensor -> the state (running statistics) whose device copy its value
  /// replaces after each micro-batch, or -1: on a backend that is not
  /// host-addressable, where the session's update of the host's state
  /// reaches the device only at the next step.
  std::vector<int32_t> stateOf_;
  std::vector<kernel::KernelPtr> kernels_; ///< per device node
  /// The kernels' scratch memory, in the backend's memory: the largest
  /// workspaceBytes() of the device's kernels.
  void *workspace_ = nullptr;
  /// Per instruction: inputs to feed before it and outputs to collect after.
  std::vector<std::vector<int32_t>> feedBefore_, collectAfter_;
  /// Per compute instruction: its nodes' operand addresses (prepare()),
  /// for the loaded weights and (no-flush plans) their second version.
  std::vector<std::vector<void *>> operands_, operands2_;
  /// Per compute instruction: (operand index, tensor) of every resident
  /// weight or constant it reads.
  std::vector<std::vector<std::pair<uint32_t, int32_t>>> weightOperands_;
  /// Per node: whether it accumulates its output in place
  /// (accumulateInto): its run for micro-batch 0 writes, the later ones add.
  std::vector<char> accumulates_;
  /// Per node: how many guards the runtime evaluates (their addresses
  /// follow the node's outputs among its operands; 0 where the backend's
  /// memory is not the host's, which then runs every node), and bit k:
  /// guard k's `when`.
  std::vector<uint8_t> guardCount_;
  std::vector<uint32_t> guardWhen_;
  /// Per instruction: gradients the backend sums into device memory after
  /// it (accumulateOnDevice).
  std::vector<std::vector<std::pair<int32_t, float *>>> accumAfter_;
  /// The backend copies asynchronously (Backend::residentTraining): feeds
  /// and collects go through host buffers of their own, the collects are
  /// handed over once the device's work is done (flushCollects), and the
  /// host waits for the device only at the step's end and where the host
  /// needs its bytes (messages, a host optimizer).
  bool async_ = false;
  bool residentWeights_ = false;
  bool deviceMessages_ = false;
  DeviceLink *link_ = nullptr;
  /// Per message (its tag): the sender's mailbox in device memory, made at
  /// the first send; a step's messages have a mailbox each.
  std::map<uint64_t, void *> mailbox_;
  bool mailboxesMade_ = false; ///< every SEND's mailbox allocated (the first step)
  /// Receives on the copy queue (setCopyQueue).
  bool copyQueueOn_ = true;
  /// Per instruction: the arena bytes [begin, end) it reads or writes.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> touches_;
  /// Per run part (StepIO::Part) and RECV: the last instruction before it
  /// of a run of that part that touches the bytes it writes, or -1; and
  /// per part and instruction, whether an event follows it on the compute
  /// queue (a receive's copy waits for it).
  std::vector<int> freeAfter_[3];
  std::vector<char> eventAfter_[3];
  /// Per instruction: its event after it this run (eventAfter_).
  std::vector<void *> afterEvent_;
  /// Receives whose copies the compute queue has not waited for yet.
  struct InFlight {
    uint64_t begin, end;
    void *done; ///< an event on the copy queue after the copy
  };
  std::vector<InFlight> inFlight_;
  /// The compute queue waits for the copies in flight into bytes that
  /// instruction `i` touches (all of them when `i` is -1).
  Status awaitCopies(int i);
  /// touches_, freeAfter_ and eventAfter_, from the plan (prepare()).
  void planReceives();
  /// What a SEND passes through the transport when messages stay on the
  /// devices (setDeviceMessages).
  struct DeviceMessage {
    void *mailbox; ///< the tensor's copy in the sender's memory
    void *event;   ///< recorded on the sender's stream after the copy
    int device;    ///< the sender's GPU
    uint64_t bytes;
  };
  /// hostSchedule()'s words on the receives with device messages.
  std::string receivesSaid() const;
  /// The address and event of a device message, checked.
  Expected<DeviceMessage> takeDeviceMessage(Transport &tr, int from, uint64_t tag, uint64_t bytes);
  struct PendingCollect {
    int32_t tensor;
    unsigned mb;
    const void *host;
  };
  std::vector<PendingCollect> pending_;
  /// Per node, the device's error flag (ExecContext::errorFlag), cleared
  /// at the step's start and read at its end; and their host copies.
  int *flags_ = nullptr;
  int *hostFlags_ = nullptr;
  /// The step and the step before in device memory (ExecContext::
  /// deviceStep), written from pinned memory at each step's start.
  uint64_t *deviceStep_ = nullptr, *hostStep_ = nullptr;
  /// Reads the flags after the step's work: an error names the node.
  Status checkFlags();
  uint64_t flagBytes() const {
    return static_cast<uint64_t>(std::max(lp_.plan.devices(stage_).nodes_size(), 1)) * sizeof(int);
  }
  /// The step's feeds and collects, each at its own offset of one host
  /// buffer (the copies of a step are in flight together).
  void *ioBuffer_ = nullptr;
  uint64_t ioBufferBytes_ = 0, ioUsed_ = 0;
  Expected<void *> ioSlot(uint64_t bytes);
  /// Waits for the device and hands the pending collects to `collect`.
  Status flushCollects(const StepIO &io);
  /// Per instruction: the highest arena byte its tensor instances reach.
  std::vector<uint64_t> highWater_;
  DeviceStats stats_;
  std::vector<double> nodeSeconds_;
  /// Where the device's memory is and its kernels run.
  kernel::BackendPtr backend_;
  /// A tensor instance readable by the host (the backend's hostView).
  Expected<void *> hostView(int32_t tensor, unsigned mb);
  bool tracing_ = false;
  std::chrono::steady_clock::time_point epoch_;
  std::vector<TraceEvent> trace_;

  /// One run of the program: what its instructions share.
  struct Run {
    DeviceExecutor *ex;
    cpu::ExecContext ctx;
    const StepIO *io;
    uint64_t step;
    unsigned mb = 0; ///< the running instruction's micro-batch
    std::chrono::steady_clock::time_point t0;
    Status status = Status::ok();
    /// Seconds the running instruction spent in parameter updates (counted
    /// as optimizer time, not kernel time).
    double updateSeconds = 0;
  };
  /// The steps of an instruction, shared by the interpreter and the
  /// compiled schedule: before it (feeds, its step and micro-batch), a
  /// SEND, RECV or OPTIMIZER, one node of a compute instruction, and after
  /// it (times, trace, collects).
  Status beginInstruction(Run &r, int i);
  Status otherInstruction(Run &r, int i);
  /// A plan RECV with device messages: the copy, on the copy queue or
  /// the compute queue.
  Status recvOnDevice(Run &r, int i, void *at, uint64_t bytes);
  Status runNode(Run &r, int32_t node, void *const *in, void *const *out);
  Status runUpdate(Run &r, const ParamUpdate &u);
  Status endInstruction(Run &r, int i);
  /// The nodes of compute instruction `i` (from `operands`), with the
  /// parameter updates placed among them.
  Status runNodes(Run &r, int i, void *const *operands);
  /// Compute instruction `i` as a recording (setRecording): made at its
  /// first run, replayed after; or eager, and why.
  Status runRecorded(Run &r, int i, void *const *operands);
  /// Why instruction `i` cannot be recorded, or empty.
  std::string unrecordable(int i) const;
  struct Recorded {
    void *handle[2] = {nullptr, nullptr}; ///< by ExecContext::training
    uint64_t nodes = 0;                   ///< nodes a replay runs
    /// Runs so far, and recordings that failed: the first run is eager
    /// (kernels make what they make lazily, cuBLAS and cuDNN handles and
    /// workspaces, which a capture cannot allocate), and a recording that
    /// fails is tried once more before the instruction stays eager.
    uint32_t runs = 0, failures = 0;
    bool eager = false;
  };
  bool recordOn_ = true;
  std::vector<Recorded> recorded_; ///< per instruction, once run
  std::string eagerBecause_;       ///< the first eager instruction's reason
  /// setParamUpdates(): per instruction, its updates in node order.
  std::vector<std::vector<ParamUpdate>> updatesAt_;
  /// The update of instruction `i` after node `node`, or null.
  const ParamUpdate *updateAfter(int i, int32_t node) const;
  /// A compute node as the compiled schedule calls it.
  struct CompiledNode {
    int32_t node;
    void *const *in, *const *out;
  };
  /// The compiled schedule (runtime/cpu/ScheduleJit.h), made at the first
  /// run it can serve; reset when the operands change.
  cpu::CompiledSchedule compiled_ = nullptr;
  bool compileTried_ = false;
  std::vector<CompiledNode> compiledNodes_;
  std::string scheduleMode_ = "interpreted";
  void resetSchedule() {
    compiled_ = nullptr;
    compileTried_ = false;
    recorded_.clear(); // the backend keeps (and frees) the recordings
    eagerBecause_.clear();
  }
  /// Why runs (with `io`, if given) take the interpreter, or null.
  const char *interpretedBecause(const StepIO *io) const;
  /// Whether a run with `io` can use the compiled schedule (compiling it
  /// the first time).
  bool useCompiled(const StepIO &io);
  void buildSchedule();
  /// The compiled schedule's calls: one step of an instruction (`i` its
  /// index), or one node (a CompiledNode).
  template <Status (DeviceExecutor::*Step)(Run &, int)> static int32_t thunkStep(void *run, void *i, void *, void *);
  static int32_t thunkNode(void *run, void *node, void *, void *);
  static int32_t thunkUpdate(void *run, void *update, void *, void *);
};

} // namespace pipec::runtime
