//===- passes/autodiff/Reduce.cpp - ReduceSum and ReduceMean gradients ----===//
//
// The gradient of a sum broadcasts dY back over the reduced axes: reshape
// dY to the keepdims shape, then Expand to X's shape (scaled by 1/n for the
// mean). Axes come from the attribute or, from ReduceSum's opset 13 and the
// others' 18, from a constant input; no axes reduce everything unless
// noop_with_empty_axes is set.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

namespace {

Status reduceGrad(GradContext &c, bool mean) {
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *x = c.input(0), *dy = c.outGrad(0);
  const Shape &xs = x->shape();
  const auto rank = static_cast<int64_t>(xs.size());
  std::vector<int64_t> axes;
  bool hasAxes = false;
  if (ir::Value *ax = c.input(1)) {
    if (!ax->isConstant())
      return c.error("the axes input must be a constant to differentiate the reduction");
    axes = ax->constant().toInts();
    hasAxes = true;
  } else if (attrHas(c.attrs(), "axes")) {
    axes = attrInts(c.attrs(), "axes");
    hasAxes = true;
  }
  if (hasAxes && axes.empty() && attrInt(c.attrs(), "noop_with_empty_axes", 0) != 0) {
    PIPEC_ASSIGN(ir::Value * g, c.reshape(dy, xs)); // identity
    c.setGrad(0, g);
    return Status::ok();
  }
  Shape kept = xs;
  int64_t count = 1;
  if (axes.empty()) {
    kept.assign(xs.size(), 1);
    count = numElements(xs);
  } else {
    for (int64_t a : axes) {
      const int64_t n = a < 0 ? a + rank : a;
      kept[n] = 1;
    }
    for (size_t i = 0; i < xs.size(); ++i)
      if (kept[i] != xs[i])
        count *= xs[i];
  }
  PIPEC_ASSIGN(ir::Value * g, c.reshape(dy, kept));
  if (mean && count != 1) {
    PIPEC_ASSIGN(g, c.scale(g, 1.0 / static_cast<double>(count)));
  }
  PIPEC_ASSIGN(g, c.expandTo(g, xs));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace

Status reduceSumGrad(GradContext &c) { return reduceGrad(c, false); }
Status reduceMeanGrad(GradContext &c) { return reduceGrad(c, true); }

} // namespace pipec::passes::autodiff
