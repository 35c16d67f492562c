//===- passes/autodiff/Variadic.cpp - Max, Min, Sum, Mean gradients -------===//
//
// The variadic elementwise ops, with numpy broadcasting: each input's
// gradient is computed at the output's shape and summed back to the input's
// shape.
//   Sum: dX_i = dY.   Mean: dX_i = dY / n.
//   Max, Min: dY goes to the input that holds the extremum, recognised by
//     X_i == Y (the kernels select, so Y is bitwise one of the inputs). On a
//     tie the first such input (lowest position) takes all of dY and the
//     others get none, so the gradients still sum to dY.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

namespace {

Status sumLike(GradContext &c, bool mean) {
  const size_t n = c.node().numInputs();
  ir::Value *g = c.outGrad(0);
  if (mean) {
    PIPEC_ASSIGN(g, c.scale(g, 1.0 / static_cast<double>(n)));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!c.needsGrad(i))
      continue;
    PIPEC_ASSIGN(ir::Value * r, c.sumToShape(g, c.input(i)->shape()));
    c.setGrad(i, r);
  }
  return Status::ok();
}

Status extremumGrad(GradContext &c) {
  const size_t n = c.node().numInputs();
  ir::Value *dy = c.outGrad(0), *y = c.output(0);
  if (n == 1) {
    if (c.needsGrad(0))
      c.setGrad(0, dy);
    return Status::ok();
  }
  size_t last = 0;
  for (size_t i = 0; i < n; ++i)
    if (c.needsGrad(i))
      last = i;
  ir::Value *zero = c.scalar(0.0, dy->dtype());
  ir::Value *taken = nullptr; // some earlier input holds the extremum
  for (size_t i = 0; i <= last; ++i) {
    PIPEC_ASSIGN(ir::Value * eq, c.emit("Equal", {c.input(i), y}));
    if (c.needsGrad(i)) {
      ir::Value *mine = eq;
      if (taken) {
        PIPEC_ASSIGN(ir::Value * free, c.emit("Not", {taken}));
        PIPEC_ASSIGN(mine, c.emit("And", {eq, free}));
      }
      PIPEC_ASSIGN(ir::Value * g, c.emit("Where", {mine, dy, zero}));
      PIPEC_ASSIGN(g, c.sumToShape(g, c.input(i)->shape()));
      c.setGrad(i, g);
    }
    if (i < last) {
      if (taken) {
        PIPEC_ASSIGN(taken, c.emit("Or", {taken, eq}));
      } else {
        taken = eq;
      }
    }
  }
  return Status::ok();
}

} // namespace

Status sumGrad(GradContext &c) { return sumLike(c, false); }
Status meanGrad(GradContext &c) { return sumLike(c, true); }
Status maxGrad(GradContext &c) { return extremumGrad(c); }
Status minGrad(GradContext &c) { return extremumGrad(c); }

} // namespace pipec::passes::autodiff
