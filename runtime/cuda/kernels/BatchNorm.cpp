//===- runtime/cuda/kernels/BatchNorm.cpp - Normalizations of CNNs ---------===//
//
// BatchNormalization (opsets 7-15: inference, and training with the batch's
// statistics and the running ones updated as the CPU keeps them),
// pipec:BatchNormalizationStats, pipec:BatchNormalizationGrad,
// pipec:BatchNormalizationScaleGrad, InstanceNormalization and LRN, float32,
// by the kernels of runtime/cuda/DnnKernels.cu: the CPU kernels' formulas
// (runtime/cpu/kernels/BatchNorm.cpp, GradBatchNorm.cpp, InstanceNorm.cpp,
// LRN.cpp), statistics in double. Not cuDNN's: its batch normalization
// updates the running variance with the unbiased variance and keeps an
// inverse standard deviation, its LRN takes windows of 16 channels at
// most (CUDNN_LRN_MAX_N).
//
// Training or inference as the CPU decides: the training_mode attribute
// where the node has one (opset 14+), the five-output form of opsets 9-13
// training, else ExecContext::training. Each channel's statistics are a
// block's sums in a fixed order (runtime/cuda/DnnBodies.h), then the
// elements are normalized with the channel's float scale and shift.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cuda/Dnn.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {

inline size_t roundUp(size_t b) { return (b + 255) & ~size_t(255); }

/// The workspace, aligned to 256 bytes (workspaceBytes() reserves them).
inline unsigned char *aligned(void *p) {
  return reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(p) + 255) & ~uintptr_t(255));
}

/// Every given input and output float32 (the table's rows say Own: a
/// normalization's optional outputs may be absent).
Status needF32Given(const OpDesc &d) {
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (d.hasInput(i) && d.inputs[i].dtype != DType::F32)
      return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype),
                    "; the CUDA kernels take float32 only");
  for (size_t i = 0; i < d.outputs.size(); ++i)
    if (cpu::linalgHasOutput(d, i) && d.outputs[i].dtype != DType::F32)
      return errorf(d.where(), ": output ", i, " is ", dtypeName(d.outputs[i].dtype),
                    "; the CUDA kernels take float32 only");
  return Status::ok();
}

Status missing(const std::string &where, const void *const *in, int n) {
  for (int i = 0; i < n; ++i)
    if (!in[i])
      return errorf(where, ": input ", i, " is missing at run time");
  return Status::ok();
}

using BnGeom = cpu::BnGradGeom;

/// The CPU's check of a gradient node (cpu::linalgCheckBnGrad), float32
/// only.
Status checkBn(const OpDesc &d, size_t numIn, size_t numOut, int dyIdx, size_t xIdx,
               const std::vector<size_t> &perChannel, const std::vector<size_t> &perChannelOut, BnGeom &g) {
  if (d.inputs.size() != numIn || d.outputs.size() != numOut)
    return errorf(d.where(), ": expects ", numIn, " inputs and ", numOut, " outputs, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  PIPEC_TRY(needF32Given(d));
  return cpu::linalgCheckBnGrad(d, numIn, numOut, dyIdx, xIdx, perChannel, perChannelOut, g);
}

dnn::NormArgs argsOf(const BnGeom &g, dnn::NormPass pass, bool training) {
  dnn::NormArgs a;
  a.pass = pass;
  a.N = g.N;
  a.C = g.C;
  a.inner = g.inner;
  a.epsilon = g.epsilon;
  a.training = training;
  return a;
}

} // namespace

