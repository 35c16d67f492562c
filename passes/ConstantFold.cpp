//===- passes/ConstantFold.cpp - Evaluate constant subgraphs --------------===//
//
// Pass `constant-fold`. Evaluates, with the CPU kernels, every node whose
// inputs are all constants, and turns its outputs into constants. Requires:
// inferred types. Guarantees: no node with only constant inputs remains,
// except where folding would grow the model (an output larger than both
// 1 MiB and the node's inputs together, as Expand or ConstantOfShape can
// make) or where no kernel exists.
//
//===----------------------------------------------------------------------===//
#include "passes/NodeEval.h"
#include "passes/Pass.h"

namespace pipec::passes {

namespace {
constexpr size_t kMaxGrowthBytes = 1 << 20;

bool worthFolding(const ir::Node &n) {
  size_t in = 0, out = 0;
  for (const ir::Value *v : n.inputs())
    if (v)
      in += v->type().bytes();
  for (const ir::Value *v : n.outputs())
    out += v->type().bytes();
  return out <= kMaxGrowthBytes || out <= in;
}

class ConstantFold final : public Pass {
public:
  std::string_view name() const override { return "constant-fold"; }
  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    for (ir::Node *n : g.nodes()) {
      if (!canEvaluate(*n) || !worthFolding(*n))
        continue;
      // Random ops are never folded: their values depend on the step.
      if (n->is("Dropout"))
        continue;
      PIPEC_ASSIGN(std::vector<Tensor> values, evaluateNode(*n, g.opset(n->domain())));
      replaceWithConstants(g, n, std::move(values));
      changed = true;
    }
    if (changed)
      g.removeDeadConstants();
    return changed;
  }
};
} // namespace

std::unique_ptr<Pass> createConstantFoldPass() { return std::make_unique<ConstantFold>(); }

} // namespace pipec::passes
