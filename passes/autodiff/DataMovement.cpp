//===- passes/autodiff/DataMovement.cpp - Data movement gradient rules ----===//
//
// Gradients of ops that only move elements: reshapes (Reshape, Flatten,
// Squeeze, Unsqueeze) reshape dY back; Transpose applies the inverse
// permutation; Expand sums back to the input shape; Concat slices dY per
// input; Split concatenates the output gradients (zeros for outputs without
// one); Slice (unit steps) pads dY with zeros; Gather scatter-adds dY into
// zeros of the data shape (pipec:GatherGrad), so repeated indices (tied
// embeddings, repeated tokens) accumulate in index order. Pad (constant
// mode) slices dY back, or pads it with the negated pads where the forward
// cropped; the constant's gradient is sum(dY) - sum(dX). Tile reshapes dY to
// [r0, d0, r1, d1, ...] and sums over the repeat axes.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include <algorithm>
#include <limits>

namespace pipec::passes::autodiff {

namespace {

int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

/// Constant integer input i, or an error.
Expected<std::vector<int64_t>> constInts(GradContext &c, size_t i) {
  ir::Value *v = c.input(i);
  if (!v || !v->isConstant())
    return c.error(cat("input ", i, " must be a constant to differentiate this node"));
  return v->constant().toInts();
}

/// Slice of `x` along `axis` over [begin, end).
Expected<ir::Value *> sliceAxis(GradContext &c, ir::Value *x, int64_t axis, int64_t begin,
                                int64_t end) {
  if (c.opset() < 10)
    return c.emit("Slice", {x},
                  {{"axes", Attribute::ofInts({axis})},
                   {"starts", Attribute::ofInts({begin})},
                   {"ends", Attribute::ofInts({end})}});
  return c.emit("Slice", {x, c.ints({begin}), c.ints({end}), c.ints({axis})});
}

} // namespace

Status reshapeLikeGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.reshape(c.outGrad(0), c.input(0)->shape()));
  c.setGrad(0, g);
  return Status::ok();
}

Status transposeGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  const auto rank = static_cast<int64_t>(c.input(0)->shape().size());
  std::vector<int64_t> perm = attrInts(c.attrs(), "perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<size_t>(normAxis(perm[i], rank))] = static_cast<int64_t>(i);
  PIPEC_ASSIGN(ir::Value * g, c.transpose(c.outGrad(0), inv));
  c.setGrad(0, g);
  return Status::ok();
}

Status expandGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * g, c.sumToShape(c.outGrad(0), c.input(0)->shape()));
  c.setGrad(0, g);
  return Status::ok();
}

Status concatGrad(GradContext &c) {
  ir::Value *dy = c.outGrad(0);
  const auto rank = static_cast<int64_t>(dy->shape().size());
  const int64_t axis = normAxis(attrInt(c.attrs(), "axis", 0), rank);
  int64_t offset = 0;
  for (size_t i = 0; i < c.node().numInputs(); ++i) {
    const int64_t len = c.input(i)->shape()[static_cast<size_t>(axis)];
    if (c.needsGrad(i)) {
      PIPEC_ASSIGN(ir::Value * g, sliceAxis(c, dy, axis, offset, offset + len));
      c.setGrad(i, g);
    }
    offset += len;
  }
  return Status::ok();
}

Status splitGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  std::vector<ir::Value *> parts;
  for (size_t i = 0; i < c.node().numOutputs(); ++i) {
    ir::Value *g = c.outGrad(i);
    if (!g) {
      PIPEC_ASSIGN(g, c.zeros(c.output(i)->type()));
    }
    parts.push_back(g);
  }
  const auto rank = static_cast<int64_t>(c.input(0)->shape().size());
  const int64_t axis = normAxis(attrInt(c.attrs(), "axis", 0), rank);
  ir::Value *g = parts[0];
  if (parts.size() > 1) {
    PIPEC_ASSIGN(g, c.emit("Concat", parts, {{"axis", Attribute::ofInt(axis)}}));
  }
  c.setGrad(0, g);
  return Status::ok();
}

Status sliceGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  const Shape &xs = c.input(0)->shape();
  const auto rank = static_cast<int64_t>(xs.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = attrInts(c.attrs(), "starts");
    ends = attrInts(c.attrs(), "ends");
    axes = attrInts(c.attrs(), "axes");
  } else {
    PIPEC_ASSIGN(starts, constInts(c, 1));
    PIPEC_ASSIGN(ends, constInts(c, 2));
    if (c.input(3)) {
      PIPEC_ASSIGN(axes, constInts(c, 3));
    }
    if (c.input(4)) {
      PIPEC_ASSIGN(steps, constInts(c, 4));
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> pads(2 * xs.size(), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!steps.empty() && steps[i] != 1)
      return c.error("only unit steps can be differentiated");
    const int64_t a = normAxis(axes[i], rank);
    const int64_t dim = xs[static_cast<size_t>(a)];
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = std::clamp<int64_t>(s, 0, dim);
    const int64_t len = c.output(0)->shape()[static_cast<size_t>(a)];
    pads[static_cast<size_t>(a)] = s;
    pads[static_cast<size_t>(a + rank)] = dim - s - len;
  }
  ir::Value *dy = c.outGrad(0);
  ir::Value *g = nullptr;
  if (c.opset() < 11) {
    PIPEC_ASSIGN(g, c.emit("Pad", {dy}, {{"pads", Attribute::ofInts(pads)}}));
  } else {
    PIPEC_ASSIGN(g, c.emit("Pad", {dy, c.ints(pads)}));
  }
  c.setGrad(0, g);
  return Status::ok();
}

