//===- runtime/cpu/kernels/Slice.cpp - Slice ------------------------------===//
//
// Slice (opsets 1-13): starts/ends/axes attributes before opset 10, constant
// starts/ends/axes/steps inputs from 10 on. Starts and ends are clamped as the
// spec says ([0, dim] for positive steps, [0, dim-1] and [-1, dim-1] for
// negative ones), so the result is a strided view of the input: a
// StridedCopy with a start offset and stride * step per axis, negative for
// reversed axes.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/StridedView.h"

#include <algorithm>
#include <cstdint>

namespace pipec::cpu {

namespace {
Status readSliceArgs(const OpDesc &d, std::vector<int64_t> &starts, std::vector<int64_t> &ends,
                     std::vector<int64_t> &axes, std::vector<int64_t> &steps) {
  if (d.opset < 10) {
    if (!attrHas(d.attrs, "starts") || !attrHas(d.attrs, "ends"))
      return errorf(d.where(), ": attributes 'starts' and 'ends' are required before opset 10");
    starts = attrInts(d.attrs, "starts");
    ends = attrInts(d.attrs, "ends");
    axes = attrInts(d.attrs, "axes");
    return Status::ok();
  }
  PIPEC_TRY(dm::checkArity(d, 3, 1));
  PIPEC_ASSIGN(starts, dm::constInts(d, 1, "starts"));
  PIPEC_ASSIGN(ends, dm::constInts(d, 2, "ends"));
  if (d.hasInput(3)) {
    PIPEC_ASSIGN(axes, dm::constInts(d, 3, "axes"));
  }
  if (d.hasInput(4)) {
    PIPEC_ASSIGN(steps, dm::constInts(d, 4, "steps"));
  }
  return Status::ok();
}
} // namespace

Expected<KernelPtr> makeSliceKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  std::vector<int64_t> starts, ends, axes, steps;
  PIPEC_TRY(readSliceArgs(d, starts, ends, axes, steps));
  auto v = sliceView(x.shape, starts, ends, axes, steps);
  if (!v)
    return v.status().withContext(d.where());
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, v->out));
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(v->dims, v->strides, v->offset, esize)));
}

} // namespace pipec::cpu
