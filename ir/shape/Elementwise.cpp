//===- ir/shape/Elementwise.cpp - Unary, binary and n-ary elementwise ops -===//
//
// Unary ops keep their input's type; Cast changes the element type; binary
// and n-ary ops broadcast by numpy rules (opset 7 on; before that Add, Sub,
// Mul, Div and Pow took a `broadcast` attribute with ONNX's legacy suffix
// broadcasting, and Max, Min, Sum and Mean required equal shapes).
// Comparisons and logical ops give bool.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

namespace pipec::ir::shape {

namespace {

/// Opset < 7 binary ops: B must match A, or with broadcast=1 be a
/// contiguous run of A's dimensions ending at the last (or starting at
/// `axis`). The output has A's shape.
Status legacyBroadcast(const ShapeContext &ctx, Outputs &out, DType dtype) {
  const Shape &a = ctx.inputType(0).shape, &b = ctx.inputType(1).shape;
  out[0] = {dtype, a};
  if (attrInt(ctx.attrs(), "broadcast", 0) == 0) {
    if (a != b)
      return ctx.error(cat("inputs have shapes ", shapeStr(a), " and ", shapeStr(b),
                           " and broadcast is 0 (opset < 7 broadcasts only when asked)"));
    return Status::ok();
  }
  auto ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(b.size());
  int64_t start = attrHas(ctx.attrs(), "axis") ? attrInt(ctx.attrs(), "axis", 0) : ra - rb;
  if (start < 0)
    start += ra;
  bool ok = rb <= ra && start >= 0 && start + rb <= ra;
  for (int64_t i = 0; ok && i < rb; ++i)
    ok = b[i] == a[start + i] || b[i] == 1;
  if (!ok)
    return ctx.error(cat("input 1 of shape ", shapeStr(b), " does not fit input 0 of shape ",
                         shapeStr(a), " at axis ", start, " (legacy broadcasting)"));
  return Status::ok();
}

} // namespace

Status unaryRule(const ShapeContext &ctx, Outputs &out) { return sameAsInput(ctx, out); }

Status boolUnaryRule(const ShapeContext &ctx, Outputs &out) {
  out[0] = {DType::Bool, ctx.inputType(0).shape};
  return Status::ok();
}

Status logicalNotRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectDType(ctx, 0, DType::Bool));
  return boolUnaryRule(ctx, out);
}

Status castRule(const ShapeContext &ctx, Outputs &out) {
  const Attribute *to = attrFind(ctx.attrs(), "to");
  if (!to || to->kind != Attribute::Kind::Int)
    return ctx.error("attribute 'to' (an integer element type) is required");
  if (!isKnownDType(static_cast<int32_t>(to->i)) || to->i == 0)
    return ctx.error(cat("attribute 'to' is ", to->i, ", not an element type pipec knows"));
  out[0] = {static_cast<DType>(to->i), ctx.inputType(0).shape};
  return Status::ok();
}

Status clipRule(const ShapeContext &ctx, Outputs &out) {
  // Opset 11 turned the min and max attributes into optional scalar inputs.
  for (size_t i = 1; i < 3; ++i) {
    if (!ctx.hasInput(i))
      continue;
    if (ctx.opset() < 11)
      return ctx.error(
          cat("Clip takes min and max as attributes before opset 11, got ", inputLabel(ctx, i)));
    if (ctx.inputType(i).numel() != 1)
      return ctx.error(cat(inputLabel(ctx, i), " must be a scalar, got ", ctx.inputType(i).str()));
    PIPEC_TRY(expectSameDType(ctx, {0, i}));
  }
  return sameAsInput(ctx, out);
}

Status dropoutRule(const ShapeContext &ctx, Outputs &out) {
  // Opset 12 turned the ratio attribute into an input and added training_mode.
  if (ctx.opset() < 12 && ctx.numInputs() > 1)
    return ctx.error("Dropout takes ratio as an attribute before opset 12");
  if (ctx.hasInput(1) && ctx.inputType(1).numel() != 1)
    return ctx.error(
        cat(inputLabel(ctx, 1), " (ratio) must be a scalar, got ", ctx.inputType(1).str()));
  if (ctx.hasInput(2)) {
    PIPEC_TRY(expectDType(ctx, 2, DType::Bool));
    if (ctx.inputType(2).numel() != 1)
      return ctx.error(cat(inputLabel(ctx, 2), " (training_mode) must be a scalar, got ",
                           ctx.inputType(2).str()));
  }
  const TensorDesc &x = ctx.inputType(0);
  out[0] = x;
  // The mask is bool from opset 10, the input's type before.
  if (out.size() > 1)
    out[1] = {ctx.opset() >= 10 ? DType::Bool : x.dtype, x.shape};
  return Status::ok();
}

