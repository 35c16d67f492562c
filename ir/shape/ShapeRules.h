//===- ir/shape/ShapeRules.h - Per-op shape and type rules -----*- C++ -*-===//
//
// A shape rule computes the element types and static shapes of a node's
// outputs from its inputs' types, and from input values where the op needs
// them (Reshape's shape, Slice's starts...). Rules follow the ONNX operator
// specifications for every opset pipec accepts (7 to 21) and never consult
// the installed ONNX library's schemas. One file per op family in ir/shape/,
// registered in the table in ir/shape/ShapeRules.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <string_view>
#include <utility>
#include <vector>

namespace pipec::ir {

/// What a rule may look at.
class ShapeContext {
public:
  ShapeContext(const Node &node, int64_t opset) : node_(node), opset_(opset) {}
  const Node &node() const { return node_; }
  int64_t opset() const { return opset_; }
  size_t numInputs() const { return node_.numInputs(); }
  size_t numOutputs() const { return node_.numOutputs(); }
  /// Whether input i is present (optional inputs may be omitted).
  bool hasInput(size_t i) const { return node_.input(i) != nullptr; }
  /// Type of input i (must be present and typed).
  const TensorDesc &inputType(size_t i) const { return node_.input(i)->type(); }
  /// Value of input i if it is a compile-time constant, else null.
  const Tensor *inputValue(size_t i) const {
    const Value *v = node_.input(i);
    return v && v->isConstant() ? &v->constant() : nullptr;
  }
  const AttrMap &attrs() const { return node_.attrs(); }
  /// Error prefixed with the node, op type and opset.
  Status error(const std::string &message) const;

private:
  const Node &node_;
  int64_t opset_;
};

using ShapeRule = Status (*)(const ShapeContext &, std::vector<TensorDesc> &outputs);

/// Infers the types of `n`'s outputs (resized to n.numOutputs()). All present
/// inputs must be typed. Fails with a message naming the node, its op type
/// and opset when the shapes are inconsistent, when an input needed as a
/// value is not a constant, or when no rule exists.
Status inferNodeTypes(const Node &n, int64_t opset, std::vector<TensorDesc> &outputs);

/// Whether a shape rule exists for the op (every row of ir/Ops.def has one).
bool hasShapeRule(std::string_view domain, std::string_view opType);
/// The ops with a rule, "Gemm" in the default domain and "pipec:ReluGrad"
/// in pipec's, in table order (tests/unit/OpRegistryTest.cpp checks them
/// against ir/Ops.def).
std::vector<std::string> shapeRuleOps();

/// The dimensions [begin, end) of its input that a Shape node lists: all of
/// them, or the clamped start/end attributes from opset 15.
std::pair<int64_t, int64_t> shapeOpRange(int64_t rank, const AttrMap &attrs, int64_t opset);

/// Broadcast two shapes by numpy rules; fails if incompatible.
Expected<Shape> broadcastShapes(const Shape &a, const Shape &b);
/// Normalises a possibly negative axis into [0, rank); fails if out of range.
Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank);

} // namespace pipec::ir
