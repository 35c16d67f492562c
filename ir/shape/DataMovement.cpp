//===- ir/shape/DataMovement.cpp - Ops that move or replicate data --------===//
//
// Concat, Gather, GatherElements, Transpose, Flatten, Tile, Expand, Trilu,
// Pad and Split. Pad takes `pads` as an attribute before opset 11 and as an
// input after (with an `axes` input from 18); Split takes `split` as an
// attribute before 13, as an input from 13, or `num_outputs` from 18.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

#include <algorithm>
#include <numeric>

namespace pipec::ir::shape {

Status concatRule(const ShapeContext &ctx, Outputs &out) {
  std::vector<size_t> all;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i))
      all.push_back(i);
  PIPEC_TRY(expectSameDType(ctx, all));
  const TensorDesc &first = ctx.inputType(all[0]);
  if (!attrHas(ctx.attrs(), "axis") && ctx.opset() >= 4)
    return ctx.error("attribute 'axis' is required");
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", 1), first.rank()));
  Shape y = first.shape;
  y[axis] = 0;
  for (size_t i : all) {
    const Shape &s = ctx.inputType(i).shape;
    bool ok = s.size() == y.size();
    for (size_t d = 0; ok && d < s.size(); ++d)
      ok = static_cast<int64_t>(d) == axis || s[d] == y[d];
    if (!ok)
      return ctx.error(cat(inputLabel(ctx, i), " of shape ", shapeStr(s), " does not match ",
                           inputLabel(ctx, all[0]), " of shape ", shapeStr(first.shape),
                           " outside axis ", axis));
    y[axis] += s[axis];
  }
  out[0] = {first.dtype, std::move(y)};
  return Status::ok();
}

Status gatherRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectIndexDType(ctx, 1));
  const TensorDesc &data = ctx.inputType(0);
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", 0), data.rank()));
  const Shape &idx = ctx.inputType(1).shape;
  Shape y(data.shape.begin(), data.shape.begin() + axis);
  y.insert(y.end(), idx.begin(), idx.end());
  y.insert(y.end(), data.shape.begin() + axis + 1, data.shape.end());
  out[0] = {data.dtype, std::move(y)};
  return Status::ok();
}

Status gatherElementsRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectIndexDType(ctx, 1));
  const TensorDesc &data = ctx.inputType(0), &idx = ctx.inputType(1);
  PIPEC_TRY(axisFor(ctx, attrInt(ctx.attrs(), "axis", 0), data.rank()).status());
  if (idx.rank() != data.rank())
    return ctx.error(cat("indices ", idx.str(), " must have the rank of data ", data.str()));
  out[0] = {data.dtype, idx.shape};
  return Status::ok();
}

Status transposeRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  std::vector<int64_t> perm(static_cast<size_t>(x.rank()));
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (attrHas(ctx.attrs(), "perm"))
    perm = attrInts(ctx.attrs(), "perm");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<int64_t>(perm.size()) == x.rank();
  for (size_t i = 0; ok && i < sorted.size(); ++i)
    ok = sorted[i] == static_cast<int64_t>(i);
  if (!ok)
    return ctx.error(cat("perm ", shapeStr(perm), " is not a permutation of the ", x.rank(),
                         " axes of ", x.str()));
  Shape y;
  for (int64_t p : perm)
    y.push_back(x.shape[p]);
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

Status flattenRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  int64_t axis = attrInt(ctx.attrs(), "axis", 1), r = x.rank();
  // Negative axes are allowed from opset 11; the axis may equal the rank.
  if (axis < 0 && ctx.opset() >= 11)
    axis += r;
  if (axis < 0 || axis > r)
    return ctx.error(cat("axis ", attrInt(ctx.attrs(), "axis", 1), " is out of range for ", x.str(),
                         " (expected ", ctx.opset() >= 11 ? -r : 0, " to ", r, ")"));
  int64_t outer = numElements(Shape(x.shape.begin(), x.shape.begin() + axis));
  int64_t inner = numElements(Shape(x.shape.begin() + axis, x.shape.end()));
  out[0] = {x.dtype, {outer, inner}};
  return Status::ok();
}

Status tileRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  PIPEC_ASSIGN(std::vector<int64_t> reps, constInts(ctx, 1));
  if (static_cast<int64_t>(reps.size()) != x.rank())
    return ctx.error(
        cat("repeats has ", reps.size(), " values, input ", x.str(), " has rank ", x.rank()));
  Shape y = x.shape;
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0)
      return ctx.error(cat("repeats ", shapeStr(reps), " must not be negative"));
    y[i] *= reps[i];
  }
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

