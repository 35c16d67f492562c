//===- ir/shape/ShapeOps.cpp - Ops that compute or change shapes ----------===//
//
// Constant, ConstantOfShape, Range, Reshape, Shape, Size, Slice, Squeeze and
// Unsqueeze: the ops of exported shape subgraphs. Those whose output shape
// depends on an input's value read it as a compile-time constant (shape
// inference folds Shape -> Gather -> Concat chains first). Slice takes
// starts/ends/axes as attributes before opset 10 and as inputs (with steps)
// after; Squeeze/Unsqueeze take axes as an attribute before 13.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

#include <algorithm>
#include <cmath>

namespace pipec::ir::shape {

Status constantRule(const ShapeContext &ctx, Outputs &out) {
  const AttrMap &a = ctx.attrs();
  if (a.size() != 1)
    return ctx.error(cat("needs exactly one value attribute, got ", a.size()));
  const auto &[name, attr] = *a.begin();
  if (name == "value" && attr.kind == Attribute::Kind::Tensor)
    out[0] = attr.t.desc();
  else if (name == "value_float" && attr.kind == Attribute::Kind::Float)
    out[0] = {DType::F32, {}};
  else if (name == "value_floats" && attr.kind == Attribute::Kind::Floats)
    out[0] = {DType::F32, {static_cast<int64_t>(attr.floats.size())}};
  else if (name == "value_int" && attr.kind == Attribute::Kind::Int)
    out[0] = {DType::I64, {}};
  else if (name == "value_ints" && attr.kind == Attribute::Kind::Ints)
    out[0] = {DType::I64, {static_cast<int64_t>(attr.ints.size())}};
  else
    return ctx.error(cat("attribute '", name,
                         "' is not a value pipec supports (value, "
                         "value_float(s), value_int(s))"));
  return Status::ok();
}

Status constantOfShapeRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectRank(ctx, 0, 1));
  PIPEC_ASSIGN(std::vector<int64_t> shape, constInts(ctx, 0));
  for (int64_t d : shape)
    if (d < 0)
      return ctx.error(cat("shape ", shapeStr(shape), " has a negative dimension"));
  DType dtype = DType::F32;
  if (const Attribute *v = attrFind(ctx.attrs(), "value")) {
    if (v->kind != Attribute::Kind::Tensor || v->t.numel() != 1)
      return ctx.error("attribute 'value' must be a one-element tensor");
    dtype = v->t.dtype();
  }
  out[0] = {dtype, std::move(shape)};
  return Status::ok();
}

Status rangeRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectSameDType(ctx, {0, 1, 2}));
  const Tensor *v[3];
  for (size_t i = 0; i < 3; ++i) {
    PIPEC_ASSIGN(v[i], constValue(ctx, i));
    if (v[i]->numel() != 1)
      return ctx.error(cat(inputLabel(ctx, i), " must be a scalar, got ", v[i]->desc().str()));
  }
  DType t = v[0]->dtype();
  int64_t n = 0;
  if (t == DType::F32) {
    // The spec computes in T: ceil((limit - start) / delta).
    float start = static_cast<float>(v[0]->getDouble(0));
    float limit = static_cast<float>(v[1]->getDouble(0));
    float delta = static_cast<float>(v[2]->getDouble(0));
    if (delta == 0)
      return ctx.error("delta is 0");
    n = static_cast<int64_t>(std::ceil((limit - start) / delta));
  } else if (t == DType::F64) {
    double start = v[0]->getDouble(0), limit = v[1]->getDouble(0), delta = v[2]->getDouble(0);
    if (delta == 0)
      return ctx.error("delta is 0");
    n = static_cast<int64_t>(std::ceil((limit - start) / delta));
  } else if (t == DType::I64 || t == DType::I32 || t == DType::I16) {
    int64_t start = v[0]->getInt(0), limit = v[1]->getInt(0), delta = v[2]->getInt(0);
    if (delta == 0)
      return ctx.error("delta is 0");
    int64_t span = limit - start;
    // ceil(span / delta) for either sign.
    n = span / delta + ((span % delta != 0 && ((span < 0) == (delta < 0))) ? 1 : 0);
  } else {
    return ctx.error(cat("Range does not support element type ", dtypeName(t)));
  }
  out[0] = {t, {std::max<int64_t>(n, 0)}};
  return Status::ok();
}

Status reshapeRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  std::vector<int64_t> shape;
  PIPEC_ASSIGN(shape, constInts(ctx, 1));
  bool allowZero = ctx.opset() >= 14 && attrInt(ctx.attrs(), "allowzero", 0) != 0;
  Shape y(shape.size());
  int64_t inferAt = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == -1) {
      if (inferAt >= 0)
        return ctx.error(cat("shape ", shapeStr(shape), " has more than one -1"));
      inferAt = static_cast<int64_t>(i);
      continue;
    }
    if (d < -1)
      return ctx.error(cat("shape ", shapeStr(shape), " has a negative dimension"));
    if (d == 0 && !allowZero) {
      // 0 copies the input's dimension (unless allowzero, opset 14).
      if (static_cast<int64_t>(i) >= x.rank())
        return ctx.error(cat("shape ", shapeStr(shape), " copies dimension ", i,
                             " (a 0) but the input ", x.str(), " has rank ", x.rank()));
      d = x.shape[i];
    }
    y[i] = d;
    known *= d;
  }
  int64_t total = x.numel();
  if (inferAt >= 0) {
    if (known == 0) {
      if (allowZero)
        return ctx.error(cat("shape ", shapeStr(shape), " has both 0 and -1 with allowzero=1"));
      return ctx.error(cat("cannot infer the -1 of shape ", shapeStr(shape), " for ", x.str(),
                           ": the other dimensions have no elements"));
    }
    if (total % known != 0)
      return ctx.error(cat("cannot reshape ", x.str(), " (", total, " elements) to ",
                           shapeStr(shape), ": ", total, " is not a multiple of ", known));
    y[inferAt] = total / known;
    known = total;
  }
  if (known != total)
    return ctx.error(cat("cannot reshape ", x.str(), " (", total, " elements) to ", shapeStr(y),
                         " (", known, " elements)"));
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

