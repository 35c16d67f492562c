//===- runtime/cuda/CudaBackend.cpp - Plan devices on GPUs ----------------===//
#include "runtime/cuda/CudaBackend.h"

#include "runtime/cuda/Gpu.h"
#include "support/Format.h"

#if PIPEC_HAVE_CUDA
#include "runtime/cuda/CudaKernels.h"
#endif

#include <utility>
#include <vector>

namespace pipec::cuda {

namespace {

class CudaBackend final : public kernel::Backend {
public:
  explicit CudaBackend(std::unique_ptr<GpuDevice> gpu) : gpu_(std::move(gpu)) {}
  std::string name() const override { return cat("GPU ", gpu_->gpu()); }
  bool hostAddressable() const override { return false; }
  const char *interpretedBecause() const override { return "a GPU device"; }
  Expected<kernel::KernelPtr> createKernel(const kernel::OpDesc &desc) override {
#if PIPEC_HAVE_CUDA
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

private:
  struct Weight {
    void *device;
    const void *host;
    uint64_t bytes;
  };
  std::unique_ptr<GpuDevice> gpu_;
  std::vector<Weight> weights_;
};

} // namespace

Expected<kernel::BackendPtr> makeCudaBackend(int gpu) {
  PIPEC_ASSIGN(std::unique_ptr<GpuDevice> device, GpuDevice::open(gpu));
  return kernel::BackendPtr(new CudaBackend(std::move(device)));
}

} // namespace pipec::cuda
