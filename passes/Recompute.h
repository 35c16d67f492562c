//===- passes/Recompute.h - Rematerialization per stage --------*- C++ -*-===//
//
// Trades compute for memory, after the partitioner has placed every node.
// On a stage with a policy other than `none`, the forward values its
// backward nodes read are no longer kept from the forward pass to the
// backward pass (stashed, once per micro-batch in flight): ordinary IR
// nodes with phase Recompute (clones of the forward nodes, forwardOf = the
// original) compute them again just before the stage's backward, and the
// backward nodes read the clones.
//
//   none       keep everything (no clones).
//   full       GPipe: keep only the stage's inputs (values other stages,
//              graph inputs or constants provide); recompute every forward
//              value of the stage that the backward reads.
//   selective  keep the outputs of expensive ops (MatMul, Gemm, Conv,
//              ConvTranspose, Einsum: most FLOPs per byte kept), recompute
//              the cheap ones between them (normalisations, activations,
//              softmax, dropout, reshapes), which hold most of the bytes.
//
// `auto` (the least recompute that fits each stage's memory budget) is
// decided by the partitioner's memory model, which passes one of the three
// policies per stage. Clones run the same kernels on the same inputs, and a
// recomputed Dropout replays its forward node's random stream (the plan
// keys it by forwardOf), so results are bitwise those of `none`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <functional>
#include <string>
#include <vector>

namespace pipec::passes {

/// The policies a stage can get (auto is resolved before this pass).
bool isStagePolicy(const std::string &policy);

struct RecomputeOptions {
  /// Policy per stage: none, full or selective.
  std::vector<std::string> policies;
  /// Stage of a node (the partition).
  std::function<int(const ir::Node *)> stageOf;
  /// Records the stage of a clone.
  std::function<void(const ir::Node *, int)> assign;
};

struct RecomputeStats {
  size_t clonedNodes = 0;
  /// Per stage: bytes of forward values per micro-batch that the backward
  /// now reads from clones instead of keeping them.
  std::vector<uint64_t> bytesNotStashed;
};

/// True for ops whose outputs `selective` keeps.
bool isExpensiveToRecompute(const ir::Node &n);

Expected<RecomputeStats> rematerialize(ir::Graph &g, const RecomputeOptions &opts);

} // namespace pipec::passes
