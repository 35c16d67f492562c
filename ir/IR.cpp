//===- ir/IR.cpp - Graph, Node, Value -------------------------------------===//
#include "ir/IR.h"

#include <algorithm>
#include <queue>

namespace pipec::ir {

namespace {
std::vector<OpInfo> buildOpTable() {
  using namespace op;
  std::vector<OpInfo> t;
#define PIPEC_OP(Domain, Name, MinIn, MaxIn, MinOut, MaxOut, ValueIn, Traits)  \
  t.push_back(OpInfo{Domain, #Name, MinIn, MaxIn, MinOut, MaxOut, ValueIn, Traits});
#include "ir/Ops.def"
  return t;
}
} // namespace

const std::vector<OpInfo> &allOps() {
  static const std::vector<OpInfo> table = buildOpTable();
  return table;
}

std::string canonicalDomain(std::string_view domain) {
  if (domain == "ai.onnx")
    return "";
  return std::string(domain);
}

const OpInfo *lookupOp(std::string_view domain, std::string_view name) {
  static const auto index = [] {
    std::map<std::pair<std::string, std::string>, const OpInfo *> m;
    for (const OpInfo &o : allOps())
      m[{std::string(o.domain), std::string(o.name)}] = &o;
    return m;
  }();
  auto it = index.find({canonicalDomain(domain), std::string(name)});
  return it == index.end() ? nullptr : it->second;
}

std::string_view phaseName(Phase p) {
  switch (p) {
  case Phase::Forward: return "fwd";
  case Phase::Backward: return "bwd";
  case Phase::WeightGrad: return "wgrad";
  case Phase::Optimizer: return "opt";
  case Phase::Recompute: return "remat";
  }
  return "fwd";
}

//===-- Node --------------------------------------------------------------===//

void Node::removeUser(Value *v, Node *n) {
  auto &u = v->users_;
  auto it = std::find(u.begin(), u.end(), n);
  if (it != u.end())
    u.erase(it);
}

void Node::setInput(size_t i, Value *v) {
  if (i >= inputs_.size())
    inputs_.resize(i + 1, nullptr);
  if (inputs_[i])
    Node::removeUser(inputs_[i], this);
  inputs_[i] = v;
  if (v)
    v->users_.push_back(this);
}

void Node::addInput(Value *v) { setInput(inputs_.size(), v); }

void Node::setGuards(std::vector<Guard> g) {
  for (const Guard &old : guards_)
    old.cond->guarded_.erase(this);
  guards_ = std::move(g);
  for (const Guard &now : guards_)
    now.cond->guarded_.insert(this);
}

//===-- Graph -------------------------------------------------------------===//

int64_t Graph::opset(const std::string &domain) const {
  auto it = opsets_.find(canonicalDomain(domain));
  return it == opsets_.end() ? 0 : it->second;
}

Value *Graph::newValue(const std::string &name) {
  values_.push_back(std::make_unique<Value>());
  Value *v = values_.back().get();
  v->name_ = name;
  valueByName_[name] = v;
  return v;
}

Expected<Value *> Graph::addInput(const std::string &name, TensorDesc type) {
  if (valueByName_.count(name))
    return errorf("graph input '", name, "' redefines a value");
  Value *v = newValue(name);
  v->setType(std::move(type));
  v->isInput_ = true;
  inputs_.push_back(v);
  return v;
}

Expected<Value *> Graph::addConstant(const std::string &name, Tensor data) {
  if (valueByName_.count(name))
    return errorf("constant '", name, "' redefines a value");
  Value *v = newValue(name);
  v->setType(data.desc());
  v->constant_ = std::move(data);
  return v;
}

Expected<Node *> Graph::addNode(const std::string &name, const std::string &opType,
                                const std::string &domain,
                                const std::vector<Value *> &inputs,
                                const std::vector<std::string> &outputNames,
                                AttrMap attrs) {
  return insertNode(nullptr, name, opType, domain, inputs, outputNames,
                    std::move(attrs));
}

void Graph::reserve(size_t nodes, size_t values) {
  nodeByName_.reserve(nodes);
  valueByName_.reserve(values);
}

Expected<Node *> Graph::insertNode(Node *pos, const std::string &name,
                                   const std::string &opType,
                                   const std::string &domain,
                                   const std::vector<Value *> &inputs,
                                   const std::vector<std::string> &outputNames,
                                   AttrMap attrs) {
  const OpInfo *info = lookupOp(domain, opType);
  if (!info)
    return errorf("unknown op '", domain.empty() ? "" : domain + ".", opType,
                  "'");
  if (nodeByName_.count(name))
    return errorf("node name '", name, "' is used twice");
  for (const std::string &o : outputNames)
    if (!o.empty() && valueByName_.count(o))
      return errorf("node '", name, "' redefines value '", o, "'");
  auto node = std::make_unique<Node>();
  Node *n = node.get();
  n->name_ = name;
  n->opType_ = opType;
  n->domain_ = canonicalDomain(domain);
  n->info_ = info;
  n->attrs_ = std::move(attrs);
  for (Value *v : inputs)
    n->addInput(v);
  for (size_t i = 0; i < outputNames.size(); ++i) {
    Value *v = newValue(outputNames[i]);
    v->producer_ = n;
    v->producerIndex_ = static_cast<int>(i);
    n->outputs_.push_back(v);
  }
  nodeByName_[name] = n;
  n->self_ = nodes_.insert(pos ? pos->self_ : nodes_.end(), std::move(node));
  return n;
}

Expected<Value *> Graph::addNodeOutput(Node *n, const std::string &name) {
  if (valueByName_.count(name))
    return errorf("node '", n->name(), "' redefines value '", name, "'");
  Value *v = newValue(name);
  v->producer_ = n;
  v->producerIndex_ = static_cast<int>(n->outputs_.size());
  n->outputs_.push_back(v);
  return v;
}

void Graph::addOutput(Value *v) {
  v->isOutput_ = true;
  outputs_.push_back(v);
}

void Graph::setOutput(size_t i, Value *v) {
  Value *old = outputs_[i];
  outputs_[i] = v;
  v->isOutput_ = true;
  old->isOutput_ = std::count(outputs_.begin(), outputs_.end(), old) > 0;
}

std::vector<Value *> Graph::constants() const {
  std::vector<Value *> r;
  for (const auto &v : values_)
    if (v->isConstant())
      r.push_back(v.get());
  return r;
}

std::vector<Node *> Graph::nodes() const {
  std::vector<Node *> r;
  r.reserve(nodes_.size());
  for (const auto &n : nodes_)
    r.push_back(n.get());
  return r;
}

size_t Graph::indexOf(const Node *n) const {
  size_t i = 0;
  for (const auto &x : nodes_) {
    if (x.get() == n)
      return i;
    ++i;
  }
  return nodes_.size();
}

Value *Graph::findValue(const std::string &name) const {
  auto it = valueByName_.find(name);
  return it == valueByName_.end() ? nullptr : it->second;
}

Node *Graph::findNode(const std::string &name) const {
  auto it = nodeByName_.find(name);
  return it == nodeByName_.end() ? nullptr : it->second;
}

std::string Graph::uniqueValueName(const std::string &base) {
  if (!valueByName_.count(base))
    return base;
  int &c = nameCounter_[base];
  std::string n;
  do
    n = base + "." + std::to_string(++c);
  while (valueByName_.count(n));
  return n;
}

std::string Graph::uniqueNodeName(const std::string &base) {
  if (!nodeByName_.count(base))
    return base;
  int &c = nameCounter_["node:" + base];
  std::string n;
  do
    n = base + "." + std::to_string(++c);
  while (nodeByName_.count(n));
  return n;
}

Status Graph::renameValue(Value *v, const std::string &name) {
  if (v->name_ == name)
    return Status::ok();
  auto it = valueByName_.find(name);
  if (it != valueByName_.end())
    return errorf("value name '", name, "' is already used");
  valueByName_.erase(v->name_);
  v->name_ = name;
  valueByName_[name] = v;
  return Status::ok();
}

Status Graph::renameNode(Node *n, const std::string &name) {
  if (n->name_ == name)
    return Status::ok();
  if (nodeByName_.count(name))
    return errorf("node name '", name, "' is already used");
  nodeByName_.erase(n->name_);
  n->name_ = name;
  nodeByName_[name] = n;
  return Status::ok();
}

void Graph::replaceAllUsesWith(Value *from, Value *to) {
  if (from == to)
    return;
  std::vector<Node *> users = from->users_;
  for (Node *n : users)
    for (size_t i = 0; i < n->inputs_.size(); ++i)
      if (n->inputs_[i] == from)
        n->setInput(i, to);
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (outputs_[i] == from)
      setOutput(i, to);
  const std::vector<Node *> guarded(from->guarded_.begin(), from->guarded_.end());
  for (Node *n : guarded) {
    std::vector<Guard> g = n->guards_;
    for (Guard &x : g)
      if (x.cond == from)
        x.cond = to;
    n->setGuards(std::move(g));
  }
}

Expected<Node *> Graph::replaceNode(Node *old, const std::string &name, const std::string &opType,
                                    const std::string &domain, const std::vector<Value *> &inputs,
                                    AttrMap attrs) {
  PIPEC_ASSIGN(Node * n, insertNode(old, name, opType, domain, inputs, {}, std::move(attrs)));
  n->phase_ = old->phase_;
  n->forwardOf_ = old->forwardOf_;
  n->setGuards(old->guards_);
  n->outputs_ = std::move(old->outputs_);
  old->outputs_.clear();
  for (size_t i = 0; i < n->outputs_.size(); ++i) {
    n->outputs_[i]->producer_ = n;
    n->outputs_[i]->producerIndex_ = static_cast<int>(i);
  }
  eraseNode(old);
  return n;
}

void Graph::eraseNode(Node *n) {
  n->setGuards({});
  for (size_t i = 0; i < n->inputs_.size(); ++i)
    if (n->inputs_[i])
      Node::removeUser(n->inputs_[i], n);
  for (Value *o : n->outputs_) {
    if (o->producer_ != n)
      continue; // converted to a constant
    o->producer_ = nullptr;
    o->producerIndex_ = -1;
    if (o->users_.empty() && !o->isOutput_)
      valueByName_.erase(o->name_);
  }
  nodeByName_.erase(n->name_);
  nodes_.erase(n->self_);
  // Values of the erased node stay allocated (other code may still hold
  // pointers during a pass); they are unreachable from the graph.
}

Value *Graph::makeConstantValue(const std::string &nameBase, Tensor data) {
  Value *v = newValue(uniqueValueName(nameBase));
  v->setType(data.desc());
  v->constant_ = std::move(data);
  return v;
}

void Graph::convertToConstant(Value *v, Tensor data) {
  v->producer_ = nullptr;
  v->producerIndex_ = -1;
  v->setType(data.desc());
  v->constant_ = std::move(data);
}

void Graph::removeDeadConstants() {
  for (auto &v : values_)
    if (v->isConstant() && v->users_.empty() && !v->isOutput_ &&
        valueByName_.count(v->name_) && valueByName_[v->name_] == v.get()) {
      valueByName_.erase(v->name_);
      v->constant_ = Tensor();
    }
  values_.erase(std::remove_if(values_.begin(), values_.end(),
                               [&](const std::unique_ptr<Value> &v) {
                                 return !v->isInput_ && !v->producer_ &&
                                        !v->isConstant() && v->users_.empty() &&
                                        !v->isOutput_;
                               }),
                values_.end());
}

Status Graph::topoSort() {
  // Kahn's algorithm, always taking the earliest ready node in the current
  // order, so an already sorted graph keeps its order exactly.
  std::vector<std::unique_ptr<Node>> order;
  order.reserve(nodes_.size());
  for (auto &x : nodes_)
    order.push_back(std::move(x));
  nodes_.clear();
  // Back into the list in `ordered`'s order, each node's position kept.
  auto relink = [this](std::vector<std::unique_ptr<Node>> &ordered) {
    for (auto &x : ordered) {
      Node *node = x.get();
      nodes_.push_back(std::move(x));
      node->self_ = std::prev(nodes_.end());
    }
  };
  size_t n = order.size();
  std::unordered_map<const Node *, size_t> pos;
  for (size_t i = 0; i < n; ++i)
    pos[order[i].get()] = i;
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> succ(n);
  for (size_t i = 0; i < n; ++i)
    for (Value *v : order[i]->inputs_)
      if (v && v->producer_) {
        size_t p = pos.at(v->producer_);
        succ[p].push_back(i);
        ++pending[i];
      }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0)
      ready.push(i);
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(n);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    for (size_t s : succ[i])
      if (--pending[s] == 0)
        ready.push(s);
    sorted.push_back(std::move(order[i]));
  }
  if (sorted.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (order[i])
        sorted.push_back(std::move(order[i]));
    relink(sorted);
    return errorf("the graph has a cycle");
  }
  relink(sorted);
  return Status::ok();
}

bool isParameter(const Value &v) {
  if (!v.isConstant() || !v.isTrainable() || v.isLossScaleSeed())
    return false;
  for (const Node *u : v.users()) {
    if (u->is("BatchNormalization") && (u->input(3) == &v || u->input(4) == &v))
      return false;
    const OpInfo *info = u->info();
    for (size_t i = 0; i < u->numInputs(); ++i)
      if (u->input(i) == &v && i < 32 && ((info->shapeValueInputs >> i) & 1u))
        return false;
  }
  return true;
}

bool isView(const Node &n) {
  if (!n.info() || !n.info()->has(op::View))
    return false;
  if (n.numInputs() < 1 || n.numOutputs() != 1 || !n.input(0) || n.input(0)->isConstant())
    return false;
  return n.input(0)->type().bytes() == n.output(0)->type().bytes();
}

} // namespace pipec::ir
