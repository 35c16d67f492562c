//===- runtime/cuda/kernels/Norm.cpp - CUDA row kernels: softmax, layer norm, reductions, losses -===//
//
// Softmax and LogSoftmax, pipec:MaskedSoftmax and pipec:SoftmaxGrad,
// LayerNormalization and its gradients, the reductions, and the losses
// (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss) with their gradients.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "runtime/cuda/kernels/CudaCommon.h"

#include <cuda_runtime.h>

#include <optional>

namespace pipec::cuda {

namespace {

class MaskedSoftmaxKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  MaskedSoftmaxKernel(int64_t rows, int64_t n, body::Broadcast mask, float scale, float fill, bool fillWhen)
      : rows_(rows), n_(n), mask_(mask), scale_(scale), fill_(fill), fillWhen_(fillWhen) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchMaskedSoftmax(static_cast<const float *>(in[0]), static_cast<const bool *>(in[1]),
                               static_cast<float *>(out[0]), rows_, n_, mask_, scale_, fill_, fillWhen_,
                               ctx.stream);
  }

private:
  int64_t rows_, n_;
  body::Broadcast mask_;
  float scale_, fill_;
  bool fillWhen_;
};

class SoftmaxKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  SoftmaxKernel(bool log, int64_t outer, int64_t len, int64_t inner)
      : log_(log), outer_(outer), len_(len), inner_(inner) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchSoftmax(log_, static_cast<const float *>(in[0]), static_cast<float *>(out[0]), outer_, len_,
                         inner_, ctx.stream);
  }

private:
  bool log_;
  int64_t outer_, len_, inner_;
};

/// ReduceSum (its own kernel), or another reduction when `op` is given.
class ReduceSumKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  ReduceSumKernel(body::Reduction r, int64_t outN, std::optional<body::ReduceOp> op = std::nullopt)
      : r_(r), outN_(outN), op_(op) {}
  size_t workspaceBytes() const override {
    return op_ ? 0 : static_cast<size_t>(body::reduceSumParts(outN_, r_)) * sizeof(float);
  }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    if (op_)
      return launchReduce(*op_, static_cast<const float *>(in[0]), static_cast<float *>(out[0]), outN_, r_,
                          ctx.stream);
    return launchReduceSum(static_cast<const float *>(in[0]), static_cast<float *>(out[0]), outN_, r_,
                           static_cast<float *>(ctx.workspace), ctx.stream);
  }

private:
  body::Reduction r_;
  int64_t outN_;
  std::optional<body::ReduceOp> op_;
};

/// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (reduction 0
/// none, 1 sum, 2 mean; class weights; an ignore index; int32 or int64
/// targets) and their gradients. The workspace holds the flag the kernels
/// raise for a target outside [0, C) (an error, not a silent NaN), the
/// mean's total weight, and each position's loss and weight.
class LossKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  LossKernel(std::string where, rows::LossGeometry g, bool grad, bool weighted)
      : where_(std::move(where)), g_(g), grad_(grad), weighted_(weighted) {}
  size_t workspaceBytes() const override { return kPerPosition + 2 * static_cast<size_t>(g_.n * g_.d) * sizeof(float); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    auto *ws = static_cast<char *>(ctx.workspace);
    auto *total = reinterpret_cast<double *>(ws + 8);
    auto *per = reinterpret_cast<float *>(ws + kPerPosition);
    float *perWeight = per + g_.n * g_.d;
    return withDataFlag(ctx, where_, [&](int *flag) -> Status {
      if (grad_)
        return launchLossGrad(g_, static_cast<const float *>(in[0]), static_cast<const float *>(in[1]), in[2],
                              weighted_ ? static_cast<const float *>(in[3]) : nullptr, total,
                              static_cast<float *>(out[0]), flag, ctx.stream);
      float *loss = static_cast<float *>(out[0]);
      const bool none = g_.reduction == 0;
      PIPEC_TRY(launchLoss(g_, static_cast<const float *>(in[0]), in[1],
                           weighted_ ? static_cast<const float *>(in[2]) : nullptr, none ? loss : per,
                           none ? nullptr : perWeight, flag, ctx.stream));
      return none ? Status::ok() : launchLossSum(per, perWeight, g_.n * g_.d, g_.reduction, loss, ctx.stream);
    });
  }

