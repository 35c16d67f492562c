//===- passes/DeadCodeElimination.cpp - Remove unused nodes ---------------===//
//
// Pass `dce`. Removes every node none of whose outputs reaches a graph
// output, then constants without users. Requires: a verified graph.
// Guarantees: graph inputs and outputs are unchanged; the relative order of
// the remaining nodes is unchanged.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

namespace pipec::passes {

namespace {
class DeadCodeElimination final : public Pass {
public:
  std::string_view name() const override { return "dce"; }
  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    // Reverse order: a node's users are visited (and possibly removed)
    // before the node itself, so one sweep removes whole dead chains.
    std::vector<ir::Node *> nodes = g.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      ir::Node *n = *it;
      bool live = false;
      for (const ir::Value *o : n->outputs())
        live = live || !o->users().empty() || o->isGraphOutput();
      if (!live) {
        g.eraseNode(n);
        changed = true;
      }
    }
    size_t before = g.constants().size();
    g.removeDeadConstants();
    return changed || g.constants().size() != before;
  }
};
} // namespace

std::unique_ptr<Pass> createDeadCodeEliminationPass() {
  return std::make_unique<DeadCodeElimination>();
}

} // namespace pipec::passes
