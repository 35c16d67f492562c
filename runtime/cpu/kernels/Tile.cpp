//===- runtime/cpu/kernels/Tile.cpp - Tile --------------------------------===//
//
// Tile (opsets 6-13) with a constant 'repeats' input. Output axis i of size
// r_i * d_i is, in row-major order, the pair of axes [r_i, d_i] with input
// strides [0, s_i]; so Tile is a StridedCopy over the interleaved view
// [r_0, d_0, r_1, d_1, ...], copying contiguous input runs with memcpy.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/StridedView.h"

namespace pipec::cpu {

Expected<KernelPtr> makeTileKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  PIPEC_ASSIGN(std::vector<int64_t> repeats, dm::constInts(d, 1, "repeats"));
  auto v = tileView(x.shape, repeats);
  if (!v)
    return v.status().withContext(d.where());
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, v->out));
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(v->dims, v->strides, 0, esize)));
}

} // namespace pipec::cpu
