//===- support/StridedView.h - Slice, Expand and Tile as strided views -*- C++ -*-===//
//
// Slice, Expand and Tile read their input as a strided view: output
// element i (row-major over `dims`) is input element offset + sum over
// axes of coordinate * stride (strides may be 0 or negative). The CPU
// kernels (runtime/cpu/kernels/Slice.cpp, Expand.cpp, Tile.cpp) copy such
// views with dm::StridedCopy, the CUDA kernels with one thread an element;
// both take the geometry from here. Tile's view interleaves [repeats_i,
// d_i] per axis, so it has twice the input's rank.
//
// Errors are the ops' (a step of 0, shapes that do not broadcast...), for
// the caller to prefix with the node.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"
#include "support/Tensor.h"

#include <cstdint>
#include <vector>

namespace pipec {

struct StridedView {
  Shape out;                    ///< the op's output shape
  Shape dims;                   ///< the view's axes (out, or Tile's interleaved axes)
  std::vector<int64_t> strides; ///< per view axis, in input elements
  int64_t offset = 0;           ///< of output element 0, in input elements
};

/// Slice with ONNX's clamping of starts and ends (axes and steps as given:
/// `axes` empty means 0..n-1, `steps` empty all 1).
Expected<StridedView> sliceView(const Shape &in, const std::vector<int64_t> &starts, const std::vector<int64_t> &ends,
                                std::vector<int64_t> axes, std::vector<int64_t> steps);
/// Expand to the broadcast of the input's shape and `shape`.
Expected<StridedView> expandView(const Shape &in, const std::vector<int64_t> &shape);
/// Tile by `repeats` (one per axis, not negative).
Expected<StridedView> tileView(const Shape &in, const std::vector<int64_t> &repeats);

} // namespace pipec
