//===- ir/shape/Norm.cpp - Normalization and softmax-like ops -------------===//
//
// BatchNormalization's outputs changed with the opsets: up to five outputs
// (Y, mean, var, saved_mean, saved_var) before 14, the five-output form being
// training mode, then Y and the running mean and var in training mode; opset 15 lets scale/bias and mean/var have
// their own element types. LayerNormalization (17) returns Mean and
// InvStdDev with the normalized axes reduced to 1, typed by stash_type.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

namespace pipec::ir::shape {

Status batchNormRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 2));
  const TensorDesc &x = ctx.inputType(0);
  // With spatial=0 (opsets 7 and 8) the statistics are per activation.
  bool perActivation = ctx.opset() < 9 && attrInt(ctx.attrs(), "spatial", 1) == 0;
  Shape stat = perActivation ? Shape(x.shape.begin() + 1, x.shape.end()) : Shape{x.shape[1]};
  for (size_t i = 1; i < 5; ++i)
    if (ctx.inputType(i).shape != stat)
      return ctx.error(cat(inputLabel(ctx, i), " must have shape ", shapeStr(stat),
                           " (the channels of X ", x.str(), "), got ", ctx.inputType(i).str()));
  if (ctx.opset() >= 15) {
    PIPEC_TRY(expectSameDType(ctx, {1, 2}));
    PIPEC_TRY(expectSameDType(ctx, {3, 4}));
  } else {
    PIPEC_TRY(expectSameDType(ctx, {0, 1, 2, 3, 4}));
  }
  if (ctx.opset() >= 14 && out.size() > 3)
    return ctx.error(cat("has ", out.size(), " outputs; from opset 14 the op gives 1 to 3 (Y, ",
                         "running_mean, running_var)"));
  if (ctx.opset() >= 14 && out.size() > 1 && attrInt(ctx.attrs(), "training_mode", 0) == 0)
    return ctx.error(cat("has ", out.size(),
                         " outputs, but the running mean and variance outputs exist "
                         "only with training_mode=1"));
  out[0] = x;
  for (size_t i = 1; i < out.size(); ++i)
    out[i] = {ctx.inputType(3).dtype, stat};
  return Status::ok();
}

Status instanceNormRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 3));
  PIPEC_TRY(expectSameDType(ctx, {0, 1, 2}));
  const TensorDesc &x = ctx.inputType(0);
  for (size_t i = 1; i < 3; ++i)
    if (ctx.inputType(i).shape != Shape{x.shape[1]})
      return ctx.error(cat(inputLabel(ctx, i), " must have shape [", x.shape[1],
                           "] (the channels of X ", x.str(), "), got ", ctx.inputType(i).str()));
  out[0] = x;
  return Status::ok();
}

Status layerNormRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", -1), x.rank()));
  PIPEC_TRY(expectSameDType(ctx, {0, 1, 2}));
  for (size_t i = 1; i < 3; ++i)
    if (ctx.hasInput(i))
      PIPEC_TRY(expectUnidirectional(ctx, ctx.inputType(i).shape, x.shape, inputLabel(ctx, i)));
  int64_t stash = attrInt(ctx.attrs(), "stash_type", static_cast<int64_t>(DType::F32));
  if (!isKnownDType(static_cast<int32_t>(stash)) || stash == 0)
    return ctx.error(cat("attribute 'stash_type' is ", stash, ", not an element type"));
  Shape reduced = x.shape;
  for (size_t d = static_cast<size_t>(axis); d < reduced.size(); ++d)
    reduced[d] = 1;
  out[0] = x;
  for (size_t i = 1; i < out.size(); ++i)
    out[i] = {static_cast<DType>(stash), reduced};
  return Status::ok();
}

Status softmaxRule(const ShapeContext &ctx, Outputs &out) {
  // The default axis moved from 1 to -1 in opset 13 (which also changed the
  // meaning from "flatten at axis" to "along axis"); the shape is unchanged.
  // An explicit axis must be in range; the default is valid by definition.
  if (const Attribute *a = attrFind(ctx.attrs(), "axis"))
    PIPEC_TRY(axisFor(ctx, a->i, ctx.inputType(0).rank()).status());
  return sameAsInput(ctx, out);
}

Status lrnRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 3));
  if (attrInt(ctx.attrs(), "size", 0) <= 0)
    return ctx.error("attribute 'size' (a positive integer) is required");
  return sameAsInput(ctx, out);
}

} // namespace pipec::ir::shape