Expected<KernelPtr> makeBatchNorm(const OpDesc &d) {
  if (d.inputs.size() != 5 || d.outputs.empty() || d.outputs.size() > 5)
    return errorf(d.where(), ": expects 5 inputs and 1 to 5 outputs, got ", d.inputs.size(), " and ", d.outputs.size());
  PIPEC_TRY(needF32Given(d));
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 2 || d.outputs[0].shape != x.shape)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 2 and Y ", d.outputs[0].str(), " its shape");
  BnGeom g;
  const int64_t cs = d.inputs[1].numel();
  // Opset 7's spatial = 0: every activation a channel (scale [C, D1...]).
  const bool spatial = d.opset >= 9 || attrInt(d.attrs, "spatial", 1) != 0;
  if (spatial ? x.shape[1] != cs : cs != x.numel() / std::max<int64_t>(x.shape[0], 1))
    return errorf(d.where(), ": scale ", d.inputs[1].str(), " does not match X ", x.str());
  g.N = x.shape[0];
  g.C = cs;
  g.inner = g.N != 0 && cs != 0 ? x.numel() / (g.N * cs) : 0;
  for (int i = 2; i < 5; ++i)
    if (d.inputs[static_cast<size_t>(i)].numel() != cs)
      return errorf(d.where(), ": input ", i, " ", d.inputs[static_cast<size_t>(i)].str(), " has not ", cs,
                    " elements");
  g.epsilon = attrFloat(d.attrs, "epsilon", 1e-5f);
  const double momentum = attrFloat(d.attrs, "momentum", 0.9f);
  if (attrHas(d.attrs, "training_mode"))
    g.trainingAttr = attrInt(d.attrs, "training_mode", 0) != 0 ? 1 : 0;
  else if (d.outputs.size() == 5)
    g.trainingAttr = 1; // opsets 9-13: output case #1 is training mode
  if (cpu::linalgHasOutput(d, 1) != cpu::linalgHasOutput(d, 2) || cpu::linalgHasOutput(d, 3) != cpu::linalgHasOutput(d, 4))
    return errorf(d.where(), ": mean and variance outputs come in pairs");
  for (size_t i = 1; i < d.outputs.size(); ++i)
    if (cpu::linalgHasOutput(d, i) && d.outputs[i].numel() != cs)
      return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " has not ", cs, " elements");
  const bool running = cpu::linalgHasOutput(d, 1), saved = cpu::linalgHasOutput(d, 3);
  const size_t ws = 256 + 2 * roundUp(static_cast<size_t>(cs) * sizeof(float));
  return launchKernel(
      [where = d.where(), g, momentum, running, saved](ExecContext &ctx, const void *const *in, void *const *out) {
        PIPEC_TRY(missing(where, in, 5));
        dnn::NormArgs a = argsOf(g, dnn::NormPass::Forward, g.training(ctx));
        a.momentum = momentum;
        a.x = static_cast<const float *>(in[0]);
        a.scale = static_cast<const float *>(in[1]);
        a.bias = static_cast<const float *>(in[2]);
        a.mean = static_cast<const float *>(in[3]);
        a.var = static_cast<const float *>(in[4]);
        unsigned char *w = aligned(ctx.workspace);
        a.ta = reinterpret_cast<float *>(w);
        a.tb = reinterpret_cast<float *>(w + roundUp(static_cast<size_t>(g.C) * sizeof(float)));
        if (running) {
          a.runMean = static_cast<float *>(out[1]);
          a.runVar = static_cast<float *>(out[2]);
        }
        if (saved) {
          a.savedMean = static_cast<float *>(out[3]);
          a.savedVar = static_cast<float *>(out[4]);
        }
        PIPEC_TRY(launchNormChannels(a, ctx.stream));
        return launchNormApply(a.x, a.ta, a.tb, static_cast<float *>(out[0]), g.N, g.C, g.inner, ctx.stream);
      },
      ws);
}

