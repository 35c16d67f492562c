//===- ir/IR.h - Graph, Node, Value ----------------------------*- C++ -*-===//
//
// pipec's IR: a Graph owns Values (SSA tensors with a static type) and Nodes
// (operator applications) kept in a topological order. Values know their
// producer and users; the graph's name table keeps value names unique.
// Nodes carry their training phase and, for backward nodes, the forward node
// they differentiate, so that later passes and schedules can group them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Attribute.h"
#include "support/Error.h"
#include "support/Tensor.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <list>
#include <vector>

namespace pipec::ir {

/// The facts of an op that ir/Ops.def's last column records (its header
/// says what each means): ir::op::Grad, ir::op::Cuda, ...
namespace op {
enum Trait : unsigned {
  Grad = 1u << 0,
  View = 1u << 1,
  Fusible = 1u << 2,
  CostMovement = 1u << 3,
  CostTranscendental = 1u << 4,
  CostNormalization = 1u << 5,
  Cpu = 1u << 6,
  Cuda = 1u << 7,
  Expanded = 1u << 8,
};
} // namespace op

/// One row of ir/Ops.def.
struct OpInfo {
  std::string_view domain;
  std::string_view name;
  int minInputs, maxInputs;   ///< maxInputs < 0: variadic
  int minOutputs, maxOutputs; ///< maxOutputs < 0: variadic
  unsigned shapeValueInputs;  ///< bit i: input i must be a compile-time value
  unsigned traits;            ///< op::Trait bits

  bool has(op::Trait t) const { return (traits & t) != 0; }
  /// "Name" in the default domain, "domain:Name" otherwise (the spelling
  /// of the kernel and rule tables' listings).
  std::string qualifiedName() const {
    return domain.empty() ? std::string(name) : std::string(domain) + ":" + std::string(name);
  }
};

/// The row for (domain, name); "ai.onnx" and "" are the same domain. Null if
/// pipec does not know the operator.
const OpInfo *lookupOp(std::string_view domain, std::string_view name);
/// All rows, in table order.
const std::vector<OpInfo> &allOps();
/// Canonical domain spelling: "" for ai.onnx.
std::string canonicalDomain(std::string_view domain);

/// Forward; Backward (input gradients, B); WeightGrad (weight gradients, W,
/// which a schedule may run later); Optimizer; Recompute (a forward node
/// rematerialized just before its stage's backward, forwardOf = the original).
enum class Phase { Forward, Backward, WeightGrad, Optimizer, Recompute };
std::string_view phaseName(Phase p);

class Node;
class Graph;
class Value;

/// A graph attribute of a node (If's branches, Loop's and Scan's body). Its
/// inputs are the op's formal inputs (numFormalInputs of them: Loop's
/// iteration number, condition and carried values), then the outer values
/// the body reads by name, which ONNX lets a subgraph do: captureSlots[j]
/// is the input of the node that supplies subgraph input numFormalInputs + j,
/// so that outer data flow, topological order and dead-code elimination see
/// every value a subgraph uses.
struct Subgraph {
  std::shared_ptr<Graph> graph;
  size_t numFormalInputs = 0;
  std::vector<size_t> captureSlots;
};

/// A condition on a node: its outputs are needed only when the scalar bool
/// `cond` equals `when` (the nodes of one branch of a data-dependent If:
/// passes/expand/ControlFlow.cpp). Advisory: a plan may run the node
/// anyway, so a guard never changes a result; the plan emitter keeps only
/// guards whose every reader is guarded alike or is the If's select
/// (codegen/Guards.cpp), and the runtime skips such a node when the
/// condition says so.
struct Guard {
  Value *cond = nullptr;
  bool when = true;
  bool operator==(const Guard &o) const { return cond == o.cond && when == o.when; }
};

class Value {
public:
  const std::string &name() const { return name_; }
  /// Element type and shape; shapeKnown() tells whether the shape is final.
  const TensorDesc &type() const { return type_; }
  bool typeKnown() const { return typeKnown_; }
  void setType(TensorDesc t) {
    type_ = std::move(t);
    typeKnown_ = true;
  }
  DType dtype() const { return type_.dtype; }
  const Shape &shape() const { return type_.shape; }

