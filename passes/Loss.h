//===- passes/Loss.h - Attaching and finding the training loss -*- C++ -*-===//
//
// Training needs a scalar loss. A model exported for inference has none:
// attachLoss() adds one on top of a named output ("logits"), with a new
// graph input for the labels or targets. findLoss() picks the loss of a
// model that already has one. Both run on a typed graph (after
// infer-shapes); the compile driver calls them before differentiate().
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <string>

namespace pipec::passes {

struct LossOptions {
  /// "cross-entropy": SoftmaxCrossEntropyLoss (mean) of logits [N, C] or
  /// [N, C, d...] against int64 labels [N] / [N, d...];
  /// "mse": mean((logits - target)^2) with a target shaped as the logits.
  std::string kind;
  /// The value the loss is computed from.
  std::string logits;
  /// Name of the new graph input holding labels or targets.
  std::string target = "labels";
  /// Name of the loss value (also made a graph output).
  std::string output = "loss";
};

/// Appends the loss nodes and the target input; returns the loss value.
Expected<ir::Value *> attachLoss(ir::Graph &g, const LossOptions &opts);

/// The loss of a model: the value `name` if given (a float scalar), else
/// the unique scalar float graph output, else the output of the unique
/// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss node with a scalar
/// result. Errors say how to choose ("the model has several scalar outputs
/// (a, b): pick one with --loss-output").
Expected<ir::Value *> findLoss(const ir::Graph &g, const std::string &name = "");

} // namespace pipec::passes