Status gatherGrad(GradContext &c) {
  if (c.needsGrad(1))
    return c.error("indices cannot be differentiated");
  if (!c.needsGrad(0))
    return Status::ok();
  const auto rank = static_cast<int64_t>(c.input(0)->shape().size());
  AttrMap a = {{"axis", Attribute::ofInt(normAxis(attrInt(c.attrs(), "axis", 0), rank))},
               {"shape", Attribute::ofInts(c.input(0)->shape())}};
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("GatherGrad", {c.outGrad(0), c.input(1)}, a));
  c.setGrad(0, g);
  return Status::ok();
}

Status padGrad(GradContext &c) {
  const std::string mode = attrString(c.attrs(), "mode", "constant");
  if (mode != "constant")
    return c.error(cat("mode '", mode, "' is not differentiated (only 'constant' is)"));
  if (!c.needsGrad(0) && !c.needsGrad(2))
    return Status::ok();
  const Shape &xs = c.input(0)->shape();
  const auto rank = static_cast<int64_t>(xs.size());
  std::vector<int64_t> given, axes;
  if (c.opset() < 11) {
    given = attrInts(c.attrs(), "pads");
  } else {
    PIPEC_ASSIGN(given, constInts(c, 1));
    if (c.input(3)) {
      PIPEC_ASSIGN(axes, constInts(c, 3));
    }
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (given.size() != 2 * axes.size())
    return c.error(cat("pads has ", given.size(), " values for ", axes.size(), " axes"));
  std::vector<int64_t> pads(2 * xs.size(), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<size_t>(normAxis(axes[i], rank));
    pads[a] = given[i];
    pads[a + xs.size()] = given[i + axes.size()];
  }
  ir::Value *dy = c.outGrad(0), *dx = nullptr;
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p >= 0; })) {
    std::vector<int64_t> starts, ends, all;
    for (int64_t i = 0; i < rank; ++i) {
      starts.push_back(pads[static_cast<size_t>(i)]);
      ends.push_back(pads[static_cast<size_t>(i)] + xs[static_cast<size_t>(i)]);
      all.push_back(i);
    }
    PIPEC_ASSIGN(dx, c.slice(dy, starts, ends, all));
  } else {
    // Negative pads crop: pad dY with zeros where the forward cropped, and
    // crop what it padded.
    std::vector<int64_t> neg;
    for (int64_t p : pads)
      neg.push_back(-p);
    if (c.opset() < 11) {
      PIPEC_ASSIGN(dx, c.emit("Pad", {dy}, {{"pads", Attribute::ofInts(neg)}}));
    } else {
      PIPEC_ASSIGN(dx, c.emit("Pad", {dy, c.ints(neg)}));
    }
  }
  if (c.needsGrad(0))
    c.setGrad(0, dx);
  if (c.needsGrad(2)) {
    // The constant fills every element of Y that does not come from X.
    std::vector<int64_t> all;
    for (int64_t i = 0; i < rank; ++i)
      all.push_back(i);
    ir::Value *sy = dy, *sx = dx;
    if (rank > 0) {
      PIPEC_ASSIGN(sy, c.reduceSum(dy, all, false));
      PIPEC_ASSIGN(sx, c.reduceSum(dx, all, false));
    }
    PIPEC_ASSIGN(ir::Value * d, c.sub(sy, sx));
    PIPEC_ASSIGN(d, c.reshape(d, c.input(2)->shape()));
    c.setGrad(2, d);
  }
  return Status::ok();
}

Status tileGrad(GradContext &c) {
  if (!c.needsGrad(0))
    return Status::ok();
  const Shape &xs = c.input(0)->shape();
  PIPEC_ASSIGN(std::vector<int64_t> reps, constInts(c, 1));
  if (reps.size() != xs.size())
    return c.error(cat("repeats has ", reps.size(), " values for rank ", xs.size()));
  // Y[k * d + j] = X[j] along each axis: view dY as [r0, d0, r1, d1, ...].
  Shape split;
  std::vector<int64_t> axes;
  for (size_t i = 0; i < xs.size(); ++i) {
    split.push_back(reps[i]);
    split.push_back(xs[i]);
    if (reps[i] != 1)
      axes.push_back(static_cast<int64_t>(2 * i));
  }
  ir::Value *g = c.outGrad(0);
  if (!axes.empty()) {
    PIPEC_ASSIGN(g, c.reshape(g, split));
    PIPEC_ASSIGN(g, c.reduceSum(g, axes, false));
  }
  PIPEC_ASSIGN(g, c.reshape(g, xs));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace pipec::passes::autodiff