private:
  static constexpr size_t kPerPosition = 256; ///< the flag at 0, the total weight at 8
  std::string where_;
  rows::LossGeometry g_;
  bool grad_, weighted_;
};

/// The geometry of summing a row-major tensor of shape `s` over the axes
/// `reduced` marks (rank at most body::kMaxRank): body::reductionOf.
body::Reduction reductionOf(const Shape &s, const std::vector<bool> &reduced) {
  bool marks[body::kMaxRank] = {};
  for (size_t a = 0; a < reduced.size() && a < static_cast<size_t>(body::kMaxRank); ++a)
    marks[a] = reduced[a];
  return body::reductionOf(s.data(), static_cast<int>(s.size()), marks);
}

/// LayerNormalization's scale gradient's workspace: the rows' statistics,
/// then the chunks of its sums (doubles), then (`withBias`) those of the
/// bias gradient's ReduceSum (floats).
struct NormGradSpace {
  size_t scaleParts, biasParts, bytes; ///< offsets (the statistics at 0) and the size
  NormGradSpace(int64_t rows, int64_t cols, bool withBias, const body::Reduction &columns) {
    auto up = [](size_t n) { return (n + 255) / 256 * 256; };
    scaleParts = up(static_cast<size_t>(rows) * sizeof(body::RowStats));
    biasParts = scaleParts + up(static_cast<size_t>(body::chunkParts(rows, cols)) * sizeof(double));
    bytes = biasParts + (withBias ? static_cast<size_t>(body::reduceSumParts(cols, columns)) * sizeof(float) : 0);
  }
  body::RowStats *statsIn(void *ws) const { return static_cast<body::RowStats *>(ws); }
  double *scaleIn(void *ws) const { return reinterpret_cast<double *>(static_cast<char *>(ws) + scaleParts); }
  float *biasIn(void *ws) const { return reinterpret_cast<float *>(static_cast<char *>(ws) + biasParts); }
};

} // namespace

Expected<KernelPtr> makeReduceSum(const OpDesc &d) {
  const Shape &s = d.inputs[0].shape;
  const int rank = static_cast<int>(s.size());
  if (rank > body::kMaxRank)
    return errorf(d.where(), ": rank ", rank, " (the CUDA kernel reduces up to rank ", body::kMaxRank, ")");
  std::vector<int64_t> axes;
  // Axes became an input at opset 13 for ReduceSum, at 18 for the others.
  if (d.opset >= (d.opType == "ReduceSum" ? 13 : 18)) {
    if (d.hasInput(1)) {
      const Tensor *a = d.constInput(1);
      if (!a || a->dtype() != DType::I64)
        return errorf(d.where(), ": axes must be a constant int64 tensor");
      axes = a->toInts();
    }
  } else {
    axes = attrInts(d.attrs, "axes");
  }
  const bool noop = attrInt(d.attrs, "noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t a : axes) {
    if (a < 0)
      a += rank;
    if (a < 0 || a >= rank)
      return errorf(d.where(), ": axis out of range for ", shapeStr(s));
    reduced[static_cast<size_t>(a)] = true;
  }
  std::optional<body::ReduceOp> op;
  using R = body::ReduceOp;
  static const std::pair<const char *, R> kOps[] = {
      {"ReduceMean", R::Mean}, {"ReduceSumSquare", R::SumSquare}, {"ReduceL1", R::L1}, {"ReduceL2", R::L2},
      {"ReduceProd", R::Prod}, {"ReduceMax", R::Max}, {"ReduceMin", R::Min}, {"ReduceLogSumExp", R::LogSumExp}};
  for (const auto &[name, code] : kOps)
    if (d.opType == name)
      op = code;
  if (!op && d.opType != "ReduceSum")
    return errorf(d.where(), ": not a reduction of the CUDA kernels");
  return KernelPtr(new ReduceSumKernel(reductionOf(s, reduced), d.outputs[0].numel(), op));
}