  /// Producing node, or null for graph inputs and constants.
  Node *producer() const { return producer_; }
  int producerIndex() const { return producerIndex_; }
  bool isGraphInput() const { return isInput_; }
  bool isConstant() const { return !constant_.empty(); }
  /// A model parameter: a floating-point initializer of the source model,
  /// which training may update. Passes never fold it into other constants.
  bool isTrainable() const { return trainable_; }
  void setTrainable(bool t) { trainable_ = t; }
  /// A trainable value the model stored as a Constant node, which the
  /// importer promoted to a parameter (ImportOptions::trainableConstants);
  /// the partition report counts them.
  bool isPromotedConstant() const { return promotedConstant_; }
  void setPromotedConstant(bool p) { promotedConstant_ = p; }
  /// The loss gradient's seed under loss scaling: a constant the runtime
  /// sets before each step (so trainable: never folded), no parameter.
  bool isLossScaleSeed() const { return lossScaleSeed_; }
  void setLossScaleSeed(bool s) { lossScaleSeed_ = s; }
  const Tensor &constant() const { return constant_; }
  /// Nodes that read this value, once per input slot.
  const std::vector<Node *> &users() const { return users_; }
  bool isGraphOutput() const { return isOutput_; }

private:
  friend class Graph;
  friend class Node;
  std::string name_;
  TensorDesc type_;
  bool typeKnown_ = false;
  Node *producer_ = nullptr;
  int producerIndex_ = -1;
  bool isInput_ = false;
  bool isOutput_ = false;
  bool trainable_ = false;
  bool promotedConstant_ = false;
  bool lossScaleSeed_ = false;
  Tensor constant_;
  std::vector<Node *> users_;
  /// Nodes guarded on this value (Node::guards), which are not users:
  /// Graph::replaceAllUsesWith moves their guards along.
  std::unordered_set<Node *> guarded_;
};

class Node {
public:
  const std::string &name() const { return name_; }
  const std::string &opType() const { return opType_; }
  const std::string &domain() const { return domain_; }
  const OpInfo *info() const { return info_; }
  /// True for an op of the default ONNX domain named `op`.
  bool is(std::string_view op) const { return domain_.empty() && opType_ == op; }

  size_t numInputs() const { return inputs_.size(); }
  size_t numOutputs() const { return outputs_.size(); }
  /// Input i; null when an optional input is omitted or i is past the end.
  Value *input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value *output(size_t i) const { return outputs_[i]; }
  const std::vector<Value *> &inputs() const { return inputs_; }
  const std::vector<Value *> &outputs() const { return outputs_; }
  void setInput(size_t i, Value *v);
  void addInput(Value *v);

  AttrMap &attrs() { return attrs_; }
  const AttrMap &attrs() const { return attrs_; }
  /// Graph attributes by name (only ops with the Expanded trait have any:
  /// passes/expand/ replaces them before anything else reads the graph).
  std::map<std::string, Subgraph> &subgraphs() { return subgraphs_; }
  const std::map<std::string, Subgraph> &subgraphs() const { return subgraphs_; }

  Phase phase() const { return phase_; }
  void setPhase(Phase p) { phase_ = p; }
  /// The conditions under which the node's outputs are needed (all of
  /// them; empty: always).
  const std::vector<Guard> &guards() const { return guards_; }
  /// Replaces the guards (each condition then knows the node, so that
  /// Graph::replaceAllUsesWith moves the guard along with the users).
  void setGuards(std::vector<Guard> g);
  /// A Where that selects between the two branches of a data-dependent
  /// If on its condition (input 0): input 1 is needed only when it is
  /// true, input 2 only when it is false.
  bool isBranchSelect() const { return branchSelect_; }
  void setBranchSelect(bool b) { branchSelect_ = b; }
  /// Name of the forward node this node belongs to (backward, recompute).
  const std::string &forwardOf() const { return forwardOf_; }
  void setForwardOf(std::string n) { forwardOf_ = std::move(n); }

private:
  friend class Graph;
  static void removeUser(Value *v, Node *n);
  /// Where the node sits in its graph's list (Graph::nodes_): inserting
  /// and erasing a node are O(1), so a pass that rewrites many nodes stays
  /// linear in the graph.
  std::list<std::unique_ptr<Node>>::iterator self_;
  std::string name_, opType_, domain_;
  const OpInfo *info_ = nullptr;
  std::vector<Value *> inputs_;
  std::vector<Value *> outputs_;
  AttrMap attrs_;
  std::map<std::string, Subgraph> subgraphs_;
  std::vector<Guard> guards_;
  bool branchSelect_ = false;
  Phase phase_ = Phase::Forward;
  std::string forwardOf_;
};

class Graph {
public:
  Graph() = default;
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  /// Opset version per canonical domain ("" is ai.onnx).
  const std::map<std::string, int64_t> &opsets() const { return opsets_; }
  void setOpset(const std::string &domain, int64_t version) {
    opsets_[canonicalDomain(domain)] = version;
  }
  /// Version imported for a domain; 0 if not imported.
  int64_t opset(const std::string &domain = "") const;

