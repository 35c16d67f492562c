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
  const TensorDesc &dy = d.inputs[0];
  auto fwd = resizeGradForward(d.attrs);
  if (!fwd)
    return errorf(d.where(), ": ", fwd.status().message());
  auto spec = resolveResize(fwd->args());
  if (!spec)
    return errorf(d.where(), ": forward ", fwd->opType, "-", fwd->opset, ": ",
                  spec.status().message());
  if (dy.shape != spec->out)
    return errorf(d.where(), ": dY ", dy.str(), " does not have the forward output's shape ",
                  shapeStr(spec->out));
  PIPEC_TRY(ew::checkOutput(d, 0, dy.dtype, spec->in));
  std::vector<ResizeTaps> taps;
  for (size_t ax = 0; ax < spec->in.size(); ++ax)
    taps.push_back(resizeAxisTaps(*spec, ax).transposed());
  return ew::dispatchKernel<ew::kFloats>(
      d, dy.dtype, "dY", [&]<typename T>(ew::TypeTag<T>) -> Expected<KernelPtr> {
        return KernelPtr(
            new resize::SeparableKernel<T>(resize::SeparablePlan<T>(dy.shape, taps, 0.0)));
      });
}

} // namespace pipec::cpu