Expected<KernelPtr> makeLoss(const OpDesc &d) {
  const bool grad = d.domain == "pipec";
  if (!grad && d.outputs.size() > 1)
    return errorf(d.where(), ": the log_prob output is not implemented in the CUDA kernel");
  // A gradient node read as its forward loss (scores, target, weight ->
  // loss), as the CPU kernel reads it, for the shared checks and layout.
  OpDesc fwd = d;
  if (grad) {
    if (d.inputs.size() < 3 || d.outputs.size() != 1)
      return errorf(d.where(), ": expects 3 or 4 inputs and 1 output");
    fwd.inputs.assign(d.inputs.begin() + 1, d.inputs.end());
    fwd.constInputs.clear();
    fwd.outputs = {d.inputs[0]};
  }
  PIPEC_ASSIGN(cpu::dm::LossLayout l, cpu::dm::lossLayout(fwd));
  if (l.scoreType != DType::F32)
    return errorf(d.where(), ": the CUDA kernel takes float32 scores, not ", dtypeName(l.scoreType));
  if (grad && (d.inputs[0].dtype != DType::F32 || d.outputs[0] != d.inputs[1]))
    return errorf(d.where(), ": the gradient must be float32 ", shapeStr(d.inputs[1].shape));
  rows::LossGeometry g;
  g.n = l.n;
  g.c = l.c;
  g.d = l.d;
  g.softmax = d.opType.find("SoftmaxCrossEntropy") != std::string::npos;
  g.hasIgnore = l.hasIgnore;
  g.ignoreIndex = l.ignoreIndex;
  g.target32 = l.targetType == DType::I32;
  g.reduction = l.reduction == cpu::dm::Reduction::None ? 0 : l.reduction == cpu::dm::Reduction::Sum ? 1 : 2;
  return KernelPtr(new LossKernel(d.where(), g, grad, l.hasWeight));
}

Expected<KernelPtr> makeLayerNorm(const OpDesc &d) {
  const bool grad = d.opType == "LayerNormalizationGrad", scaleGrad = d.opType == "LayerNormalizationScaleGrad";
  const TensorDesc &x = grad || scaleGrad ? d.inputs[1] : d.inputs[0];
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", -1), x.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.shape.size()))
    return errorf(d.where(), ": axis out of range for ", x.str());
  const double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  const int64_t rows = prodDims(x.shape, 0, static_cast<size_t>(axis));
  const int64_t cols = prodDims(x.shape, static_cast<size_t>(axis), x.shape.size());
  const body::Reduction columns = reductionOf({rows, cols}, {true, false});
  if (scaleGrad) {
    const NormGradSpace ws(rows, cols, false, columns);
    return launchKernel(
        [=](ExecContext &ctx, const void *const *in, void *const *out) {
          return launchLayerNormScaleGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                                          static_cast<float *>(out[0]), rows, cols, eps, ws.statsIn(ctx.workspace),
                                          ws.scaleIn(ctx.workspace), ctx.stream);
        },
        ws.bytes);
  }
  if (grad && d.outputs.size() == 3) {
    // dX, dScale and dBias (autodiff's form when all three train): the dX
    // and scale-gradient kernels, then dY's column sums.
    const NormGradSpace ws(rows, cols, true, columns);
    return launchKernel(
        [=](ExecContext &ctx, const void *const *in, void *const *out) {
          const auto *dy = static_cast<const float *>(in[0]), *xp = static_cast<const float *>(in[1]);
          PIPEC_TRY(launchLayerNormGrad(dy, xp, static_cast<const float *>(in[2]), static_cast<float *>(out[0]), rows,
                                        cols, eps, ctx.stream));
          PIPEC_TRY(launchLayerNormScaleGrad(dy, xp, static_cast<float *>(out[1]), rows, cols, eps,
                                             ws.statsIn(ctx.workspace), ws.scaleIn(ctx.workspace), ctx.stream));
          return launchReduceSum(dy, static_cast<float *>(out[2]), cols, columns, ws.biasIn(ctx.workspace),
                                 ctx.stream);
        },
        ws.bytes);
  }
  if (grad && d.outputs.size() == 1)
    return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
      return launchLayerNormGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                                 static_cast<const float *>(in[2]), static_cast<float *>(out[0]), rows, cols, eps,
                                 ctx.stream);
    });
  if (grad)
    return errorf(d.where(), ": expects dX, or dX, dScale and dBias");
  if (d.outputs.size() > 1)
    return errorf(d.where(), ": the Mean and InvStdDev outputs are not implemented in the CUDA kernel");
  if (d.inputs[1].numel() != cols || (d.hasInput(2) && d.inputs[2].numel() != cols))
    return errorf(d.where(), ": scale and bias must hold ", cols, " elements (the CUDA kernel does not broadcast them)");
  const bool bias = d.hasInput(2);
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchLayerNorm(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                           bias ? static_cast<const float *>(in[2]) : nullptr, static_cast<float *>(out[0]), rows,
                           cols, eps, ctx.stream);
  });
}

