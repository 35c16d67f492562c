//===- passes/autodiff/GradRules.h - Gradient rules per op -----*- C++ -*-===//
//
// A gradient rule emits the backward nodes of one forward node: given the
// gradients flowing into the node's outputs, it appends ordinary IR nodes
// (ONNX ops where they exist, ops of the domain "pipec" otherwise) that
// compute the gradients of the inputs that need one, and reports them with
// GradContext::setGrad. Rules live in this folder by op family and are
// listed in the explicit table of GradRules.cpp; the driver is
// passes/Autodiff.cpp. Every value a rule emits is typed as it is emitted
// (the shape rules of ir/shape/ run on each new node).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "passes/NodeBuilder.h"

#include <string>
#include <string_view>
#include <vector>

namespace pipec::passes::autodiff {

/// What a rule sees and how it emits nodes (NodeBuilder's building blocks).
/// Emitted nodes are appended to the graph with phase Backward and
/// forwardOf = the forward node's name; the driver refines phases once
/// everything is emitted.
class GradContext : public NodeBuilder {
public:
  GradContext(ir::Graph &g, ir::Node &fwd, std::vector<ir::Value *> outGrads,
              std::vector<bool> needsGrad);

  const ir::Node &node() const { return fwd_; }
  const AttrMap &attrs() const { return fwd_.attrs(); }
  ir::Value *input(size_t i) const { return fwd_.input(i); }
  ir::Value *output(size_t i) const { return fwd_.output(i); }

  /// Gradient of output i, or null when no gradient flows into it.
  ir::Value *outGrad(size_t i) const { return i < outGrads_.size() ? outGrads_[i] : nullptr; }
  /// Whether input i needs a gradient (a float value that depends on a
  /// trainable parameter).
  bool needsGrad(size_t i) const { return i < needs_.size() && needs_[i]; }
  /// Reports the gradient of input i (typed as the input).
  void setGrad(size_t i, ir::Value *grad);
  /// Gradients set so far, one slot per input (null where none).
  const std::vector<ir::Value *> &inputGrads() const { return inGrads_; }

  /// An error naming the forward node, its op type and opset.
  Status error(const std::string &message) const override;

private:
  ir::Node &fwd_;
  std::vector<ir::Value *> outGrads_;
  std::vector<bool> needs_;
  std::vector<ir::Value *> inGrads_;
};

/// A rule; returns an error when the node's configuration is unsupported.
using GradRule = Status (*)(GradContext &);

/// The rule for an op, or null.
GradRule findGradRule(std::string_view domain, std::string_view opType);
/// The ops with a rule, "Gemm" in the default domain and "pipec:Attention"
/// in pipec's, in table order (checked against ir/Ops.def's Grad trait by
/// tests/unit/OpRegistryTest.cpp).
std::vector<std::string> gradRuleOps();

// Elementwise.cpp
Status addGrad(GradContext &);
Status subGrad(GradContext &);
Status mulGrad(GradContext &);
Status divGrad(GradContext &);
Status negGrad(GradContext &);
Status powGrad(GradContext &);
Status sqrtGrad(GradContext &);
Status expGrad(GradContext &);
Status logGrad(GradContext &);
Status tanhGrad(GradContext &);
Status sigmoidGrad(GradContext &);
Status reluGrad(GradContext &);
Status identityGrad(GradContext &);
Status dropoutGrad(GradContext &);
Status erfGrad(GradContext &);
Status geluGrad(GradContext &);
Status whereGrad(GradContext &);

// Activation.cpp
Status absGrad(GradContext &);
Status castGrad(GradContext &);
Status clipGrad(GradContext &);
Status cosGrad(GradContext &);
Status eluGrad(GradContext &);
Status hardSigmoidGrad(GradContext &);
Status leakyReluGrad(GradContext &);
Status reciprocalGrad(GradContext &);
Status seluGrad(GradContext &);
Status sinGrad(GradContext &);
Status softplusGrad(GradContext &);
Status softsignGrad(GradContext &);

// Variadic.cpp
Status maxGrad(GradContext &);
Status meanGrad(GradContext &);
Status minGrad(GradContext &);
Status sumGrad(GradContext &);

// Linalg.cpp
Status gemmGrad(GradContext &);
Status matMulGrad(GradContext &);

// Einsum.cpp
Status einsumGrad(GradContext &);

// Reduce.cpp
Status reduceSumGrad(GradContext &);
Status reduceMeanGrad(GradContext &);
Status reduceMaxGrad(GradContext &);
Status reduceMinGrad(GradContext &);
Status reduceProdGrad(GradContext &);
Status reduceL1Grad(GradContext &);
Status reduceL2Grad(GradContext &);
Status reduceLogSumExpGrad(GradContext &);
Status reduceSumSquareGrad(GradContext &);

// Loss.cpp
Status softmaxCrossEntropyGrad(GradContext &);
Status nllLossGrad(GradContext &);

// Norm.cpp
Status softmaxGrad(GradContext &);
Status maskedSoftmaxGrad(GradContext &);
Status attentionGrad(GradContext &);
Status logSoftmaxGrad(GradContext &);
Status layerNormGrad(GradContext &);
Status instanceNormGrad(GradContext &);

// Cnn.cpp
Status globalAveragePoolGrad(GradContext &);
Status convGrad(GradContext &);
Status convTransposeGrad(GradContext &);
Status batchNormGrad(GradContext &);
Status maxPoolGrad(GradContext &);
Status averagePoolGrad(GradContext &);

// DataMovement.cpp
Status transposeGrad(GradContext &);
Status reshapeLikeGrad(GradContext &); ///< Reshape, Flatten, Squeeze, Unsqueeze
Status gatherGrad(GradContext &);
Status concatGrad(GradContext &);
Status splitGrad(GradContext &);
Status sliceGrad(GradContext &);
Status expandGrad(GradContext &);
Status padGrad(GradContext &);
Status tileGrad(GradContext &);

// Resize.cpp
Status resizeGrad(GradContext &); ///< Resize, Upsample

/// For unary ops: dX = dY * f where f is computed by `factor`.
template <typename F> Status unaryTimes(GradContext &c, F &&factor) {
  if (!c.needsGrad(0))
    return Status::ok();
  PIPEC_ASSIGN(ir::Value * f, factor());
  PIPEC_ASSIGN(ir::Value * g, c.mul(c.outGrad(0), f));
  c.setGrad(0, g);
  return Status::ok();
}

} // namespace pipec::passes::autodiff
