//===- passes/autodiff/Cnn.cpp - Conv, pooling and BatchNormalization -----===//
//
// Gradients of the convolutional-network ops:
//   GlobalAveragePool: dX = Expand(dY, X.shape) / spatial size.
//   Conv (1-D to 3-D): dX = pipec:ConvGradInput(dY, W),
//     dW = pipec:ConvGradWeight(dY, X) (both carry the forward's window
//     attributes and `shape`, the shape of the result), dB = ReduceSum of dY
//     over N and the spatial axes.
//   BatchNormalization: pipec:BatchNormalizationStats(X, mean, var) -> (mu,
//     rstd) once, then pipec:BatchNormalizationGrad(dY, X, scale, mu, rstd)
//     -> (dX, sums) (B) and pipec:BatchNormalizationScaleGrad(sums) ->
//     (dScale, dBias) (W: nothing on the way to dX reads it, so a schedule
//     can defer it); without dX, ScaleGrad(dY, X, mu, rstd) sums itself. All carry the forward's attributes and so decide
//     between batch statistics (training) and the given ones exactly as the
//     forward kernel does. mean and var are not differentiated.
//   MaxPool: pipec:MaxPoolGrad(dY, X) routes dY to the argmax recomputed
//     from X (first maximum in window order, as the forward).
//   AveragePool: pipec:AveragePoolGrad(dY) spreads dY over the window with
//     the forward's divisor; `shape` is X's shape.
//   ConvTranspose is the adjoint of Conv(., W) with the same strides,
//     dilations, group and (resolved) pads, so dX = Conv(dY, W) and
//     dW = pipec:ConvGradWeight(X, dY) (the roles of dY and X swapped);
//     dB as for Conv. Positions of Y that no input reaches (output_padding,
//     or output_shape beyond the natural size) are sliced off dY first.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include <algorithm>

namespace pipec::passes::autodiff {

namespace {

/// The forward's attributes plus `shape`.
AttrMap withShape(const AttrMap &a, const Shape &s) {
  AttrMap r = a;
  r["shape"] = Attribute::ofInts(s);
  return r;
}

/// The spatial axes [2, rank) of a value.
std::vector<int64_t> spatialAxes(const ir::Value *v) {
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < static_cast<int64_t>(v->shape().size()); ++i)
    axes.push_back(i);
  return axes;
}

} // namespace

Status globalAveragePoolGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  const Shape &xs = c.input(0)->shape();
  int64_t spatial = 1;
  for (size_t i = 2; i < xs.size(); ++i)
    spatial *= xs[i];
  if (spatial <= 0)
    return c.error("X has no spatial elements");
  PIPEC_ASSIGN(ir::Value * e, c.expandTo(c.outGrad(0), xs));
  PIPEC_ASSIGN(ir::Value * g, c.scale(e, 1.0 / static_cast<double>(spatial)));
  c.setGrad(0, g);
  return Status::ok();
}

Status convGrad(GradContext &c) {
  ir::Value *dy = c.outGrad(0), *x = c.input(0), *w = c.input(1);
  if (x->shape().size() < 3 || x->shape().size() > 5)
    return c.error(cat("only 1-D, 2-D and 3-D convolutions are differentiated, X is ",
                       x->type().str()));
  if (c.needsGrad(0)) {
    PIPEC_ASSIGN(ir::Value * g,
                 c.emitPipec("ConvGradInput", {dy, w}, withShape(c.attrs(), x->shape())));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) {
    PIPEC_ASSIGN(ir::Value * g,
                 c.emitPipec("ConvGradWeight", {dy, x}, withShape(c.attrs(), w->shape())));
    c.setGrad(1, g);
  }
  if (c.needsGrad(2)) {
    std::vector<int64_t> axes = spatialAxes(dy);
    axes.insert(axes.begin(), 0);
    PIPEC_ASSIGN(ir::Value * g, c.reduceSum(dy, axes, false));
    PIPEC_ASSIGN(g, c.reshape(g, c.input(2)->shape()));
    c.setGrad(2, g);
  }
  return Status::ok();
}

Status batchNormGrad(GradContext &c) {
  for (size_t i = 1; i < c.node().numOutputs(); ++i)
    if (c.outGrad(i))
      return c.error("the statistics outputs cannot be differentiated");
  if (c.opset() < 9 && attrInt(c.attrs(), "spatial", 1) == 0)
    return c.error("spatial = 0 is not differentiated");
  if (!c.needsGrad(0) && !c.needsGrad(1) && !c.needsGrad(2))
    return Status::ok();
  PIPEC_ASSIGN(std::vector<ir::Value *> stats,
               c.emitN("BatchNormalizationStats", {c.input(0), c.input(3), c.input(4)}, 2,
                       c.attrs(), "pipec"));
  ir::Value *dy = c.outGrad(0), *x = c.input(0);
  const bool scaleGrads = c.needsGrad(1) || c.needsGrad(2);
  std::vector<ir::Value *> scaleFrom = {dy, x, stats[0], stats[1]};
  if (c.needsGrad(0)) {
    // dX's two per-channel sums are dScale's and dBias's: written once, as
    // a second output that ScaleGrad reads.
    PIPEC_ASSIGN(std::vector<ir::Value *> g,
                 c.emitN("BatchNormalizationGrad", {dy, x, c.input(1), stats[0], stats[1]},
                         scaleGrads ? 2 : 1, c.attrs(), "pipec"));
    c.setGrad(0, g[0]);
    if (scaleGrads)
      scaleFrom = {g[1]};
  }
  if (scaleGrads) {
    PIPEC_ASSIGN(std::vector<ir::Value *> g,
                 c.emitN("BatchNormalizationScaleGrad", scaleFrom, 2, c.attrs(), "pipec"));
    for (size_t i = 1; i < 3; ++i)
      if (c.needsGrad(i)) {
        PIPEC_ASSIGN(ir::Value * r, c.reshape(g[i - 1], c.input(i)->shape()));
        c.setGrad(i, r);
      }
  }
  return Status::ok();
}

