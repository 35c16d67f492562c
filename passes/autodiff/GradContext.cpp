//===- passes/autodiff/GradContext.cpp - Emitting backward nodes ----------===//
//
// GradContext: node emission with immediate typing, constants, and the
// building blocks the rules share (broadcast reduction, reshape, expand).
// Names derive from the forward node ("fc1/grad/MatMul", made unique by
// the graph), so printed IR reads as the forward graph does.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include "ir/shape/ShapeRules.h"

namespace pipec::passes::autodiff {

GradContext::GradContext(ir::Graph &g, ir::Node &fwd, std::vector<ir::Value *> outGrads,
                         std::vector<bool> needsGrad)
    : g_(g), fwd_(fwd), opset_(g.opset("")), outGrads_(std::move(outGrads)),
      needs_(std::move(needsGrad)), inGrads_(fwd.numInputs(), nullptr) {}

void GradContext::setGrad(size_t i, ir::Value *grad) {
  if (i < inGrads_.size())
    inGrads_[i] = grad;
}

Status GradContext::error(const std::string &message) const {
  return errorf("node '", fwd_.name(), "' (", fwd_.domain().empty() ? "" : fwd_.domain() + ":",
                fwd_.opType(), ", opset ", g_.opset(fwd_.domain()), "): ", message);
}

Expected<std::vector<ir::Value *>> GradContext::emitN(const std::string &op,
                                                      const std::vector<ir::Value *> &inputs,
                                                      size_t numOutputs, AttrMap attrs,
                                                      const std::string &domain) {
  const std::string base = cat(fwd_.name(), "/grad/", op);
  std::vector<std::string> names;
  for (size_t i = 0; i < numOutputs; ++i)
    names.push_back(g_.uniqueValueName(numOutputs == 1 ? base : cat(base, ":", i)));
  PIPEC_ASSIGN(ir::Node * n, g_.addNode(g_.uniqueNodeName(base), op, domain, inputs, names,
                                        std::move(attrs)));
  n->setPhase(ir::Phase::Backward);
  n->setForwardOf(fwd_.name());
  emitted_.push_back(n);
  if (!domain.empty() && g_.opset(domain) == 0)
    g_.setOpset(domain, 1);
  std::vector<TensorDesc> types;
  Status st = ir::inferNodeTypes(*n, g_.opset(n->domain()), types);
  if (!st.isOk())
    return error(cat("typing its gradient: ", st.message()));
  for (size_t i = 0; i < types.size(); ++i)
    n->output(i)->setType(types[i]);
  return n->outputs();
}

Expected<ir::Value *> GradContext::emit(const std::string &op,
                                        const std::vector<ir::Value *> &inputs, AttrMap attrs,
                                        const std::string &domain) {
  PIPEC_ASSIGN(std::vector<ir::Value *> outs, emitN(op, inputs, 1, std::move(attrs), domain));
  return outs[0];
}

Expected<ir::Value *> GradContext::emitPipec(const std::string &op,
                                             const std::vector<ir::Value *> &inputs,
                                             AttrMap attrs) {
  return emit(op, inputs, std::move(attrs), "pipec");
}

ir::Value *GradContext::constant(Tensor t) {
  auto v = g_.addConstant(g_.uniqueValueName(cat(fwd_.name(), "/grad/const")), std::move(t));
  return *v; // the name is unique, so this cannot fail
}

ir::Value *GradContext::scalar(double v, DType t, const Shape &shape) {
  Tensor c(t, shape);
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (t == DType::F64)
      c.data<double>()[i] = v;
    else
      c.data<float>()[i] = static_cast<float>(v);
  }
  return constant(std::move(c));
}

ir::Value *GradContext::ints(const std::vector<int64_t> &v) {
  return constant(Tensor::fromInts(v));
}

Expected<ir::Value *> GradContext::scale(ir::Value *x, double c) {
  if (c == 1.0)
    return x;
  return mul(x, scalar(c, x->dtype()));
}

Expected<ir::Value *> GradContext::reshape(ir::Value *x, const Shape &s) {
  if (x->shape() == s)
    return x;
  return emit("Reshape", {x, ints(s)});
}

Expected<ir::Value *> GradContext::transpose(ir::Value *x, const std::vector<int64_t> &perm) {
  return emit("Transpose", {x}, {{"perm", Attribute::ofInts(perm)}});
}

Expected<ir::Value *> GradContext::reduceSum(ir::Value *x, const std::vector<int64_t> &axes,
                                             bool keepdims) {
  AttrMap attrs{{"keepdims", Attribute::ofInt(keepdims ? 1 : 0)}};
  if (opset_ < 13) {
    attrs["axes"] = Attribute::ofInts(axes);
    return emit("ReduceSum", {x}, std::move(attrs));
  }
  return emit("ReduceSum", {x, ints(axes)}, std::move(attrs));
}

Expected<ir::Value *> GradContext::reduce(const std::string &op, ir::Value *x,
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

Expected<ir::Value *> GradContext::slice(ir::Value *x, const std::vector<int64_t> &starts,
                                         const std::vector<int64_t> &ends,
                                         const std::vector<int64_t> &axes) {
  if (opset_ < 10)
    return emit("Slice", {x},
                {{"starts", Attribute::ofInts(starts)},
                 {"ends", Attribute::ofInts(ends)},
                 {"axes", Attribute::ofInts(axes)}});
  return emit("Slice", {x, ints(starts), ints(ends), ints(axes)});
}

Expected<ir::Value *> GradContext::sumToShape(ir::Value *g, const Shape &target) {
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

Expected<ir::Value *> GradContext::expandTo(ir::Value *x, const Shape &target) {
  if (x->shape() == target)
    return x;
  return emit("Expand", {x, ints(target)});
}

Expected<ir::Value *> GradContext::zeros(const TensorDesc &type) {
  Tensor v(type.dtype, {1});
  return emit("ConstantOfShape", {ints(type.shape)}, {{"value", Attribute::ofTensor(v)}});
}

} // namespace pipec::passes::autodiff
