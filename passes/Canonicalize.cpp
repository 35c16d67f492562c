//===- passes/Canonicalize.cpp - Remove no-op nodes -----------------------===//
//
// Pass `canonicalize`. Removes nodes that compute their input unchanged:
// Identity, Cast to the input's own type, and Reshape, Flatten, Squeeze,
// Unsqueeze and Expand whose output type equals their input type. Requires:
// inferred types. Guarantees: graph outputs keep their names (a no-op whose
// output is a graph output is kept).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

namespace pipec::passes {

namespace {
bool isNoOp(const ir::Node &n) {
  if (n.numOutputs() != 1 || !n.input(0) || !n.input(0)->typeKnown() ||
      !n.output(0)->typeKnown())
    return false;
  bool sameType = n.input(0)->type() == n.output(0)->type();
  if (n.is("Identity"))
    return true;
  if (n.is("Cast") || n.is("Reshape") || n.is("Flatten") || n.is("Squeeze") ||
      n.is("Unsqueeze") || n.is("Expand"))
    return sameType;
  return false;
}

class Canonicalize final : public Pass {
public:
  std::string_view name() const override { return "canonicalize"; }
  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    for (ir::Node *n : g.nodes()) {
      if (!isNoOp(*n))
        continue;
      ir::Value *in = n->input(0);
      ir::Value *out = n->output(0);
      if (out->isGraphOutput())
        continue; // its name is part of the model's interface

      g.replaceAllUsesWith(out, in);
      g.eraseNode(n);
      changed = true;
    }
    return changed;
  }
};
} // namespace

std::unique_ptr<Pass> createCanonicalizePass() { return std::make_unique<Canonicalize>(); }

} // namespace pipec::passes
