//===- passes/AttentionProbs.cpp - The forward's probabilities for the gradient
//
// Training pass `keep-attention-probs`, after autodiff (the default
// training pipeline runs it). pipec:AttentionGrad recomputes the
// probabilities P = softmax(scale * Q KT [+ mask]) from its inputs: one of
// the forward's two products and its softmax again, about two thirds of
// the forward's time. Where P takes no more memory than Q, KT and V
// together, which the gradient keeps alive anyway (a GPT-like block of
// d 256, 4 heads, 128 tokens: P 2 MB, Q, K and V 3 MB a micro-batch of 8),
// the forward writes P as its second output and the gradient reads it:
//
//   O = pipec:Attention(Q, KT, V[, mask])
//   dQ, dKT, dV = pipec:AttentionGrad(Q, KT, V[, mask], dO)
// becomes
//   O, P = pipec:Attention(Q, KT, V[, mask])
//   dQ, dKT, dV = pipec:AttentionGrad(Q, KT, V[, mask], dO, P)
//
// Long sequences (P grows with s x t, Q, K and V with s + t) keep
// recomputing. The kernels compute P the same way in both places, so the
// results are bitwise those of the recomputation. The partitioner and the
// memory planner see P as any activation that lives from the forward to
// the backward; the recompute pass may still rematerialize the forward
// node, P with it.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/TrainingPasses.h"
#include "support/FusedOps.h"

namespace pipec::passes {

namespace {

/// The pipec:Attention node whose operands and attributes are those of
/// gradient node `grad`, if there is one.
ir::Node *forwardOf(const ir::Node *grad, size_t operands) {
  for (ir::Node *u : grad->input(0)->users()) {
    if (u->domain() != "pipec" || u->opType() != "Attention" || u->numInputs() != operands || u->attrs() != grad->attrs())
      continue;
    bool same = true;
    for (size_t i = 0; i < operands && same; ++i)
      same = u->input(i) == grad->input(i);
    if (same)
      return u;
  }
  return nullptr;
}

double bytes(const ir::Value *v) { return static_cast<double>(v->type().bytes()); }

class KeepAttentionProbsPass final : public Pass {
public:
  std::string_view name() const override { return "keep-attention-probs"; }

  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    for (ir::Node *n : g.nodes()) {
      if (n->domain() != "pipec" || n->opType() != "AttentionGrad")
        continue;
      auto kind = attentionMaskOf(n->attrs());
      if (!kind)
        continue;
      const size_t operands = attentionOperands(*kind);
      if (n->numInputs() != operands + 1)
        continue; // P is an input already
      ir::Node *f = forwardOf(n, operands);
      if (!f)
        continue;
      auto dims = attentionDims(n->input(0)->shape(), n->input(1)->shape(), n->input(2)->shape(), n->attrs());
      if (!dims)
        continue;
      const TensorDesc probs{n->input(0)->type().dtype, dims->scores};
      // Q, K and V's bytes, each value once (packed_qkv: one tensor).
      double qkv = bytes(n->input(0));
      if (n->input(1) != n->input(0))
        qkv += bytes(n->input(1));
      if (n->input(2) != n->input(0) && n->input(2) != n->input(1))
        qkv += bytes(n->input(2));
      if (static_cast<double>(probs.bytes()) > qkv)
        continue;
      if (f->numOutputs() == 1) {
        PIPEC_ASSIGN(ir::Value * p, g.addNodeOutput(f, g.uniqueValueName(f->output(0)->name() + "/probs")));
        p->setType(probs);
      }
      n->addInput(f->output(1));
      changed = true;
    }
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createKeepAttentionProbsPass() { return std::make_unique<KeepAttentionProbsPass>(); }

} // namespace pipec::passes
