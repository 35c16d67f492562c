//===- passes/autodiff/Elementwise.cpp - Elementwise gradient rules -------===//
//
// Binary ops (Add Sub Mul Div Pow) with numpy broadcasting, whose gradients
// are summed back to each input's shape; unary ops written as ONNX
// expressions of the forward input or output (Exp, Log, Sqrt, Tanh,
// Sigmoid, Erf, Neg, Identity); ops with a pipec gradient kernel (Relu,
// Gelu); and Where, which routes the gradient by its condition.
// Rules read the forward output where that saves keeping the input alive
// (Exp, Sqrt, Tanh, Sigmoid, Relu).
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include <cmath>

namespace pipec::passes::autodiff {

namespace {

/// Sets the gradient of input i to `g` summed to the input's shape.
Status setReduced(GradContext &c, size_t i, ir::Value *g) {
  PIPEC_ASSIGN(ir::Value * r, c.sumToShape(g, c.input(i)->shape()));
  c.setGrad(i, r);
  return Status::ok();
}

} // namespace

Status addGrad(GradContext &c) {
  for (size_t i = 0; i < 2; ++i)
    if (c.needsGrad(i))
      PIPEC_TRY(setReduced(c, i, c.outGrad(0)));
  return Status::ok();
}

Status subGrad(GradContext &c) {
  if (c.needsGrad(0))
    PIPEC_TRY(setReduced(c, 0, c.outGrad(0)));
  if (c.needsGrad(1)) {
    // Reduce first: the negation then touches the smaller tensor.
    PIPEC_ASSIGN(ir::Value * r, c.sumToShape(c.outGrad(0), c.input(1)->shape()));
    PIPEC_ASSIGN(ir::Value * n, c.neg(r));
    c.setGrad(1, n);
  }
  return Status::ok();
}

Status mulGrad(GradContext &c) {
  ir::Value *dy = c.outGrad(0);
  for (size_t i = 0; i < 2; ++i) {
    if (!c.needsGrad(i))
      continue;
    PIPEC_ASSIGN(ir::Value * g, c.mul(dy, c.input(1 - i)));
    PIPEC_TRY(setReduced(c, i, g));
  }
  return Status::ok();
}

Status divGrad(GradContext &c) {
  // y = a / b: da = dy / b, db = -dy * y / b.
  ir::Value *dy = c.outGrad(0), *b = c.input(1);
  ir::Value *da = nullptr;
  if (c.needsGrad(0) || c.needsGrad(1)) {
    PIPEC_ASSIGN(da, c.div(dy, b));
  }
  if (c.needsGrad(0))
    PIPEC_TRY(setReduced(c, 0, da));
  if (c.needsGrad(1)) {
    PIPEC_ASSIGN(ir::Value * t, c.mul(da, c.output(0)));
    PIPEC_ASSIGN(ir::Value * r, c.sumToShape(t, b->shape()));
    PIPEC_ASSIGN(ir::Value * n, c.neg(r));
    c.setGrad(1, n);
  }
  return Status::ok();
}

Status negGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.neg(c.outGrad(0)));
  c.setGrad(0, g);
  return Status::ok();
}

Status powGrad(GradContext &c) {
  // y = x^e: dx = dy * e * x^(e-1); de = dy * y * log(x), which is 0 where
  // x = 0 and e >= 0 (y is 0 or 1 there; PyTorch's convention) and NaN
  // where x < 0, as log(x) is.
  ir::Value *x = c.input(0), *e = c.input(1);
  if (c.needsGrad(1)) {
    if (e->dtype() != x->dtype())
      return c.error(cat("the gradient with respect to the exponent needs it in the base's type (",
                         dtypeName(x->dtype()), "), it is ", dtypeName(e->dtype())));
    PIPEC_ASSIGN(ir::Value * logx, c.emit("Log", {x}));
    PIPEC_ASSIGN(ir::Value * ylog, c.mul(c.output(0), logx));
    ir::Value *zero = c.scalar(0.0, x->dtype());
    PIPEC_ASSIGN(ir::Value * x0, c.emit("Equal", {x, zero}));
    PIPEC_ASSIGN(ir::Value * eNeg, c.emit("Less", {e, zero}));
    PIPEC_ASSIGN(ir::Value * eNonNeg, c.emit("Not", {eNeg}));
    PIPEC_ASSIGN(ir::Value * flat, c.emit("And", {x0, eNonNeg}));
    PIPEC_ASSIGN(ir::Value * safe, c.emit("Where", {flat, zero, ylog}));
    PIPEC_ASSIGN(ir::Value * ge, c.mul(c.outGrad(0), safe));
    PIPEC_TRY(setReduced(c, 1, ge));
  }
  if (!c.needsGrad(0))
    return Status::ok();
  if (e->dtype() != x->dtype()) {
    // DType values are ONNX's TensorProto codes.
    PIPEC_ASSIGN(e, c.emit("Cast", {e}, {{"to", Attribute::ofInt(static_cast<int64_t>(x->dtype()))}}));
  }
  ir::Value *p = nullptr;
  if (e->isConstant() && e->constant().numel() == 1 && e->constant().getDouble(0) == 2.0) {
    p = x; // x^1
    PIPEC_ASSIGN(p, c.scale(p, 2.0));
  } else {
    PIPEC_ASSIGN(ir::Value * em1, c.sub(e, c.scalar(1.0, x->dtype())));
    PIPEC_ASSIGN(ir::Value * xp, c.emit("Pow", {x, em1}));
    PIPEC_ASSIGN(p, c.mul(xp, e));
  }
  PIPEC_ASSIGN(ir::Value * g, c.mul(c.outGrad(0), p));
  return setReduced(c, 0, g);
}

