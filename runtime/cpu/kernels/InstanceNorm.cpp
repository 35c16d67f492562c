//===- runtime/cpu/kernels/InstanceNorm.cpp - InstanceNormalization -------===//
//
// ONNX InstanceNormalization, opsets 6+: for every (n, c) plane of X
// (N, C, D1, ...), Y = scale[c] * (X - mean) / sqrt(var + epsilon) + B[c]
// with the plane's mean and biased variance. Planes are independent and run
// in parallel; each plane sums in a fixed order (in double, linalgSum).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "support/Parallel.h"

#include <cmath>

namespace pipec::cpu {

namespace {

template <typename T> class InstanceNormKernel final : public Kernel {
public:
  InstanceNormKernel(int64_t planes, int64_t C, int64_t spatial, double eps)
      : planes_(planes), C_(C), spatial_(spatial), eps_(eps) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    const T *scale = static_cast<const T *>(in[1]);
    const T *bias = static_cast<const T *>(in[2]);
    if (!scale || !bias)
      return errorf("InstanceNormalization: scale or B is missing at run time");
    T *y = static_cast<T *>(out[0]);
    parallelFor(planes_, planes_ * spatial_ > 16384, [&](int64_t p) {
      const T *xp = x + p * spatial_;
      T *yp = y + p * spatial_;
      double m = spatial_ ? linalgSum(xp, spatial_) / spatial_ : 0.0;
      double v = spatial_ ? linalgSumSqDev(xp, spatial_, m) / spatial_ : 0.0;
      int64_t c = p % C_;
      double a = scale[c] / std::sqrt(v + eps_);
      T ta = static_cast<T>(a), tb = static_cast<T>(bias[c] - m * a);
      for (int64_t i = 0; i < spatial_; ++i)
        yp[i] = xp[i] * ta + tb;
    });
    return Status::ok();
  }

private:
  int64_t planes_, C_, spatial_;
  double eps_;
};

} // namespace

Expected<KernelPtr> makeInstanceNormalizationKernel(const OpDesc &d) {
  if (d.inputs.size() != 3 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 3 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 3");
  int64_t C = x.shape[1];
  for (int i = 1; i < 3; ++i)
    if (d.inputs[i].dtype != x.dtype || d.inputs[i].shape != Shape{C})
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " is not ",
                    dtypeName(x.dtype), "[", C, "]");
  if (d.outputs[0] != x)
    return errorf(d.where(), ": output ", d.outputs[0].str(), " differs from X ", x.str());
  int64_t planes = x.shape[0] * C;
  int64_t spatial = planes ? x.numel() / planes : 0;
  double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  return linalgDispatchFloat(d, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    return KernelPtr(new InstanceNormKernel<T>(planes, C, spatial, eps));
  });
}

} // namespace pipec::cpu
