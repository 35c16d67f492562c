//===- support/Resize.h - The geometry of Resize and Upsample --*- C++ -*-===//
//
// ONNX Resize (opsets 10-19) and its deprecated alias Upsample (7-9) are
// read in four places: the shape rule (ir/shape/Resize.cpp), the gradient
// rule (passes/autodiff/Resize.cpp), and the CPU kernels of the forward op
// and of pipec:ResizeGrad (runtime/cpu/kernels/Resize.cpp, GradResize.cpp).
// One reader, here, so that they agree; like support/FusedOps.h it is shared
// by the compiler and the runtime. Errors name no node: callers add it.
//
// resolveResize() turns a node's attributes and constant inputs into a
// ResizeSpec: per axis the input and output extents and the scale used by
// the coordinate transformation, with every opset's defaults applied
// (opset 10 and Upsample: asymmetric coordinates, and for nearest the floor
// of the coordinate, or its ceiling on an axis that shrinks, as ONNX
// Runtime does). Attribute values pipec does not know are refused, never
// ignored. resizeAxisTaps() then gives, per output coordinate of one axis,
// the input coordinates it reads and their weights: nearest (one tap),
// linear (two), cubic (four, edge-clamped or, with exclude_outside,
// renormalised over the input), and with antialias (opset 18) a linear or
// cubic filter stretched by 1/scale when the axis shrinks, its window cut
// to the input and its weights renormalised (as PyTorch's and ONNX
// Runtime's antialiasing). An N-dimensional resize is the product of its
// axes' taps, which the kernels apply one axis at a time.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Attribute.h"
#include "support/Error.h"
#include "support/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec {

enum class ResizeMode { Nearest, Linear, Cubic };

enum class ResizeCoord {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNn,
  TfCropAndResize,
};

enum class ResizeNearest {
  RoundPreferFloor,
  RoundPreferCeil,
  Floor,
  Ceil,
  /// Opset 10 and Upsample: floor, or ceil where the axis shrinks.
  Simple,
};

/// Everything a Resize or Upsample node's output depends on besides X.
struct ResizeSpec {
  Shape in, out;
  /// Per axis, the scale of the coordinate transformation (1 for an axis
  /// that is not resized).
  std::vector<double> scales;
  /// Per axis, the output's extent as a real number, scale * extent, as
  /// ONNX's align_corners, pytorch_half_pixel, half_pixel_symmetric and
  /// tf_crop_and_resize formulas use it (exactly the size where sizes are
  /// given with the policy stretch).
  std::vector<double> lengths;
  /// Per axis, the region of interest of tf_crop_and_resize (0 and 1 where
  /// none is given).
  std::vector<double> roiStart, roiEnd;
  ResizeMode mode = ResizeMode::Nearest;
  ResizeCoord coord = ResizeCoord::HalfPixel;
  ResizeNearest nearest = ResizeNearest::RoundPreferFloor;
  double cubicA = -0.75;
  bool excludeOutside = false;
  double extrapolation = 0.0;
  bool antialias = false;
};

/// What resolveResize reads: the op ("Resize" or "Upsample"), its opset,
/// its attributes, X's shape and the values of the optional inputs (null
/// where absent; a tensor of no elements counts as absent, as exporters
/// write an empty roi or scales next to sizes).
struct ResizeArgs {
  std::string opType = "Resize";
  int64_t opset = 0;
  const AttrMap *attrs = nullptr;
  Shape x;
  const Tensor *roi = nullptr;
  const Tensor *scales = nullptr;
  const Tensor *sizes = nullptr;
};

/// The input index of roi, scales and sizes for an op and opset (-1 where
/// the op has no such input; Upsample-7/8 and Resize-10 have no roi).
struct ResizeInputSlots {
  int roi = -1, scales = -1, sizes = -1;
};
ResizeInputSlots resizeInputSlots(const std::string &opType, int64_t opset);

/// Reads and checks everything; errors say which attribute or input is
/// wrong and why (no node name: callers prefix it).
Expected<ResizeSpec> resolveResize(const ResizeArgs &args);

/// One axis's sampling: output coordinate o reads input coordinates
/// idx[k] with weights w[k] for k in [start[o], start[o+1]); outside[o] is
/// set where tf_crop_and_resize samples outside the input (the output is
/// extrapolation_value there, and o has no taps).
struct ResizeTaps {
  int64_t inSize = 0, outSize = 0;
  std::vector<int64_t> start, idx;
  std::vector<double> w;
  std::vector<uint8_t> outside;
  bool anyOutside() const;
  /// Output o is input o with weight 1 for every o (the axis is unchanged).
  bool identity() const;
  /// The taps of the transposed map: per input coordinate, the output
  /// coordinates that read it, in increasing order, with their weights
  /// (what the gradient gathers). outside is empty.
  ResizeTaps transposed() const;
};

/// The taps of axis `axis` of `spec`. Exactly-zero weights are dropped.
ResizeTaps resizeAxisTaps(const ResizeSpec &spec, size_t axis);

/// pipec:ResizeGrad (dY -> dX) carries its forward node in attributes:
/// `forward` (the op type), `forward_opset`, `shape` (X's shape), the
/// forward's own attributes, and the values of its roi, scales and sizes
/// inputs as the tensor attributes `roi_value`, `scales_value` and
/// `sizes_value`, so that its kernel resolves the same ResizeSpec.
AttrMap resizeGradAttrs(const ResizeArgs &forward);

/// The forward node a pipec:ResizeGrad's attributes describe.
struct ResizeGradForward {
  std::string opType;
  int64_t opset = 0;
  AttrMap attrs;
  Shape x;
  Tensor roi, scales, sizes;
  /// Points into this object: keep it alive while the args are used.
  ResizeArgs args() const;
};
Expected<ResizeGradForward> resizeGradForward(const AttrMap &gradAttrs);

} // namespace pipec
