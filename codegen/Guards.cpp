//===- codegen/Guards.cpp - The guards a plan keeps -----------------------===//
#include "codegen/Guards.h"

#include <algorithm>

namespace pipec::codegen {

std::unordered_map<const ir::Node *, std::vector<ir::Guard>>
planGuards(const std::vector<ir::Node *> &order, const std::function<int(const ir::Node *)> &stageOf,
           const std::unordered_set<const ir::Value *> &kept) {
  std::unordered_map<const ir::Node *, std::vector<ir::Guard>> out;
  if (std::none_of(order.begin(), order.end(), [](const ir::Node *n) { return !n->guards().empty(); }))
    return out;
  std::unordered_map<const ir::Node *, size_t> index;
  for (size_t i = 0; i < order.size(); ++i)
    index[order[i]] = i;
  // The guards the runtime can evaluate at the node.
  for (size_t i = 0; i < order.size(); ++i) {
    const ir::Node *n = order[i];
    if (n->guards().empty() || n->phase() != ir::Phase::Forward)
      continue;
    std::vector<ir::Guard> g;
    for (const ir::Guard &x : n->guards()) {
      const ir::Node *p = x.cond->producer();
      auto at = p ? index.find(p) : index.end();
      if (at != index.end() && at->second < i && stageOf(p) == stageOf(n) &&
          x.cond->typeKnown() && x.cond->dtype() == DType::Bool && x.cond->type().numel() == 1)
        g.push_back(x);
    }
    if (!g.empty())
      out[n] = std::move(g);
  }
  // Readers first: keep what every reader covers.
  auto guardsOf = [&](const ir::Node *n) -> const std::vector<ir::Guard> * {
    auto it = out.find(n);
    return it == out.end() ? nullptr : &it->second;
  };
  for (size_t i = order.size(); i-- > 0;) {
    auto it = out.find(order[i]);
    if (it == out.end())
      continue;
    std::vector<ir::Guard> &g = it->second;
    for (const ir::Value *v : order[i]->outputs()) {
      if (v->isGraphOutput() || kept.count(v)) {
        g.clear();
        break;
      }
      for (const ir::Node *r : v->users()) {
        const std::vector<ir::Guard> *rg = guardsOf(r);
        for (size_t slot = 0; slot < r->numInputs(); ++slot) {
          if (r->input(slot) != v)
            continue;
          std::erase_if(g, [&](const ir::Guard &x) {
            const bool own = rg && std::find(rg->begin(), rg->end(), x) != rg->end();
            const bool picked = r->isBranchSelect() && (slot == 1 || slot == 2) &&
                                r->input(0) == x.cond && x.when == (slot == 1);
            return !own && !picked;
          });
        }
      }
    }
    if (g.empty())
      out.erase(it);
  }
  return out;
}

} // namespace pipec::codegen
