//===- passes/expand/Expand.h - Ops rewritten into other ops ---*- C++ -*-===//
//
// Some ONNX ops are not given kernels: the shape inference walk
// (passes/ShapeInference.cpp) replaces them by ops that have kernels, shape
// rules and gradients, once their inputs are typed and earlier nodes are
// folded. Control flow (ControlFlow.cpp): an If whose condition is a
// compile-time value becomes its taken branch, a data-dependent If both
// branches and a select; a Loop is unrolled one iteration at a time, so a
// condition that folds ends it. Recurrences (LSTM, GRU, RNN) unroll over
// their static sequence length. The nodes an expansion emits sit where the
// op was; the walk goes on from the first of them, so that an expansion may
// emit further expandable ops (a nested If, the rest of a Loop).
//
// Rows of ir/Ops.def with the Expanded trait have an expansion here and
// nothing else (tests/unit/OpRegistryTest.cpp checks both ways).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "passes/NodeBuilder.h"

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pipec::passes::expand {

/// Shape inference's checks on nodes an expansion emitted: node -> the
/// error to give unless its inputs 1 and 2 have the same type (the select
/// of a data-dependent If, whose branches must agree for a static plan).
using SameTypeChecks = std::unordered_map<const ir::Node *, std::string>;

/// What the expansions of one shape inference walk share: the checks above,
/// and each subgraph constant's one copy in the graph (a Loop's body
/// inlined N times reads one copy, not N).
struct ExpandState {
  SameTypeChecks checks;
  std::unordered_map<const ir::Value *, ir::Value *> constants;
  /// Nodes inlined from subgraphs so far (bounded: kMaxInlinedNodes).
  size_t inlined = 0;
};

/// The most nodes the expansions of one graph may inline (a Loop unrolled
/// many times over a large body would exhaust memory first).
inline constexpr size_t kMaxInlinedNodes = 20'000'000;

/// What an expansion rule sees: the node, and a NodeBuilder that inserts
/// before it.
class Expansion : public NodeBuilder {
public:
  Expansion(ir::Graph &g, ir::Node &n, ExpandState &state);

  const ir::Node &node() const { return n_; }
  const AttrMap &attrs() const { return n_.attrs(); }
  ir::Value *input(size_t i) const { return n_.input(i); }
  size_t numOutputs() const { return n_.numOutputs(); }
  /// The ai.onnx opset the node is read at.
  int64_t nodeOpset() const { return g_.opset(n_.domain()); }

  /// An error naming the node, its op type and opset.
  Status error(const std::string &message) const override;

  /// Copies the nodes of graph attribute `attr` before the node, binding
  /// its formal inputs to `formals` and its captured values to the node's
  /// inputs; returns the values of its outputs. The copies are untyped
  /// (nested expandable ops among them), the walk types them; they get the
  /// node's guards, and `guard` when given (a data-dependent If's branch).
  Expected<std::vector<ir::Value *>> inlineSubgraph(const std::string &attr,
                                                    const std::vector<ir::Value *> &formals,
                                                    const ir::Guard *guard = nullptr);
  /// Requires `select`'s inputs 1 and 2 to have one type once typed.
  void requireSameType(const ir::Node *select, std::string message);

  /// The values that replace the node's outputs (one each).
  void setOutputs(std::vector<ir::Value *> v) { outputs_ = std::move(v); }
  const std::vector<ir::Value *> &outputs() const { return outputs_; }

private:
  ir::Node &n_;
  ExpandState &state_;
  std::vector<ir::Value *> outputs_;
};

/// A rule; returns an error when the node's configuration is unsupported.
using ExpandRule = Status (*)(Expansion &);

/// The rule for an op, or null.
ExpandRule findExpansion(std::string_view domain, std::string_view opType);
/// The ops with a rule ("If"; "domain:Op" outside ai.onnx), checked against
/// ir/Ops.def's Expanded trait by tests/unit/OpRegistryTest.cpp.
std::vector<std::string> expansionOps();

/// Replaces `n` (which has a rule and typed inputs) by its expansion: the
/// new nodes sit where n was, n's outputs' users read their replacements
/// (graph outputs keep their names), n is erased.
Status expandNode(ir::Graph &g, ir::Node *n, ExpandState &state);

// ControlFlow.cpp
Status expandIf(Expansion &);
Status expandLoop(Expansion &);
Status expandScan(Expansion &);

// Recurrent.cpp
Status expandLstm(Expansion &);
Status expandGru(Expansion &);
Status expandRnn(Expansion &);

} // namespace pipec::passes::expand
