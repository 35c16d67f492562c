//===- passes/NodeBuilder.cpp - Emitting typed nodes ----------------------===//
#include "passes/NodeBuilder.h"

#include "ir/shape/ShapeRules.h"

namespace pipec::passes {

NodeBuilder::NodeBuilder(ir::Graph &g, ir::Node *pos, std::string nameBase, ir::Phase phase,
                         std::string forwardOf, std::string what)
    : g_(g), opset_(g.opset("")), pos_(pos), nameBase_(std::move(nameBase)), phase_(phase),
      forwardOf_(std::move(forwardOf)), what_(std::move(what)) {}

Expected<std::vector<ir::Value *>> NodeBuilder::emitN(const std::string &op,
                                                      const std::vector<ir::Value *> &inputs,
                                                      size_t numOutputs, AttrMap attrs,
                                                      const std::string &domain) {
  const std::string base = nameBase_ + op;
  std::vector<std::string> names;
  for (size_t i = 0; i < numOutputs; ++i)
    names.push_back(g_.uniqueValueName(numOutputs == 1 ? base : cat(base, ":", i)));
  PIPEC_ASSIGN(ir::Node * n, g_.insertNode(pos_, g_.uniqueNodeName(base), op, domain, inputs,
                                           names, std::move(attrs)));
  n->setPhase(phase_);
  n->setForwardOf(forwardOf_);
  n->setGuards(guards_);
  emitted_.push_back(n);
  if (!domain.empty() && g_.opset(domain) == 0)
    g_.setOpset(domain, 1);
  // An expansion may emit nodes that read values it inlined untyped, and
  // ops that expand further (the rest of a Loop); the shape inference walk
  // types those when it reaches them.
  for (const ir::Value *v : inputs)
    if (v && !v->typeKnown())
      return n->outputs();
  if (n->info()->has(ir::op::Expanded))
    return n->outputs();
  std::vector<TensorDesc> types;
  Status st = ir::inferNodeTypes(*n, g_.opset(n->domain()), types);
  if (!st.isOk())
    return error(cat("typing ", what_, ": ", st.message()));
  for (size_t i = 0; i < types.size(); ++i)
    n->output(i)->setType(types[i]);
  onEmit(*n);
  return n->outputs();
}

Expected<ir::Value *> NodeBuilder::emit(const std::string &op,
                                        const std::vector<ir::Value *> &inputs, AttrMap attrs,
                                        const std::string &domain) {
  PIPEC_ASSIGN(std::vector<ir::Value *> outs, emitN(op, inputs, 1, std::move(attrs), domain));
  return outs[0];
}

Expected<ir::Value *> NodeBuilder::emitPipec(const std::string &op,
                                             const std::vector<ir::Value *> &inputs,
                                             AttrMap attrs) {
  return emit(op, inputs, std::move(attrs), "pipec");
}

ir::Value *NodeBuilder::constant(Tensor t) {
  auto v = g_.addConstant(g_.uniqueValueName(nameBase_ + "const"), std::move(t));
  return *v; // the name is unique, so this cannot fail
}

ir::Value *NodeBuilder::scalar(double v, DType t, const Shape &shape) {
  Tensor c(t, shape);
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (t == DType::F64)
      c.data<double>()[i] = v;
    else
      c.data<float>()[i] = static_cast<float>(v);
  }
  return constant(std::move(c));
}

ir::Value *NodeBuilder::ints(const std::vector<int64_t> &v) {
  return constant(Tensor::fromInts(v));
}

Expected<ir::Value *> NodeBuilder::scale(ir::Value *x, double c) {
  if (c == 1.0)
    return x;
  return mul(x, scalar(c, x->dtype()));
}

Expected<ir::Value *> NodeBuilder::reshape(ir::Value *x, const Shape &s) {
  if (x->shape() == s)
    return x;
  return emit("Reshape", {x, ints(s)});
}

Expected<ir::Value *> NodeBuilder::transpose(ir::Value *x, const std::vector<int64_t> &perm) {
  return emit("Transpose", {x}, {{"perm", Attribute::ofInts(perm)}});
}

Expected<ir::Value *> NodeBuilder::reduceSum(ir::Value *x, const std::vector<int64_t> &axes,
                                             bool keepdims) {
  AttrMap attrs{{"keepdims", Attribute::ofInt(keepdims ? 1 : 0)}};
  if (opset_ < 13) {
    attrs["axes"] = Attribute::ofInts(axes);
    return emit("ReduceSum", {x}, std::move(attrs));
  }
  return emit("ReduceSum", {x, ints(axes)}, std::move(attrs));
}

Expected<ir::Value *> NodeBuilder::reduce(const std::string &op, ir::Value *x,
                                          const std::vector<int64_t> &axes, bool keepdims) {
  if (op == "ReduceSum")
    return reduceSum(x, axes, keepdims);
  AttrMap attrs{{"keepdims", Attribute::ofInt(keepdims ? 1 : 0)}};
  if (opset_ < 18) {
    attrs["axes"] = Attribute::ofInts(axes);
    return emit(op, {x}, std::move(attrs));
  }
  return emit(op, {x, ints(axes)}, std::move(attrs));
}

Expected<ir::Value *> NodeBuilder::slice(ir::Value *x, const std::vector<int64_t> &starts,
                                         const std::vector<int64_t> &ends,
                                         const std::vector<int64_t> &axes) {
  if (opset_ < 10)
    return emit("Slice", {x},
                {{"starts", Attribute::ofInts(starts)},
                 {"ends", Attribute::ofInts(ends)},
                 {"axes", Attribute::ofInts(axes)}});
  return emit("Slice", {x, ints(starts), ints(ends), ints(axes)});
}

Expected<ir::Value *> NodeBuilder::unsqueeze(ir::Value *x, const std::vector<int64_t> &axes) {
  if (opset_ < 13)
    return emit("Unsqueeze", {x}, {{"axes", Attribute::ofInts(axes)}});
  return emit("Unsqueeze", {x, ints(axes)});
}

Expected<ir::Value *> NodeBuilder::squeeze(ir::Value *x, const std::vector<int64_t> &axes) {
  if (opset_ < 13)
    return emit("Squeeze", {x}, {{"axes", Attribute::ofInts(axes)}});
  return emit("Squeeze", {x, ints(axes)});
}

Expected<ir::Value *> NodeBuilder::concat(const std::vector<ir::Value *> &xs, int64_t axis) {
  if (xs.size() == 1)
    return xs[0];
  return emit("Concat", xs, {{"axis", Attribute::ofInt(axis)}});
}

Expected<ir::Value *> NodeBuilder::sumToShape(ir::Value *g, const Shape &target) {
  const Shape &s = g->shape();
  if (s == target)
    return g;
  const size_t lead = s.size() - target.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < s.size(); ++i)
    if (i < lead || (target[i - lead] == 1 && s[i] != 1))
      axes.push_back(static_cast<int64_t>(i));
  ir::Value *r = g;
  if (!axes.empty()) {
    PIPEC_ASSIGN(r, reduceSum(g, axes, true));
  }
  return reshape(r, target);
}

Expected<ir::Value *> NodeBuilder::expandTo(ir::Value *x, const Shape &target) {
  if (x->shape() == target)
    return x;
  return emit("Expand", {x, ints(target)});
}

Expected<ir::Value *> NodeBuilder::zeros(const TensorDesc &type) {
  Tensor v(type.dtype, {1});
  return emit("ConstantOfShape", {ints(type.shape)}, {{"value", Attribute::ofTensor(v)}});
}

} // namespace pipec::passes
