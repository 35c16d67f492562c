//===- ir/shape/Reduce.cpp - Reductions and ArgMax/ArgMin -----------------===//
//
// Reduce* ops take `axes` as an attribute until ReduceSum's opset 13 and the
// others' opset 18, then as an optional input (which must then be a
// compile-time constant) with noop_with_empty_axes. No axes reduce all
// dimensions, unless noop_with_empty_axes=1 makes the op an identity.
// ArgMax/ArgMin reduce one axis and give int64.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

#include <algorithm>

namespace pipec::ir::shape {

namespace {

Shape reducedShape(const Shape &in, const std::vector<int64_t> &axes, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    bool reduced =
        axes.empty() || std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!reduced)
      out.push_back(in[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

} // namespace

Status argReduceRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", 0), x.rank()));
  if (x.shape[axis] == 0)
    return ctx.error(cat("cannot take the arg ", ctx.node().opType() == "ArgMax" ? "max" : "min",
                         " of an empty axis ", axis, " of ", x.str()));
  bool keepdims = attrInt(ctx.attrs(), "keepdims", 1) != 0;
  out[0] = {DType::I64, reducedShape(x.shape, {axis}, keepdims)};
  return Status::ok();
}

Status reduceRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  bool axesInput = ctx.opset() >= (ctx.node().opType() == "ReduceSum" ? 13 : 18);
  bool keepdims = attrInt(ctx.attrs(), "keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (axesInput) {
    if (attrHas(ctx.attrs(), "axes"))
      return ctx.error("axes is an input, not an attribute, from this opset");
    if (ctx.hasInput(1)) {
      PIPEC_ASSIGN(axes, constInts(ctx, 1));
    }
    if (axes.empty() && attrInt(ctx.attrs(), "noop_with_empty_axes", 0) != 0) {
      out[0] = x;
      return Status::ok();
    }
  } else {
    if (ctx.hasInput(1))
      return ctx.error(cat("axes is an attribute, not an input, before opset ",
                           ctx.node().opType() == "ReduceSum" ? 13 : 18));
    axes = attrInts(ctx.attrs(), "axes");
  }
  PIPEC_ASSIGN(std::vector<int64_t> norm, axesFor(ctx, axes, x.rank()));
  out[0] = {x.dtype, reducedShape(x.shape, norm, keepdims)};
  return Status::ok();
}

} // namespace pipec::ir::shape
