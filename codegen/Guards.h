//===- codegen/Guards.h - The guards a plan keeps --------------*- C++ -*-===//
//
// ir::Guard says when a node's outputs are needed; a runtime may skip the
// node otherwise. That is safe only if nothing reads a skipped node's
// outputs but nodes skipped alike and the If's select, which reads only
// the branch its condition picks. Passes after the expansion (autodiff,
// recompute, fusions) make nodes without guards that may read guarded
// values; planGuards keeps, of each node's guards, those every reader
// covers, so the plan's guards are safe whatever the passes did:
//
//  - a reader covers guard g of its input if it has g itself, or it is a
//    branch select reading the input in the slot g's condition picks;
//  - a value that leaves the graph (an output, a gradient, a state update)
//    is needed always;
//  - a guard is kept only on a forward node on the stage that computes its
//    condition (the runtime reads the condition there), after it.
//
// Readers come after producers, so one pass in reverse order settles every
// node: a node's kept guards are final before its producers are looked at.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pipec::codegen {

/// The guards to emit, by node (nodes without any are absent). `order`:
/// the graph's nodes in topological order; `stageOf`: each node's stage;
/// `kept`: values needed whatever the conditions.
std::unordered_map<const ir::Node *, std::vector<ir::Guard>>
planGuards(const std::vector<ir::Node *> &order, const std::function<int(const ir::Node *)> &stageOf,
           const std::unordered_set<const ir::Value *> &kept);

} // namespace pipec::codegen
