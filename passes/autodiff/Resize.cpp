//===- passes/autodiff/Resize.cpp - Gradient of Resize and Upsample -------===//
//
// Resize and Upsample are linear in X for fixed roi, scales and sizes
// (compile-time constants: their bits in ir/Ops.def), so dX = A^T dY:
// pipec:ResizeGrad, which carries the forward node's attributes and input
// values (support/Resize.h: resizeGradAttrs) and transposes its taps
// (runtime/cpu/kernels/GradResize.cpp). roi, scales and sizes get no
// gradient: they decide the sampling, not the values.
//
//===----------------------------------------------------------------------===//
#include "support/Resize.h"
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

Status resizeGrad(GradContext &c) {
  for (size_t i = 1; i < c.node().numInputs(); ++i)
    if (c.needsGrad(i))
      return c.error(cat("input ", i, " (roi, scales or sizes) cannot be differentiated"));
  if (!c.needsGrad(0))
    return Status::ok();
  const std::string &op = c.node().opType();
  const ResizeInputSlots slots = resizeInputSlots(op, c.opset());
  ResizeArgs a;
  a.opType = op;
  a.opset = c.opset();
  a.attrs = &c.attrs();
  a.x = c.input(0)->shape();
  auto value = [&](int slot, const Tensor *&t) -> Status {
    t = nullptr;
    if (slot < 0 || static_cast<size_t>(slot) >= c.node().numInputs() || !c.input(slot))
      return Status::ok();
    const ir::Value *v = c.input(static_cast<size_t>(slot));
    if (v->type().numel() == 0)
      return Status::ok();
    if (!v->isConstant())
      return c.error(cat("input ", slot, " must be a constant to differentiate this node"));
    t = &v->constant();
    return Status::ok();
  };
  const bool crop =
      attrString(c.attrs(), "coordinate_transformation_mode", "") == "tf_crop_and_resize";
  PIPEC_TRY(value(slots.roi, a.roi));
  if (!crop)
    a.roi = nullptr;
  PIPEC_TRY(value(slots.scales, a.scales));
  PIPEC_TRY(value(slots.sizes, a.sizes));
  PIPEC_ASSIGN(ir::Value * g, c.emitPipec("ResizeGrad", {c.outGrad(0)}, resizeGradAttrs(a)));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace pipec::passes::autodiff
