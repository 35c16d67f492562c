//===- runtime/cpu/kernels/Expand.cpp - Expand ----------------------------===//
//
// Expand (opsets 8-13): broadcasts the input to the multidirectional
// broadcast of its shape and the constant 'shape' input. A StridedCopy with
// stride 0 on broadcast axes: contiguous runs are copied with memcpy, a
// broadcast innermost axis is filled by replication.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"

#include <algorithm>

namespace pipec::cpu {

Expected<KernelPtr> makeExpandKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  PIPEC_ASSIGN(std::vector<int64_t> shape, dm::constInts(d, 1, "shape"));
  const int64_t rank = std::max<int64_t>(x.rank(), static_cast<int64_t>(shape.size()));
  const std::vector<int64_t> inStrides = rowMajorStrides(x.shape);
  Shape out(static_cast<size_t>(rank));
  std::vector<int64_t> strides(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t xi = i - (rank - x.rank()), si = i - (rank - static_cast<int64_t>(shape.size()));
    const int64_t a = xi >= 0 ? x.shape[xi] : 1, b = si >= 0 ? shape[si] : 1;
    if (a != b && a != 1 && b != 1)
      return errorf(d.where(), ": cannot broadcast ", x.str(), " to shape ", shapeStr(shape),
                    " (axis ", i, ": ", a, " vs ", b, ")");
    out[i] = a == 1 ? b : a;
    strides[i] = a == 1 ? 0 : inStrides[xi];
  }
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, out));
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(out, strides, 0, esize)));
}

} // namespace pipec::cpu
