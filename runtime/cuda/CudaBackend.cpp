//===- runtime/cuda/CudaBackend.cpp - Plan devices on GPUs ----------------===//
#include "runtime/cuda/CudaBackend.h"

#include "runtime/cuda/Gpu.h"
#include "support/Format.h"

#if PIPEC_HAVE_CUDA
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/Roundings.h"
#include "runtime/cuda/Update.h"
#include "runtime/cuda/kernels/CudaCommon.h"
#endif

#include <utility>
#include <vector>

namespace pipec::cuda {

namespace {

#if PIPEC_HAVE_CUDA
/// The device update (runtime/cuda/Update.h) of one GPU's parameters: the
/// chunk table and the passes' buffers in its memory, the squared sums
/// fetched into pinned memory.
class CudaUpdater final : public kernel::ParamUpdater {
public:
  static Expected<std::unique_ptr<kernel::ParamUpdater>> make(GpuDevice &gpu,
                                                              const std::vector<kernel::ParamBuffers> &params) {
    PIPEC_ASSIGN(UpdateTable t, makeUpdateTable(params));
    std::unique_ptr<CudaUpdater> u(new CudaUpdater(gpu));
    u->chunks_ = static_cast<int32_t>(t.chunks.size());
    u->params_ = t.params();
    const uint64_t chunkBytes = t.chunks.size() * sizeof(update::Chunk);
    const uint64_t firstBytes = t.firstChunk.size() * sizeof(int32_t);
    PIPEC_ASSIGN(void *chunks, gpu.alloc(chunkBytes));
    PIPEC_ASSIGN(void *first, gpu.alloc(firstBytes));
    PIPEC_ASSIGN(void *lanes, gpu.alloc(t.chunks.size() * update::kLanes * sizeof(double)));
    PIPEC_ASSIGN(void *squares, gpu.alloc(static_cast<uint64_t>(u->params_) * sizeof(double)));
    PIPEC_ASSIGN(void *control, gpu.alloc(sizeof(update::Control)));
    PIPEC_ASSIGN(void *hostSquares, gpu.pinned(static_cast<uint64_t>(u->params_) * sizeof(double)));
    PIPEC_ASSIGN(void *hostControl, gpu.pinned(sizeof(update::Control)));
    u->dChunks_ = static_cast<update::Chunk *>(chunks);
    u->dFirst_ = static_cast<int32_t *>(first);
    u->dLanes_ = static_cast<double *>(lanes);
    u->dSquares_ = static_cast<double *>(squares);
    u->dControl_ = static_cast<update::Control *>(control);
    u->hSquares_ = static_cast<double *>(hostSquares);
    u->hControl_ = static_cast<update::Control *>(hostControl);
    PIPEC_TRY(gpu.upload(chunks, t.chunks.data(), chunkBytes));
    PIPEC_TRY(gpu.upload(first, t.firstChunk.data(), firstBytes));
    PIPEC_TRY(gpu.sync()); // the table's host copy goes away
    return std::unique_ptr<kernel::ParamUpdater>(std::move(u));
  }
  Status squares(float scale) override {
    return launchUpdateSquares(dChunks_, chunks_, dFirst_, params_, scale, dLanes_, dSquares_, gpu_.stream());
  }
  Status decide(double clip, bool skipNonFinite) override {
    return launchUpdateDecide(dSquares_, params_, clip, skipNonFinite, dControl_, gpu_.stream());
  }
  Status setDecision(bool skip, bool scale, double coef) override {
    // The pinned slot is free: the last step's copy finished with it.
    *hControl_ = update::Control{};
    hControl_->skip = skip;
    hControl_->scale = scale;
    hControl_->coef = coef;
    return gpu_.upload(dControl_, hControl_, sizeof(update::Control));
  }
  Status apply(const train::UpdateScalars &s, bool update) override {
    return launchUpdateApply(dChunks_, chunks_, dControl_, s, update, gpu_.stream());
  }
  Status fetchSquares() override {
    return gpu_.download(hSquares_, dSquares_, static_cast<uint64_t>(params_) * sizeof(double));
  }
  const double *squaresOnHost() const override { return hSquares_; }

private:
  explicit CudaUpdater(GpuDevice &gpu) : gpu_(gpu) {}
  GpuDevice &gpu_;
  int32_t chunks_ = 0, params_ = 0;
  update::Chunk *dChunks_ = nullptr;
  int32_t *dFirst_ = nullptr;
  double *dLanes_ = nullptr, *dSquares_ = nullptr, *hSquares_ = nullptr;
  update::Control *dControl_ = nullptr, *hControl_ = nullptr;
};
#endif

#if PIPEC_HAVE_CUDA
/// The GPU's weight roundings (runtime/cuda/Roundings.h): in its memory,
/// enqueued on its stream.
class GpuHalfWeights final : public kernel::HalfWeights {
public:
  explicit GpuHalfWeights(GpuDevice &gpu)
      : r_(
            [&gpu](uint64_t bytes) -> void * {
              auto p = gpu.alloc(bytes);
              return p ? *p : nullptr;
            },
            [&gpu](const float *src, void *dst, int64_t n, DType t) {
              return launchHalfCast(src, CastType::F32, dst, t == DType::BF16 ? CastType::BF16 : CastType::F16, n,
                                    gpu.stream())
                  .isOk();
            }) {}
  const uint16_t *rounded(const float *src, int64_t n, DType t, uint64_t step) override {
    return r_.get(src, n, t, step);
  }
  size_t bytes() const override { return static_cast<size_t>(r_.bytes()); }
  Roundings &roundings() { return r_; }

private:
  Roundings r_;
};
#endif

class CudaBackend final : public kernel::Backend {
public:
  explicit CudaBackend(std::unique_ptr<GpuDevice> gpu) : gpu_(std::move(gpu)) {
#if PIPEC_HAVE_CUDA
    halfWeights_ = std::make_unique<GpuHalfWeights>(*gpu_);
#endif
  }
  std::string name() const override { return cat("GPU ", gpu_->gpu()); }
  bool hostAddressable() const override { return false; }
  const char *interpretedBecause() const override { return "a GPU device"; }
  Expected<kernel::KernelPtr> createKernel(const kernel::OpDesc &desc) override {
#if PIPEC_HAVE_CUDA
    // Kernels made here choose for this GPU (cuDNN's algorithms) and keep
    // what they allocate on it (pinned constants, tap tables).
    PIPEC_TRY(gpu_->select());
    return cuda::createKernel(desc);
#else
    return errorf(desc.where(), ": this build has no CUDA backend");
#endif
  }
  Expected<void *> alloc(uint64_t bytes) override {
    PIPEC_TRY(gpu_->select());
    return gpu_->alloc(bytes);
  }
  Expected<void *> residentWeight(const void *host, uint64_t bytes) override {
    PIPEC_TRY(gpu_->select());
    PIPEC_ASSIGN(void *dst, gpu_->alloc(bytes));
    PIPEC_TRY(gpu_->upload(dst, host, bytes));
    PIPEC_TRY(gpu_->sync());
    weights_.push_back({dst, host, bytes});
    return dst;
  }
  Status beginStep(bool weightsChanged) override {
    PIPEC_TRY(gpu_->select());
    // The host's optimizer updated the host copies between steps.
    if (weightsChanged)
      for (const Weight &w : weights_)
        PIPEC_TRY(gpu_->upload(w.device, w.host, w.bytes));
    return Status::ok();
  }
  Status sync() override { return gpu_->sync(); }
  void *stream() const override { return gpu_->stream(); }
  Expected<void *> hostView(void *dev, uint64_t bytes) override {
    PIPEC_ASSIGN(void *host, gpu_->staging(bytes));
    PIPEC_TRY(gpu_->download(host, dev, bytes));
    PIPEC_TRY(gpu_->sync());
    return host;
  }
  Expected<void *> staging(void *, uint64_t bytes) override { return gpu_->staging(bytes); }
  Status commit(void *dev, const void *host, uint64_t bytes) override {
    PIPEC_TRY(gpu_->upload(dev, host, bytes));
    return gpu_->sync(); // the staging buffer is reused next
  }
#if PIPEC_HAVE_CUDA
  bool residentTraining() const override { return true; }
  Status upload(void *dev, const void *host, uint64_t bytes) override { return gpu_->upload(dev, host, bytes); }
  Status download(void *host, const void *dev, uint64_t bytes) override {
    return gpu_->download(host, dev, bytes);
  }
  Expected<void *> hostBuffer(uint64_t bytes) override { return gpu_->pinned(bytes); }
  Status accumulate(float *dst, const float *src, int64_t n, bool first) override {
    return launchAccumulate(dst, src, n, first, gpu_->stream());
  }
  Expected<std::unique_ptr<kernel::ParamUpdater>> paramUpdater(const std::vector<kernel::ParamBuffers> &p) override {
    PIPEC_TRY(gpu_->select());
    return CudaUpdater::make(*gpu_, p);
  }
  bool deviceMessages() const override { return true; }
  int deviceIndex() const override { return gpu_->gpu(); }
  Expected<void *> recordEvent(uint64_t slot, kernel::Queue q) override { return gpu_->record(slot, on(q)); }
  Status waitEvent(void *event, kernel::Queue q) override { return gpu_->wait(event, on(q)); }
  Status copyFromDevice(void *dst, const void *src, int srcDevice, uint64_t bytes, kernel::Queue q) override {
    return gpu_->copyFrom(dst, src, srcDevice, bytes, on(q));
  }
  kernel::HalfWeights *halfWeights() override { return halfWeights_.get(); }
  bool canRecord() const override { return true; }
  Status beginRecording() override {
    PIPEC_TRY(gpu_->beginCapture());
    halfWeights_->roundings().beginCapture();
    return Status::ok();
  }
  Expected<void *> endRecording() override {
    auto graph = gpu_->endCapture();
    halfWeights_->roundings().endCapture(graph.isOk());
    return graph;
  }
  Status replay(void *recording, uint64_t) override { return gpu_->launchGraph(recording); }
#endif

private:
  static GpuDevice::On on(kernel::Queue q) {
    return q == kernel::Queue::Copy ? GpuDevice::On::CopyStream : GpuDevice::On::Stream;
  }
  struct Weight {
    void *device;
    const void *host;
    uint64_t bytes;
  };
  std::unique_ptr<GpuDevice> gpu_;
  std::vector<Weight> weights_;
#if PIPEC_HAVE_CUDA
  std::unique_ptr<GpuHalfWeights> halfWeights_;
#endif
};

} // namespace

Expected<kernel::BackendPtr> makeCudaBackend(int gpu, bool tf32) {
  PIPEC_ASSIGN(std::unique_ptr<GpuDevice> device, GpuDevice::open(gpu));
#if PIPEC_HAVE_CUDA
  setStreamMath(device->stream(), tf32 ? MathMode::Tf32 : MathMode::Exact);
#else
  (void)tf32;
#endif
  return kernel::BackendPtr(new CudaBackend(std::move(device)));
}

} // namespace pipec::cuda
