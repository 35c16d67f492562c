//===- ir/shape/Loss.cpp - NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
//
// Both take scores [N, C, d1..dk] and integer targets [N, d1..dk], with an
// optional per-class weight [C]. reduction "none" gives a loss per target
// element; "sum" and "mean" (the default) give a scalar.
// SoftmaxCrossEntropyLoss may also return log_prob, shaped as the scores.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

namespace pipec::ir::shape {

namespace {

Status lossRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 2));
  PIPEC_TRY(expectIndexDType(ctx, 1));
  const TensorDesc &scores = ctx.inputType(0), &target = ctx.inputType(1);
  Shape expected = scores.shape;
  expected.erase(expected.begin() + 1);
  if (target.shape != expected)
    return ctx.error(cat("target ", target.str(), " must have shape ", shapeStr(expected),
                         " for scores ", scores.str(), " ([N, C, d...] -> [N, d...])"));
  if (ctx.hasInput(2)) {
    PIPEC_TRY(expectSameDType(ctx, {0, 2}));
    if (ctx.inputType(2).shape != Shape{scores.shape[1]})
      return ctx.error(
          cat("weight must have shape [", scores.shape[1], "], got ", ctx.inputType(2).str()));
  }
  std::string reduction = attrString(ctx.attrs(), "reduction", "mean");
  if (reduction == "none")
    out[0] = {scores.dtype, target.shape};
  else if (reduction == "sum" || reduction == "mean")
    out[0] = {scores.dtype, {}};
  else
    return ctx.error(cat("reduction '", reduction, "' is not none, sum or mean"));
  return Status::ok();
}

} // namespace

Status nllLossRule(const ShapeContext &ctx, Outputs &out) { return lossRule(ctx, out); }

Status softmaxCrossEntropyRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(lossRule(ctx, out));
  if (out.size() > 1)
    out[1] = ctx.inputType(0);
  return Status::ok();
}

} // namespace pipec::ir::shape
