//===- ir/shape/RuleUtil.h - Helpers shared by the shape rules -*- C++ -*-===//
//
// Internal to ir/shape/: checks and look-ups every rule family needs (input
// ranks and dtypes, compile-time values of shape inputs, axes), all of which
// fail with ShapeContext::error so that messages name the node, op type and
// opset. Also declares each family's rules for the table in ShapeRules.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/shape/ShapeRules.h"

#include <string>
#include <vector>

namespace pipec::ir::shape {

using Outputs = std::vector<TensorDesc>;

/// "input 1 'shape'" (the value's name), for messages.
std::string inputLabel(const ShapeContext &ctx, size_t i);

/// Fails unless input i has exactly `rank` dimensions.
Status expectRank(const ShapeContext &ctx, size_t i, int64_t rank);
/// Fails unless input i has at least `rank` dimensions.
Status expectMinRank(const ShapeContext &ctx, size_t i, int64_t rank);
/// Fails unless the present inputs among `idx` have the dtype of the first.
Status expectSameDType(const ShapeContext &ctx, const std::vector<size_t> &idx);
/// The result type of a product of inputs 0 and 1 (a convolution or its
/// gradients): their common type, or f32 for 16-bit operands under
/// `output_dtype` (support/FusedOps.h productResultType); the present
/// inputs among `others` (a bias) must have the result type.
Expected<DType> expectProductDType(const ShapeContext &ctx, const std::vector<size_t> &others);
/// Fails unless input i has dtype `t`.
Status expectDType(const ShapeContext &ctx, size_t i, DType t);
/// Fails unless input i is int32 or int64 (indices, targets).
Status expectIndexDType(const ShapeContext &ctx, size_t i);

/// The value of input i as integers. Fails when the input is not a
/// compile-time constant ("the output shape depends on the value of input
/// 'x' ..."), or is not an integer tensor.
Expected<std::vector<int64_t>> constInts(const ShapeContext &ctx, size_t i);
/// The value of input i (any dtype); same failure when not constant.
Expected<const Tensor *> constValue(const ShapeContext &ctx, size_t i);

/// `broadcastShapes` over several inputs, with a message naming them.
Expected<Shape> broadcastInputs(const ShapeContext &ctx, const std::vector<size_t> &idx);
/// Fails unless `from` broadcasts to `to` without changing `to` (ONNX's
/// unidirectional broadcasting); `what` names `from` in the message.
Status expectUnidirectional(const ShapeContext &ctx, const Shape &from, const Shape &to,
                            const std::string &what);

/// Normalises an axis attribute or value against `rank`; `what` names it.
Expected<int64_t> axisFor(const ShapeContext &ctx, int64_t axis, int64_t rank,
                          const std::string &what = "axis");
/// Normalises a list of axes and rejects duplicates.
Expected<std::vector<int64_t>> axesFor(const ShapeContext &ctx, const std::vector<int64_t> &axes,
                                       int64_t rank, const std::string &what = "axes");

/// Sets every output to input 0's type (unary elementwise ops).
inline Status sameAsInput(const ShapeContext &ctx, Outputs &out) {
  for (TensorDesc &o : out)
    o = ctx.inputType(0);
  return Status::ok();
}

// Elementwise.cpp
Status unaryRule(const ShapeContext &, Outputs &);
Status boolUnaryRule(const ShapeContext &, Outputs &);
Status logicalNotRule(const ShapeContext &, Outputs &);
Status castRule(const ShapeContext &, Outputs &);
Status clipRule(const ShapeContext &, Outputs &);
Status dropoutRule(const ShapeContext &, Outputs &);
Status binaryRule(const ShapeContext &, Outputs &);
Status powRule(const ShapeContext &, Outputs &);
Status compareRule(const ShapeContext &, Outputs &);
Status logicalRule(const ShapeContext &, Outputs &);
Status preluRule(const ShapeContext &, Outputs &);
Status whereRule(const ShapeContext &, Outputs &);
Status variadicRule(const ShapeContext &, Outputs &);

// Linalg.cpp and Einsum.cpp
Status matMulRule(const ShapeContext &, Outputs &);
Status gemmRule(const ShapeContext &, Outputs &);
Status einsumRule(const ShapeContext &, Outputs &);

// Norm.cpp
Status batchNormRule(const ShapeContext &, Outputs &);
Status instanceNormRule(const ShapeContext &, Outputs &);
Status layerNormRule(const ShapeContext &, Outputs &);
Status softmaxRule(const ShapeContext &, Outputs &);
Status lrnRule(const ShapeContext &, Outputs &);

// Conv.cpp
Status convRule(const ShapeContext &, Outputs &);
Status nhwcConvRule(const ShapeContext &, Outputs &);
Status nhwcPoolRule(const ShapeContext &, Outputs &);
Status convTransposeRule(const ShapeContext &, Outputs &);
Status poolRule(const ShapeContext &, Outputs &);
Status averagePoolRule(const ShapeContext &, Outputs &);
Status globalPoolRule(const ShapeContext &, Outputs &);

// Reduce.cpp
Status argReduceRule(const ShapeContext &, Outputs &);
Status reduceRule(const ShapeContext &, Outputs &);

// DataMovement.cpp
Status concatRule(const ShapeContext &, Outputs &);
Status gatherRule(const ShapeContext &, Outputs &);
Status gatherElementsRule(const ShapeContext &, Outputs &);
Status transposeRule(const ShapeContext &, Outputs &);
Status flattenRule(const ShapeContext &, Outputs &);
Status tileRule(const ShapeContext &, Outputs &);
Status expandRule(const ShapeContext &, Outputs &);
Status triluRule(const ShapeContext &, Outputs &);
Status padRule(const ShapeContext &, Outputs &);
Status splitRule(const ShapeContext &, Outputs &);

// ShapeOps.cpp
Status constantRule(const ShapeContext &, Outputs &);
Status constantOfShapeRule(const ShapeContext &, Outputs &);
Status rangeRule(const ShapeContext &, Outputs &);
Status reshapeRule(const ShapeContext &, Outputs &);
Status shapeRule(const ShapeContext &, Outputs &);
Status sizeRule(const ShapeContext &, Outputs &);
Status sliceRule(const ShapeContext &, Outputs &);
Status squeezeRule(const ShapeContext &, Outputs &);
Status unsqueezeRule(const ShapeContext &, Outputs &);

// Resize.cpp (Resize, Upsample and pipec:ResizeGrad)
Status resizeRule(const ShapeContext &, Outputs &);
Status resizeGradRule(const ShapeContext &, Outputs &);

// Loss.cpp
Status nllLossRule(const ShapeContext &, Outputs &);
Status softmaxCrossEntropyRule(const ShapeContext &, Outputs &);

// Grad.cpp (domain pipec)
Status elementwiseGradRule(const ShapeContext &, Outputs &);
Status axisGradRule(const ShapeContext &, Outputs &);
Status lossGradRule(const ShapeContext &, Outputs &);
Status layerNormGradRule(const ShapeContext &, Outputs &);
Status layerNormScaleGradRule(const ShapeContext &, Outputs &);
Status gatherGradRule(const ShapeContext &, Outputs &);
Status shapeAttrGradRule(const ShapeContext &, Outputs &);
Status maxPoolGradRule(const ShapeContext &, Outputs &);
Status batchNormStatsRule(const ShapeContext &, Outputs &);
Status batchNormGradRule(const ShapeContext &, Outputs &);
Status batchNormScaleGradRule(const ShapeContext &, Outputs &);
// Fused ops of the domain pipec (Grad.cpp).
Status maskedSoftmaxRule(const ShapeContext &, Outputs &);
Status fusedElementwiseRule(const ShapeContext &, Outputs &);
Status fusedGemmRule(const ShapeContext &, Outputs &);
Status attentionRule(const ShapeContext &, Outputs &);
Status attentionGradRule(const ShapeContext &, Outputs &);

} // namespace pipec::ir::shape