Status shapeRule(const ShapeContext &ctx, Outputs &out) {
  auto [begin, end] = shapeOpRange(ctx.inputType(0).rank(), ctx.attrs(), ctx.opset());
  out[0] = {DType::I64, {end - begin}};
  return Status::ok();
}

Status sizeRule(const ShapeContext &ctx, Outputs &out) {
  out[0] = {DType::I64, {}};
  return Status::ok();
}

Status sliceRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  std::vector<int64_t> starts, ends, axes, steps;
  bool hasAxes;
  if (ctx.opset() < 10) {
    if (ctx.numInputs() > 1)
      return ctx.error("Slice takes starts and ends as attributes before opset 10");
    starts = attrInts(ctx.attrs(), "starts");
    ends = attrInts(ctx.attrs(), "ends");
    hasAxes = attrHas(ctx.attrs(), "axes");
    axes = attrInts(ctx.attrs(), "axes");
  } else {
    if (!ctx.hasInput(1) || !ctx.hasInput(2))
      return ctx.error("Slice takes starts and ends as inputs from opset 10");
    PIPEC_ASSIGN(starts, constInts(ctx, 1));
    PIPEC_ASSIGN(ends, constInts(ctx, 2));
    hasAxes = ctx.hasInput(3);
    if (hasAxes) {
      PIPEC_ASSIGN(axes, constInts(ctx, 3));
    }
    if (ctx.hasInput(4)) {
      PIPEC_ASSIGN(steps, constInts(ctx, 4));
    }
  }
  size_t n = starts.size();
  if (!hasAxes)
    for (size_t i = 0; i < n; ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (steps.empty())
    steps.assign(n, 1);
  if (ends.size() != n || axes.size() != n || steps.size() != n)
    return ctx.error(cat("starts, ends, axes and steps have ", n, ", ", ends.size(), ", ",
                         axes.size(), " and ", steps.size(), " values; they must agree"));
  PIPEC_ASSIGN(std::vector<int64_t> norm, axesFor(ctx, axes, x.rank()));
  Shape y = x.shape;
  for (size_t i = 0; i < n; ++i) {
    int64_t dim = x.shape[norm[i]], s = starts[i], e = ends[i], st = steps[i];
    if (st == 0)
      return ctx.error(cat("steps ", shapeStr(steps), " has a 0"));
    if (s < 0)
      s += dim;
    if (e < 0)
      e += dim;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      y[norm[i]] = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      y[norm[i]] = s > e ? (s - e - st - 1) / -st : 0;
    }
  }
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

Status squeezeRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  std::vector<int64_t> axes;
  if (ctx.opset() < 13) {
    if (ctx.hasInput(1))
      return ctx.error("Squeeze takes axes as an attribute before opset 13");
    axes = attrInts(ctx.attrs(), "axes");
  } else if (ctx.hasInput(1)) {
    PIPEC_ASSIGN(axes, constInts(ctx, 1));
  }
  PIPEC_ASSIGN(std::vector<int64_t> norm, axesFor(ctx, axes, x.rank()));
  Shape y;
  for (int64_t d = 0; d < x.rank(); ++d) {
    bool listed = std::find(norm.begin(), norm.end(), d) != norm.end();
    if (listed && x.shape[d] != 1)
      return ctx.error(
          cat("cannot squeeze axis ", d, " of ", x.str(), ": its size is ", x.shape[d], ", not 1"));
    if (listed || (norm.empty() && x.shape[d] == 1))
      continue;
    y.push_back(x.shape[d]);
  }
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

Status unsqueezeRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  std::vector<int64_t> axes;
  if (ctx.opset() < 13) {
    if (ctx.hasInput(1))
      return ctx.error("Unsqueeze takes axes as an attribute before opset 13");
    if (!attrHas(ctx.attrs(), "axes"))
      return ctx.error("attribute 'axes' is required before opset 13");
    axes = attrInts(ctx.attrs(), "axes");
  } else {
    if (!ctx.hasInput(1))
      return ctx.error("input 'axes' is required from opset 13");
    PIPEC_ASSIGN(axes, constInts(ctx, 1));
  }
  int64_t rank = x.rank() + static_cast<int64_t>(axes.size());
  PIPEC_ASSIGN(std::vector<int64_t> norm, axesFor(ctx, axes, rank));
  Shape y;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(norm.begin(), norm.end(), d) != norm.end())
      y.push_back(1);
    else
      y.push_back(x.shape[next++]);
  }
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

} // namespace pipec::ir::shape
