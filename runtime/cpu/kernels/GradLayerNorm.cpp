//===- runtime/cpu/kernels/GradLayerNorm.cpp - pipec:LayerNormalizationGrad
//
// dX of LayerNormalization over the dimensions [axis, rank) from dY, X and
// scale (statistics recomputed from X in double with linalgSum's lanes, as
// the forward's own loop computes them): with
// xhat = (x - mean) * rstd and g = dY * scale,
//   dX = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// Rows are independent tasks, each summed in laneSum's fixed order:
// thread-count independent.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/LinalgCommon.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> class LayerNormGradKernel final : public Kernel {
public:
  LayerNormGradKernel(int64_t rows, int64_t cols, double eps)
      : rows_(rows), cols_(cols), eps_(eps) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    const T *scale = static_cast<const T *>(in[2]);
    T *dx = static_cast<T *>(out[0]);
    const int64_t C = cols_;
    parallelTasks(rows_, rows_ * C, [&](int64_t r) {
      const T *xr = x + r * C, *gr = dy + r * C;
      T *o = dx + r * C;
      const double mean = linalgSum(xr, C) / static_cast<double>(C);
      const double var = linalgSumSqDev(xr, C, mean) / static_cast<double>(C);
      const double rstd = 1.0 / std::sqrt(var + eps_);
      const double mg = laneSum(C, [&](int64_t i) {
                          return static_cast<double>(gr[i]) * scale[i];
                        }) /
                        static_cast<double>(C);
      const double mgx = laneSum(C, [&](int64_t i) {
                           return static_cast<double>(gr[i]) * scale[i] * (xr[i] - mean) * rstd;
                         }) /
                         static_cast<double>(C);
      for (int64_t i = 0; i < C; ++i) {
        const double g = static_cast<double>(gr[i]) * scale[i];
        const double xhat = (xr[i] - mean) * rstd;
        o[i] = static_cast<T>(rstd * (g - mg - xhat * mgx));
      }
    });
    return Status::ok();
  }

private:
  int64_t rows_, cols_;
  double eps_;
};
} // namespace

Expected<KernelPtr> makeLayerNormalizationGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 3, 3, 1, 1));
  const TensorDesc &x = d.inputs[1];
  if (d.inputs[0] != x)
    return errorf(d.where(), ": dY is ", d.inputs[0].str(), " but X is ", x.str());
  PIPEC_TRY(checkOutput(d, 0, x.dtype, x.shape));
  PIPEC_ASSIGN(int64_t axis, normalizeAxis(d, attrInt(d.attrs, "axis", -1), x.rank()));
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < x.rank(); ++i)
    (i < axis ? rows : cols) *= x.shape[static_cast<size_t>(i)];
  if (d.inputs[2].dtype != x.dtype || d.inputs[2].numel() != cols)
    return errorf(d.where(), ": scale ", d.inputs[2].str(), " must hold ", cols, " elements");
  const double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  return dispatchKernel<kFloats>(d, x.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   return KernelPtr(new LayerNormGradKernel<T>(rows, cols, eps));
                                 });
}

} // namespace pipec::cpu
