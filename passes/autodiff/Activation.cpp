//===- passes/autodiff/Activation.cpp - Unary activation gradients --------===//
//
// Gradients of the unary activations and functions that Elementwise.cpp
// does not cover, all written as ONNX expressions (no gradient kernels):
//   Abs: dY * Sign(X)                 Reciprocal: -dY * Y * Y
//   Sin: dY * Cos(X)                  Cos: -dY * Sin(X)
//   Softplus: dY * Sigmoid(X)         Softsign: dY / (1 + |X|)^2
//   LeakyRelu: X < 0 ? alpha dY : dY  (the kernel's x >= 0 branch is x)
//   Elu: X < 0 ? dY (Y + alpha) : dY
//   Selu: X > 0 ? gamma dY : dY (Y + gamma alpha)
//   HardSigmoid: 0 < Y < 1 ? alpha dY : 0
//   Clip: min < X < max ? dY : 0 (strict, so an element at a bound gets
//     none), bounds from attributes before opset 11 and inputs from 11; the
//     bounds themselves are not differentiated.
//   Cast: float to float only; dX = Cast(dY) back to X's type.
// Attribute defaults are those of the kernels (runtime/cpu/kernels/Unary.cpp),
// read as float as the kernels read them.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

namespace {

/// An attribute read as the kernels read it: a float widened to double.
double attrF(const GradContext &c, const char *name, double dflt) {
  return static_cast<double>(attrFloat(c.attrs(), name, static_cast<float>(dflt)));
}

/// dX = cond ? a : b, typed as the input.
Status setWhere(GradContext &c, ir::Value *cond, ir::Value *a, ir::Value *b) {
  PIPEC_ASSIGN(ir::Value * g, c.emit("Where", {cond, a, b}));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace

Status absGrad(GradContext &c) {
  return unaryTimes(c, [&]() { return c.emit("Sign", {c.input(0)}); });
}

Status reciprocalGrad(GradContext &c) {
  // y = 1/x: dx = -dy * y^2.
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *y = c.output(0);
  PIPEC_ASSIGN(ir::Value * y2, c.mul(y, y));
  PIPEC_ASSIGN(ir::Value * t, c.mul(c.outGrad(0), y2));
  PIPEC_ASSIGN(ir::Value * g, c.neg(t));
  c.setGrad(0, g);
  return Status::ok();
}

Status sinGrad(GradContext &c) {
  return unaryTimes(c, [&]() { return c.emit("Cos", {c.input(0)}); });
}

Status cosGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * s, c.emit("Sin", {c.input(0)}));
  PIPEC_ASSIGN(ir::Value * t, c.mul(c.outGrad(0), s));
  PIPEC_ASSIGN(ir::Value * g, c.neg(t));
  c.setGrad(0, g);
  return Status::ok();
}

Status softplusGrad(GradContext &c) {
  return unaryTimes(c, [&]() { return c.emit("Sigmoid", {c.input(0)}); });
}

Status softsignGrad(GradContext &c) {
  // y = x / (1 + |x|): dx = dy / (1 + |x|)^2.
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *x = c.input(0);
  PIPEC_ASSIGN(ir::Value * a, c.emit("Abs", {x}));
  PIPEC_ASSIGN(ir::Value * d, c.add(a, c.scalar(1.0, x->dtype())));
  PIPEC_ASSIGN(ir::Value * d2, c.mul(d, d));
  PIPEC_ASSIGN(ir::Value * g, c.div(c.outGrad(0), d2));
  c.setGrad(0, g);
  return Status::ok();
}

Status leakyReluGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *x = c.input(0), *dy = c.outGrad(0);
  PIPEC_ASSIGN(ir::Value * neg, c.emit("Less", {x, c.scalar(0.0, x->dtype())}));
  PIPEC_ASSIGN(ir::Value * scaled, c.scale(dy, attrF(c, "alpha", 0.01)));
  return setWhere(c, neg, scaled, dy);
}

Status eluGrad(GradContext &c) {
  // x < 0: y = alpha (e^x - 1), dy/dx = alpha e^x = y + alpha.
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *x = c.input(0), *dy = c.outGrad(0);
  PIPEC_ASSIGN(ir::Value * neg, c.emit("Less", {x, c.scalar(0.0, x->dtype())}));
  PIPEC_ASSIGN(ir::Value * f, c.add(c.output(0), c.scalar(attrF(c, "alpha", 1.0), x->dtype())));
  PIPEC_ASSIGN(ir::Value * scaled, c.mul(dy, f));
  return setWhere(c, neg, scaled, dy);
}