Status maxPoolGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("MaxPoolGrad", {c.outGrad(0), c.input(0)}, c.attrs()));
  c.setGrad(0, g);
  return Status::ok();
}

Status averagePoolGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("AveragePoolGrad", {c.outGrad(0)},
                                          withShape(c.attrs(), c.input(0)->shape())));
  c.setGrad(0, g);
  return Status::ok();
}

Status convTransposeGrad(GradContext &c) {
  ir::Value *dy = c.outGrad(0), *x = c.input(0), *w = c.input(1);
  const Shape &xs = x->shape(), &ys = c.output(0)->shape(), &ws = w->shape();
  if (xs.size() < 3)
    return c.error(cat("X must have a spatial axis, it is ", x->type().str()));
  const size_t n = xs.size() - 2;
  const AttrMap &a = c.attrs();
  const std::vector<int64_t> strides = attrInts(a, "strides", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> dil = attrInts(a, "dilations", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> given = attrInts(a, "pads", std::vector<int64_t>(2 * n, 0));
  const std::vector<int64_t> outPad = attrInts(a, "output_padding", std::vector<int64_t>(n, 0));
  const bool hasOutShape = !attrInts(a, "output_shape").empty();
  const std::string autoPad = attrString(a, "auto_pad", "NOTSET");
  const bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (strides.size() != n || dil.size() != n || given.size() != 2 * n || outPad.size() != n)
    return c.error(cat("strides/dilations/pads/output_padding do not have ", n,
                       " values per spatial axis"));
  // Resolve the pads as the kernel does (runtime/cpu/kernels/ConvTranspose.cpp),
  // then crop dY to the positions some input reaches.
  std::vector<int64_t> pads(2 * n), starts, ends, axes;
  bool crop = false;
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = xs[i + 2], out = ys[i + 2], extent = (ws[i + 2] - 1) * dil[i] + 1;
    const int64_t full = strides[i] * (in - 1) + outPad[i] + extent;
    int64_t pb = 0;
    if (hasOutShape || same) {
      const int64_t total = full - out;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      pb = autoPad == "SAME_UPPER" ? half : total - half;
    } else if (autoPad != "VALID") {
      pb = given[i];
    }
    const int64_t pe = strides[i] * (in - 1) + extent - out - pb;
    const int64_t start = std::max<int64_t>(0, -pb), end = out + std::min<int64_t>(0, pe);
    if (end <= start)
      return c.error(cat("no input position reaches the output along spatial axis ", i));
    crop = crop || start != 0 || end != out;
    starts.push_back(start);
    ends.push_back(end);
    axes.push_back(static_cast<int64_t>(i + 2));
    pads[i] = pb + start;
    pads[i + n] = std::max<int64_t>(pe, 0);
  }
  if (crop) {
    PIPEC_ASSIGN(dy, c.slice(dy, starts, ends, axes));
  }
  AttrMap conv = {{"strides", Attribute::ofInts(strides)},
                  {"dilations", Attribute::ofInts(dil)},
                  {"pads", Attribute::ofInts(pads)},
                  {"group", Attribute::ofInt(attrInt(a, "group", 1))}};
  if (c.needsGrad(0)) {
    PIPEC_ASSIGN(ir::Value * g, c.emit("Conv", {dy, w}, conv));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) {
    if (n > 3)
      return c.error(cat("the weight gradient of a ", n,
                         "-D ConvTranspose is not supported (1-D to 3-D are)"));
    PIPEC_ASSIGN(ir::Value * g, c.emitPipec("ConvGradWeight", {x, dy}, withShape(conv, ws)));
    c.setGrad(1, g);
  }
  if (c.needsGrad(2)) {
    std::vector<int64_t> red = spatialAxes(c.outGrad(0));
    red.insert(red.begin(), 0);
    PIPEC_ASSIGN(ir::Value * g, c.reduceSum(c.outGrad(0), red, false));
    PIPEC_ASSIGN(g, c.reshape(g, c.input(2)->shape()));
    c.setGrad(2, g);
  }
  return Status::ok();
}

} // namespace pipec::passes::autodiff
