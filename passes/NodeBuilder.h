//===- passes/NodeBuilder.h - Emitting typed nodes -------------*- C++ -*-===//
//
// What passes that write ONNX ops share: a NodeBuilder emits nodes at one
// position of a graph (appended, or before a given node), types each one as
// it is emitted (the shape rules of ir/shape/ run on it), names them after
// the node they stand for ("fc1/grad/MatMul", "lstm/MatMul"), and spells the
// ops whose form changed between opsets (Slice, Unsqueeze, ReduceSum...) as
// the graph's ai.onnx opset wants them. Users: autodiff's GradContext
// (passes/autodiff/GradRules.h) and the expansions (passes/expand/).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <string>
#include <vector>

namespace pipec::passes {

class NodeBuilder {
public:
  /// Emits before `pos` (null: appends); names start with `nameBase`
  /// ("fc1/grad/"); nodes get `phase` and forwardOf = `forwardOf`.
  /// `what` names the emitted nodes in errors ("its gradient").
  NodeBuilder(ir::Graph &g, ir::Node *pos, std::string nameBase, ir::Phase phase,
              std::string forwardOf, std::string what);
  virtual ~NodeBuilder() = default;

  ir::Graph &graph() { return g_; }
  /// ai.onnx opset of the graph (decides how emitted ONNX ops are spelled).
  int64_t opset() const { return opset_; }
  /// Nodes emitted so far, in order.
  const std::vector<ir::Node *> &emitted() const { return emitted_; }
  /// Guards every emitted node gets (an expansion's: those of the node it
  /// replaces).
  void setGuards(std::vector<ir::Guard> g) { guards_ = std::move(g); }

  /// An error naming the node the builder emits for.
  virtual Status error(const std::string &message) const = 0;

  /// Emits `op` and types its outputs (when its inputs are typed); returns
  /// all outputs.
  Expected<std::vector<ir::Value *>> emitN(const std::string &op,
                                           const std::vector<ir::Value *> &inputs,
                                           size_t numOutputs, AttrMap attrs = {},
                                           const std::string &domain = "");
  /// Emits a single-output op.
  Expected<ir::Value *> emit(const std::string &op, const std::vector<ir::Value *> &inputs,
                             AttrMap attrs = {}, const std::string &domain = "");
  /// Emits an op of the domain "pipec".
  Expected<ir::Value *> emitPipec(const std::string &op, const std::vector<ir::Value *> &inputs,
                                  AttrMap attrs = {});

  /// A new constant (not trainable).
  ir::Value *constant(Tensor t);
  /// A constant holding `v` in dtype `t`, of shape `shape` (default scalar).
  ir::Value *scalar(double v, DType t, const Shape &shape = {});
  /// An int64 1-D constant.
  ir::Value *ints(const std::vector<int64_t> &v);

  // Building blocks.
  Expected<ir::Value *> add(ir::Value *a, ir::Value *b) { return emit("Add", {a, b}); }
  Expected<ir::Value *> sub(ir::Value *a, ir::Value *b) { return emit("Sub", {a, b}); }
  Expected<ir::Value *> mul(ir::Value *a, ir::Value *b) { return emit("Mul", {a, b}); }
  Expected<ir::Value *> div(ir::Value *a, ir::Value *b) { return emit("Div", {a, b}); }
  Expected<ir::Value *> neg(ir::Value *a) { return emit("Neg", {a}); }
  /// x * c for a constant c (no node when c == 1).
  Expected<ir::Value *> scale(ir::Value *x, double c);
  /// Reshape to a static shape (no node when the shape is already `s`).
  Expected<ir::Value *> reshape(ir::Value *x, const Shape &s);
  /// Transpose with a permutation.
  Expected<ir::Value *> transpose(ir::Value *x, const std::vector<int64_t> &perm);
  /// ReduceSum over `axes` (attribute before opset 13, input from 13).
  Expected<ir::Value *> reduceSum(ir::Value *x, const std::vector<int64_t> &axes, bool keepdims);
  /// Any Reduce* op over `axes` (attribute before the op's axes-input opset:
  /// 13 for ReduceSum, 18 for the others; input from then on).
  Expected<ir::Value *> reduce(const std::string &op, ir::Value *x,
                               const std::vector<int64_t> &axes, bool keepdims);
  /// Slice along `axes` (attributes before opset 10, inputs from 10).
  Expected<ir::Value *> slice(ir::Value *x, const std::vector<int64_t> &starts,
                              const std::vector<int64_t> &ends, const std::vector<int64_t> &axes);
  /// Unsqueeze at `axes` (attribute before opset 13, input from 13).
  Expected<ir::Value *> unsqueeze(ir::Value *x, const std::vector<int64_t> &axes);
  /// Squeeze at `axes` (attribute before opset 13, input from 13).
  Expected<ir::Value *> squeeze(ir::Value *x, const std::vector<int64_t> &axes);
  /// Concat along `axis`.
  Expected<ir::Value *> concat(const std::vector<ir::Value *> &xs, int64_t axis);
  /// Sums a broadcast gradient back to `target` (numpy broadcasting undone):
  /// ReduceSum over the broadcast axes, then Reshape. No node when equal.
  Expected<ir::Value *> sumToShape(ir::Value *g, const Shape &target);
  /// Expand to `target` (no node when equal).
  Expected<ir::Value *> expandTo(ir::Value *x, const Shape &target);
  /// A tensor of zeros of `type` (ConstantOfShape, so plans stay small).
  Expected<ir::Value *> zeros(const TensorDesc &type);

protected:
  /// Called for each emitted node, after it is typed.
  virtual void onEmit(ir::Node &) {}

  ir::Graph &g_;
  int64_t opset_;

private:
  ir::Node *pos_;
  std::string nameBase_;
  ir::Phase phase_;
  std::string forwardOf_;
  std::string what_;
  std::vector<ir::Guard> guards_;
  std::vector<ir::Node *> emitted_;
};

} // namespace pipec::passes
