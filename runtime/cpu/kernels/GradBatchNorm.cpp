//===- runtime/cpu/kernels/GradBatchNorm.cpp - BatchNormalization gradients
//
// The three pipec ops of BatchNormalization's gradient, all with the
// forward's attributes. Statistics are chosen as the forward kernel chooses
// them (BatchNorm.cpp): training_mode if given, else ExecContext::training.
//   BatchNormalizationStats(X, mean, var) -> (mu, rstd): the batch's mean and
//     biased variance (training) or the given ones, rstd = 1/sqrt(v + eps).
//   BatchNormalizationScaleGrad(dY, X, mu, rstd) -> (dScale, dBias):
//     dBias = sum(dY), dScale = sum(dY * xhat) over N and spatial,
//     xhat = (x - mu) * rstd.
//   BatchNormalizationGrad(dY, X, scale, mu, rstd) -> (dX [, sums]):
//     training:   dX = scale * rstd * (dY - mean(dY) - xhat * mean(dY * xhat))
//     inference:  dX = scale * rstd * dY
//     sums [2, C]: sum(dY), sum(dY * xhat), for ScaleGrad.
//   BatchNormalizationScaleGrad(sums) -> (dScale, dBias) copies them; with
//     (dY, X, mu, rstd) instead (where no dX is wanted) it sums itself.
// dX computes the two sums once and hands them to ScaleGrad, which stays a
// weight-gradient node that a schedule can defer (summing them again in
// ScaleGrad was a second pass over dY and X); the statistics are
// computed once (Stats) for both.
// Channels are independent tasks summed in a fixed order in double: results
// do not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "support/Parallel.h"

#include <cmath>

namespace pipec::cpu {

namespace {

/// sum(dY) and sum(dY * xhat) of channel c, in double, in a fixed order
/// (linalgSegmentLaneSums).
template <typename T>
void channelSums(const BnGradGeom &g, const T *dy, const T *x, int64_t c, double mu, double rstd,
                 double &sdy, double &sdyx) {
  const T *xc = x + c * g.inner, *gc = dy + c * g.inner;
  const int64_t stride = g.C * g.inner;
  double s[2];
  linalgSegmentLaneSums<2>(
      g.N, g.inner,
      [&](int64_t n, int64_t i, double (&v)[2]) {
        const double gv = gc[n * stride + i];
        v[0] = gv;
        v[1] = gv * ((xc[n * stride + i] - mu) * rstd);
      },
      s);
  sdy = s[0];
  sdyx = s[1];
}

template <typename T> class BatchNormStatsKernel final : public Kernel {
public:
  explicit BatchNormStatsKernel(BnGradGeom g) : g_(g) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    for (int i = 0; i < 3; ++i)
      if (!in[i])
        return errorf("BatchNormalizationStats: input ", i, " is missing at run time");
    const T *x = static_cast<const T *>(in[0]);
    const T *mean = static_cast<const T *>(in[1]);
    const T *var = static_cast<const T *>(in[2]);
    T *mu = static_cast<T *>(out[0]);
    T *rstd = static_cast<T *>(out[1]);
    const bool training = g_.training(ctx);
    parallelFor(g_.C, training && g_.parallel(), [&](int64_t c) {
      double m, v;
      if (training) {
        linalgChannelStats(x, g_.N, g_.C, g_.inner, c, m, v);
      } else {
        m = mean[c];
        v = var[c];
      }
      mu[c] = static_cast<T>(m);
      rstd[c] = static_cast<T>(1.0 / std::sqrt(v + g_.epsilon));
    });
    return Status::ok();
  }

private:
  BnGradGeom g_;
};

template <typename T> class BatchNormScaleGradKernel final : public Kernel {
public:
  /// `fromSums`: the one input is BatchNormalizationGrad's [2, C] sums.
  BatchNormScaleGradKernel(BnGradGeom g, bool fromSums) : g_(g), fromSums_(fromSums) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    T *dscale = static_cast<T *>(out[0]);
    T *dbias = static_cast<T *>(out[1]);
    if (fromSums_) {
      if (!in[0])
        return errorf("BatchNormalizationScaleGrad: the sums are missing at run time");
      const T *sums = static_cast<const T *>(in[0]);
      for (int64_t c = 0; c < g_.C; ++c) {
        if (dbias)
          dbias[c] = sums[c];
        if (dscale)
          dscale[c] = sums[g_.C + c];
      }
      return Status::ok();
    }
    for (int i = 0; i < 4; ++i)
      if (!in[i])
        return errorf("BatchNormalizationScaleGrad: input ", i, " is missing at run time");
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    const T *mu = static_cast<const T *>(in[2]);
    const T *rstd = static_cast<const T *>(in[3]);
    parallelFor(g_.C, g_.parallel(), [&](int64_t c) {
      double sdy, sdyx;
      channelSums(g_, dy, x, c, mu[c], rstd[c], sdy, sdyx);
      if (dbias)
        dbias[c] = static_cast<T>(sdy);
      if (dscale)
        dscale[c] = static_cast<T>(sdyx);
    });
    return Status::ok();
  }

private:
  BnGradGeom g_;
  bool fromSums_;
};

