//===- ir/shape/Grad.cpp - Shape rules of the gradient ops (domain pipec) -===//
//
// The ops that autodiff (passes/Autodiff.h) emits where ONNX has no op for a
// backward computation: pipec:ReluGrad, pipec:SoftmaxGrad, the loss
// gradients and the rest of the "Gradient ops" section of ir/Ops.def. Most
// return a tensor shaped like one of their inputs (the forward input they
// differentiate); the rules check that the incoming gradient matches the
// forward value it is the gradient of. The fused ops of the passes
// (pipec:MaskedSoftmax) have their rules here too.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"
#include "support/ElementwiseProgram.h"
#include "support/FusedOps.h"

#include <initializer_list>

namespace pipec::ir::shape {

namespace {

/// Fails unless inputs a and b have the same type (dtype and shape).
Status expectSameType(const ShapeContext &ctx, size_t a, size_t b) {
  if (ctx.inputType(a) != ctx.inputType(b))
    return ctx.error(cat(inputLabel(ctx, a), " is ", ctx.inputType(a).str(), " but ",
                         inputLabel(ctx, b), " is ", ctx.inputType(b).str(),
                         "; they must have the same type"));
  return Status::ok();
}

Status expectFloat(const ShapeContext &ctx, size_t i) {
  if (!isFloat(ctx.inputType(i).dtype))
    return ctx.error(cat(inputLabel(ctx, i), " must be a float tensor, it is ",
                         ctx.inputType(i).str()));
  return Status::ok();
}

} // namespace

/// pipec:FusedElementwise(x...) {program}: f32 inputs broadcast (numpy,
/// right-aligned) to the output, which has their broadcast shape; the
/// program (support/ElementwiseProgram.h) reads as many inputs as the node
/// has.
Status fusedElementwiseRule(const ShapeContext &ctx, Outputs &out) {
  if (auto p = ewProgramOf(ctx.attrs(), ctx.numInputs()); !p)
    return ctx.error(p.status().message());
  Shape shape;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const TensorDesc &t = ctx.inputType(i);
    if (t.dtype != DType::F32)
      return ctx.error(cat(inputLabel(ctx, i), " must be f32, it is ", t.str()));
    Shape r(std::max(shape.size(), t.shape.size()), 1);
    for (size_t a = 0; a < r.size(); ++a) {
      const int64_t x = a + shape.size() >= r.size() ? shape[a + shape.size() - r.size()] : 1;
      const int64_t y = a + t.shape.size() >= r.size() ? t.shape[a + t.shape.size() - r.size()] : 1;
      if (x != y && x != 1 && y != 1)
        return ctx.error(cat("the inputs do not broadcast: ", shapeStr(shape), " and ", t.str()));
      r[a] = x == 1 ? y : x;
    }
    shape = r;
  }
  out[0] = TensorDesc{DType::F32, shape};
  return Status::ok();
}

/// pipec:FusedGemm(A, B[, bias]) {transA, transB, activation}: f32, the
/// geometry of support/FusedOps.h, bias [N].
Status fusedGemmRule(const ShapeContext &ctx, Outputs &out) {
  // f32 operands, or 16-bit ones with an f32 result (output_dtype); the
  // bias f32.
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const bool half = i < 2 && ctx.attrs().count(kProductOutputDType);
    if (!ctx.hasInput(i) || (ctx.inputType(i).dtype != DType::F32 && !half))
      return ctx.error(cat(inputLabel(ctx, i), " must be an f32 tensor"));
  }
  if (auto t = productResultType(ctx.inputType(0).dtype, ctx.inputType(1).dtype, ctx.attrs()); !t)
    return ctx.error(t.status().message());
  if (auto act = fusedActivationOf(ctx.attrs()); !act)
    return ctx.error(act.status().message());
  auto g = fusedGemmDims(ctx.inputType(0).shape, ctx.inputType(1).shape, ctx.attrs());
  if (!g)
    return ctx.error(g.status().message());
  if (ctx.numInputs() > 2 && ctx.inputType(2).shape != Shape{g->N})
    return ctx.error(cat("the bias must be f32[", g->N, "], it is ", ctx.inputType(2).str()));
  out[0] = TensorDesc{DType::F32, g->out};
  return Status::ok();
}