Expected<KernelPtr> makeBatchNormStats(const OpDesc &d) {
  BnGeom g;
  PIPEC_TRY(checkBn(d, 3, 2, -1, 0, {1, 2}, {0, 1}, g));
  return launchKernel([where = d.where(), g](ExecContext &ctx, const void *const *in, void *const *out) {
    PIPEC_TRY(missing(where, in, 3));
    dnn::NormArgs a = argsOf(g, dnn::NormPass::Stats, g.training(ctx));
    a.x = static_cast<const float *>(in[0]);
    a.mean = static_cast<const float *>(in[1]);
    a.var = static_cast<const float *>(in[2]);
    a.muOut = static_cast<float *>(out[0]);
    a.rstdOut = static_cast<float *>(out[1]);
    return launchNormChannels(a, ctx.stream);
  });
}

Expected<KernelPtr> makeBatchNormScaleGrad(const OpDesc &d) {
  BnGeom g;
  if (d.inputs.size() == 1) {
    // BatchNormalizationGrad's [2, C] sums: dBias the first row, dScale
    // the second.
    const TensorDesc &sums = d.inputs[0];
    if (!d.hasInput(0) || sums.rank() != 2 || sums.shape[0] != 2 || d.outputs.size() != 2)
      return errorf(d.where(), ": expects the [2, C] sums and 2 outputs, got ", sums.str(), " and ", d.outputs.size(),
                    " outputs");
    PIPEC_TRY(needF32Given(d));
    const int64_t C = sums.shape[1];
    for (size_t i = 0; i < 2; ++i)
      if (cpu::linalgHasOutput(d, i) && d.outputs[i].numel() != C)
        return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " is not ", C, " float32 elements");
    const size_t bytes = static_cast<size_t>(C) * sizeof(float);
    return launchKernel([where = d.where(), bytes](ExecContext &ctx, const void *const *in, void *const *out) {
      PIPEC_TRY(missing(where, in, 1));
      const auto *sums = static_cast<const unsigned char *>(in[0]);
      auto stream = static_cast<cudaStream_t>(ctx.stream);
      for (int o = 0; o < 2; ++o)
        if (out[o] && bytes &&
            cudaMemcpyAsync(out[o], sums + (o == 0 ? bytes : 0), bytes, cudaMemcpyDeviceToDevice, stream) !=
                cudaSuccess)
          return errorf(where, ": cudaMemcpyAsync failed: ", cudaGetErrorString(cudaGetLastError()));
      return Status::ok();
    });
  }
  PIPEC_TRY(checkBn(d, 4, 2, 0, 1, {2, 3}, {0, 1}, g));
  return launchKernel([where = d.where(), g](ExecContext &ctx, const void *const *in, void *const *out) {
    PIPEC_TRY(missing(where, in, 4));
    dnn::NormArgs a = argsOf(g, dnn::NormPass::ScaleGrad, g.training(ctx));
    a.dy = static_cast<const float *>(in[0]);
    a.x = static_cast<const float *>(in[1]);
    a.mu = static_cast<const float *>(in[2]);
    a.rstd = static_cast<const float *>(in[3]);
    a.dScale = static_cast<float *>(out[0]);
    a.dBias = static_cast<float *>(out[1]);
    return launchNormChannels(a, ctx.stream);
  });
}

Expected<KernelPtr> makeBatchNormGrad(const OpDesc &d) {
  BnGeom g;
  const bool sums = d.outputs.size() == 2;
  PIPEC_TRY(checkBn(d, 5, sums ? 2 : 1, 0, 1, {2, 3, 4}, {}, g));
  if (d.outputs[0] != d.inputs[1])
    return errorf(d.where(), ": dX ", d.outputs[0].str(), " is not typed as X ", d.inputs[1].str());
  if (sums && d.outputs[1] != TensorDesc{DType::F32, {2, g.C}})
    return errorf(d.where(), ": the sums ", d.outputs[1].str(), " are not float32[2, ", g.C, "]");
  const size_t ws = 256 + static_cast<size_t>(g.C) * 5 * sizeof(double);
  return launchKernel(
      [where = d.where(), g, sums](ExecContext &ctx, const void *const *in, void *const *out) {
        PIPEC_TRY(missing(where, in, 5));
        const bool training = g.training(ctx);
        dnn::NormArgs a = argsOf(g, dnn::NormPass::Grad, training);
        a.dy = static_cast<const float *>(in[0]);
        a.x = static_cast<const float *>(in[1]);
        a.scale = static_cast<const float *>(in[2]);
        a.mu = static_cast<const float *>(in[3]);
        a.rstd = static_cast<const float *>(in[4]);
        a.coef = reinterpret_cast<double *>(aligned(ctx.workspace));
        a.sums = sums ? static_cast<float *>(out[1]) : nullptr;
        PIPEC_TRY(launchNormChannels(a, ctx.stream));
        return launchBnGradApply(a.dy, a.x, a.coef, static_cast<float *>(out[0]), g.N, g.C, g.inner, training,
                                 ctx.stream);
      },
      ws);
}

