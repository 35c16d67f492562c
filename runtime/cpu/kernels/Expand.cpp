//===- runtime/cpu/kernels/Expand.cpp - Expand ----------------------------===//
//
// Expand (opsets 8-13): broadcasts the input to the multidirectional
// broadcast of its shape and the constant 'shape' input. A StridedCopy with
// stride 0 on broadcast axes: contiguous runs are copied with memcpy, a
// broadcast innermost axis is filled by replication.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/StridedView.h"

#include <algorithm>

namespace pipec::cpu {

Expected<KernelPtr> makeExpandKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  PIPEC_ASSIGN(std::vector<int64_t> shape, dm::constInts(d, 1, "shape"));
  auto v = expandView(x.shape, shape);
  if (!v)
    return v.status().withContext(d.where());
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, v->out));
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(v->dims, v->strides, 0, esize)));
}

} // namespace pipec::cpu