Expected<KernelPtr> makeSoftmaxGrad(const OpDesc &d) {
  if (attrInt(d.attrs, "coerce2d", 0) != 0)
    return errorf(d.where(), ": the opset < 13 form (coerce2d) is not implemented in the CUDA kernel");
  const Shape &s = d.inputs[1].shape;
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", -1), s.size());
  if (axis < 0 || axis >= static_cast<int64_t>(s.size()))
    return errorf(d.where(), ": axis out of range for ", shapeStr(s));
  const int64_t outer = prodDims(s, 0, static_cast<size_t>(axis)), len = s[static_cast<size_t>(axis)];
  const int64_t inner = prodDims(s, static_cast<size_t>(axis) + 1, s.size());
  const bool log = d.opType == "LogSoftmaxGrad";
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchSoftmaxGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                             static_cast<float *>(out[0]), outer, len, inner, ctx.stream, log);
  });
}

Expected<KernelPtr> makeMaskedSoftmax(const OpDesc &d) {
  const Shape &x = d.inputs[0].shape, &c = d.inputs[1].shape;
  if (x.empty() || c.size() > x.size() || x.size() > static_cast<size_t>(body::kMaxRank) ||
      d.inputs[1].dtype != DType::Bool)
    return errorf(d.where(), ": the mask ", d.inputs[1].str(), " does not broadcast to ", d.inputs[0].str());
  for (size_t a = 0; a < c.size(); ++a)
    if (c[a] != 1 && c[a] != x[a + x.size() - c.size()])
      return errorf(d.where(), ": the mask ", d.inputs[1].str(), " does not broadcast to ", d.inputs[0].str());
  const int64_t n = x.back(), rows = n ? d.inputs[0].numel() / n : 0;
  return KernelPtr(new MaskedSoftmaxKernel(rows, n, broadcastOf(c, x), attrFloat(d.attrs, "scale", 1.0f),
                                           attrFloat(d.attrs, "fill", -INFINITY),
                                           attrInt(d.attrs, "fill_when", 1) != 0));
}

Expected<KernelPtr> makeSoftmax(const OpDesc &d) {
  const Shape &s = d.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t axis = attrInt(d.attrs, "axis", d.opset >= 13 ? -1 : 1);
  if (axis < 0)
    axis += rank;
  if (rank == 0 || axis < 0 || axis >= rank)
    return errorf(d.where(), ": axis out of range for ", shapeStr(s));
  if (d.opset < 13)
    return errorf(d.where(), ": opset ", d.opset, " Softmax flattens to 2-D; the CUDA kernel implements opset 13 and later");
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a)
    outer *= s[a];
  for (int64_t a = axis + 1; a < rank; ++a)
    inner *= s[a];
  return KernelPtr(new SoftmaxKernel(d.opType == "LogSoftmax", outer, s[axis], inner));
}

} // namespace pipec::cuda
