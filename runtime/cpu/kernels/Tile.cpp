//===- runtime/cpu/kernels/Tile.cpp - Tile --------------------------------===//
//
// Tile (opsets 6-13) with a constant 'repeats' input. Output axis i of size
// r_i * d_i is, in row-major order, the pair of axes [r_i, d_i] with input
// strides [0, s_i]; so Tile is a StridedCopy over the interleaved view
// [r_0, d_0, r_1, d_1, ...], copying contiguous input runs with memcpy.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"

namespace pipec::cpu {

Expected<KernelPtr> makeTileKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  PIPEC_ASSIGN(std::vector<int64_t> repeats, dm::constInts(d, 1, "repeats"));
  if (static_cast<int64_t>(repeats.size()) != x.rank())
    return errorf(d.where(), ": repeats ", shapeStr(repeats), " must have one value per axis of ",
                  x.str());
  const std::vector<int64_t> inStrides = rowMajorStrides(x.shape);
  Shape out, view;
  std::vector<int64_t> strides;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (repeats[i] < 0)
      return errorf(d.where(), ": repeat ", repeats[i], " of axis ", i, " is negative");
    out.push_back(x.shape[i] * repeats[i]);
    view.insert(view.end(), {repeats[i], x.shape[i]});
    strides.insert(strides.end(), {0, inStrides[i]});
  }
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, out));
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(view, strides, 0, esize)));
}

} // namespace pipec::cpu
