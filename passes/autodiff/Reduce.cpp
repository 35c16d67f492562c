//===- passes/autodiff/Reduce.cpp - Gradients of the Reduce* ops ----------===//
//
// Axes come from the attribute or, from ReduceSum's opset 13 and the
// others' 18, from a constant input; no axes reduce everything unless
// noop_with_empty_axes is set, in which case no axis is reduced (the op is
// elementwise: identity, |x| or x^2 as the kernels compute it, and the
// formulas below reduce to its derivative).
//
// dY and Y are reshaped to the keepdims shape ("kept") and broadcast
// against X by the elementwise ops:
//   ReduceSum: Expand(dY).            ReduceMean: Expand(dY) / n.
//   ReduceSumSquare: 2 X dY.          ReduceL1: Sign(X) dY.
//   ReduceL2: X / Y dY (0 where Y = 0).
//   ReduceLogSumExp: Exp(X - Y) dY.
//   ReduceMax, ReduceMin: dY split evenly among the elements equal to Y
//     (mask / count, as PyTorch's amax/amin), so ties share it.
//   ReduceProd: the product of the other elements, without dividing by a
//     zero: with z zeros in the slice and P the product of its non-zeros,
//     a non-zero element gets P / x if z = 0 (else 0) and a zero element
//     gets P if z = 1 (else 0).
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include <algorithm>

