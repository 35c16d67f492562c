//===- passes/NodeEval.cpp - Evaluate an IR node on constants -------------===//
#include "passes/NodeEval.h"

namespace pipec::passes {

cpu::OpDesc opDescForNode(const ir::Node &n, int64_t opset) {
  cpu::OpDesc d;
  d.name = n.name();
  d.opType = n.opType();
  d.domain = n.domain();
  d.opset = opset;
  d.attrs = n.attrs();
  for (const ir::Value *v : n.inputs()) {
    d.inputs.push_back(v ? v->type() : TensorDesc{});
    d.constInputs.push_back(v && v->isConstant() ? v->constant() : Tensor());
  }
  for (const ir::Value *v : n.outputs())
    d.outputs.push_back(v->type());
  return d;
}

bool canEvaluate(const ir::Node &n) {
  for (const ir::Value *v : n.inputs())
    if (v && (!v->isConstant() || v->isTrainable()))
      return false;
  for (const ir::Value *v : n.outputs())
    if (!v->typeKnown())
      return false;
  return cpu::hasKernel(n.domain(), n.opType());
}

Expected<std::vector<Tensor>> evaluateNode(const ir::Node &n, int64_t opset) {
  cpu::OpDesc d = opDescForNode(n, opset);
  std::vector<Tensor> inputs;
  for (const ir::Value *v : n.inputs())
    inputs.push_back(v ? v->constant() : Tensor());
  return cpu::evaluate(d, inputs);
}

void replaceWithConstants(ir::Graph &g, ir::Node *n, std::vector<Tensor> values) {
  for (size_t i = 0; i < n->numOutputs(); ++i) {
    ir::Value *out = n->output(i);
    if (!out->users().empty() || out->isGraphOutput())
      g.convertToConstant(out, std::move(values[i]));
  }
  g.eraseNode(n);
}

} // namespace pipec::passes
