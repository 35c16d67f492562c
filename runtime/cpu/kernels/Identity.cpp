//===- runtime/cpu/kernels/Identity.cpp - Identity (a copy) ---------------===//
//
// The pattern every kernel follows: a factory checks the OpDesc once and
// precomputes what run() needs; run() touches only raw pointers.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"

#include <cstring>

namespace pipec::cpu {

namespace {
class CopyKernel final : public Kernel {
public:
  explicit CopyKernel(size_t bytes) : bytes_(bytes) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    if (in[0] != out[0] && bytes_)
      std::memcpy(out[0], in[0], bytes_);
    return Status::ok();
  }

private:
  size_t bytes_;
};
} // namespace

Expected<KernelPtr> makeIdentityKernel(const OpDesc &d) {
  if (d.inputs.empty() || d.outputs.empty() || d.inputs[0].bytes() != d.outputs[0].bytes())
    return errorf(d.where(), ": input and output sizes differ");
  return KernelPtr(new CopyKernel(d.outputs[0].bytes()));
}

} // namespace pipec::cpu
