//===- ir/shape/Resize.cpp - Shape rules of Resize, Upsample, ResizeGrad --===//
//
// Resize (opsets 10-19) and Upsample (7-9): the output's extents come from
// the constant scales (floor(extent * scale)) or sizes (with axes and
// keep_aspect_ratio_policy from opset 18); support/Resize.h reads them, as
// the kernels do. The roi input matters only to tf_crop_and_resize (it
// moves the sampling points, not the output's extents, as in ONNX's own
// shape inference and ONNX Runtime). pipec:ResizeGrad (autodiff's gradient
// of both) gives dX the forward input's shape.
//
//===----------------------------------------------------------------------===//
#include "support/Resize.h"
#include "ir/shape/RuleUtil.h"

#include <algorithm>

namespace pipec::ir::shape {

namespace {

/// Input `slot`'s value: null when the slot is absent or holds no
/// elements, an error when it is needed and not a compile-time constant.
Expected<const Tensor *> optionalValue(const ShapeContext &ctx, int slot, bool needed) {
  if (slot < 0 || !ctx.hasInput(static_cast<size_t>(slot)) ||
      ctx.inputType(static_cast<size_t>(slot)).numel() == 0)
    return static_cast<const Tensor *>(nullptr);
  const Tensor *t = ctx.inputValue(static_cast<size_t>(slot));
  if (!t && needed)
    return constValue(ctx, static_cast<size_t>(slot));
  return t;
}

} // namespace

Status resizeRule(const ShapeContext &ctx, Outputs &out) {
  const std::string &op = ctx.node().opType();
  const TensorDesc &x = ctx.inputType(0);
  const ResizeInputSlots slots = resizeInputSlots(op, ctx.opset());
  const size_t maxInputs =
      static_cast<size_t>(std::max({slots.roi, slots.scales, slots.sizes}) + 1);
  if (ctx.numInputs() > std::max<size_t>(maxInputs, 1))
    for (size_t i = std::max<size_t>(maxInputs, 1); i < ctx.numInputs(); ++i)
      if (ctx.hasInput(i))
        return ctx.error(cat(op, "-", ctx.opset(), " takes ", std::max<size_t>(maxInputs, 1),
                             " inputs, the node has ", ctx.numInputs()));
  ResizeArgs a;
  a.opType = op;
  a.opset = ctx.opset();
  a.attrs = &ctx.attrs();
  a.x = x.shape;
  const bool crop =
      attrString(ctx.attrs(), "coordinate_transformation_mode", "") == "tf_crop_and_resize";
  PIPEC_ASSIGN(a.roi, optionalValue(ctx, slots.roi, crop));
  PIPEC_ASSIGN(a.scales, optionalValue(ctx, slots.scales, true));
  PIPEC_ASSIGN(a.sizes, optionalValue(ctx, slots.sizes, true));
  auto spec = resolveResize(a);
  if (!spec)
    return ctx.error(spec.status().message());
  if (spec->mode != ResizeMode::Nearest && x.dtype != DType::F32 && x.dtype != DType::F64)
    return ctx.error(cat("mode '", attrString(ctx.attrs(), "mode", "nearest"),
                         "' needs float32 or float64 X, got ", x.str()));
  out[0] = {x.dtype, spec->out};
  return Status::ok();
}

Status resizeGradRule(const ShapeContext &ctx, Outputs &out) {
  // dY -> dX of the forward input's shape (attribute `shape`), after the
  // forward node that the attributes describe (support/Resize.h).
  const TensorDesc &dy = ctx.inputType(0);
  if (dy.dtype != DType::F32 && dy.dtype != DType::F64)
    return ctx.error(cat(inputLabel(ctx, 0), " must be float32 or float64, it is ", dy.str()));
  auto fwd = resizeGradForward(ctx.attrs());
  if (!fwd)
    return ctx.error(fwd.status().message());
  auto spec = resolveResize(fwd->args());
  if (!spec)
    return ctx.error(cat("forward ", fwd->opType, "-", fwd->opset, ": ", spec.status().message()));
  if (spec->out != dy.shape)
    return ctx.error(cat("the output gradient ", dy.str(),
                         " does not have the forward output's shape ", shapeStr(spec->out)));
  out[0] = {dy.dtype, fwd->x};
  return Status::ok();
}

} // namespace pipec::ir::shape
