//===- passes/expand/Expand.cpp - The expansion driver and table ----------===//
#include "passes/expand/Expand.h"

namespace pipec::passes::expand {

namespace {

struct Entry {
  std::string_view domain, op;
  ExpandRule rule;
};

// The table: one row per op of ir/Ops.def with the Expanded trait.
constexpr Entry kRules[] = {
    {"", "If", expandIf},
    {"", "Loop", expandLoop},
    {"", "Scan", expandScan},
    {"", "LSTM", expandLstm},
    {"", "GRU", expandGru},
    {"", "RNN", expandRnn},
};

} // namespace

ExpandRule findExpansion(std::string_view domain, std::string_view opType) {
  for (const Entry &e : kRules)
    if (e.domain == domain && e.op == opType)
      return e.rule;
  return nullptr;
}

std::vector<std::string> expansionOps() {
  std::vector<std::string> r;
  for (const Entry &e : kRules)
    r.push_back(e.domain.empty() ? std::string(e.op) : cat(e.domain, ":", e.op));
  return r;
}

Expansion::Expansion(ir::Graph &g, ir::Node &n, ExpandState &state)
    : NodeBuilder(g, &n, n.name() + "/", n.phase(), n.forwardOf(), "its expansion"), n_(n),
      state_(state) {
  setGuards(n.guards());
}

Status Expansion::error(const std::string &message) const {
  return errorf("node '", n_.name(), "' (", n_.domain().empty() ? "" : n_.domain() + ":",
                n_.opType(), ", opset ", g_.opset(n_.domain()), "): ", message);
}

void Expansion::requireSameType(const ir::Node *select, std::string message) {
  state_.checks[select] = std::move(message);
}

Expected<std::vector<ir::Value *>>
Expansion::inlineSubgraph(const std::string &attr, const std::vector<ir::Value *> &formals,
                          const ir::Guard *guard) {
  auto it = n_.subgraphs().find(attr);
  if (it == n_.subgraphs().end())
    return error(cat("has no graph attribute '", attr, "'"));
  const ir::Subgraph &sub = it->second;
  const ir::Graph &body = *sub.graph;
  if (formals.size() != sub.numFormalInputs)
    return error(cat("its subgraph '", attr, "' takes ", sub.numFormalInputs,
                     " inputs, the op gives it ", formals.size()));
  state_.inlined += body.numNodes();
  if (state_.inlined > kMaxInlinedNodes)
    return error(cat("inlining its subgraph '", attr, "' again would make more than ",
                     kMaxInlinedNodes, " nodes of subgraphs in all"));
  std::unordered_map<const ir::Value *, ir::Value *> map;
  for (size_t i = 0; i < body.inputs().size(); ++i)
    map[body.inputs()[i]] = i < formals.size() ? formals[i]
                                               : n_.input(sub.captureSlots[i - formals.size()]);
  const std::string prefix = cat(n_.name(), "/", attr, "/");
  std::vector<ir::Guard> guards = n_.guards();
  if (guard)
    guards.push_back(*guard);
  for (ir::Value *c : body.constants()) {
    ir::Value *&copy = state_.constants[c];
    if (!copy)
      copy = g_.makeConstantValue(prefix + c->name(), c->constant());
    map[c] = copy;
  }
  for (const ir::Node *bn : body.nodes()) {
    std::vector<ir::Value *> inputs;
    for (const ir::Value *v : bn->inputs())
      inputs.push_back(v ? map.at(v) : nullptr);
    std::vector<std::string> names;
    for (const ir::Value *o : bn->outputs())
      names.push_back(g_.uniqueValueName(prefix + o->name()));
    PIPEC_ASSIGN(ir::Node * copy,
                 g_.insertNode(&n_, g_.uniqueNodeName(prefix + bn->name()), bn->opType(),
                               bn->domain(), inputs, names, bn->attrs()));
    copy->setPhase(n_.phase());
    copy->setForwardOf(n_.forwardOf());
    copy->setGuards(guards);
    copy->subgraphs() = bn->subgraphs();
    for (size_t i = 0; i < bn->numOutputs(); ++i)
      map[bn->output(i)] = copy->output(i);
  }
  std::vector<ir::Value *> outs;
  for (const ir::Value *o : body.outputs())
    outs.push_back(map.at(o));
  return outs;
}

Status expandNode(ir::Graph &g, ir::Node *n, ExpandState &state) {
  ExpandRule rule = findExpansion(n->domain(), n->opType());
  Expansion x(g, *n, state);
  if (!rule)
    return x.error("has no expansion");
  PIPEC_TRY(rule(x));
  const std::vector<ir::Value *> &repl = x.outputs();
  if (repl.size() != n->numOutputs())
    return x.error(cat("internal error: its expansion gives ", repl.size(), " values for ",
                       n->numOutputs(), " outputs"));
  std::vector<std::string> names;
  std::vector<std::vector<size_t>> outputSlots(repl.size());
  for (size_t i = 0; i < repl.size(); ++i) {
    ir::Value *o = n->output(i);
    names.push_back(o->name());
    for (size_t k = 0; k < g.outputs().size(); ++k)
      if (g.outputs()[k] == o)
        outputSlots[i].push_back(k);
    g.replaceAllUsesWith(o, repl[i]);
  }
  g.eraseNode(n);
  // The replacements take the outputs' names where they are new values of
  // the expansion; a graph output that cannot (it is an input of the node,
  // a constant, or replaces two outputs) gets an Identity of that name.
  std::unordered_map<const ir::Value *, int> uses;
  for (ir::Value *r : repl)
    ++uses[r];
  for (size_t i = 0; i < repl.size(); ++i) {
    ir::Value *r = repl[i];
    const bool own = r->producer() && uses[r] == 1 && g.findValue(names[i]) == nullptr;
    if (own && g.renameValue(r, names[i]).isOk())
      continue;
    if (outputSlots[i].empty())
      continue;
    ir::Node *after = r->producer() ? g.nextNode(r->producer()) : g.firstNode();
    PIPEC_ASSIGN(ir::Node * id, g.insertNode(after, g.uniqueNodeName(names[i] + "/Identity"),
                                             "Identity", "", {r}, {names[i]}));
    if (r->typeKnown())
      id->output(0)->setType(r->type());
    for (size_t k : outputSlots[i])
      g.setOutput(k, id->output(0));
  }
  return Status::ok();
}

} // namespace pipec::passes::expand