Status expandRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  PIPEC_ASSIGN(std::vector<int64_t> shape, constInts(ctx, 1));
  auto y = broadcastShapes(x.shape, shape);
  if (!y)
    return ctx.error(
        cat("cannot expand ", x.str(), " to ", shapeStr(shape), ": ", y.status().message()));
  out[0] = {x.dtype, y.take()};
  return Status::ok();
}

Status triluRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 2));
  if (ctx.hasInput(1) && ctx.inputType(1).numel() != 1)
    return ctx.error(
        cat(inputLabel(ctx, 1), " (k) must be a scalar, got ", ctx.inputType(1).str()));
  return sameAsInput(ctx, out);
}

Status padRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  std::vector<int64_t> pads, axes;
  if (ctx.opset() < 11) {
    // Opset 1 called the attribute `paddings`.
    pads = attrInts(ctx.attrs(), attrHas(ctx.attrs(), "pads") ? "pads" : "paddings");
  } else {
    PIPEC_ASSIGN(pads, constInts(ctx, 1));
    if (ctx.hasInput(2)) {
      PIPEC_TRY(expectSameDType(ctx, {0, 2}));
      if (ctx.inputType(2).numel() != 1)
        return ctx.error(cat(inputLabel(ctx, 2), " (constant_value) must be a scalar, got ",
                             ctx.inputType(2).str()));
    }
    if (ctx.hasInput(3)) {
      if (ctx.opset() < 18)
        return ctx.error("the axes input exists from opset 18");
      PIPEC_ASSIGN(std::vector<int64_t> a, constInts(ctx, 3));
      PIPEC_ASSIGN(axes, axesFor(ctx, a, x.rank()));
    }
  }
  if (axes.empty() && !ctx.hasInput(3))
    for (int64_t d = 0; d < x.rank(); ++d)
      axes.push_back(d);
  if (pads.size() != 2 * axes.size())
    return ctx.error(cat("pads has ", pads.size(), " values, expected ", 2 * axes.size(),
                         " (begin and end for each of ", axes.size(), " axes of ", x.str(), ")"));
  std::string mode = attrString(ctx.attrs(), "mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return ctx.error(cat("mode '", mode, "' is not constant, reflect, edge or wrap"));
  Shape y = x.shape;
  size_t n = axes.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t d = axes[i];
    y[d] = x.shape[d] + pads[i] + pads[i + n];
    if (y[d] < 0)
      return ctx.error(cat("pads ", shapeStr(pads), " remove more than the ", x.shape[d],
                           " elements of axis ", d));
  }
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

Status splitRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  PIPEC_ASSIGN(int64_t axis, axisFor(ctx, attrInt(ctx.attrs(), "axis", 0), x.rank()));
  int64_t dim = x.shape[axis], n = static_cast<int64_t>(out.size());
  std::vector<int64_t> sizes;
  if (ctx.opset() >= 13 && ctx.hasInput(1)) {
    PIPEC_ASSIGN(sizes, constInts(ctx, 1));
  } else if (ctx.opset() < 13 && attrHas(ctx.attrs(), "split")) {
    sizes = attrInts(ctx.attrs(), "split");
  } else if (ctx.opset() >= 18 && attrHas(ctx.attrs(), "num_outputs")) {
    // Equal chunks of ceil(dim / n); the last one may be smaller.
    int64_t k = attrInt(ctx.attrs(), "num_outputs", n);
    if (k != n)
      return ctx.error(cat("num_outputs is ", k, " but the node has ", n, " outputs"));
    int64_t chunk = (dim + n - 1) / n;
    sizes.assign(static_cast<size_t>(n), chunk);
    sizes.back() = dim - chunk * (n - 1);
    if (sizes.back() < 0)
      return ctx.error(
          cat("axis ", axis, " of size ", dim, " cannot be split into ", n, " chunks of ", chunk));
  } else {
    if (dim % n != 0)
      return ctx.error(
          cat("axis ", axis, " of size ", dim, " does not split evenly into ", n, " outputs"));
    sizes.assign(static_cast<size_t>(n), dim / n);
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    return ctx.error(cat("split lists ", sizes.size(), " sizes but the node has ", n, " outputs"));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return ctx.error(cat("split ", shapeStr(sizes), " has a negative size"));
    total += s;
  }
  if (total != dim)
    return ctx.error(cat("split ", shapeStr(sizes), " sums to ", total, ", axis ", axis, " of ",
                         x.str(), " has ", dim));
  for (int64_t i = 0; i < n; ++i) {
    out[i] = x;
    out[i].shape[axis] = sizes[i];
  }
  return Status::ok();
}

} // namespace pipec::ir::shape
