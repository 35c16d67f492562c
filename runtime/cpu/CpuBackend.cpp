//===- runtime/cpu/CpuBackend.cpp - Plan devices on CPU threads -----------===//
#include "runtime/cpu/CpuBackend.h"

#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/LargeAlloc.h"

#include <cstdlib>
#include <vector>

namespace pipec::cpu {

namespace {

class CpuBackend final : public kernel::Backend {
public:
  ~CpuBackend() override {
    for (void *p : allocations_)
      std::free(p);
  }
  std::string name() const override { return "the CPU"; }
  bool hostAddressable() const override { return true; }
  Expected<KernelPtr> createKernel(const OpDesc &desc) override { return cpu::createKernel(desc); }
  Expected<void *> alloc(uint64_t bytes) override {
    void *p = allocateLarge(static_cast<size_t>(bytes));
    if (!p)
      return errorf("cannot allocate ", bytes, " bytes of host memory");
    allocations_.push_back(p);
    return p;
  }
  Expected<void *> residentWeight(const void *host, uint64_t) override { return const_cast<void *>(host); }
  Status beginStep(bool) override { return Status::ok(); }
  Status sync() override { return Status::ok(); }
  Expected<void *> hostView(void *dev, uint64_t) override { return dev; }
  Expected<void *> staging(void *dev, uint64_t) override { return dev; }
  Status commit(void *, const void *, uint64_t) override { return Status::ok(); }
  kernel::HalfWeights *halfWeights() override { return halfWeights_.get(); }

private:
  std::vector<void *> allocations_;
  std::unique_ptr<kernel::HalfWeights> halfWeights_ = makeCpuHalfWeights();
};

} // namespace

kernel::BackendPtr makeCpuBackend() { return std::make_unique<CpuBackend>(); }

} // namespace pipec::cpu
