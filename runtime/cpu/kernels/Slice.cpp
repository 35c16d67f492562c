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
  const size_t n = starts.size();
  if (axes.empty())
    for (size_t i = 0; i < n; ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (steps.empty())
    steps.assign(n, 1);
  if (ends.size() != n || axes.size() != n || steps.size() != n)
    return errorf(d.where(), ": starts, ends, axes and steps have ", n, ", ", ends.size(),
                  ", ", axes.size(), " and ", steps.size(), " values; they must agree");

  const std::vector<int64_t> inStrides = rowMajorStrides(x.shape);
  Shape outShape = x.shape;
  std::vector<int64_t> strides = inStrides;
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, axes[i], x.rank(), "slice axis"));
    if (seen[axis])
      return errorf(d.where(), ": axis ", axis, " is sliced twice");
    seen[axis] = true;
    // -INT64_MAX for INT64_MIN keeps the negation below defined; either
    // takes one element.
    const int64_t dim = x.shape[axis], step = std::max(steps[i], -INT64_MAX);
    if (step == 0)
      return errorf(d.where(), ": step of axis ", axis, " is 0");
    int64_t start = starts[i], end = ends[i];
    if (start < 0)
      start += dim;
    if (end < 0)
      end += dim;
    int64_t len = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      len = end > start ? (end - start - 1) / step + 1 : 0;
    } else if (dim > 0) {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      len = start > end ? (start - end - 1) / (-step) + 1 : 0;
    }
    outShape[axis] = len;
    strides[axis] = inStrides[axis] * step;
    if (len > 0)
      offset += start * inStrides[axis];
  }
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, outShape));
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(outShape, strides, offset, esize)));
}

} // namespace pipec::cpu
