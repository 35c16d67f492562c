//===- passes/ShapeInference.h - Static types for every value --*- C++ -*-===//
//
// Pass `infer-shapes`. Walks the nodes in order, gives every output its
// element type and static shape from the rules in ir/shape/, and folds the
// shape subgraphs that exporters emit (Shape -> Gather -> Concat -> Reshape)
// into constants once the batch is bound, so that later rules can read the
// values they need.
//
// Requires: a topological node order, typed graph inputs, an ai.onnx opset
// import. Guarantees: every value typed; Constant, Shape and Size nodes
// replaced by constants; nodes whose inputs are all constants folded with
// the CPU kernels when their outputs are small (at most kMaxFoldElements
// elements, any size for integer outputs of the shape-subgraph ops) and a
// kernel exists; folded nodes' outputs keep their names. A node without a
// kernel stays; if a later shape needs its value, the error says why it was
// not folded. Dropout is never folded (its value depends on the step).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "passes/Pass.h"

#include <cstdint>
#include <memory>

namespace pipec::passes {

/// Outputs with more elements are not folded (except shape-like int data).
constexpr int64_t kMaxFoldElements = 65536;

/// The `infer-shapes` pass (listed in passes/Passes.def).
std::unique_ptr<Pass> createShapeInferencePass();

/// Runs `infer-shapes` on `g` outside a pass manager.
Status inferShapes(ir::Graph &g);

} // namespace pipec::passes
