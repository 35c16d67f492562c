//===- runtime/cpu/kernels/GradGelu.cpp - pipec:GeluGrad ------------------===//
//
// dX = dY * gelu'(X), with approximate = "none" (exact, erf):
//   gelu'(x) = Phi(x) + x * phi(x)
// or "tanh": with u = sqrt(2/pi) (x + 0.044715 x^3), t = tanh(u),
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Elementwise over fixed chunks: thread-count independent. Float tanh, erf
// and exp are VecMath.h's vectorizable approximations, as in the forward Gelu.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/VecMath.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T, bool Tanh> class GeluGradKernel final : public Kernel {
public:
  explicit GeluGradKernel(int64_t n) : n_(n) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    T *dx = static_cast<T *>(out[0]);
    parallelChunks(n_, kChunk, [&](int64_t lo, int64_t hi) {
      // Local copies (see ew::parallelChunks): the loop vectorizes.
      const T *__restrict g = dy, *__restrict xv = x;
      T *__restrict d = dx;
      for (int64_t i = lo; i < hi; ++i)
        d[i] = g[i] * derivative(xv[i]);
    });
    return Status::ok();
  }

private:
  static T derivative(T x) {
    if constexpr (Tanh) {
      const T k = static_cast<T>(0.7978845608028654), c = static_cast<T>(0.044715);
      const T t = tanhOf(k * (x + c * x * x * x));
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
    } else {
      const T cdf = T(0.5) * (T(1) + erfOf(x * static_cast<T>(0.7071067811865476)));
      const T pdf = static_cast<T>(0.3989422804014327) * expOf(T(-0.5) * x * x);
      return cdf + x * pdf;
    }
  }
  int64_t n_;
};
} // namespace

Expected<KernelPtr> makeGeluGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const TensorDesc &dy = d.inputs[0];
  if (d.inputs[1] != dy)
    return errorf(d.where(), ": dY is ", dy.str(), " but X is ", d.inputs[1].str());
  PIPEC_TRY(checkOutput(d, 0, dy.dtype, dy.shape));
  const std::string approx = attrString(d.attrs, "approximate", "none");
  if (approx != "none" && approx != "tanh")
    return errorf(d.where(), ": approximate must be none or tanh, got '", approx, "'");
  const bool tanh = approx == "tanh";
  return dispatchKernel<kFloats>(d, dy.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   if (tanh)
                                     return KernelPtr(new GeluGradKernel<T, true>(dy.numel()));
                                   return KernelPtr(new GeluGradKernel<T, false>(dy.numel()));
                                 });
}

} // namespace pipec::cpu
