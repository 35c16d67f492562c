//===- passes/Autodiff.h - Reverse-mode automatic differentiation -*- C++ -*-===//
//
// Appends the backward graph of a scalar loss to a typed graph. Walking the
// forward nodes in reverse topological order, it applies each node's
// gradient rule (passes/autodiff/GradRules.h) to the gradients of its
// outputs, seeded with dLoss = 1. Gradients of a value used several times
// are summed with Add nodes in the order the uses' rules ran (reverse
// topological order of the users, then input position): deterministic.
//
// Only float values that depend on a trainable parameter and reach the loss
// are differentiated; integer and bool paths (shapes, indices, labels) are
// not. Every trainable parameter the loss depends on gets a gradient value
// named "grad/<param>" of the parameter's type.
//
// Backward nodes are ordinary IR nodes with forwardOf = the forward node
// they differentiate and phase Backward (B), or WeightGrad (W) for nodes
// whose results flow only into parameter gradients and not into the
// gradient of any activation (found by a reverse sweep after emission), so
// that zero-bubble schedules can defer W.
//
// Requires: typed graph (infer-shapes), a topological order. Not a pass
// (it takes options): the compile driver calls differentiate(). Gradients
// are not made graph outputs; the optimizer consumes them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <string>
#include <vector>

namespace pipec::passes {

struct AutodiffOptions {
  /// Name of the loss: a scalar (one-element) float value.
  std::string loss;
  /// Loss scaling: the seed (dLoss = 1) is a constant the runtime sets to
  /// the scale before each step (ir::Value::isLossScaleSeed); `*seed`
  /// receives it.
  bool scalableSeed = false;
  ir::Value **seed = nullptr;
};

/// A trainable parameter and its gradient.
struct GradientPair {
  ir::Value *param;
  ir::Value *grad;
};

/// Emits the backward nodes; returns one pair per parameter the loss
/// depends on, in the order of the graph's constants. Fails, naming the
/// node, op type and opset, when a node on a path from a parameter to the
/// loss has no gradient rule.
Expected<std::vector<GradientPair>> differentiate(ir::Graph &g, const AutodiffOptions &opts);

} // namespace pipec::passes
