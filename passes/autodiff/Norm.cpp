//===- passes/autodiff/Norm.cpp - Softmax, LogSoftmax, LayerNormalization -===//
//
// Softmax and LogSoftmax differentiate from their output Y with
// pipec:SoftmaxGrad / pipec:LogSoftmaxGrad (axis normalised; coerce2d = 1
// reproduces the 2-D coercion of opsets before 13). LayerNormalization
// recomputes its row statistics from X: pipec:LayerNormalizationGrad gives
// dX (B), pipec:LayerNormalizationScaleGrad gives dScale (W), and dBias is
// dY summed over the leading axes. The optional Mean and InvStdDev outputs
// are not differentiated. InstanceNormalization is composed of ONNX ops:
// with statistics over the spatial axes recomputed from X (as the kernel,
// biased variance), x^ = (X - mean) / sqrt(var + eps),
//   dBias = sum of dY over N and space, dScale = sum of dY x^ likewise,
//   dX = (g - mean(g) - x^ mean(g x^)) / sqrt(var + eps), g = dY * scale.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"
#include "support/FusedOps.h"

#include <cmath>

namespace pipec::passes::autodiff {

namespace {

Status softmaxLike(GradContext &c, const char *gradOp) {
  if (!c.needsGrad(0))
    return Status::ok();
  const bool coerce = c.opset() < 13;
  int64_t axis = attrInt(c.attrs(), "axis", coerce ? 1 : -1);
  const auto rank = static_cast<int64_t>(c.output(0)->shape().size());
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return c.error(cat("axis ", axis, " is out of range for rank ", rank));
  AttrMap a = {{"axis", Attribute::ofInt(axis)}};
  if (coerce)
    a["coerce2d"] = Attribute::ofInt(1);
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec(gradOp, {c.outGrad(0), c.output(0)}, a));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace

Status softmaxGrad(GradContext &c) { return softmaxLike(c, "SoftmaxGrad"); }

// pipec:MaskedSoftmax(x, cond) {scale, fill}: y = Softmax(v) over the last
// axis with v = fill where masked, x * scale elsewhere, so dx = scale *
// SoftmaxGrad(dy, y) where unmasked and 0 where masked. The fusion keeps
// only fills of -1e30 or below, whose y is exactly 0, and SoftmaxGrad's
// y * (dy - sum(dy y)) is then exactly 0 there too.
Status maskedSoftmaxGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  if (!(attrFloat(c.attrs(), "fill", -INFINITY) <= -1e30f))
    return c.error("the fill must be -1e30 or below (its softmax exactly 0)");
  const auto rank = static_cast<int64_t>(c.output(0)->shape().size());
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("SoftmaxGrad", {c.outGrad(0), c.output(0)},
                                          {{"axis", Attribute::ofInt(rank - 1)}}));
  PIPEC_ASSIGN(g, c.scale(g, attrFloat(c.attrs(), "scale", 1.0f)));
  c.setGrad(0, g);
  return Status::ok();
}
// pipec:Attention(Q, KT, V[, mask]) (fuse-attention): one
// pipec:AttentionGrad(Q, KT, V[, mask], dO) recomputes the probabilities
// from the inputs (the forward keeps no scores) and gives dQ, dKT and dV,
// or with packed_qkv the one dQKV (runtime/cpu/kernels/Attention.cpp;
// pack-qkv packs after autodiff, but a pipeline given with --passes may
// pack before). A bool mask's fill must make its
// probabilities exactly 0, as for MaskedSoftmax.
Status attentionGrad(GradContext &c) {
  auto kind = attentionMaskOf(c.attrs());
  if (!kind)
    return c.error(kind.status().message());
  const bool masked = *kind != AttentionMask::None;
  if (masked && c.needsGrad(3))
    return c.error("the attention mask cannot be differentiated");
  if (!c.needsGrad(0) && !c.needsGrad(1) && !c.needsGrad(2))
    return Status::ok();
  if (*kind == AttentionMask::Bool && !(attrFloat(c.attrs(), "fill", -INFINITY) <= -1e30f))
    return c.error("the fill must be -1e30 or below (its probability exactly 0)");
  std::vector<ir::Value *> in{c.input(0), c.input(1), c.input(2)};
  if (masked)
    in.push_back(c.input(3));
  in.push_back(c.outGrad(0));
  if (attrInt(c.attrs(), "packed_qkv", 0) != 0) {
    // Q, K and V are one tensor read three times (pack-qkv): its gradient
    // is the one output dQKV, given to it once.
    PIPEC_ASSIGN(ir::Value * g, c.emitPipec("AttentionGrad", in, c.attrs()));
    c.setGrad(0, g);
    return Status::ok();
  }
  PIPEC_ASSIGN(std::vector<ir::Value *> g, c.emitN("AttentionGrad", in, 3, c.attrs(), "pipec"));
  for (size_t i = 0; i < 3; ++i)
    if (c.needsGrad(i))
      c.setGrad(i, g[i]);
  return Status::ok();
}
Status logSoftmaxGrad(GradContext &c) { return softmaxLike(c, "LogSoftmaxGrad"); }

