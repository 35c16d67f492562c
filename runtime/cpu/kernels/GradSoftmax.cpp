//===- runtime/cpu/kernels/GradSoftmax.cpp - pipec:SoftmaxGrad, LogSoftmaxGrad
//
// From the forward output Y and its gradient dY along `axis`:
//   SoftmaxGrad:    dX = Y * (dY - sum(dY * Y))
//   LogSoftmaxGrad: dX = dY - exp(Y) * sum(dY)
// With coerce2d = 1 (forward opset < 13) the axis spans every later
// dimension, as the forward op. Each [outer, inner] column is one sum in
// axis order, so the result does not depend on the thread count. Float exp
// is VecMath.h's expApprox (vectorized).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/VecMath.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T, bool Log> class SoftmaxGradKernel final : public Kernel {
public:
  SoftmaxGradKernel(int64_t outer, int64_t len, int64_t inner)
      : outer_(outer), len_(len), inner_(inner) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *y = static_cast<const T *>(in[1]);
    T *dx = static_cast<T *>(out[0]);
    const int64_t L = len_, I = inner_;
    parallelTasks(outer_ * I, outer_ * L * I, [&](int64_t task) {
      const int64_t o = task / I, k = task % I;
      const int64_t base = o * L * I + k;
      T s = 0;
      for (int64_t j = 0; j < L; ++j)
        s += Log ? dy[base + j * I] : dy[base + j * I] * y[base + j * I];
      for (int64_t j = 0; j < L; ++j) {
        const int64_t e = base + j * I;
        dx[e] = Log ? dy[e] - expOf(y[e]) * s : y[e] * (dy[e] - s);
      }
    });
    return Status::ok();
  }

private:
  int64_t outer_, len_, inner_;
};
} // namespace

Expected<KernelPtr> makeSoftmaxGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const TensorDesc &y = d.inputs[1];
  if (d.inputs[0] != y)
    return errorf(d.where(), ": dY is ", d.inputs[0].str(), " but Y is ", y.str());
  PIPEC_TRY(checkOutput(d, 0, y.dtype, y.shape));
  const bool log = d.opType == "LogSoftmaxGrad";
  const bool coerce2d = attrInt(d.attrs, "coerce2d", 0) != 0;
  int64_t axis = attrInt(d.attrs, "axis", -1);
  PIPEC_ASSIGN(axis, normalizeAxis(d, axis, y.rank()));
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t i = 0; i < y.rank(); ++i) {
    if (i < axis)
      outer *= y.shape[i];
    else if (i == axis || coerce2d)
      len *= y.shape[i];
    else
      inner *= y.shape[i];
  }
  return dispatchKernel<kFloats>(d, y.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   if (log)
                                     return KernelPtr(new SoftmaxGradKernel<T, true>(outer, len, inner));
                                   return KernelPtr(new SoftmaxGradKernel<T, false>(outer, len, inner));
                                 });
}

} // namespace pipec::cpu
