//===- passes/FusionUtil.h - What the fusion passes share ------*- C++ -*-===//
//
// Helpers of the fusion passes (passes/Fusion.cpp: the pattern fusions and
// fuse-gemm-epilogue; passes/FuseElementwise.cpp): type tests, the names of
// fused nodes, the values a training graph must keep, and the forward-node
// names of backward nodes after their forward node was fused.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "passes/TrainingPasses.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace pipec::passes {

/// Whether `v` is a typed float32 value.
inline bool isF32(const ir::Value *v) { return v && v->typeKnown() && v->type().dtype == DType::F32; }

/// The name of a node made for `from`'s scope: "/ln_1/ReduceMean" ->
/// "/ln_1/LayerNormalization".
inline std::string scopedName(ir::Graph &g, const ir::Node *from, const std::string &op) {
  const std::string &n = from->name();
  const size_t slash = n.rfind('/');
  return g.uniqueNodeName(slash == std::string::npos ? op : n.substr(0, slash + 1) + op);
}

/// The values a training graph's fusions must keep: the loss, the
/// gradients and the state updates the plan returns (none without
/// `protect`).
inline std::unordered_set<const ir::Value *> protectedValues(const TrainingResults *protect) {
  std::unordered_set<const ir::Value *> keep;
  if (protect) {
    keep.insert(protect->loss);
    for (const GradientPair &gp : protect->gradients)
      keep.insert(gp.grad);
    for (const StateUpdate &u : protect->stateUpdates)
      keep.insert(u.value);
  }
  return keep;
}

/// Backward (and recompute) nodes name the forward node they belong to,
/// which the partitioner places them with: forward nodes fused away are
/// named by their fused node now.
inline void renameForwardOf(ir::Graph &g, const std::unordered_map<std::string, std::string> &renamed) {
  if (!renamed.empty())
    for (ir::Node *n : g.nodes())
      if (auto it = renamed.find(n->forwardOf()); it != renamed.end())
        n->setForwardOf(it->second);
}

} // namespace pipec::passes