namespace {
/// Checks pipec:Attention's Q, KT (or K), V and mask (input 3 unless the
/// mask attribute is "none"; support/FusedOps.h); returns O's type.
Expected<TensorDesc> attentionOutput(const ShapeContext &ctx) {
  for (size_t i = 0; i < 3; ++i)
    PIPEC_TRY(expectFloat(ctx, i));
  const TensorDesc &q = ctx.inputType(0), &k = ctx.inputType(1), &v = ctx.inputType(2);
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    return ctx.error(cat("Q ", q.str(), ", K ", k.str(), " and V ", v.str(), " differ in type"));
  auto dims = attentionDims(q.shape, k.shape, v.shape, ctx.attrs());
  if (!dims)
    return ctx.error(dims.status().message());
  auto kind = attentionMaskOf(ctx.attrs());
  if (!kind)
    return ctx.error(kind.status().message());
  if (*kind != AttentionMask::None) {
    if (ctx.numInputs() < 4 || !ctx.hasInput(3))
      return ctx.error("a mask needs input 3");
    const TensorDesc &m = ctx.inputType(3);
    const Shape &scores = dims->scores;
    bool fits = m.rank() <= static_cast<int64_t>(scores.size()) &&
                (*kind == AttentionMask::Bool ? m.dtype == DType::Bool : m.dtype == q.dtype);
    for (int64_t a = 0; fits && a < m.rank(); ++a) {
      const int64_t d = m.shape[a], sd = scores[a + scores.size() - m.rank()];
      fits = d == 1 || d == sd;
    }
    if (!fits)
      return ctx.error(cat("the mask ", m.str(), " does not broadcast to the scores ", shapeStr(scores)));
  }
  return TensorDesc{q.dtype, dims->out};
}

/// The probabilities' type: the scores' shape [..., s, t] in Q's type.
Expected<TensorDesc> attentionProbs(const ShapeContext &ctx) {
  auto dims = attentionDims(ctx.inputType(0).shape, ctx.inputType(1).shape, ctx.inputType(2).shape, ctx.attrs());
  if (!dims)
    return ctx.error(dims.status().message());
  return TensorDesc{ctx.inputType(0).dtype, dims->scores};
}
} // namespace

/// pipec:Attention(Q, KT, V[, mask]) -> O [..., s, dv][, P [..., s, t]].
Status attentionRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_ASSIGN(out[0], attentionOutput(ctx));
  if (ctx.numOutputs() == 2) {
    PIPEC_ASSIGN(out[1], attentionProbs(ctx));
  }
  return Status::ok();
}

/// pipec:AttentionGrad(Q, KT, V[, mask], dO[, P]) -> dQ, dKT, dV of their
/// inputs' types; with packed_qkv -> dQKV, the one input's type.
Status attentionGradRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_ASSIGN(TensorDesc o, attentionOutput(ctx));
  auto kind = attentionMaskOf(ctx.attrs());
  const size_t at = attentionOperands(*kind); // attentionOutput checked the kind
  if (ctx.numInputs() != at + 1 && ctx.numInputs() != at + 2)
    return ctx.error(cat("expects ", at + 1, " or ", at + 2, " inputs with mask '",
                         attrString(ctx.attrs(), "mask", "none"), "', got ", ctx.numInputs()));
  if (ctx.inputType(at) != o)
    return ctx.error(cat("dO is ", ctx.inputType(at).str(), ", expected ", o.str()));
  if (ctx.numInputs() == at + 2) {
    PIPEC_ASSIGN(TensorDesc p, attentionProbs(ctx));
    if (ctx.inputType(at + 1) != p)
      return ctx.error(cat("P is ", ctx.inputType(at + 1).str(), ", expected ", p.str()));
  }
  const size_t outputs = attrInt(ctx.attrs(), "packed_qkv", 0) != 0 ? 1 : 3;
  if (ctx.numOutputs() != outputs)
    return ctx.error(cat("expects ", outputs, outputs == 1 ? " output (dQKV)" : " outputs (dQ, dKT, dV)", ", got ",
                         ctx.numOutputs()));
  for (size_t i = 0; i < outputs; ++i)
    out[i] = ctx.inputType(i);
  return Status::ok();
}

/// pipec:MaskedSoftmax(x, cond): x float, cond bool broadcasting to x
/// (right-aligned); y has x's type.
Status maskedSoftmaxRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectFloat(ctx, 0));
  const TensorDesc &x = ctx.inputType(0), &c = ctx.inputType(1);
  if (c.dtype != DType::Bool)
    return ctx.error(cat(inputLabel(ctx, 1), " must be a bool tensor, it is ", c.str()));
  bool fits = c.rank() <= x.rank();
  for (int64_t a = 0; fits && a < c.rank(); ++a) {
    const int64_t d = c.shape[a], xd = x.shape[a + x.rank() - c.rank()];
    fits = d == 1 || d == xd;
  }
  if (!fits || x.rank() < 1)
    return ctx.error(cat("the mask ", c.str(), " does not broadcast to the scores ", x.str()));
  out[0] = x;
  return Status::ok();
}