Status sqrtGrad(GradContext &c) {
  // dx = dy * 0.5 / y.
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * h, c.scale(c.outGrad(0), 0.5));
  PIPEC_ASSIGN(ir::Value * g, c.div(h, c.output(0)));
  c.setGrad(0, g);
  return Status::ok();
}

Status expGrad(GradContext &c) {
  return unaryTimes(c, [&]() -> Expected<ir::Value *> { return c.output(0); });
}

Status logGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.div(c.outGrad(0), c.input(0)));
  c.setGrad(0, g);
  return Status::ok();
}

Status tanhGrad(GradContext &c) {
  // dx = dy * (1 - y^2).
  return unaryTimes(c, [&]() -> Expected<ir::Value *> {
    ir::Value *y = c.output(0);
    PIPEC_ASSIGN(ir::Value * y2, c.mul(y, y));
    return c.sub(c.scalar(1.0, y->dtype()), y2);
  });
}

Status sigmoidGrad(GradContext &c) {
  // dx = dy * y * (1 - y).
  return unaryTimes(c, [&]() -> Expected<ir::Value *> {
    ir::Value *y = c.output(0);
    PIPEC_ASSIGN(ir::Value * om, c.sub(c.scalar(1.0, y->dtype()), y));
    return c.mul(y, om);
  });
}

Status reluGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("ReluGrad", {c.outGrad(0), c.output(0)}));
  c.setGrad(0, g);
  return Status::ok();
}

Status identityGrad(GradContext &c) {
  if (c.needsGrad(0))
    c.setGrad(0, c.outGrad(0));
  return Status::ok();
}

Status dropoutGrad(GradContext &c) {
  // The forward mask is a pure function of (seed, step, micro-batch, node
  // id, element). A Dropout of dY with the forward node's inputs, to which
  // codegen gives the forward node's random stream (see
  // codegen/PlanEmitter.cpp), drops exactly the same elements and scales the
  // kept ones by the same 1 / (1 - ratio): that is dX. In inference mode
  // both are the identity.
  if (!c.needsGrad(0))
    return Status::ok();
  std::vector<ir::Value *> inputs = {c.outGrad(0)};
  for (size_t i = 1; i < c.node().numInputs(); ++i)
    inputs.push_back(c.input(i));
  PIPEC_ASSIGN(ir::Value * g, c.emit("Dropout", inputs, c.attrs()));
  c.setGrad(0, g);
  return Status::ok();
}

Status erfGrad(GradContext &c) {
  // dx = dy * 2/sqrt(pi) * exp(-x^2).
  return unaryTimes(c, [&]() -> Expected<ir::Value *> {
    ir::Value *x = c.input(0);
    PIPEC_ASSIGN(ir::Value * x2, c.mul(x, x));
    PIPEC_ASSIGN(ir::Value * n, c.scale(x2, -1.0));
    PIPEC_ASSIGN(ir::Value * e, c.emit("Exp", {n}));
    return c.scale(e, 2.0 / std::sqrt(M_PI));
  });
}

Status geluGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  AttrMap a;
  a["approximate"] = Attribute::ofString(attrString(c.attrs(), "approximate", "none"));
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("GeluGrad", {c.outGrad(0), c.input(0)}, a));
  c.setGrad(0, g);
  return Status::ok();
}

Status whereGrad(GradContext &c) {
  // y = cond ? a : b: da = cond ? dy : 0, db = cond ? 0 : dy.
  ir::Value *dy = c.outGrad(0), *cond = c.input(0);
  for (size_t i = 1; i < 3; ++i) {
    if (!c.needsGrad(i))
      continue;
    ir::Value *zero = c.scalar(0.0, dy->dtype());
    PIPEC_ASSIGN(ir::Value * g, i == 1 ? c.emit("Where", {cond, dy, zero})
                                       : c.emit("Where", {cond, zero, dy}));
    PIPEC_TRY(setReduced(c, i, g));
  }
  return Status::ok();
}

} // namespace pipec::passes::autodiff