template <typename T> class BatchNormGradKernel final : public Kernel {
public:
  /// `sums`: also write sum(dY) and sum(dY * xhat) per channel ([2, C]).
  BatchNormGradKernel(BnGradGeom g, bool sums) : g_(g), sums_(sums) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    for (int i = 0; i < 5; ++i)
      if (!in[i])
        return errorf("BatchNormalizationGrad: input ", i, " is missing at run time");
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    const T *scale = static_cast<const T *>(in[2]);
    const T *mu = static_cast<const T *>(in[3]);
    const T *rstd = static_cast<const T *>(in[4]);
    T *dx = static_cast<T *>(out[0]);
    T *sums = sums_ ? static_cast<T *>(out[1]) : nullptr;
    const bool training = g_.training(ctx);
    const int64_t count = g_.N * g_.inner;
    parallelFor(g_.C, g_.parallel(), [&](int64_t c) {
      const double m = mu[c], r = rstd[c], a = scale[c] * r;
      double mdy = 0, mdyx = 0;
      if ((training && count) || sums) {
        double sdy, sdyx;
        channelSums(g_, dy, x, c, m, r, sdy, sdyx);
        if (training && count) {
          mdy = sdy / count;
          mdyx = sdyx / count;
        }
        if (sums) {
          sums[c] = static_cast<T>(sdy);
          sums[g_.C + c] = static_cast<T>(sdyx);
        }
      }
      for (int64_t n = 0; n < g_.N; ++n) {
        const T *xp = x + (n * g_.C + c) * g_.inner, *gp = dy + (n * g_.C + c) * g_.inner;
        T *op = dx + (n * g_.C + c) * g_.inner;
        if (!training) {
          for (int64_t i = 0; i < g_.inner; ++i)
            op[i] = static_cast<T>(a * gp[i]);
          continue;
        }
        for (int64_t i = 0; i < g_.inner; ++i) {
          const double xhat = (xp[i] - m) * r;
          op[i] = static_cast<T>(a * (gp[i] - mdy - xhat * mdyx));
        }
      }
    });
    return Status::ok();
  }

private:
  BnGradGeom g_;
  bool sums_;
};

} // namespace

