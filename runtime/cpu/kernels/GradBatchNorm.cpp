//===- runtime/cpu/kernels/GradBatchNorm.cpp - pipec:BatchNormalizationGrad
//
// (dY, X, scale, mean, var) -> (dX, dScale, dBias) of BatchNormalization
// with the forward's attributes. Statistics are chosen as the forward kernel
// chooses them (BatchNorm.cpp): training_mode if given, else
// ExecContext::training. With xhat = (x - mu) * rstd, rstd = 1/sqrt(v + eps):
//   dBias = sum(dY), dScale = sum(dY * xhat)   (over N and spatial)
//   training (mu, v the batch's):  dX = scale * rstd * (dY - mean(dY)
//                                       - xhat * mean(dY * xhat))
//   inference (mu, v given):       dX = scale * rstd * dY
// Channels are independent tasks summed in a fixed order in double: results
// do not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"

#include <cmath>

namespace pipec::cpu {

namespace {

template <typename T> class BatchNormGradKernel final : public Kernel {
public:
  int64_t N = 0, C = 0, inner = 0;
  double epsilon = 1e-5;
  int trainingAttr = -1; ///< training_mode if given, else -1

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    for (int i = 0; i < 5; ++i)
      if (!in[i])
        return errorf("BatchNormalizationGrad: input ", i, " is missing at run time");
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    const T *scale = static_cast<const T *>(in[2]);
    const T *mean = static_cast<const T *>(in[3]);
    const T *var = static_cast<const T *>(in[4]);
    T *dx = static_cast<T *>(out[0]);
    T *dscale = static_cast<T *>(out[1]);
    T *dbias = static_cast<T *>(out[2]);
    const bool training = trainingAttr >= 0 ? trainingAttr == 1 : ctx.training;
    const int64_t count = N * inner;
#pragma omp parallel for schedule(static) if (N * C * inner > 16384)
    for (int64_t c = 0; c < C; ++c) {
      double m, v;
      if (training) {
        linalgChannelStats(x, N, C, inner, c, m, v);
      } else {
        m = mean[c];
        v = var[c];
      }
      const double rstd = 1.0 / std::sqrt(v + epsilon);
      double sdy = 0, sdyx = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T *xp = x + (n * C + c) * inner, *gp = dy + (n * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          sdy += gp[i];
          sdyx += static_cast<double>(gp[i]) * ((xp[i] - m) * rstd);
        }
      }
      dbias[c] = static_cast<T>(sdy);
      dscale[c] = static_cast<T>(sdyx);
      const double a = scale[c] * rstd;
      const double mdy = training && count ? sdy / count : 0.0;
      const double mdyx = training && count ? sdyx / count : 0.0;
      for (int64_t n = 0; n < N; ++n) {
        const T *xp = x + (n * C + c) * inner, *gp = dy + (n * C + c) * inner;
        T *op = dx + (n * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const double xhat = (xp[i] - m) * rstd;
          op[i] = static_cast<T>(a * (gp[i] - mdy - xhat * mdyx));
        }
      }
    }
    return Status::ok();
  }
};

} // namespace

Expected<KernelPtr> makeBatchNormalizationGradKernel(const OpDesc &d) {
  if (d.inputs.size() != 5 || d.outputs.size() != 3)
    return errorf(d.where(), ": expects 5 inputs and 3 outputs, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &dy = d.inputs[0], &x = d.inputs[1];
  if (dy != x || x.rank() < 2)
    return errorf(d.where(), ": dY ", dy.str(), " and X ", x.str(),
                  " must have the same type, of rank >= 2");
  const int64_t C = x.shape[1];
  for (size_t i = 2; i < 5; ++i)
    if (d.inputs[i].dtype != x.dtype || d.inputs[i].numel() != C)
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " is not ", C, " ",
                    dtypeName(x.dtype), " elements");
  if (d.outputs[0] != x)
    return errorf(d.where(), ": dX ", d.outputs[0].str(), " is not typed as X ", x.str());
  for (size_t i = 1; i < 3; ++i)
    if (d.outputs[i].dtype != x.dtype || d.outputs[i].numel() != C)
      return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " is not ", C, " ",
                    dtypeName(x.dtype), " elements");
  return linalgDispatchFloat(d, x.dtype, [&](auto tag) -> Expected<KernelPtr> {
    auto k = std::make_unique<BatchNormGradKernel<decltype(tag)>>();
    k->N = x.shape[0];
    k->C = C;
    k->inner = k->N != 0 && C != 0 ? x.numel() / (k->N * C) : 0;
    k->epsilon = attrFloat(d.attrs, "epsilon", 1e-5f);
    if (attrHas(d.attrs, "training_mode"))
      k->trainingAttr = attrInt(d.attrs, "training_mode", 0) != 0 ? 1 : 0;
    return KernelPtr(std::move(k));
  });
}

} // namespace pipec::cpu