namespace pipec::passes::autodiff {

namespace {

/// The reduced axes, normalised and sorted (empty: none reduced).
Expected<std::vector<int64_t>> reducedAxes(GradContext &c) {
  const auto rank = static_cast<int64_t>(c.input(0)->shape().size());
  std::vector<int64_t> axes;
  if (ir::Value *ax = c.input(1)) {
    if (!ax->isConstant())
      return c.error("the axes input must be a constant to differentiate the reduction");
    axes = ax->constant().toInts();
  } else if (attrHas(c.attrs(), "axes")) {
    axes = attrInts(c.attrs(), "axes");
  }
  if (axes.empty()) {
    if (attrInt(c.attrs(), "noop_with_empty_axes", 0) != 0)
      return axes;
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
    return axes;
  }
  for (int64_t &a : axes) {
    if (a < -rank || a >= rank)
      return c.error(cat("axis ", a, " is out of range for rank ", rank));
    if (a < 0)
      a += rank;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

/// X's shape with the reduced axes set to 1.
Shape keptShape(const Shape &xs, const std::vector<int64_t> &axes) {
  Shape kept = xs;
  for (int64_t a : axes)
    kept[static_cast<size_t>(a)] = 1;
  return kept;
}

/// `op` over `axes` with keepdims (x itself when no axis is reduced).
Expected<ir::Value *> reduceKeep(GradContext &c, const std::string &op, ir::Value *x,
                                 const std::vector<int64_t> &axes) {
  if (axes.empty())
    return x;
  return c.reduce(op, x, axes, true);
}

/// The shared frame: axes, dY and Y at the kept shape; `local` computes
/// dX from them; the result is checked to have X's shape.
template <typename F> Status reduceRule(GradContext &c, F &&local) {
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *x = c.input(0);
  PIPEC_ASSIGN(std::vector<int64_t> axes, reducedAxes(c));
  const Shape kept = keptShape(x->shape(), axes);
  PIPEC_ASSIGN(ir::Value * dy, c.reshape(c.outGrad(0), kept));
  PIPEC_ASSIGN(ir::Value * y, c.reshape(c.output(0), kept));
  PIPEC_ASSIGN(ir::Value * g, local(axes, dy, y));
  PIPEC_ASSIGN(g, c.expandTo(g, x->shape()));
  c.setGrad(0, g);
  return Status::ok();
}

Status reduceSumMean(GradContext &c, bool mean) {
  return reduceRule(
      c,
      [&](const std::vector<int64_t> &axes, ir::Value *dy, ir::Value *) -> Expected<ir::Value *> {
        int64_t count = 1;
        for (int64_t a : axes)
          count *= c.input(0)->shape()[static_cast<size_t>(a)];
        if (mean && count != 1)
          return c.scale(dy, 1.0 / static_cast<double>(count));
        return dy;
      });
}

Status extremum(GradContext &c) {
  return reduceRule(
      c,
      [&](const std::vector<int64_t> &axes, ir::Value *dy, ir::Value *y) -> Expected<ir::Value *> {
        ir::Value *x = c.input(0);
        PIPEC_ASSIGN(ir::Value * eq, c.emit("Equal", {x, y}));
        PIPEC_ASSIGN(
            ir::Value * mask,
            c.emit("Cast", {eq}, {{"to", Attribute::ofInt(static_cast<int64_t>(x->dtype()))}}));
        PIPEC_ASSIGN(ir::Value * count, reduceKeep(c, "ReduceSum", mask, axes));
        PIPEC_ASSIGN(ir::Value * share, c.div(dy, count));
        return c.mul(mask, share);
      });
}

} // namespace

Status reduceSumGrad(GradContext &c) { return reduceSumMean(c, false); }
Status reduceMeanGrad(GradContext &c) { return reduceSumMean(c, true); }
Status reduceMaxGrad(GradContext &c) { return extremum(c); }
Status reduceMinGrad(GradContext &c) { return extremum(c); }

Status reduceSumSquareGrad(GradContext &c) {
  return reduceRule(
      c, [&](const std::vector<int64_t> &, ir::Value *dy, ir::Value *) -> Expected<ir::Value *> {
        PIPEC_ASSIGN(ir::Value * t, c.mul(c.input(0), dy));
        return c.scale(t, 2.0);
      });
}

Status reduceL1Grad(GradContext &c) {
  return reduceRule(
      c, [&](const std::vector<int64_t> &, ir::Value *dy, ir::Value *) -> Expected<ir::Value *> {
        PIPEC_ASSIGN(ir::Value * s, c.emit("Sign", {c.input(0)}));
        return c.mul(s, dy);
      });
}

Status reduceL2Grad(GradContext &c) {
  return reduceRule(
      c, [&](const std::vector<int64_t> &, ir::Value *dy, ir::Value *y) -> Expected<ir::Value *> {
        ir::Value *x = c.input(0);
        ir::Value *zero = c.scalar(0.0, x->dtype());
        PIPEC_ASSIGN(ir::Value * q, c.div(x, y));
        PIPEC_ASSIGN(ir::Value * isZero, c.emit("Equal", {y, zero}));
        PIPEC_ASSIGN(ir::Value * safe, c.emit("Where", {isZero, zero, q}));
        return c.mul(safe, dy);
      });
}

Status reduceLogSumExpGrad(GradContext &c) {
  return reduceRule(
      c, [&](const std::vector<int64_t> &, ir::Value *dy, ir::Value *y) -> Expected<ir::Value *> {
        PIPEC_ASSIGN(ir::Value * d, c.sub(c.input(0), y));
        PIPEC_ASSIGN(ir::Value * e, c.emit("Exp", {d}));
        return c.mul(e, dy);
      });
}

Status reduceProdGrad(GradContext &c) {
  return reduceRule(
      c,
      [&](const std::vector<int64_t> &axes, ir::Value *dy, ir::Value *) -> Expected<ir::Value *> {
        ir::Value *x = c.input(0);
        const DType t = x->dtype();
        ir::Value *zero = c.scalar(0.0, t), *one = c.scalar(1.0, t);
        PIPEC_ASSIGN(ir::Value * isZero, c.emit("Equal", {x, zero}));
        PIPEC_ASSIGN(ir::Value * zf,
                     c.emit("Cast", {isZero}, {{"to", Attribute::ofInt(static_cast<int64_t>(t))}}));
        PIPEC_ASSIGN(ir::Value * zeros, reduceKeep(c, "ReduceSum", zf, axes));
        PIPEC_ASSIGN(ir::Value * xs, c.emit("Where", {isZero, one, x}));
        PIPEC_ASSIGN(ir::Value * p, reduceKeep(c, "ReduceProd", xs, axes));
        PIPEC_ASSIGN(ir::Value * others, c.div(p, xs));
        PIPEC_ASSIGN(ir::Value * noZero, c.emit("Equal", {zeros, zero}));
        PIPEC_ASSIGN(ir::Value * oneZero, c.emit("Equal", {zeros, one}));
        PIPEC_ASSIGN(ir::Value * atZero, c.emit("Where", {oneZero, p, zero}));
        PIPEC_ASSIGN(ir::Value * atNonZero, c.emit("Where", {noZero, others, zero}));
        PIPEC_ASSIGN(ir::Value * f, c.emit("Where", {isZero, atZero, atNonZero}));
        return c.mul(f, dy);
      });
}

} // namespace pipec::passes::autodiff
