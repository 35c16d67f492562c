//===- runtime/cpu/kernels/GradResize.cpp - pipec:ResizeGrad --------------===//
//
// The gradient of Resize and Upsample with respect to X: dX = A^T dY for the
// linear map A the forward computes (every mode: nearest's taps have weight
// 1; tf_crop_and_resize's extrapolated outputs have none, so they send no
// gradient). The forward node comes from the attributes
// (support/Resize.h: resizeGradForward); its taps are transposed once, so
// each element of dX is gathered from the dY elements that read it, in
// increasing order: no atomics, and the same bits for any thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ResizeCommon.h"

namespace pipec::cpu {

Expected<KernelPtr> makeResizeGradKernel(const OpDesc &d) {
  PIPEC_TRY(ew::checkArity(d, 1, 1, 1, 1));
  PIPEC_ASSIGN(resize::ResizeNode node, resize::resizeNode(d));
  return ew::dispatchKernel<ew::kFloats>(
      d, d.inputs[0].dtype, "dY", [&]<typename T>(ew::TypeTag<T>) -> Expected<KernelPtr> {
        return KernelPtr(new resize::SeparableKernel<T>(resize::SeparablePlan<T>(node.in, node.taps, 0.0)));
      });
}

} // namespace pipec::cpu