Expected<KernelPtr> makeInstanceNorm(const OpDesc &d) {
  if (d.inputs.size() != 3 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 3 inputs and 1 output, got ", d.inputs.size(), " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 3");
  const int64_t C = x.shape[1];
  for (size_t i = 1; i < 3; ++i)
    if (d.inputs[i].shape != Shape{C})
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " is not float32[", C, "]");
  if (d.outputs[0] != x)
    return errorf(d.where(), ": output ", d.outputs[0].str(), " differs from X ", x.str());
  const int64_t planes = x.shape[0] * C, spatial = planes ? x.numel() / planes : 0;
  const double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  const size_t ws = 256 + 2 * roundUp(static_cast<size_t>(planes) * sizeof(float));
  return launchKernel(
      [where = d.where(), C, planes, spatial, eps](ExecContext &ctx, const void *const *in, void *const *out) {
        PIPEC_TRY(missing(where, in, 3));
        dnn::NormArgs a;
        a.pass = dnn::NormPass::Instance;
        a.N = 1;
        a.C = planes;
        a.inner = spatial;
        a.scaleC = C;
        a.epsilon = eps;
        a.x = static_cast<const float *>(in[0]);
        a.scale = static_cast<const float *>(in[1]);
        a.bias = static_cast<const float *>(in[2]);
        unsigned char *w = aligned(ctx.workspace);
        a.ta = reinterpret_cast<float *>(w);
        a.tb = reinterpret_cast<float *>(w + roundUp(static_cast<size_t>(planes) * sizeof(float)));
        PIPEC_TRY(launchNormChannels(a, ctx.stream));
        return launchNormApply(a.x, a.ta, a.tb, static_cast<float *>(out[0]), 1, planes, spatial, ctx.stream);
      },
      ws);
}

Expected<KernelPtr> makeLrn(const OpDesc &d) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 1 input and 1 output, got ", d.inputs.size(), " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3 || d.outputs[0] != x)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 3 and Y ", d.outputs[0].str(), " its type");
  const int64_t size = attrInt(d.attrs, "size", 0);
  if (size < 1)
    return errorf(d.where(), ": attribute 'size' is ", size, ", must be >= 1");
  // As LRN.cpp: the attributes in double, then the scale, bias and
  // exponent rounded to float.
  const double alpha = attrFloat(d.attrs, "alpha", 1e-4f), beta = attrFloat(d.attrs, "beta", 0.75f),
               bias = attrFloat(d.attrs, "bias", 1.0f);
  dnn::LrnArgs a;
  a.N = x.shape[0];
  a.C = x.shape[1];
  a.spatial = a.N != 0 && a.C != 0 ? x.numel() / (a.N * a.C) : 0;
  a.size = size;
  a.scale = static_cast<float>(alpha / static_cast<double>(size));
  a.bias = static_cast<float>(bias);
  a.negBeta = static_cast<float>(-beta);
  return launchKernel([a](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchLrn(a, static_cast<const float *>(in[0]), static_cast<float *>(out[0]), ctx.stream);
  });
}

} // namespace pipec::cuda
