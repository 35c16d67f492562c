//===- partitioner/StageModel.cpp - Time and memory of a stage ------------===//
#include "partitioner/StageModel.h"

#include "passes/Recompute.h"


#include <algorithm>
#include <unordered_map>

namespace pipec::partitioner {

Status checkRecomputePolicy(const std::string &p) {
  if (p == "none" || p == "full" || p == "selective" || p == "auto")
    return Status::ok();
  return errorf("unknown recompute policy '", p, "' (none, full, selective, auto)");
}

nlohmann::json memoryToJson(const MemoryBreakdown &m) {
  return {{"weights", m.weights},           {"gradients", m.gradients},
          {"optimizer_state", m.optimizerState}, {"activations", m.activations},
          {"communication", m.communication}, {"workspace", m.workspace},
          {"total", m.total()}};
}

namespace {
double bytesOf(const ir::Value *v) { return static_cast<double>(v->type().bytes()); }
} // namespace

Expected<ChainModel> ChainModel::build(const ir::Graph &g, std::vector<const ir::Node *> order,
                                       const CostModel &cost, const ChainOptions &opts) {
  PIPEC_TRY(checkRecomputePolicy(opts.recompute));
  ChainModel m;
  m.opts_ = opts;
  m.cost_ = cost;
  const size_t N = order.size();
  m.nodes_.resize(N);
  std::vector<ir::Node *> all = g.nodes();
  std::unordered_map<const ir::Node *, int> owner;
  owner.reserve(all.size());
  for (size_t i = 0; i < N; ++i)
    owner[order[i]] = static_cast<int>(i);
  std::unordered_map<const ir::Value *, int> ids;
  ids.reserve(2 * all.size());
  auto idOf = [&](const ir::Value *v) {
    auto [it, fresh] = ids.emplace(v, static_cast<int>(ids.size()));
    return it->second;
  };
  // Owners of non-forward nodes, as assignNonForwardNodes places them.
  for (const ir::Node *n : all) {
    if (owner.count(n))
      continue;
    int o = -1;
    if (!n->forwardOf().empty())
      if (const ir::Node *f = g.findNode(n->forwardOf()))
        if (f->phase() == ir::Phase::Forward)
          if (auto it = owner.find(f); it != owner.end() && it->second < static_cast<int>(N))
            o = it->second;
    for (size_t i = 0; o < 0 && i < n->numInputs(); ++i)
      if (n->input(i) && n->input(i)->producer()) {
        auto it = owner.find(n->input(i)->producer());
        if (it != owner.end())
          o = it->second;
      }
    owner[n] = o < 0 ? static_cast<int>(N) - 1 : o;
  }
  // Last forward use of every value, by chain index.
  std::unordered_map<const ir::Value *, int> lastUse;
  lastUse.reserve(2 * N);
  for (size_t i = 0; i < N; ++i)
    for (const ir::Value *v : order[i]->inputs())
      if (v)
        lastUse[v] = static_cast<int>(i);
  auto producerIndex = [&](const ir::Value *v) {
    if (!v->producer() || v->producer()->phase() != ir::Phase::Forward)
      return -1;
    auto it = owner.find(v->producer());
    return it == owner.end() ? -1 : it->second;
  };
  for (const ir::Node *n : all) {
    ChainNode &c = m.nodes_[static_cast<size_t>(owner[n])];
    const int self = owner[n];
    double t = cost.nodeTime(*n);
    double flops = forwardCost(*n).flops;
    double ws = 0;
    for (const ir::Value *v : n->inputs())
      if (v && !v->isConstant())
        ws += bytesOf(v);
    for (const ir::Value *v : n->outputs())
      ws += bytesOf(v);
    c.workspace = std::max(c.workspace, ws);
    for (const ir::Value *v : n->inputs())
      if (v && v->isConstant()) {
        bool p = ir::isParameter(*v);
        c.constants.push_back({idOf(v), bytesOf(v), p ? 1 : 0});
        c.paramElems.push_back(p ? static_cast<double>(v->type().numel()) : 0.0);
        const bool inPlace = opts.accumulatedInPlace && opts.accumulatedInPlace->count(v);
        c.collectedElems.push_back(inPlace ? 0.0 : c.paramElems.back());
      }
    switch (n->phase()) {
    case ir::Phase::Forward: {
      c.fwd += t;
      c.fwdFlops += flops;
      c.expensive = passes::isExpensiveToRecompute(*n);
      for (const ir::Value *v : n->outputs()) {
        auto it = lastUse.find(v);
        c.produced.push_back({idOf(v), bytesOf(v), it == lastUse.end() ? -1 : it->second});
        if (it != lastUse.end())
          m.nodes_[static_cast<size_t>(it->second)].lastUses.push_back({idOf(v), bytesOf(v), self});
      }
      for (const ir::Value *v : n->inputs())
        if (v && !v->isConstant())
          c.inputs.push_back({idOf(v), bytesOf(v), producerIndex(v)});
      break;
    }
    case ir::Phase::Backward:
    case ir::Phase::WeightGrad:
    case ir::Phase::Recompute:
      (n->phase() == ir::Phase::Recompute ? c.rec : c.bwd) += t;
      if (n->phase() == ir::Phase::WeightGrad)
        c.wgt += t;
      if (n->phase() != ir::Phase::Recompute)
        c.bwdFlops += flops;
      for (const ir::Value *v : n->inputs())
        if (v && !v->isConstant() &&
            (v->isGraphInput() || (v->producer() && v->producer()->phase() == ir::Phase::Forward)))
          c.stashReads.push_back({idOf(v), bytesOf(v), producerIndex(v)});
      break;
    case ir::Phase::Optimizer:
      c.opt += t;
      break;
    }
  }
  // Selective recompute (passes/Recompute.h) clones the cheap forward nodes
  // whose outputs the backward reads, and, transitively, the cheap nodes
  // those clones read from; the clones read the kept values (outputs of
  // expensive nodes, stage inputs, graph inputs), which stay stashed even
  // when no backward node reads them.
  {
    std::vector<char> needed(ids.size(), 0);
    for (const ChainNode &c : m.nodes_)
      for (const Use &u : c.stashReads)
        needed[static_cast<size_t>(u.value)] = 1;
    for (size_t j = N; j-- > 0;) {
      ChainNode &c = m.nodes_[j];
      if (c.expensive)
        continue;
      bool recomputed = false;
      for (const Use &u : c.produced)
        recomputed = recomputed || needed[static_cast<size_t>(u.value)];
      if (!recomputed)
        continue;
      c.chainReads = c.inputs;
      for (const Use &u : c.inputs)
        needed[static_cast<size_t>(u.value)] = 1;
    }
  }
  m.numValues_ = ids.size();
  m.seenChain_.assign(m.numValues_, -1);
  m.seenConst_.assign(m.numValues_, -1);
  m.seenIn_.assign(m.numValues_, -1);
  m.seenStash_.assign(m.numValues_, -1);
  m.seenInput_.assign(m.numValues_, -1);
  return m;
}

ChainModel::Sweep::Sweep(const ChainModel &m, size_t begin)
    : m_(m), begin_(begin), end_(begin), tag_(m.nextTag_++) {}

void ChainModel::Sweep::push() {
  const ChainNode &c = m_.nodes_[end_];
  const int a = static_cast<int>(begin_), i = static_cast<int>(end_);
  fwd_ += c.fwd;
  bwd_ += c.bwd + c.rec;
  wgt_ += c.wgt;
  opt_ += c.opt;
  if (!c.expensive)
    cheapFwd_ += c.fwd;
  fwdFlops_ += c.fwdFlops;
  bwdFlops_ += c.bwdFlops;
  workspace_ = std::max(workspace_, c.workspace);
  for (size_t k = 0; k < c.constants.size(); ++k) {
    const Use &u = c.constants[k];
    if (m_.seenConst_[u.value] == tag_)
      continue;
    m_.seenConst_[u.value] = tag_;
    weights_ += u.bytes;
    if (u.producer) {
      paramBytes_ += u.bytes;
      params_ += c.paramElems[k];
      collected_ += c.collectedElems[k];
    }
  }
  // Values this stage stops sending: their last forward use is here.
  for (const Use &u : c.lastUses)
    if (u.producer >= a && u.producer < i)
      out_ -= u.bytes;
  for (const Use &u : c.produced)
    if (u.producer > i)
      out_ += u.bytes;
  for (const Use &u : c.inputs) {
    if (u.producer >= a)
      continue; // made inside the stage
    if (m_.seenInput_[u.value] != tag_) {
      m_.seenInput_[u.value] = tag_;
      stageInputs_ += u.bytes;
      if (u.producer >= 0)
        in_ += u.bytes; // graph inputs are fed, not sent
    }
  }
  for (const Use &u : c.stashReads) {
    if (m_.seenStash_[u.value] == tag_)
      continue;
    m_.seenStash_[u.value] = tag_;
    stash_ += u.bytes;
    bool kept = u.producer < a || (u.producer >= 0 && m_.nodes_[u.producer].expensive);
    if (kept)
      keptStash_ += u.bytes;
    if (m_.seenChain_[u.value] == tag_)
      chainStash_ -= u.bytes; // counted once, as read by the backward
  }
  for (const Use &u : c.chainReads) {
    bool kept = u.producer < a || (u.producer >= 0 && m_.nodes_[u.producer].expensive);
    if (!kept || m_.seenChain_[u.value] == tag_ || m_.seenStash_[u.value] == tag_)
      continue;
    m_.seenChain_[u.value] = tag_;
    chainStash_ += u.bytes;
  }
  ++end_;
}

StageEstimate ChainModel::Sweep::estimate(int stage, int numStages) const {
  const ChainOptions &o = m_.opts_;
  StageEstimate e;
  e.begin = begin_;
  e.end = end_;
  e.forwardTime = fwd_;
  e.backwardTime = o.training ? bwd_ : 0;
  e.weightGradTime = o.training ? wgt_ : 0;
  e.optimizerTime = opt_ + (o.training ? params_ * o.optimizerSecondsPerParameter / o.optimizerShards +
                                             collected_ * o.accumulateSecondsPerParameter
                                       : 0);
  e.forwardFlops = fwdFlops_;
  e.backwardFlops = bwdFlops_;
  e.parameters = params_;
  e.bytesOut = std::max(0.0, out_);
  e.bytesIn = in_;
  e.sendForwardTime = m_.cost_.transferTime(e.bytesOut);
  e.sendBackwardTime = o.training ? m_.cost_.transferTime(e.bytesIn) : 0;
  MemoryBreakdown &mem = e.memory;
  mem.weights = weights_;
  mem.communication = e.bytesIn + e.bytesOut;
  mem.workspace = workspace_;
  if (o.training) {
    // 2bw keeps a second version of every parameter it updates.
    mem.weights += paramBytes_ * (o.schedule.weightVersions() - 1);
    mem.gradients = paramBytes_;
    mem.optimizerState = paramBytes_ * o.optimizerStates / o.optimizerShards;
    const std::vector<unsigned> &inFlight = m_.inFlight(numStages);
    e.inFlight = stage >= 0 && static_cast<size_t>(stage) < inFlight.size()
                     ? static_cast<int>(inFlight[static_cast<size_t>(stage)])
                     : o.microBatches;
  }
  const double inflight = e.inFlight;
  auto activations = [&](const std::string &policy) {
    if (!o.training)
      return 0.0;
    if (policy == "full")
      return stageInputs_ * inflight + stash_;
    if (policy == "selective")
      return (keptStash_ + chainStash_) * inflight + (stash_ - keptStash_);
    return stash_ * inflight;
  };
  auto recomputeTime = [&](const std::string &policy) {
    if (!o.training)
      return 0.0;
    return policy == "full" ? fwd_ : policy == "selective" ? cheapFwd_ : 0.0;
  };
  std::string policy = o.recompute;
  if (policy == "auto") {
    policy = "full";
    for (const char *p : {"none", "selective"}) {
      MemoryBreakdown trial = mem;
      trial.activations = activations(p);
      if (o.memoryBudget <= 0 || trial.total() <= o.memoryBudget) {
        policy = p;
        break;
      }
    }
  }
  if (!o.training)
    policy = "none";
  e.recompute = policy;
  mem.activations = activations(policy);
  e.recomputeTime = recomputeTime(policy);
  if (numStages > static_cast<int>(o.schedule.stagesPerDevice())) {
    // Every device computes while the others do: each kernel takes the
    // profile's measured two-core time.
    const double f = m_.cost_.profile.concurrentSlowdown;
    e.forwardTime *= f;
    e.backwardTime *= f;
    e.weightGradTime *= f;
    e.recomputeTime *= f;
    e.optimizerTime *= f;
  }
  return e;
}

const std::vector<unsigned> &ChainModel::inFlight(int numStages) const {
  if (auto it = inFlight_.find(numStages); it != inFlight_.end())
    return it->second;
  // A stage count the schedule cannot run (checked by the partitioner
  // before it cuts) keeps every micro-batch in flight.
  const unsigned per = opts_.schedule.stagesPerDevice();
  std::vector<unsigned> v(static_cast<size_t>(std::max(numStages, 0)),
                          static_cast<unsigned>(std::max(opts_.microBatches, 1)));
  if (numStages > 0 && numStages % static_cast<int>(per) == 0)
    if (auto f = opts_.schedule.microBatchesInFlight(static_cast<unsigned>(numStages) / per,
                                                     static_cast<unsigned>(opts_.microBatches),
                                                     opts_.training))
      v = f.take();
  return inFlight_.emplace(numStages, std::move(v)).first->second;
}

StageEstimate ChainModel::evaluate(size_t begin, size_t end, int stage, int numStages) const {
  Sweep s(*this, begin);
  while (s.end() < end)
    s.push();
  return s.estimate(stage, numStages);
}

} // namespace pipec::partitioner