Status elementwiseGradRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectFloat(ctx, 0));
  PIPEC_TRY(expectSameType(ctx, 0, 1));
  out[0] = ctx.inputType(0);
  return Status::ok();
}

Status axisGradRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(elementwiseGradRule(ctx, out));
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", -1),
                                     ctx.inputType(0).rank()));
  (void)axis;
  return Status::ok();
}

Status lossGradRule(const ShapeContext &ctx, Outputs &out) {
  // dLoss, scores [N, C, d...], target [N, d...], optional weight [C].
  PIPEC_TRY(expectFloat(ctx, 0));
  PIPEC_TRY(expectMinRank(ctx, 1, 2));
  PIPEC_TRY(expectIndexDType(ctx, 2));
  PIPEC_TRY(expectSameDType(ctx, {0, 1, 3}));
  const TensorDesc &scores = ctx.inputType(1), &target = ctx.inputType(2);
  Shape expected = scores.shape;
  expected.erase(expected.begin() + 1);
  if (target.shape != expected)
    return ctx.error(cat("target ", target.str(), " must have shape ", shapeStr(expected),
                         " for scores ", scores.str()));
  std::string reduction = attrString(ctx.attrs(), "reduction", "mean");
  Shape dLoss = reduction == "none" ? target.shape : Shape{};
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.error(cat("reduction '", reduction, "' is not none, sum or mean"));
  if (ctx.inputType(0).shape != dLoss)
    return ctx.error(cat("the loss gradient is ", ctx.inputType(0).str(), ", expected shape ",
                         shapeStr(dLoss), " for reduction '", reduction, "'"));
  if (ctx.hasInput(3) && ctx.inputType(3).shape != Shape{scores.shape[1]})
    return ctx.error(cat("weight must have shape [", scores.shape[1], "], got ",
                         ctx.inputType(3).str()));
  out[0] = scores;
  return Status::ok();
}

Status layerNormGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, X, scale -> dX[, dScale, dBias] (the last two shaped as the scale).
  PIPEC_TRY(expectFloat(ctx, 0));
  PIPEC_TRY(expectSameType(ctx, 0, 1));
  PIPEC_TRY(expectSameDType(ctx, {0, 2}));
  const TensorDesc &x = ctx.inputType(1);
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", -1), x.rank()));
  Shape norm(x.shape.begin() + axis, x.shape.end());
  if (numElements(ctx.inputType(2).shape) != numElements(norm))
    return ctx.error(cat("scale ", ctx.inputType(2).str(), " does not match the normalized shape ",
                         shapeStr(norm)));
  if (ctx.numOutputs() == 2)
    return ctx.error("expects dX, or dX, dScale and dBias");
  out[0] = x;
  for (size_t i = 1; i < ctx.numOutputs(); ++i)
    out[i] = ctx.inputType(2);
  return Status::ok();
}

Status layerNormScaleGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, X -> dScale shaped as the scale (attribute `shape`, default the
  // normalized dimensions X[axis:]).
  PIPEC_TRY(expectFloat(ctx, 0));
  PIPEC_TRY(expectSameType(ctx, 0, 1));
  const TensorDesc &x = ctx.inputType(1);
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", -1), x.rank()));
  Shape norm(x.shape.begin() + axis, x.shape.end());
  Shape s = attrInts(ctx.attrs(), "shape", norm);
  if (numElements(s) != numElements(norm))
    return ctx.error(cat("shape ", shapeStr(s), " does not hold the normalized shape ",
                         shapeStr(norm)));
  out[0] = {x.dtype, s};
  return Status::ok();
}

Status gatherGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, indices -> dData of attribute `shape`, scattered along `axis`.
  PIPEC_TRY(expectFloat(ctx, 0));
  PIPEC_TRY(expectIndexDType(ctx, 1));
  const Attribute *shape = attrFind(ctx.attrs(), "shape");
  if (!shape || shape->kind != Attribute::Kind::Ints)
    return ctx.error("attribute 'shape' (the data shape) is required");
  Shape data = shape->ints;
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", 0),
                                     static_cast<int64_t>(data.size())));
  Shape y(data.begin(), data.begin() + axis);
  const Shape &idx = ctx.inputType(1).shape;
  y.insert(y.end(), idx.begin(), idx.end());
  y.insert(y.end(), data.begin() + axis + 1, data.end());
  if (ctx.inputType(0).shape != y)
    return ctx.error(cat("the output gradient is ", ctx.inputType(0).str(), ", expected shape ",
                         shapeStr(y)));
  out[0] = {ctx.inputType(0).dtype, data};
  return Status::ok();
}

