//===- passes/Autodiff.cpp - Reverse-mode automatic differentiation -------===//
//
// The driver of passes/Autodiff.h: activity analysis, the reverse walk
// applying gradient rules, deterministic gradient accumulation, naming of
// parameter gradients, and the B / W phase classification.
//
//===----------------------------------------------------------------------===//
#include "passes/Autodiff.h"

#include "passes/autodiff/GradRules.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace pipec::passes {

namespace {

using autodiff::GradContext;

/// Values that get a gradient: float, depending on a parameter, reaching
/// the loss.
std::unordered_set<const ir::Value *> activeValues(const ir::Graph &g, const ir::Value *loss,
                                                   const std::vector<ir::Node *> &nodes) {
  std::unordered_set<const ir::Value *> depends, reaches;
  for (ir::Value *c : g.constants())
    if (c->isTrainable() && isFloat(c->dtype()))
      depends.insert(c);
  for (const ir::Node *n : nodes) {
    bool any = false;
    for (const ir::Value *v : n->inputs())
      any = any || (v && depends.count(v));
    if (any)
      for (const ir::Value *v : n->outputs())
        if (isFloat(v->dtype()))
          depends.insert(v);
  }
  reaches.insert(loss);
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    bool any = false;
    for (const ir::Value *v : (*it)->outputs())
      any = any || reaches.count(v);
    if (any)
      for (const ir::Value *v : (*it)->inputs())
        if (v && isFloat(v->dtype()))
          reaches.insert(v);
  }
  std::unordered_set<const ir::Value *> active;
  for (const ir::Value *v : depends)
    if (reaches.count(v))
      active.insert(v);
  return active;
}

class Differentiator {
public:
  Differentiator(ir::Graph &g) : g_(g) {}

  Expected<std::vector<GradientPair>> run(const AutodiffOptions &opts) {
    // The backward pass adds about three nodes per forward node.
    g_.reserve(5 * g_.numNodes(), 6 * g_.numNodes() + g_.constants().size());
    ir::Value *loss = g_.findValue(opts.loss);
    if (!loss)
      return errorf("autodiff: the loss '", opts.loss, "' is not a value of the graph");
    if (!loss->typeKnown() || !isFloat(loss->dtype()) || loss->type().numel() != 1)
      return errorf("autodiff: the loss '", opts.loss, "' must be a float scalar, it is ",
                    loss->typeKnown() ? loss->type().str() : std::string("untyped"));
    const std::vector<ir::Node *> forward = g_.nodes();
    const auto active = activeValues(g_, loss, forward);

    // Seed dLoss = 1.
    Tensor one(loss->type());
    for (int64_t i = 0; i < one.numel(); ++i) {
      if (one.dtype() == DType::F64)
        one.data<double>()[i] = 1.0;
      else
        one.data<float>()[i] = 1.0f;
    }
    PIPEC_ASSIGN(ir::Value * seed,
                 g_.addConstant(g_.uniqueValueName(cat("grad/", loss->name())), one));
    if (opts.scalableSeed) {
      seed->setTrainable(true); // never folded into another constant
      seed->setLossScaleSeed(true);
    }
    if (opts.seed)
      *opts.seed = seed;
    contributions_[loss].push_back(seed);

    for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
      ir::Node *n = *it;
      std::vector<ir::Value *> outGrads(n->numOutputs(), nullptr);
      bool anyOut = false;
      for (size_t i = 0; i < n->numOutputs(); ++i) {
        PIPEC_ASSIGN(outGrads[i], accumulate(n->output(i), n->name()));
        anyOut = anyOut || outGrads[i];
      }
      std::vector<bool> needs(n->numInputs(), false);
      bool anyIn = false;
      for (size_t i = 0; i < n->numInputs(); ++i) {
        needs[i] = n->input(i) && active.count(n->input(i));
        anyIn = anyIn || needs[i];
      }
      if (!anyOut || !anyIn)
        continue;
      for (size_t i = 0; i < n->numOutputs(); ++i)
        if (outGrads[i] && !n->output(i)->isTrainable())
          activationGrads_.insert(outGrads[i]);
      autodiff::GradRule rule = autodiff::findGradRule(n->domain(), n->opType());
      if (!rule)
        return errorf("autodiff: no gradient rule for op ",
                      n->domain().empty() ? "" : n->domain() + ":", n->opType(), " (node '",
                      n->name(), "', opset ", g_.opset(n->domain()),
                      ") on the path from a trainable parameter to the loss '", loss->name(), "'");
      GradContext ctx(g_, *n, outGrads, needs);
      PIPEC_TRY(rule(ctx));
      emitted_.insert(emitted_.end(), ctx.emitted().begin(), ctx.emitted().end());
      for (size_t i = 0; i < n->numInputs(); ++i) {
        ir::Value *gi = ctx.inputGrads()[i];
        if (!gi || !needs[i])
          continue;
        if (gi->type() != n->input(i)->type())
          return ctx.error(cat("internal error: the gradient of input ", i, " is ",
                               gi->type().str(), ", the input is ", n->input(i)->type().str()));
        contributions_[n->input(i)].push_back(gi);
      }
    }

