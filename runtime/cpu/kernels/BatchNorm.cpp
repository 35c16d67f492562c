//===- runtime/cpu/kernels/BatchNorm.cpp - BatchNormalization -------------===//
//
// ONNX BatchNormalization, opsets 7-15, inputs X, scale, B, mean, var.
//
// Inference: Y = (X - mean) / sqrt(var + epsilon) * scale + B.
// Training (training_mode = 1, opset 14+; before 14, the five-output form,
// which the spec of opsets 9-13 defines as training mode; otherwise, with no
// training_mode attribute, ExecContext::training): the batch's own mean and (biased)
// variance over N and the spatial dimensions normalize X, and the running
// statistics are updated as the spec says,
//   running_mean = mean * momentum + batch_mean * (1 - momentum)
// and likewise for the variance, into outputs 1 and 2 when they exist.
// Before opset 14 outputs 3 and 4 (saved_mean, saved_var) receive the batch
// mean and batch variance (the spec's "saved variance", not an inverse
// standard deviation).
//
// Opset 7's spatial = 0 (statistics per activation, scale of shape
// [C, D1, ...]) is handled by treating every activation as a channel.
//
// Channels are independent; each channel's statistics are summed in one
// fixed order (in double), so results do not depend on the thread count.
// The loop is memory bound and needs no library: it ran faster than
// oneDNN's batch_normalization_forward on the plain NCHW layout, both in
// inference and with batch statistics (docs/cpu-linalg-kernels.md).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "support/Parallel.h"

#include <cmath>

namespace pipec::cpu {

namespace {

template <typename T> class BatchNormKernel final : public Kernel {
public:
  int64_t N = 0, C = 0, inner = 0;
  double epsilon = 1e-5, momentum = 0.9;
  int trainingAttr = -1; ///< training_mode if given, else -1
  bool hasRunning = false, hasSaved = false;

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    for (int i = 0; i < 5; ++i)
      if (!in[i])
        return errorf("BatchNormalization: input ", i, " is missing at run time");
    const T *x = static_cast<const T *>(in[0]);
    const T *scale = static_cast<const T *>(in[1]);
    const T *bias = static_cast<const T *>(in[2]);
    const T *mean = static_cast<const T *>(in[3]);
    const T *var = static_cast<const T *>(in[4]);
    T *y = static_cast<T *>(out[0]);
    bool training = trainingAttr >= 0 ? trainingAttr == 1 : ctx.training;
    // Statistics outputs requested in inference mode get the given
    // statistics (the spec leaves them undefined; nothing stays unwritten).
    T *runMean = hasRunning ? static_cast<T *>(out[1]) : nullptr;
    T *runVar = hasRunning ? static_cast<T *>(out[2]) : nullptr;
    T *savedMean = hasSaved ? static_cast<T *>(out[3]) : nullptr;
    T *savedVar = hasSaved ? static_cast<T *>(out[4]) : nullptr;
    parallelFor(C, N * C * inner > 16384, [&](int64_t c) {
      double m, v;
      if (training) {
        linalgChannelStats(x, N, C, inner, c, m, v);
        if (runMean) {
          runMean[c] = static_cast<T>(mean[c] * momentum + m * (1.0 - momentum));
          runVar[c] = static_cast<T>(var[c] * momentum + v * (1.0 - momentum));
        }
        if (savedMean) {
          savedMean[c] = static_cast<T>(m);
          savedVar[c] = static_cast<T>(v);
        }
      } else {
        m = mean[c];
        v = var[c];
        if (runMean) {
          runMean[c] = mean[c];
          runVar[c] = var[c];
        }
        if (savedMean) {
          savedMean[c] = mean[c];
          savedVar[c] = var[c];
        }
      }
      double a = scale[c] / std::sqrt(v + epsilon);
      T ta = static_cast<T>(a), tb = static_cast<T>(bias[c] - m * a);
      for (int64_t n = 0; n < N; ++n) {
        const T *xp = x + (n * C + c) * inner;
        T *yp = y + (n * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i)
          yp[i] = xp[i] * ta + tb;
      }
    });
    return Status::ok();
  }
};

template <typename T> Expected<KernelPtr> makeTyped(const OpDesc &d) {
  auto k = std::make_unique<BatchNormKernel<T>>();
  const TensorDesc &x = d.inputs[0];
  int64_t cs = d.inputs[1].numel();
  bool spatial = d.opset >= 9 || attrInt(d.attrs, "spatial", 1) != 0;
  k->N = x.shape[0];
  k->C = cs;
  if (spatial ? x.shape[1] != cs : cs != x.numel() / std::max<int64_t>(x.shape[0], 1))
    return errorf(d.where(), ": scale ", d.inputs[1].str(), " does not match X ", x.str());
  k->inner = k->N != 0 && cs != 0 ? x.numel() / (k->N * cs) : 0;
  for (int i = 2; i < 5; ++i)
    if (d.inputs[i].numel() != cs)
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " has not ", cs, " elements");
  k->epsilon = attrFloat(d.attrs, "epsilon", 1e-5f);
  k->momentum = attrFloat(d.attrs, "momentum", 0.9f);
  if (attrHas(d.attrs, "training_mode"))
    k->trainingAttr = attrInt(d.attrs, "training_mode", 0) != 0 ? 1 : 0;
  else if (d.outputs.size() == 5)
    k->trainingAttr = 1; // opsets 9-13: output case #1 is training mode
  k->hasRunning = linalgHasOutput(d, 1) && linalgHasOutput(d, 2);
  k->hasSaved = linalgHasOutput(d, 3) && linalgHasOutput(d, 4);
  if (linalgHasOutput(d, 1) != linalgHasOutput(d, 2) ||
      linalgHasOutput(d, 3) != linalgHasOutput(d, 4))
    return errorf(d.where(), ": mean and variance outputs come in pairs");
  for (size_t i = 1; i < d.outputs.size(); ++i)
    if (linalgHasOutput(d, i) && d.outputs[i].numel() != cs)
      return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " has not ", cs,
                    " elements");
  return KernelPtr(std::move(k));
}

} // namespace

Expected<KernelPtr> makeBatchNormalizationKernel(const OpDesc &d) {
  if (d.inputs.size() != 5 || d.outputs.empty() || d.outputs.size() > 5)
    return errorf(d.where(), ": expects 5 inputs and 1 to 5 outputs, got ", d.inputs.size(),
                  " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (d.inputs[i].dtype != x.dtype)
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " differs in type from X ",
                    x.str());
  for (size_t i = 0; i < d.outputs.size(); ++i)
    if (linalgHasOutput(d, i) && d.outputs[i].dtype != x.dtype)
      return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " differs in type from X ",
                    x.str());
  if (x.rank() < 2 || d.outputs[0].shape != x.shape)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 2 and Y ", d.outputs[0].str(),
                  " its shape");
  return linalgDispatchFloat(d, x.dtype, [&](auto tag) { return makeTyped<decltype(tag)>(d); });
}

} // namespace pipec::cpu