Status shapeAttrGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, [a forward operand] -> a tensor of attribute `shape` (the forward
  // input it differentiates) in dY's dtype: ConvGradInput, ConvGradWeight,
  // AveragePoolGrad. The convolutions' gradients under output_dtype read
  // 16-bit dY and operand and give f32.
  if (!ctx.attrs().count(kProductOutputDType))
    PIPEC_TRY(expectFloat(ctx, 0));
  DType t = ctx.inputType(0).dtype;
  if (ctx.hasInput(1)) {
    PIPEC_ASSIGN(t, expectProductDType(ctx, {}));
  } else if (ctx.attrs().count(kProductOutputDType)) {
    return ctx.error("output_dtype needs two operands");
  }
  const Attribute *shape = attrFind(ctx.attrs(), "shape");
  if (!shape || shape->kind != Attribute::Kind::Ints)
    return ctx.error("attribute 'shape' (the result's shape) is required");
  if (shape->ints.size() != ctx.inputType(0).shape.size())
    return ctx.error(cat("shape ", shapeStr(shape->ints), " and the output gradient ",
                         ctx.inputType(0).str(), " differ in rank"));
  out[0] = {t, shape->ints};
  return Status::ok();
}

Status maxPoolGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, X -> dX shaped as X.
  PIPEC_TRY(expectFloat(ctx, 0));
  PIPEC_TRY(expectSameDType(ctx, {0, 1}));
  if (ctx.inputType(0).rank() != ctx.inputType(1).rank())
    return ctx.error(cat("the output gradient ", ctx.inputType(0).str(), " and X ",
                         ctx.inputType(1).str(), " differ in rank"));
  out[0] = ctx.inputType(1);
  return Status::ok();
}

namespace {

/// Fails unless inputs `idx` are [C] tensors of X's dtype (X is input xIdx,
/// of rank >= 2); returns C's desc through `perChannel`.
Status expectPerChannel(const ShapeContext &ctx, size_t xIdx, std::initializer_list<size_t> idx,
                        TensorDesc &perChannel) {
  const TensorDesc &x = ctx.inputType(xIdx);
  if (!isFloat(x.dtype) || x.rank() < 2)
    return ctx.error(cat("X must be a float tensor of rank >= 2, it is ", x.str()));
  perChannel = {x.dtype, {x.shape[1]}};
  for (size_t i : idx)
    if (ctx.inputType(i) != perChannel)
      return ctx.error(cat(inputLabel(ctx, i), " is ", ctx.inputType(i).str(), ", expected ",
                           perChannel.str(), " for X ", x.str()));
  return Status::ok();
}

} // namespace

Status batchNormStatsRule(const ShapeContext &ctx, Outputs &out) {
  // X, mean, var -> mean, 1/sqrt(var + epsilon), [C] each.
  TensorDesc c;
  PIPEC_TRY(expectPerChannel(ctx, 0, {1, 2}, c));
  out[0] = c;
  out[1] = c;
  return Status::ok();
}

Status batchNormGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, X, scale, mean, rstd -> dX [, sums: [2, C], sum(dY) and
  // sum(dY * xhat) per channel, for BatchNormalizationScaleGrad].
  TensorDesc c;
  PIPEC_TRY(expectPerChannel(ctx, 1, {2, 3, 4}, c));
  PIPEC_TRY(expectSameType(ctx, 0, 1));
  out[0] = ctx.inputType(1);
  if (out.size() > 1)
    out[1] = {c.dtype, {2, c.shape[0]}};
  return Status::ok();
}

Status batchNormScaleGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY, X, mean, rstd -> dScale, dBias, [C] each; or the same from
  // BatchNormalizationGrad's sums [2, C] alone.
  TensorDesc c;
  if (ctx.numInputs() == 1) {
    const TensorDesc &sums = ctx.inputType(0);
    if (!isFloat(sums.dtype) || sums.rank() != 2 || sums.shape[0] != 2)
      return ctx.error(cat("the sums must be a float [2, C] tensor, got ", sums.str()));
    c = {sums.dtype, {sums.shape[1]}};
  } else {
    if (ctx.numInputs() != 4)
      return ctx.error(cat("takes dY, X, mean and rstd, or the sums alone; got ", ctx.numInputs(),
                           " inputs"));
    PIPEC_TRY(expectPerChannel(ctx, 1, {2, 3}, c));
    PIPEC_TRY(expectSameType(ctx, 0, 1));
  }
  out[0] = c;
  out[1] = c;
  return Status::ok();
}

} // namespace pipec::ir::shape