    std::vector<GradientPair> result;
    std::set<const ir::Value *> renamed;
    for (ir::Value *p : g_.constants()) {
      if (!p->isTrainable() || !contributions_.count(p))
        continue;
      const std::vector<ir::Value *> &cs = contributions_[p];
      std::string owner = cs.back()->producer() ? cs.back()->producer()->forwardOf() : "";
      PIPEC_ASSIGN(ir::Value * grad, accumulate(p, owner));
      const std::string name = cat("grad/", p->name());
      bool own = grad->producer() && grad->producer()->phase() != ir::Phase::Forward &&
                 !renamed.count(grad) && !activationGrads_.count(grad);
      if (!own) {
        // Shared with another gradient (e.g. Identity passed it through):
        // give the parameter its own value.
        PIPEC_ASSIGN(ir::Node * id, g_.addNode(g_.uniqueNodeName(name), "Identity", "", {grad},
                                               {g_.uniqueValueName(name)}));
        id->setPhase(ir::Phase::Backward);
        id->setForwardOf(owner);
        id->output(0)->setType(grad->type());
        emitted_.push_back(id);
        grad = id->output(0);
      }
      PIPEC_TRY(g_.renameValue(grad, g_.findValue(name) == grad ? name : g_.uniqueValueName(name)));
      renamed.insert(grad);
      result.push_back({p, grad});
    }
    classifyPhases();
    return result;
  }

private:
  /// The summed gradient of `v` (null if none); caches the sum.
  Expected<ir::Value *> accumulate(ir::Value *v, const std::string &owner) {
    auto it = contributions_.find(v);
    if (it == contributions_.end() || it->second.empty())
      return static_cast<ir::Value *>(nullptr);
    std::vector<ir::Value *> &cs = it->second;
    ir::Value *sum = cs[0];
    for (size_t i = 1; i < cs.size(); ++i) {
      const std::string base = cat(owner, "/grad/sum");
      PIPEC_ASSIGN(ir::Node * add, g_.addNode(g_.uniqueNodeName(base), "Add", "", {sum, cs[i]},
                                              {g_.uniqueValueName(base)}));
      add->setPhase(ir::Phase::Backward);
      add->setForwardOf(owner);
      add->output(0)->setType(sum->type());
      emitted_.push_back(add);
      sum = add->output(0);
    }
    cs.assign(1, sum);
    return sum;
  }

  /// W for nodes whose outputs reach only parameter gradients, B for nodes
  /// on the way to an activation gradient.
  void classifyPhases() {
    std::unordered_set<const ir::Node *> isB;
    for (auto it = emitted_.rbegin(); it != emitted_.rend(); ++it) {
      ir::Node *n = *it;
      bool b = false;
      for (const ir::Value *o : n->outputs()) {
        if (activationGrads_.count(o))
          b = true;
        for (const ir::Node *u : o->users())
          if (isB.count(u))
            b = true;
      }
      if (b)
        isB.insert(n);
      n->setPhase(b ? ir::Phase::Backward : ir::Phase::WeightGrad);
    }
  }

  ir::Graph &g_;
  std::unordered_map<const ir::Value *, std::vector<ir::Value *>> contributions_;
  std::unordered_set<const ir::Value *> activationGrads_;
  std::vector<ir::Node *> emitted_;
};

} // namespace

Expected<std::vector<GradientPair>> differentiate(ir::Graph &g, const AutodiffOptions &opts) {
  return Differentiator(g).run(opts);
}

} // namespace pipec::passes
