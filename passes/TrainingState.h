//===- passes/TrainingState.h - State a training step updates --*- C++ -*-===//
//
// Besides its parameters, a model can hold state that training updates but
// no gradient touches: BatchNormalization's running mean and variance.
// exposeRunningStatistics() gives every BatchNormalization whose running
// statistics are constants the outputs that hold the updated statistics
// (outputs 1 and 2, as ONNX defines them in training mode:
//   running_mean = input_mean * momentum + batch_mean * (1 - momentum)
// and the same for the variance, the batch variance being the biased one
// the node normalises with). The runtime copies each micro-batch's updated
// statistics back into the constants right after that micro-batch's
// forward, in ascending micro-batch order, so M micro-batches apply M
// updates in sequence, on whichever stage holds the node.
//
// PyTorch updates running_var with the unbiased batch variance (a factor
// n/(n-1), n = N*H*W per channel); pipec follows the ONNX definition.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <vector>

namespace pipec::passes {

/// A constant that a forward value replaces after every micro-batch.
struct StateUpdate {
  ir::Value *state;
  ir::Value *value;
};

/// Call before differentiate(): rewrites BatchNormalization nodes in place
/// (same names) and returns the updates, in graph order.
Expected<std::vector<StateUpdate>> exposeRunningStatistics(ir::Graph &g);

} // namespace pipec::passes