Status linalgCheckBnGrad(const OpDesc &d, size_t numIn, size_t numOut, int dyIdx, size_t xIdx,
                         const std::vector<size_t> &perChannel, const std::vector<size_t> &perChannelOut,
                         BnGradGeom &g) {
  if (d.inputs.size() != numIn || d.outputs.size() != numOut)
    return errorf(d.where(), ": expects ", numIn, " inputs and ", numOut, " outputs, got ",
                  d.inputs.size(), " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[xIdx];
  if (x.rank() < 2 || !isFloat(x.dtype))
    return errorf(d.where(), ": X ", x.str(), " must be a float tensor of rank >= 2");
  if (dyIdx >= 0 && d.inputs[static_cast<size_t>(dyIdx)] != x)
    return errorf(d.where(), ": dY ", d.inputs[static_cast<size_t>(dyIdx)].str(), " and X ",
                  x.str(), " must have the same type");
  const int64_t C = x.shape[1];
  for (size_t i : perChannel)
    if (d.inputs[i].dtype != x.dtype || d.inputs[i].numel() != C)
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " is not ", C, " ",
                    dtypeName(x.dtype), " elements");
  for (size_t i : perChannelOut)
    if (linalgHasOutput(d, i) && (d.outputs[i].dtype != x.dtype || d.outputs[i].numel() != C))
      return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " is not ", C, " ",
                    dtypeName(x.dtype), " elements");
  g.N = x.shape[0];
  g.C = C;
  g.inner = g.N != 0 && C != 0 ? x.numel() / (g.N * C) : 0;
  g.epsilon = attrFloat(d.attrs, "epsilon", 1e-5f);
  if (attrHas(d.attrs, "training_mode"))
    g.trainingAttr = attrInt(d.attrs, "training_mode", 0) != 0 ? 1 : 0;
  return Status::ok();
}


Expected<KernelPtr> makeBatchNormalizationStatsKernel(const OpDesc &d) {
  BnGradGeom g;
  PIPEC_TRY(linalgCheckBnGrad(d, 3, 2, -1, 0, {1, 2}, {0, 1}, g));
  return linalgDispatchFloat(d, d.inputs[0].dtype, [&](auto tag) -> Expected<KernelPtr> {
    return KernelPtr(new BatchNormStatsKernel<decltype(tag)>(g));
  });
}

Expected<KernelPtr> makeBatchNormalizationScaleGradKernel(const OpDesc &d) {
  BnGradGeom g;
  if (d.inputs.size() == 1) {
    // The sums BatchNormalizationGrad wrote: [2, C].
    const TensorDesc &sums = d.inputs[0];
    if (!d.hasInput(0) || sums.rank() != 2 || sums.shape[0] != 2 || !isFloat(sums.dtype) ||
        d.outputs.size() != 2)
      return errorf(d.where(), ": expects the [2, C] sums and 2 outputs, got ", sums.str(),
                    " and ", d.outputs.size(), " outputs");
    g.C = sums.shape[1];
    for (size_t i = 0; i < 2; ++i)
      if (linalgHasOutput(d, i) && (d.outputs[i].dtype != sums.dtype || d.outputs[i].numel() != g.C))
        return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " is not ", g.C, " ",
                      dtypeName(sums.dtype), " elements");
    return linalgDispatchFloat(d, sums.dtype, [&](auto tag) -> Expected<KernelPtr> {
      return KernelPtr(new BatchNormScaleGradKernel<decltype(tag)>(g, true));
    });
  }
  PIPEC_TRY(linalgCheckBnGrad(d, 4, 2, 0, 1, {2, 3}, {0, 1}, g));
  return linalgDispatchFloat(d, d.inputs[1].dtype, [&](auto tag) -> Expected<KernelPtr> {
    return KernelPtr(new BatchNormScaleGradKernel<decltype(tag)>(g, false));
  });
}

Expected<KernelPtr> makeBatchNormalizationGradKernel(const OpDesc &d) {
  BnGradGeom g;
  const bool sums = d.outputs.size() == 2;
  PIPEC_TRY(linalgCheckBnGrad(d, 5, sums ? 2 : 1, 0, 1, {2, 3, 4}, {}, g));
  if (d.outputs[0] != d.inputs[1])
    return errorf(d.where(), ": dX ", d.outputs[0].str(), " is not typed as X ",
                  d.inputs[1].str());
  if (sums && d.outputs[1] != TensorDesc{d.inputs[1].dtype, {2, g.C}})
    return errorf(d.where(), ": the sums ", d.outputs[1].str(), " are not ",
                  dtypeName(d.inputs[1].dtype), "[2, ", g.C, "]");
  return linalgDispatchFloat(d, d.inputs[1].dtype, [&](auto tag) -> Expected<KernelPtr> {
    return KernelPtr(new BatchNormGradKernel<decltype(tag)>(g, sums));
  });
}

} // namespace pipec::cpu