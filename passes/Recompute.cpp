//===- passes/Recompute.cpp - Rematerialization per stage -----------------===//
#include "passes/Recompute.h"

#include <unordered_map>
#include <unordered_set>

namespace pipec::passes {

bool isStagePolicy(const std::string &p) { return p == "none" || p == "full" || p == "selective"; }

bool isExpensiveToRecompute(const ir::Node &n) {
  return n.is("MatMul") || n.is("Gemm") || n.is("Conv") || n.is("ConvTranspose") ||
         n.is("Einsum") || n.is("MatMulInteger") || n.is("QLinearMatMul") ||
         (n.domain() == "pipec" && n.opType() == "FusedGemm");
}

Expected<RecomputeStats> rematerialize(ir::Graph &g, const RecomputeOptions &opts) {
  RecomputeStats stats;
  const size_t K = opts.policies.size();
  stats.bytesNotStashed.assign(K, 0);
  for (const std::string &p : opts.policies)
    if (!isStagePolicy(p))
      return errorf("recompute: unknown policy '", p, "' (per stage: none, full, selective)");
  const std::vector<ir::Node *> nodes = g.nodes();
  auto isBackward = [](const ir::Node *n) {
    return n->phase() == ir::Phase::Backward || n->phase() == ir::Phase::WeightGrad;
  };
  bool changed = false;
  for (size_t s = 0; s < K; ++s) {
    const std::string &policy = opts.policies[s];
    if (policy == "none")
      continue;
    const int stage = static_cast<int>(s);
    // A forward value of this stage: produced by a forward node placed here.
    auto ownForward = [&](const ir::Value *v) {
      const ir::Node *p = v ? v->producer() : nullptr;
      return p && p->phase() == ir::Phase::Forward && opts.stageOf(p) == stage;
    };
    auto kept = [&](const ir::Value *v) {
      return !ownForward(v) || (policy == "selective" && isExpensiveToRecompute(*v->producer()));
    };
    // Values to recompute: what the stage's backward reads, closed over
    // the producers' inputs up to kept values.
    std::unordered_set<const ir::Value *> recompute;
    std::vector<const ir::Value *> work;
    for (const ir::Node *n : nodes)
      if (isBackward(n) && opts.stageOf(n) == stage)
        for (const ir::Value *v : n->inputs())
          if (v && !kept(v) && recompute.insert(v).second) {
            work.push_back(v);
            stats.bytesNotStashed[s] += v->type().bytes();
          }
    std::unordered_set<const ir::Node *> clone;
    while (!work.empty()) {
      const ir::Value *v = work.back();
      work.pop_back();
      const ir::Node *p = v->producer();
      if (!clone.insert(p).second)
        continue;
      for (const ir::Value *in : p->inputs())
        if (in && !kept(in) && recompute.insert(in).second)
          work.push_back(in);
    }
    if (clone.empty())
      continue;
    // Clone in forward order; a clone reads clones of recomputed inputs.
    std::unordered_map<const ir::Value *, ir::Value *> copyOf;
    for (const ir::Node *n : nodes) {
      if (!clone.count(n))
        continue;
      std::vector<ir::Value *> inputs;
      for (ir::Value *in : n->inputs()) {
        auto it = in ? copyOf.find(in) : copyOf.end();
        inputs.push_back(it == copyOf.end() ? in : it->second);
      }
      std::vector<std::string> outNames;
      for (const ir::Value *o : n->outputs())
        outNames.push_back(g.uniqueValueName("remat/" + o->name()));
      PIPEC_ASSIGN(ir::Node * c, g.addNode(g.uniqueNodeName("remat/" + n->name()), n->opType(),
                                           n->domain(), inputs, outNames, n->attrs()));
      c->setPhase(ir::Phase::Recompute);
      c->setForwardOf(n->name());
      for (size_t i = 0; i < n->numOutputs(); ++i) {
        c->output(i)->setType(n->output(i)->type());
        copyOf[n->output(i)] = c->output(i);
      }
      opts.assign(c, stage);
      ++stats.clonedNodes;
    }
    // The stage's backward reads the clones.
    for (ir::Node *n : nodes) {
      if (!isBackward(n) || opts.stageOf(n) != stage)
        continue;
      for (size_t i = 0; i < n->numInputs(); ++i) {
        auto it = n->input(i) ? copyOf.find(n->input(i)) : copyOf.end();
        if (it != copyOf.end())
          n->setInput(i, it->second);
      }
    }
    changed = true;
  }
  if (changed)
    PIPEC_TRY(g.topoSort().withContext("recompute"));
  return stats;
}

} // namespace pipec::passes