Status layerNormGrad(GradContext &c) {
  if (c.outGrad(1) || c.outGrad(2))
    return c.error("the Mean and InvStdDev outputs cannot be differentiated");
  ir::Value *dy = c.outGrad(0), *x = c.input(0);
  const auto rank = static_cast<int64_t>(x->shape().size());
  int64_t axis = attrInt(c.attrs(), "axis", -1);
  if (axis < 0)
    axis += rank;
  AttrMap a = {{"axis", Attribute::ofInt(axis)},
               {"epsilon", Attribute::ofFloat(attrFloat(c.attrs(), "epsilon", 1e-5f))}};
  // X, scale and bias (of the scale's shape) all trained: one node gives
  // the three in one pass over dY and X (runtime/cpu/kernels/GradLayerNorm.cpp).
  if (c.needsGrad(0) && c.needsGrad(1) && c.needsGrad(2) && c.input(2) &&
      c.input(2)->type() == c.input(1)->type()) {
    PIPEC_ASSIGN(std::vector<ir::Value *> g,
                 c.emitN("LayerNormalizationGrad", {dy, x, c.input(1)}, 3, a, "pipec"));
    for (size_t i = 0; i < 3; ++i)
      c.setGrad(i, g[i]);
    return Status::ok();
  }
  if (c.needsGrad(0)) {
    PIPEC_ASSIGN(ir::Value * g, c.emitPipec("LayerNormalizationGrad", {dy, x, c.input(1)}, a));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) {
    AttrMap sa = a;
    sa["shape"] = Attribute::ofInts(c.input(1)->shape());
    PIPEC_ASSIGN(ir::Value * g, c.emitPipec("LayerNormalizationScaleGrad", {dy, x}, sa));
    c.setGrad(1, g);
  }
  if (c.needsGrad(2)) {
    std::vector<int64_t> lead;
    for (int64_t i = 0; i < axis; ++i)
      lead.push_back(i);
    ir::Value *g = dy;
    if (!lead.empty()) {
      PIPEC_ASSIGN(g, c.reduceSum(dy, lead, false));
    }
    PIPEC_ASSIGN(g, c.reshape(g, c.input(2)->shape()));
    c.setGrad(2, g);
  }
  return Status::ok();
}

Status instanceNormGrad(GradContext &c) {
  ir::Value *dy = c.outGrad(0), *x = c.input(0);
  const Shape &xs = x->shape();
  if (xs.size() < 3)
    return c.error(cat("X must have a spatial axis, it is ", x->type().str()));
  const DType t = x->dtype();
  std::vector<int64_t> space, batchSpace = {0};
  for (int64_t i = 2; i < static_cast<int64_t>(xs.size()); ++i) {
    space.push_back(i);
    batchSpace.push_back(i);
  }
  const Shape perChannel = c.input(1)->shape();
  if (c.needsGrad(2)) {
    PIPEC_ASSIGN(ir::Value * g, c.reduceSum(dy, batchSpace, false));
    PIPEC_ASSIGN(g, c.reshape(g, c.input(2)->shape()));
    c.setGrad(2, g);
  }
  if (!c.needsGrad(0) && !c.needsGrad(1))
    return Status::ok();
  const double eps = static_cast<double>(attrFloat(c.attrs(), "epsilon", 1e-5f));
  PIPEC_ASSIGN(ir::Value * mean, c.reduce("ReduceMean", x, space, true));
  PIPEC_ASSIGN(ir::Value * xc, c.sub(x, mean));
  PIPEC_ASSIGN(ir::Value * sq, c.mul(xc, xc));
  PIPEC_ASSIGN(ir::Value * var, c.reduce("ReduceMean", sq, space, true));
  PIPEC_ASSIGN(ir::Value * ve, c.add(var, c.scalar(eps, t)));
  PIPEC_ASSIGN(ir::Value * sd, c.emit("Sqrt", {ve}));
  PIPEC_ASSIGN(ir::Value * xhat, c.div(xc, sd));
  if (c.needsGrad(1)) {
    PIPEC_ASSIGN(ir::Value * p, c.mul(dy, xhat));
    PIPEC_ASSIGN(ir::Value * g, c.reduceSum(p, batchSpace, false));
    PIPEC_ASSIGN(g, c.reshape(g, perChannel));
    c.setGrad(1, g);
  }
  if (c.needsGrad(0)) {
    Shape sb(xs.size() - 1, 1); // scale as [C, 1, ...], broadcast over N
    sb[0] = xs[1];
    PIPEC_ASSIGN(ir::Value * scale, c.reshape(c.input(1), sb));
    PIPEC_ASSIGN(ir::Value * g, c.mul(dy, scale));
    PIPEC_ASSIGN(ir::Value * m1, c.reduce("ReduceMean", g, space, true));
    PIPEC_ASSIGN(ir::Value * gx, c.mul(g, xhat));
    PIPEC_ASSIGN(ir::Value * m2, c.reduce("ReduceMean", gx, space, true));
    PIPEC_ASSIGN(ir::Value * t1, c.sub(g, m1));
    PIPEC_ASSIGN(ir::Value * t2, c.mul(xhat, m2));
    PIPEC_ASSIGN(ir::Value * num, c.sub(t1, t2));
    PIPEC_ASSIGN(ir::Value * dx, c.div(num, sd));
    c.setGrad(0, dx);
  }
  return Status::ok();
}

} // namespace pipec::passes::autodiff
