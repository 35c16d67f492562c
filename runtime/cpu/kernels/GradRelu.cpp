//===- runtime/cpu/kernels/GradRelu.cpp - pipec:ReluGrad ------------------===//
//
// dX = 0 where Y <= 0, else dY (the subgradient at 0 is 0, and a NaN Y
// passes dY, as PyTorch's threshold_backward).
// Reads the forward output Y rather than X so that X need not be kept.
// Elementwise over fixed chunks: thread-count independent.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> class ReluGradKernel final : public Kernel {
public:
  explicit ReluGradKernel(int64_t n) : n_(n) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *y = static_cast<const T *>(in[1]);
    T *dx = static_cast<T *>(out[0]);
    parallelChunks(n_, kChunk, [&](int64_t lo, int64_t hi) {
      // Local copies (see ew::parallelChunks): the loop vectorizes.
      const T *__restrict g = dy, *__restrict yv = y;
      T *__restrict d = dx;
      for (int64_t i = lo; i < hi; ++i)
        d[i] = yv[i] <= T(0) ? T(0) : g[i];
    });
    return Status::ok();
  }

private:
  int64_t n_;
};
} // namespace

Expected<KernelPtr> makeReluGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const TensorDesc &dy = d.inputs[0];
  if (d.inputs[1] != dy)
    return errorf(d.where(), ": dY is ", dy.str(), " but Y is ", d.inputs[1].str());
  PIPEC_TRY(checkOutput(d, 0, dy.dtype, dy.shape));
  return dispatchKernel<kFloats>(d, dy.dtype, "input", [&]<typename T>(TypeTag<T>) {
    return Expected<KernelPtr>(KernelPtr(new ReluGradKernel<T>(dy.numel())));
  });
}

} // namespace pipec::cpu
