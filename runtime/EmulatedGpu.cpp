//===- runtime/EmulatedGpu.cpp - A GPU emulated on the CPU -----------===//
#include "runtime/EmulatedGpu.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/Update.h"
#include "runtime/train/Optimizer.h"

#include <cstring>
#include <map>
#include <memory>
#include <vector>

namespace pipec::runtime {

// runtime/cuda/ does not see runtime/train/; here the two meet.
static_assert(cuda::update::kChunk == train::kTrainChunk, "the device update cuts parameters as the CPU's does");

namespace {

class EmulatedUpdater final : public kernel::ParamUpdater {
public:
  explicit EmulatedUpdater(cuda::UpdateTable t)
      : t_(std::move(t)), lanes_(t_.chunks.size() * cuda::update::kLanes), squares_(static_cast<size_t>(t_.params())),
        fetched_(squares_.size()) {}
  Status squares(float scale) override {
    cuda::hostSquares(t_, scale, lanes_.data(), squares_.data());
    return Status::ok();
  }
  Status decide(double clip, bool skipNonFinite) override {
    control_ = cuda::update::decide(squares_.data(), t_.params(), clip, skipNonFinite);
    return Status::ok();
  }
  Status setDecision(bool skip, bool scale, double coef) override {
    control_ = cuda::update::Control{};
    control_.skip = skip;
    control_.scale = scale;
    control_.coef = coef;
    return Status::ok();
  }
  Status apply(const train::UpdateScalars &s, bool update) override {
    cuda::hostApply(t_, control_, s, update);
    return Status::ok();
  }
  Status fetchSquares() override {
    fetched_ = squares_;
    return Status::ok();
  }
  const double *squaresOnHost() const override { return fetched_.data(); }

private:
  cuda::UpdateTable t_;
  std::vector<double> lanes_, squares_, fetched_;
  cuda::update::Control control_;
};

class EmulatedGpu;

/// A CPU kernel on the emulated GPU: run at once, or, while the GPU
/// records, kept as a call (the ExecContext and the operands' addresses
/// as they were) that replay() runs. The calls replay with the replay's
/// step, which the CPU kernels' host side caches by; so every kernel is
/// replayable here, and the CUDA kernels say for themselves which are
/// (runtime/cuda/kernels: not Dropout).
class EmulatedKernel final : public kernel::Kernel {
public:
  EmulatedKernel(kernel::KernelPtr inner, EmulatedGpu &gpu, size_t inputs, size_t outputs)
      : inner_(std::move(inner)), gpu_(gpu), inputs_(inputs), outputs_(outputs) {}
  Status run(kernel::ExecContext &ctx, const void *const *in, void *const *out) override;
  size_t workspaceBytes() const override { return inner_->workspaceBytes(); }
  size_t heldBytes() const override { return inner_->heldBytes(); }
  bool canAccumulate() const override { return inner_->canAccumulate(); }
  bool replayable() const override { return true; }
  Status runInner(kernel::ExecContext &ctx, const void *const *in, void *const *out) {
    inner_->nodeId = nodeId;
    return inner_->run(ctx, in, out);
  }

private:
  kernel::KernelPtr inner_;
  EmulatedGpu &gpu_;
  size_t inputs_, outputs_;
};

class EmulatedGpu final : public kernel::Backend {
public:
  EmulatedGpu() : cpu_(cpu::makeCpuBackend()) {}
  std::string name() const override { return "an emulated GPU"; }
  bool hostAddressable() const override { return false; }
  const char *interpretedBecause() const override { return "an emulated GPU"; }
  Expected<kernel::KernelPtr> createKernel(const kernel::OpDesc &desc) override {
    PIPEC_ASSIGN(kernel::KernelPtr k, cpu_->createKernel(desc));
    return kernel::KernelPtr(new EmulatedKernel(std::move(k), *this, desc.inputs.size(), desc.outputs.size()));
  }
  Expected<void *> alloc(uint64_t bytes) override { return cpu_->alloc(bytes); }
  kernel::HalfWeights *halfWeights() override { return cpu_->halfWeights(); }
  Expected<void *> residentWeight(const void *host, uint64_t bytes) override {
    PIPEC_ASSIGN(void *dev, cpu_->alloc(bytes));
    std::memcpy(dev, host, bytes);
    weights_.push_back({dev, host, bytes});
    return dev;
  }
  Status beginStep(bool weightsChanged) override {
    if (weightsChanged)
      for (const Weight &w : weights_)
        std::memcpy(w.device, w.host, w.bytes);
    return Status::ok();
  }
  Status sync() override { return notRecording("waiting for the device"); }
  Expected<void *> hostView(void *dev, uint64_t bytes) override {
    PIPEC_ASSIGN(void *host, staging(dev, bytes));
    std::memcpy(host, dev, bytes);
    return host;
  }
  Expected<void *> staging(void *, uint64_t bytes) override {
    if (bytes >= staging_.size()) // never empty: no null buffer for a 0-byte tensor
      staging_.resize(bytes + 1);
    // Poisoned, so a read of what the host did not write shows.
    std::memset(staging_.data(), 0xa5, bytes);
    return staging_.data();
  }
  Status commit(void *dev, const void *host, uint64_t bytes) override {
    std::memcpy(dev, host, bytes);
    return Status::ok();
  }
  bool residentTraining() const override { return true; }
  Status upload(void *dev, const void *host, uint64_t bytes) override {
    PIPEC_TRY(notRecording("a copy"));
    std::memcpy(dev, host, bytes);
    return Status::ok();
  }
  Status download(void *host, const void *dev, uint64_t bytes) override {
    PIPEC_TRY(notRecording("a copy"));
    std::memcpy(host, dev, bytes);
    return Status::ok();
  }
  Expected<void *> hostBuffer(uint64_t bytes) override { return cpu_->alloc(bytes); }
  Status accumulate(float *dst, const float *src, int64_t n, bool first) override {
    PIPEC_TRY(notRecording("a gradient sum"));
    cuda::hostAccumulate(dst, src, n, first);
    return Status::ok();
  }
  Expected<std::unique_ptr<kernel::ParamUpdater>> paramUpdater(const std::vector<kernel::ParamBuffers> &p) override {
    PIPEC_ASSIGN(cuda::UpdateTable t, cuda::makeUpdateTable(p));
    return std::unique_ptr<kernel::ParamUpdater>(new EmulatedUpdater(std::move(t)));
  }
  // Copies complete when enqueued, so an event is only a handle.
  bool deviceMessages() const override { return true; }
  int deviceIndex() const override { return 0; }
  Expected<void *> recordEvent(uint64_t slot) override { return &events_[slot]; }
  Status waitEvent(void *event) override {
    return event ? Status::ok() : errorf(name(), ": waiting for a null event");
  }
  Status copyFromDevice(void *dst, const void *src, int, uint64_t bytes) override {
    PIPEC_TRY(notRecording("a copy"));
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }

  // Recordings: the kernels' calls, kept (EmulatedKernel) and replayed.
  // A copy, a sum or a wait while recording is refused (the executor
  // records kernels alone), as a wait is by a CUDA stream capture.
  bool canRecord() const override { return true; }
  Status beginRecording() override {
    if (recording_)
      return errorf(name(), ": a recording is already under way");
    recording_ = std::make_unique<std::vector<Call>>();
    return Status::ok();
  }
  Expected<void *> endRecording() override {
    if (!recording_)
      return errorf(name(), ": no recording is under way");
    recordings_.push_back(std::move(recording_));
    return static_cast<void *>(recordings_.back().get());
  }
  Status replay(void *recording, uint64_t step) override {
    PIPEC_TRY(notRecording("a replay"));
    for (Call &c : *static_cast<std::vector<Call> *>(recording)) {
      kernel::ExecContext ctx = c.ctx;
      ctx.step = step;
      PIPEC_TRY(c.kernel->runInner(ctx, c.in.data(), c.out.data()));
    }
    return Status::ok();
  }
  /// Whether a kernel's run is to be kept rather than run.
  bool recording() const { return recording_ != nullptr; }
  void keep(EmulatedKernel *k, const kernel::ExecContext &ctx, const void *const *in, size_t inputs,
            void *const *out, size_t outputs) {
    recording_->push_back({k, ctx, std::vector<const void *>(in, in + inputs), std::vector<void *>(out, out + outputs)});
  }

private:
  struct Call {
    EmulatedKernel *kernel;
    kernel::ExecContext ctx;
    std::vector<const void *> in;
    std::vector<void *> out;
  };
  Status notRecording(const char *what) const {
    return recording_ ? errorf(name(), ": ", what, " while recording (only kernels are recorded)") : Status::ok();
  }
  std::unique_ptr<std::vector<Call>> recording_;
  std::vector<std::unique_ptr<std::vector<Call>>> recordings_;

  struct Weight {
    void *device;
    const void *host;
    uint64_t bytes;
  };
  kernel::BackendPtr cpu_;
  std::vector<Weight> weights_;
  std::vector<unsigned char> staging_;
  std::map<uint64_t, char> events_;
};

Status EmulatedKernel::run(kernel::ExecContext &ctx, const void *const *in, void *const *out) {
  if (gpu_.recording()) {
    gpu_.keep(this, ctx, in, inputs_, out, outputs_);
    return Status::ok();
  }
  return runInner(ctx, in, out);
}

} // namespace

kernel::BackendPtr makeEmulatedGpuBackend() { return std::make_unique<EmulatedGpu>(); }

} // namespace pipec::runtime