Status seluGrad(GradContext &c) {
  // x > 0: y = gamma x; else y = gamma alpha (e^x - 1), dy/dx = y + gamma alpha.
  if (!c.needsGrad(0))
    return Status::ok();
  const double alpha = attrF(c, "alpha", 1.67326319217681884765625);
  const double gamma = attrF(c, "gamma", 1.05070102214813232421875);
  ir::Value *x = c.input(0), *dy = c.outGrad(0);
  PIPEC_ASSIGN(ir::Value * pos, c.emit("Greater", {x, c.scalar(0.0, x->dtype())}));
  PIPEC_ASSIGN(ir::Value * lin, c.scale(dy, gamma));
  PIPEC_ASSIGN(ir::Value * f, c.add(c.output(0), c.scalar(gamma * alpha, x->dtype())));
  PIPEC_ASSIGN(ir::Value * expo, c.mul(dy, f));
  return setWhere(c, pos, lin, expo);
}

Status hardSigmoidGrad(GradContext &c) {
  // y = clamp(alpha x + beta, 0, 1): alpha where 0 < y < 1.
  if (!c.needsGrad(0))
    return Status::ok();
  ir::Value *y = c.output(0), *dy = c.outGrad(0);
  const DType t = y->dtype();
  PIPEC_ASSIGN(ir::Value * above, c.emit("Greater", {y, c.scalar(0.0, t)}));
  PIPEC_ASSIGN(ir::Value * below, c.emit("Less", {y, c.scalar(1.0, t)}));
  PIPEC_ASSIGN(ir::Value * inside, c.emit("And", {above, below}));
  PIPEC_ASSIGN(ir::Value * scaled, c.scale(dy, attrF(c, "alpha", 0.2)));
  return setWhere(c, inside, scaled, c.scalar(0.0, t));
}

Status clipGrad(GradContext &c) {
  ir::Value *x = c.input(0), *dy = c.outGrad(0);
  // Bounds that need a gradient (trainable, or computed from a parameter):
  // y = min(max(x, lo), hi) is lo where x < lo (and lo <= hi), hi where
  // x > hi or lo > hi; each bound's gradient is dy summed over the
  // elements it decides, to its own shape.
  if (c.needsGrad(1) || c.needsGrad(2)) {
    ir::Value *lo = c.input(1), *hi = c.input(2);
    ir::Value *zero = c.scalar(0.0, x->dtype());
    ir::Value *crossed = nullptr; // lo > hi
    if (lo && hi) {
      PIPEC_ASSIGN(crossed, c.emit("Greater", {lo, hi}));
    }
    if (c.needsGrad(1)) {
      PIPEC_ASSIGN(ir::Value * mask, c.emit("Less", {x, lo}));
      if (crossed) {
        PIPEC_ASSIGN(ir::Value * ordered, c.emit("Not", {crossed}));
        PIPEC_ASSIGN(mask, c.emit("And", {mask, ordered}));
      }
      PIPEC_ASSIGN(ir::Value * g, c.emit("Where", {mask, dy, zero}));
      PIPEC_ASSIGN(g, c.sumToShape(g, lo->shape()));
      c.setGrad(1, g);
    }
    if (c.needsGrad(2)) {
      PIPEC_ASSIGN(ir::Value * mask, c.emit("Greater", {x, hi}));
      if (crossed) {
        PIPEC_ASSIGN(mask, c.emit("Or", {mask, crossed}));
      }
      PIPEC_ASSIGN(ir::Value * g, c.emit("Where", {mask, dy, zero}));
      PIPEC_ASSIGN(g, c.sumToShape(g, hi->shape()));
      c.setGrad(2, g);
    }
  }
  if (!c.needsGrad(0))
    return Status::ok();
  const DType t = x->dtype();
  ir::Value *lo = nullptr, *hi = nullptr;
  if (c.opset() < 11) {
    if (const Attribute *a = attrFind(c.attrs(), "min"))
      lo = c.scalar(static_cast<double>(a->f), t);
    if (const Attribute *a = attrFind(c.attrs(), "max"))
      hi = c.scalar(static_cast<double>(a->f), t);
  } else {
    lo = c.input(1);
    hi = c.input(2);
  }
  ir::Value *inside = nullptr;
  if (lo) {
    PIPEC_ASSIGN(inside, c.emit("Greater", {x, lo}));
  }
  if (hi) {
    PIPEC_ASSIGN(ir::Value * below, c.emit("Less", {x, hi}));
    if (inside) {
      PIPEC_ASSIGN(inside, c.emit("And", {inside, below}));
    } else {
      inside = below;
    }
  }
  if (!inside) { // no bounds: the identity
    c.setGrad(0, dy);
    return Status::ok();
  }
  return setWhere(c, inside, dy, c.scalar(0.0, t));
}

Status castGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  const DType from = c.input(0)->dtype(), to = c.output(0)->dtype();
  if (!isFloat(from) || !isFloat(to))
    return c.error(cat("only float to float casts are differentiated, this one is ",
                       dtypeName(from), " to ", dtypeName(to)));
  if (from == to) {
    c.setGrad(0, c.outGrad(0));
    return Status::ok();
  }
  PIPEC_ASSIGN(ir::Value * g, c.emit("Cast", {c.outGrad(0)},
                                     {{"to", Attribute::ofInt(static_cast<int64_t>(from))}}));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace pipec::passes::autodiff
