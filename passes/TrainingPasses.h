//===- passes/TrainingPasses.h - The training transforms as passes -*- C++ -*-===//
//
// The transforms that turn a model into a training graph, as passes the
// pass manager runs (so --print-ir-after, --verify-each and --time-passes
// see them) with their options given at construction:
//   loss            attach a loss (passes/Loss.h: cross-entropy or mse of
//                   a value against a new target input), or find the
//                   model's own scalar loss output
//   training-state  expose BatchNormalization's running statistics as
//                   state updated after each micro-batch (TrainingState.h)
//   autodiff        reverse-mode gradients of every parameter (Autodiff.h)
//   recompute       rematerialization per stage (Recompute.h); it needs the
//                   partition, so it runs after the partitioner
// What they produce (the loss, the state updates, the gradient pairs)
// goes into a TrainingResults the caller owns, for the plan emitter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "passes/Autodiff.h"
#include "passes/Loss.h"
#include "passes/PassManager.h"
#include "passes/Recompute.h"
#include "passes/TrainingState.h"

#include <memory>
#include <vector>

namespace pipec::passes {

/// What the training passes made, as they ran.
struct TrainingResults {
  ir::Value *loss = nullptr;
  /// With loss scaling (set before autodiff): the seed autodiff made.
  bool scaleLoss = false;
  ir::Value *lossScaleSeed = nullptr;
  std::vector<StateUpdate> stateUpdates;
  std::vector<GradientPair> gradients;
  RecomputeStats recompute;
};

/// Attaches the loss `opts` describes; with opts.kind empty, finds the
/// model's loss output `lossOutput` (empty: the only scalar one) instead.
std::unique_ptr<Pass> createLossPass(LossOptions opts, std::string lossOutput,
                                     TrainingResults &out);
std::unique_ptr<Pass> createTrainingStatePass(TrainingResults &out);
/// Differentiates out.loss (the loss pass runs first).
std::unique_ptr<Pass> createAutodiffPass(TrainingResults &out);
std::unique_ptr<Pass> createRecomputePass(RecomputeOptions opts, TrainingResults &out);
/// fuse-elementwise (passes/Fusion.cpp) on a training graph: the values
/// `protect` names (loss, gradients, state updates) are never fused away.
std::unique_ptr<Pass> createFuseElementwisePass(const TrainingResults *protect);
/// fuse-gemm-epilogue (passes/Fusion.cpp) on a training graph, likewise.
std::unique_ptr<Pass> createFuseGemmEpiloguePass(const TrainingResults *protect);
/// keep-attention-probs (passes/AttentionProbs.cpp), after autodiff: the
/// forward pipec:Attention gives its probabilities to the gradient where
/// they are no larger than Q, KT and V together.
std::unique_ptr<Pass> createKeepAttentionProbsPass();

/// Flags and descriptions of the training passes.
const std::vector<PassInfo> &trainingPasses();

} // namespace pipec::passes
