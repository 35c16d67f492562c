//===- runtime/EmulatedGpu.cpp - A GPU emulated on the CPU -----------===//
#include "runtime/EmulatedGpu.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/Update.h"
#include "runtime/train/Optimizer.h"

#include <cstring>
#include <map>
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

class EmulatedGpu final : public kernel::Backend {
public:
  EmulatedGpu() : cpu_(cpu::makeCpuBackend()) {}
  std::string name() const override { return "an emulated GPU"; }
  bool hostAddressable() const override { return false; }
  const char *interpretedBecause() const override { return "an emulated GPU"; }
  Expected<kernel::KernelPtr> createKernel(const kernel::OpDesc &desc) override { return cpu_->createKernel(desc); }
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
  Status sync() override { return Status::ok(); }
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
    std::memcpy(dev, host, bytes);
    return Status::ok();
  }
  Status download(void *host, const void *dev, uint64_t bytes) override {
    std::memcpy(host, dev, bytes);
    return Status::ok();
  }
  Expected<void *> hostBuffer(uint64_t bytes) override { return cpu_->alloc(bytes); }
  Status accumulate(float *dst, const float *src, int64_t n, bool first) override {
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
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }

private:
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

} // namespace

kernel::BackendPtr makeEmulatedGpuBackend() { return std::make_unique<EmulatedGpu>(); }

} // namespace pipec::runtime
