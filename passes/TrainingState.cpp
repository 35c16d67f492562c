//===- passes/TrainingState.cpp - State a training step updates -----------===//
#include "passes/TrainingState.h"

namespace pipec::passes {

Expected<std::vector<StateUpdate>> exposeRunningStatistics(ir::Graph &g) {
  std::vector<StateUpdate> updates;
  for (ir::Node *n : g.nodes()) {
    if (!n->is("BatchNormalization") || n->numInputs() < 5)
      continue;
    ir::Value *mean = n->input(3), *var = n->input(4);
    // (The importer marks every float initializer trainable; running
    // statistics are never parameters: ir::isParameter.)
    if (!mean || !var || !mean->isConstant() || !var->isConstant() || mean == var)
      continue;
    if (mean->dtype() != DType::F32 || var->dtype() != DType::F32)
      return errorf("BatchNormalization '", n->name(), "': training updates float32 running "
                    "statistics; '", mean->name(), "' is ", dtypeName(mean->dtype()));
    // Statistics shared by several nodes would be updated twice per step.
    if (mean->users().size() != 1 || var->users().size() != 1)
      return errorf("BatchNormalization '", n->name(), "': its running statistics '", mean->name(),
                    "' and '", var->name(), "' are shared with other nodes; training updates "
                    "them once per node, so each node needs its own");
    const int64_t opset = g.opset("");
    if (opset >= 14)
      n->attrs()["training_mode"] = Attribute::ofInt(1);
    while (n->numOutputs() < 3) {
      const char *what = n->numOutputs() == 1 ? "running_mean" : "running_var";
      PIPEC_ASSIGN(ir::Value * v, g.addNodeOutput(n, g.uniqueValueName(n->name() + "/" + what)));
      v->setType(n->input(n->numOutputs() == 2 ? 3 : 4)->type());
    }
    n->output(1)->setType(mean->type());
    n->output(2)->setType(var->type());
    updates.push_back({mean, n->output(1)});
    updates.push_back({var, n->output(2)});
  }
  return updates;
}

} // namespace pipec::passes
