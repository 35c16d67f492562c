//===- passes/Loss.cpp - Attaching and finding the training loss ----------===//
#include "passes/Loss.h"

#include "ir/shape/ShapeRules.h"

namespace pipec::passes {

namespace {

bool isScalarFloat(const ir::Value *v) {
  return v->typeKnown() && isFloat(v->dtype()) && v->type().numel() == 1;
}

/// Appends a node and types its single output.
Expected<ir::Value *> emit(ir::Graph &g, const std::string &name, const std::string &op,
                           const std::vector<ir::Value *> &in, const std::string &out,
                           AttrMap attrs = {}) {
  PIPEC_ASSIGN(ir::Node * n, g.addNode(g.uniqueNodeName(name), op, "", in,
                                       {g.uniqueValueName(out)}, std::move(attrs)));
  std::vector<TensorDesc> types;
  PIPEC_TRY(ir::inferNodeTypes(*n, g.opset(""), types));
  n->output(0)->setType(types[0]);
  return n->output(0);
}

} // namespace

Expected<ir::Value *> attachLoss(ir::Graph &g, const LossOptions &opts) {
  ir::Value *logits = g.findValue(opts.logits);
  if (!logits)
    return errorf("attaching a loss: the model has no value '", opts.logits, "'");
  if (!logits->typeKnown() || !isFloat(logits->dtype()))
    return errorf("attaching a loss: '", opts.logits, "' must be a typed float tensor");
  if (g.findValue(opts.output))
    return errorf("attaching a loss: the name '", opts.output, "' is already used");
  const TensorDesc &lt = logits->type();
  ir::Value *loss = nullptr;
  if (opts.kind == "cross-entropy") {
    if (lt.rank() < 2)
      return errorf("attaching a cross-entropy loss: logits '", opts.logits, "' are ", lt.str(),
                    ", expected [N, C] or [N, C, d...]");
    if (g.opset("") < 12)
      return errorf("attaching a cross-entropy loss: SoftmaxCrossEntropyLoss needs opset 12, "
                    "the model imports opset ",
                    g.opset(""));
    Shape ls = lt.shape;
    ls.erase(ls.begin() + 1);
    PIPEC_ASSIGN(ir::Value * labels, g.addInput(opts.target, {DType::I64, ls}));
    PIPEC_ASSIGN(loss, emit(g, "loss/SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss",
                            {logits, labels}, opts.output,
                            {{"reduction", Attribute::ofString("mean")}}));
  } else if (opts.kind == "mse") {
    PIPEC_ASSIGN(ir::Value * target, g.addInput(opts.target, lt));
    PIPEC_ASSIGN(ir::Value * d, emit(g, "loss/Sub", "Sub", {logits, target}, "loss/diff"));
    PIPEC_ASSIGN(ir::Value * sq, emit(g, "loss/Mul", "Mul", {d, d}, "loss/square"));
    PIPEC_ASSIGN(loss, emit(g, "loss/ReduceMean", "ReduceMean", {sq}, opts.output,
                            {{"keepdims", Attribute::ofInt(0)}}));
  } else {
    return errorf("unknown loss kind '", opts.kind, "' (cross-entropy, mse)");
  }
  g.addOutput(loss);
  return loss;
}

Expected<ir::Value *> findLoss(const ir::Graph &g, const std::string &name) {
  if (!name.empty()) {
    ir::Value *v = g.findValue(name);
    if (!v)
      return errorf("the model has no value '", name, "' to use as the loss");
    if (!isScalarFloat(v))
      return errorf("the loss '", name, "' must be a float scalar, it is ",
                    v->typeKnown() ? v->type().str() : std::string("untyped"));
    return v;
  }
  std::vector<ir::Value *> scalars;
  for (ir::Value *o : g.outputs())
    if (isScalarFloat(o))
      scalars.push_back(o);
  if (scalars.size() == 1)
    return scalars[0];
  if (scalars.size() > 1) {
    std::string names;
    for (ir::Value *v : scalars)
      names += (names.empty() ? "" : ", ") + v->name();
    return errorf("the model has several scalar outputs (", names,
                  "): pick one with --loss-output");
  }
  std::vector<ir::Value *> losses;
  for (ir::Node *n : g.nodes())
    if ((n->is("SoftmaxCrossEntropyLoss") || n->is("NegativeLogLikelihoodLoss")) &&
        isScalarFloat(n->output(0)))
      losses.push_back(n->output(0));
  if (losses.size() == 1)
    return losses[0];
  if (losses.size() > 1) {
    std::string names;
    for (ir::Value *v : losses)
      names += (names.empty() ? "" : ", ") + v->name();
    return errorf("the model has several loss nodes (", names, "): pick one with --loss-output");
  }
  return errorf("the model has no scalar float output and no loss node: attach one with "
                "--loss (cross-entropy or mse) on its logits");
}

} // namespace pipec::passes