  /// Adds a graph input; fails if the name is taken.
  Expected<Value *> addInput(const std::string &name, TensorDesc type);
  /// Adds a constant (initializer); fails if the name is taken.
  Expected<Value *> addConstant(const std::string &name, Tensor data);
  /// Appends a node; output values get the given names (which must be new)
  /// and unknown types. An unknown op is an error.
  Expected<Node *> addNode(const std::string &name, const std::string &opType,
                           const std::string &domain,
                           const std::vector<Value *> &inputs,
                           const std::vector<std::string> &outputNames,
                           AttrMap attrs = {});
  /// Like addNode but inserts before `pos` (null: append).
  Expected<Node *> insertNode(Node *pos, const std::string &name,
                              const std::string &opType,
                              const std::string &domain,
                              const std::vector<Value *> &inputs,
                              const std::vector<std::string> &outputNames,
                              AttrMap attrs = {});
  void addOutput(Value *v);
  void setOutput(size_t i, Value *v);
  /// Appends an output value named `name` (new) to node `n`, untyped.
  Expected<Value *> addNodeOutput(Node *n, const std::string &name);

  const std::vector<Value *> &inputs() const { return inputs_; }
  const std::vector<Value *> &outputs() const { return outputs_; }
  /// Constants in creation order.
  std::vector<Value *> constants() const;
  /// Nodes in topological order.
  std::vector<Node *> nodes() const;
  size_t numNodes() const { return nodes_.size(); }
  /// Makes room for `nodes` nodes and `values` values in all (a pass about
  /// to add many: autodiff quadruples a training graph, and growing the
  /// name indexes step by step rehashes every name several times).
  void reserve(size_t nodes, size_t values);
  /// The i-th node (walks the list: O(i)).
  Node *nodeAt(size_t i) const { return std::next(nodes_.begin(), static_cast<std::ptrdiff_t>(i))->get(); }
  /// The first node in the order, or null.
  Node *firstNode() const { return nodes_.empty() ? nullptr : nodes_.front().get(); }
  /// The node before `n` in the order, or null.
  Node *prevNode(const Node *n) const {
    return n->self_ == nodes_.begin() ? nullptr : std::prev(n->self_)->get();
  }
  /// The node after `n` in the order, or null.
  Node *nextNode(const Node *n) const {
    auto it = std::next(n->self_);
    return it == nodes_.end() ? nullptr : it->get();
  }
  /// Position of a node in the order (linear search).
  size_t indexOf(const Node *n) const;

  Value *findValue(const std::string &name) const;
  Node *findNode(const std::string &name) const;
  /// A value name not used yet, derived from `base`.
  std::string uniqueValueName(const std::string &base);
  /// A node name not used yet, derived from `base`.
  std::string uniqueNodeName(const std::string &base);
  /// Gives `v` a new name; fails if the name is taken by another value.
  Status renameValue(Value *v, const std::string &name);
  /// Gives node `n` a new name; fails if another node has it.
  Status renameNode(Node *n, const std::string &name);

  /// Points every user of `from` (and graph outputs) at `to`.
  void replaceAllUsesWith(Value *from, Value *to);
  /// Removes a node whose outputs have no users and are not graph outputs.
  void eraseNode(Node *n);
  /// Replaces node `old` by node `name` of op `opType` reading `inputs`, at
  /// old's position, with old's phase: the new node produces old's output
  /// values themselves (the same Value objects, so what holds them stays
  /// valid: a fusion's root). old is erased.
  Expected<Node *> replaceNode(Node *old, const std::string &name, const std::string &opType,
                               const std::string &domain, const std::vector<Value *> &inputs,
                               AttrMap attrs);
  /// Makes `v` a constant holding `data` (its producer must be gone or it
  /// must be an unused output); used by constant folding.
  Value *makeConstantValue(const std::string &nameBase, Tensor data);
  /// Turns a node output into a constant holding `data`, keeping its name,
  /// users and graph-output role; the producer no longer defines it (erase
  /// the producer once all its used outputs are converted).
  void convertToConstant(Value *v, Tensor data);
  /// Drops constants that have no users and are not graph outputs.
  void removeDeadConstants();
  /// Reorders nodes with a stable topological sort (after insertions that
  /// broke the order). Fails on a cycle.
  Status topoSort();

private:
  Value *newValue(const std::string &name);
  std::string name_;
  std::map<std::string, int64_t> opsets_;
  std::vector<std::unique_ptr<Value>> values_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<Value *> inputs_, outputs_;
  std::unordered_map<std::string, Value *> valueByName_;
  std::unordered_map<std::string, Node *> nodeByName_;
  std::unordered_map<std::string, int> nameCounter_;
};

/// Whether the node's output is its input 0's bytes under another shape: a
/// reshape-like op (Reshape, Flatten, Squeeze, Unsqueeze) of a computed
/// value. Plans place such an output on its input's memory and run nothing
/// (plan::Node::view); the cost model charges nothing for it.
bool isView(const Node &n);

/// True for constants that count as trainable parameters: the model's
/// floating-point initializers, except a normalisation's running statistics
/// and values used as shapes. The one definition the memory model, the
/// plan emitter and the reports use.
bool isParameter(const Value &v);

} // namespace pipec::ir