Status binaryRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectSameDType(ctx, {0, 1}));
  if (ctx.opset() < 7)
    return legacyBroadcast(ctx, out, ctx.inputType(0).dtype);
  PIPEC_ASSIGN(Shape s, broadcastInputs(ctx, {0, 1}));
  out[0] = {ctx.inputType(0).dtype, std::move(s)};
  return Status::ok();
}

Status powRule(const ShapeContext &ctx, Outputs &out) {
  // Opset 12 lets the exponent's type differ from the base's.
  if (ctx.opset() < 12)
    PIPEC_TRY(expectSameDType(ctx, {0, 1}));
  if (ctx.opset() < 7)
    return legacyBroadcast(ctx, out, ctx.inputType(0).dtype);
  PIPEC_ASSIGN(Shape s, broadcastInputs(ctx, {0, 1}));
  out[0] = {ctx.inputType(0).dtype, std::move(s)};
  return Status::ok();
}

Status compareRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectSameDType(ctx, {0, 1}));
  if (ctx.opset() < 7)
    return legacyBroadcast(ctx, out, DType::Bool);
  PIPEC_ASSIGN(Shape s, broadcastInputs(ctx, {0, 1}));
  out[0] = {DType::Bool, std::move(s)};
  return Status::ok();
}

Status logicalRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectDType(ctx, 0, DType::Bool));
  PIPEC_TRY(expectDType(ctx, 1, DType::Bool));
  if (ctx.opset() < 7)
    return legacyBroadcast(ctx, out, DType::Bool);
  PIPEC_ASSIGN(Shape s, broadcastInputs(ctx, {0, 1}));
  out[0] = {DType::Bool, std::move(s)};
  return Status::ok();
}

Status preluRule(const ShapeContext &ctx, Outputs &out) {
  // The slope broadcasts to X (unidirectionally) from opset 7.
  PIPEC_TRY(expectSameDType(ctx, {0, 1}));
  const TensorDesc &x = ctx.inputType(0), &slope = ctx.inputType(1);
  out[0] = x;
  // Before opset 7 the slope has one value, or one per channel (axis 1).
  if (ctx.opset() < 7 &&
      (slope.numel() == 1 || (x.rank() >= 2 && slope.shape == Shape{x.shape[1]})))
    return Status::ok();
  return expectUnidirectional(ctx, slope.shape, x.shape, inputLabel(ctx, 1));
}

Status whereRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectDType(ctx, 0, DType::Bool));
  PIPEC_TRY(expectSameDType(ctx, {1, 2}));
  PIPEC_ASSIGN(Shape s, broadcastInputs(ctx, {0, 1, 2}));
  out[0] = {ctx.inputType(1).dtype, std::move(s)};
  return Status::ok();
}

Status variadicRule(const ShapeContext &ctx, Outputs &out) {
  std::vector<size_t> all;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i))
      all.push_back(i);
  if (all.empty())
    return ctx.error("needs at least one input");
  PIPEC_TRY(expectSameDType(ctx, all));
  if (ctx.opset() < 8) {
    for (size_t i : all)
      if (ctx.inputType(i).shape != ctx.inputType(all[0]).shape)
        return ctx.error(cat(inputLabel(ctx, i), " has shape ", shapeStr(ctx.inputType(i).shape),
                             " but ", inputLabel(ctx, all[0]), " has ",
                             shapeStr(ctx.inputType(all[0]).shape),
                             " (broadcasting starts at opset 8)"));
  }
  PIPEC_ASSIGN(Shape s, broadcastInputs(ctx, all));
  out[0] = {ctx.inputType(all[0]).dtype, std::move(s)};
  return Status::ok();
}

} // namespace pipec::ir::shape
