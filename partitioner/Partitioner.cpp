//===- partitioner/Partitioner.cpp - Cutting a graph into stages ----------===//
#include "partitioner/Partitioner.h"

#include "partitioner/CostModel.h"
#include "partitioner/PipelineSim.h"
#include "support/Limits.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace pipec::partitioner {

using pipeline::SimResult;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
/// Exact search up to this many (cut position x cut position x stage) steps.
constexpr double kExactLimit = 2e7;

std::string gib(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024));
  return buf;
}

/// The budget a stage's memory is checked against (infinite when ignored).
double budgetOf(const ChainModel &c) {
  return c.options().memoryBudget > 0 ? c.options().memoryBudget : kInf;
}

/// Exact: dp[s][b] = least bottleneck of cutting [0, b) into s + 1 stages.
std::vector<Stage> cutExact(const ChainModel &chain, int K, bool useMemory) {
  const size_t N = chain.size();
  const double budget = useMemory ? budgetOf(chain) : kInf;
  std::vector<std::vector<double>> dp(K, std::vector<double>(N + 1, kInf));
  std::vector<std::vector<size_t>> parent(K, std::vector<size_t>(N + 1, 0));
  for (size_t a = 0; a < N; ++a) {
    bool any = a == 0;
    for (int s = 1; s < K && !any; ++s)
      any = dp[s - 1][a] < kInf;
    if (!any)
      continue;
    ChainModel::Sweep sw(chain, a);
    for (size_t b = a + 1; b <= N; ++b) {
      sw.push();
      for (int s = a == 0 ? 0 : 1; s < K; ++s) {
        if (a == 0 && s > 0)
          break;
        double prev = s == 0 ? 0.0 : dp[s - 1][a];
        if (prev == kInf || N - b < static_cast<size_t>(K - s - 1))
          continue;
        StageEstimate e = sw.estimate(s, K);
        if (e.memory.total() > budget)
          continue;
        double v = std::max(prev, e.time());
        if (v < dp[s][b]) {
          dp[s][b] = v;
          parent[s][b] = a;
        }
      }
    }
  }
  if (dp[K - 1][N] == kInf)
    return {};
  std::vector<Stage> stages(K);
  size_t b = N;
  for (int s = K - 1; s >= 0; --s) {
    stages[s] = {parent[s][b], b};
    b = parent[s][b];
  }
  return stages;
}

/// Greedy feasibility of bottleneck T: each stage ends as far as it can.
std::vector<Stage> cutGreedy(const ChainModel &chain, int K, double T, double budget) {
  const size_t N = chain.size();
  std::vector<Stage> stages;
  size_t a = 0;
  for (int s = 0; s < K; ++s) {
    bool last = s == K - 1;
    size_t maxEnd = N - static_cast<size_t>(K - s - 1);
    ChainModel::Sweep sw(chain, a);
    size_t best = 0;
    while (sw.end() < maxEnd) {
      sw.push();
      if (sw.monotoneTime() > T)
        break;
      StageEstimate e = sw.estimate(s, K);
      if (e.memory.total() - e.memory.communication > budget)
        break;
      if ((!last || sw.end() == N) && e.time() <= T && e.memory.total() <= budget)
        best = sw.end();
    }
    if (best == 0)
      return {};
    stages.push_back({a, best});
    a = best;
  }
  return a == N ? stages : std::vector<Stage>{};
}

std::vector<Stage> cutBisect(const ChainModel &chain, int K, bool useMemory) {
  const double budget = useMemory ? budgetOf(chain) : kInf;
  std::vector<Stage> best = cutGreedy(chain, K, kInf, budget);
  if (best.empty())
    return {};
  double hi = 0;
  for (size_t s = 0; s < best.size(); ++s)
    hi = std::max(hi, chain.evaluate(best[s].begin, best[s].end, static_cast<int>(s), K).time());
  double lo = 0;
  for (int it = 0; it < 64 && hi - lo > 1e-9 * hi; ++it) {
    double mid = 0.5 * (lo + hi);
    std::vector<Stage> st = cutGreedy(chain, K, mid, budget);
    if (st.empty()) {
      lo = mid;
    } else {
      hi = mid;
      best = std::move(st);
    }
  }
  return best;
}

std::vector<Stage> cut(const ChainModel &chain, int K, const std::string &search, bool useMemory) {
  double n = static_cast<double>(chain.size());
  bool exact = search == "exact" || (search == "auto" && n * n * K <= kExactLimit);
  return exact ? cutExact(chain, K, useMemory) : cutBisect(chain, K, useMemory);
}

std::string describeMemory(const StageEstimate &e) {
  const MemoryBreakdown &m = e.memory;
  return cat(gib(m.total()), " (weights ", gib(m.weights), ", gradients ", gib(m.gradients),
             ", optimizer state ", gib(m.optimizerState), ", activations ", gib(m.activations),
             " for ", e.inFlight, " micro-batch(es) in flight, recompute ", e.recompute,
             ", communication ", gib(m.communication), ", workspace ", gib(m.workspace), ")");
}

/// Memory of each device: the sum of its stages' (schedules with more than
/// one stage per device).
std::vector<double> deviceMemory(const ChainModel &chain, const std::vector<Stage> &st) {
  const pipeline::Schedule &sched = chain.options().schedule;
  const unsigned S = static_cast<unsigned>(st.size()), K = S / sched.stagesPerDevice();
  std::vector<double> mem(K, 0.0);
  for (unsigned s = 0; s < S; ++s)
    mem[sched.deviceOf(s, K)] +=
        chain.evaluate(st[s].begin, st[s].end, static_cast<int>(s), static_cast<int>(S))
            .memory.total();
  return mem;
}

/// With several stages per device the cut balances stages, but a device's
/// time per micro-batch is the sum of its stages' (with their optimizer
/// steps spread over the micro-batches): this moves single cut positions
/// (by halving steps) while that lowers the largest device time
/// (then the sum of squares), each changed stage within the budget. The
/// work is bounded by 64 evaluations of the whole chain.
void balanceDevices(const ChainModel &chain, std::vector<Stage> &st) {
  const pipeline::Schedule &sched = chain.options().schedule;
  const int S = static_cast<int>(st.size());
  const unsigned K = static_cast<unsigned>(S) / sched.stagesPerDevice();
  const double budget = budgetOf(chain);
  std::vector<double> time(st.size());
  const double M = std::max(1, chain.options().microBatches);
  auto eval = [&](const Stage &x, int s) {
    return chain.evaluate(x.begin, x.end, s, S);
  };
  auto load = [&](const StageEstimate &e) { return e.time() + e.optimizerTime / M; };
  for (int s = 0; s < S; ++s)
    time[static_cast<size_t>(s)] = load(eval(st[static_cast<size_t>(s)], s));
  auto score = [&](const std::vector<double> &t) {
    std::vector<double> dev(K, 0.0);
    for (int s = 0; s < S; ++s)
      dev[sched.deviceOf(static_cast<unsigned>(s), K)] += t[static_cast<size_t>(s)];
    double worst = 0, squares = 0;
    for (double x : dev)
      worst = std::max(worst, x), squares += x * x;
    return std::pair<double, double>{worst, squares};
  };
  double work = 0;
  const double maxWork = 64.0 * static_cast<double>(chain.size());
  auto best = score(time);
  for (size_t step = std::max<size_t>(1, chain.size() / (4 * st.size())); step >= 1; step /= 2) {
    for (bool moved = true; moved && work < maxWork;) {
      moved = false;
      for (int i = 1; i < S && work < maxWork; ++i) {
        Stage &a = st[static_cast<size_t>(i - 1)], &b = st[static_cast<size_t>(i)];
        for (int dir : {-1, 1}) {
          const size_t cutAt = a.end;
          if (dir < 0 ? cutAt < a.begin + step + 1 : cutAt + step + 1 > b.end)
            continue;
          Stage na{a.begin, dir < 0 ? cutAt - step : cutAt + step}, nb{na.end, b.end};
          StageEstimate ea = eval(na, i - 1), eb = eval(nb, i);
          work += static_cast<double>(b.end - a.begin);
          if (ea.memory.total() > budget || eb.memory.total() > budget)
            continue;
          std::vector<double> t = time;
          t[static_cast<size_t>(i - 1)] = load(ea);
          t[static_cast<size_t>(i)] = load(eb);
          auto sc = score(t);
          if (sc.first < best.first * (1 - 1e-12) ||
              (sc.first <= best.first && sc.second < best.second * (1 - 1e-12))) {
            a = na, b = nb, time = t, best = sc, moved = true;
            break;
          }
        }
      }
    }
    if (step == 1)
      break;
  }
}

/// Cuts into S stages within the budget, or says which stages (devices) do
/// not fit. Each stage is cut to fit the budget on its own; with more than
/// one stage per device the devices' sums are checked after.
Expected<std::vector<Stage>> cutWithin(const ChainModel &chain, int S, const std::string &search) {
  const size_t N = chain.size();
  const int per = static_cast<int>(chain.options().schedule.stagesPerDevice());
  if (N == 0 && S == 1)
    return std::vector<Stage>{Stage{}}; // nothing to cut: one empty stage
  if (static_cast<size_t>(S) > N) {
    if (per > 1)
      return errorf("cannot cut ", N, " forward nodes into ", S, " stages (", S / per,
                    " devices x ", per, " stages each for the ",
                    chain.options().schedule.name(),
                    " schedule): devices x stages per device must be at most ", N);
    return errorf("cannot cut ", N, " forward nodes into ", S, " stages: -k must be at most ", N);
  }
  std::vector<Stage> st = cut(chain, S, search, true);
  if (!st.empty() && per > 1) {
    balanceDevices(chain, st);
    std::string over;
    std::vector<double> mem = deviceMemory(chain, st);
    for (size_t d = 0; d < mem.size(); ++d)
      if (mem[d] > budgetOf(chain))
        over += cat(over.empty() ? "" : "; ", "device ", d, " needs ", gib(mem[d]), " for its ",
                    per, " stages");
    if (!over.empty())
      return errorf("the stages do not fit the memory budget of ", gib(budgetOf(chain)),
                    " per device with K=", S / per, " and ", per, " stages per device (", N,
                    " forward nodes): ", over);
  }
  if (!st.empty())
    return st;
  // Explain with the best-balanced cut that ignores memory.
  std::vector<Stage> free = cut(chain, S, search, false);
  std::string over;
  for (size_t s = 0; s < free.size(); ++s) {
    StageEstimate e = chain.evaluate(free[s].begin, free[s].end, static_cast<int>(s), S);
    if (e.memory.total() > budgetOf(chain))
      over += cat(over.empty() ? "" : "; ", "stage ", s, " needs ", describeMemory(e));
  }
  if (over.empty()) // every balanced stage fits, but no cut fits all at once
    over = "every cut puts more than the budget on some stage";
  return errorf("the stages do not fit the memory budget of ", gib(budgetOf(chain)),
                " per device with K=", S / per, per > 1 ? cat(" (", S, " stages)") : "", " (", N,
                " forward nodes): ", over);
}


/// The step of `st` under the chain's schedule; one stage runs as gpipe
/// (on one device the order does not change the time).
Expected<double> simulateStages(const ChainOptions &o, const std::vector<StageEstimate> &st,
                                double *bubble) {
  std::vector<StageTimes> times;
  for (const StageEstimate &e : st)
    times.push_back(timesOf(e));
  pipeline::Schedule sched = o.schedule;
  if (st.size() == 1) {
    PIPEC_ASSIGN(sched, pipeline::Schedule::parse("gpipe"));
  }
  PIPEC_ASSIGN(auto progs, idealSchedule(sched, o.microBatches, o.training, times));
  PIPEC_ASSIGN(SimResult r, simulate(progs));
  if (bubble)
    *bubble = r.bubbleFraction;
  return r.makespan;
}

} // namespace

StageTimes timesOf(const StageEstimate &e) {
  StageTimes t;
  t.forward = e.forwardTime;
  t.backward = e.backwardTime - e.weightGradTime;
  t.weightGrad = e.weightGradTime;
  t.recompute = e.recomputeTime;
  t.sendForward = e.sendForwardTime;
  t.sendBackward = e.sendBackwardTime;
  t.optimizer = e.optimizerTime;
  return t;
}

Expected<CostModel> makeCostModel(const PartitionOptions &opts) {
  CostModel m;
  PIPEC_ASSIGN(m.profile, loadProfile(opts.profile.empty() ? kDefaultProfile : opts.profile));
  m.measured = opts.opTimes;
  return m;
}

Expected<PartitionEstimate> estimatePartition(const ChainModel &chain,
                                              const std::vector<Stage> &stages) {
  const ChainOptions &o = chain.options();
  PartitionEstimate est;
  est.model = chain.cost();
  est.memoryBudget = o.memoryBudget;
  est.schedule = o.schedule;
  est.microBatches = o.microBatches;
  est.training = o.training;
  est.recompute = o.recompute;
  const int S = static_cast<int>(stages.size());
  for (int s = 0; s < S; ++s) {
    est.stages.push_back(chain.evaluate(stages[s].begin, stages[s].end, s, S));
    est.bottleneck = std::max(est.bottleneck, est.stages.back().time());
  }
  PIPEC_ASSIGN(est.stepTime, simulateStages(o, est.stages, &est.bubbleFraction));
  // One device: the whole chain as one stage (simulateStages runs it as gpipe).
  std::vector<StageEstimate> one{chain.evaluate(0, chain.size(), 0, 1)};
  PIPEC_ASSIGN(est.singleDeviceStepTime, simulateStages(o, one, nullptr));
  return est;
}

Status assignNonForwardNodes(const ir::Graph &g, Partition &p) {
  const int last = static_cast<int>(p.numStages()) - 1;
  for (const ir::Node *n : g.nodes()) {
    if (p.stageOf(n) >= 0)
      continue;
    if (n->phase() == ir::Phase::Forward)
      return errorf("internal error: forward node '", n->name(), "' was not placed on a stage");
    int s = -1;
    if (!n->forwardOf().empty())
      if (const ir::Node *f = g.findNode(n->forwardOf()))
        s = p.stageOf(f);
    for (size_t i = 0; s < 0 && i < n->numInputs(); ++i)
      if (n->input(i) && n->input(i)->producer())
        s = p.stageOf(n->input(i)->producer());
    p.assign(n, s < 0 ? last : s);
  }
  return Status::ok();
}

Expected<Partition> partitionGraph(const ir::Graph &g, const PartitionOptions &opts) {
  if (opts.microBatches < 1 || static_cast<uint32_t>(opts.microBatches) > kMaxMicroBatches)
    return errorf("the number of micro-batches must be 1 to ", kMaxMicroBatches, " (got ",
                  opts.microBatches, ")");
  if (static_cast<uint32_t>(std::max(opts.numStages, opts.maxDevices)) > kMaxStages)
    return errorf("at most ", kMaxStages, " stages are supported (asked for ",
                  std::max(opts.numStages, opts.maxDevices), ")");
  if (opts.maxDevices < 0)
    return errorf("the number of devices must be at least 1 (got ", opts.maxDevices, ")");
  if (opts.maxDevices == 0 && opts.numStages < 1)
    return errorf("the number of stages must be at least 1 (got ", opts.numStages, ")");
  if (opts.memoryBudget < 0)
    return errorf("the memory budget must be positive (got ", opts.memoryBudget, " bytes)");
  if (opts.optimizerStates < 0)
    return errorf("the optimizer state count must be at least 0 (got ", opts.optimizerStates, ")");
  if (opts.search != "auto" && opts.search != "exact" && opts.search != "bisect")
    return errorf("unknown partition search '", opts.search, "' (auto, exact, bisect)");
  PIPEC_TRY(checkRecomputePolicy(opts.recompute));
  Partition p;
  for (const ir::Node *n : g.nodes())
    if (n->phase() == ir::Phase::Forward)
      p.order.push_back(n);
  // A graph that folded to constants (every output a constant or a graph
  // input) still gets a plan: one device with no nodes, which holds the
  // constant outputs.
  if (p.order.empty() && (opts.maxDevices > 1 || (opts.maxDevices == 0 && opts.numStages > 1)))
    return errorf("the graph has no nodes left to place on stages (every output folded to a "
                  "constant or is an input): compile it for one device, not ",
                  opts.maxDevices > 0 ? opts.maxDevices : opts.numStages);
  PIPEC_ASSIGN(CostModel cost, makeCostModel(opts));
  ChainOptions co;
  co.training = opts.training;
  co.microBatches = opts.microBatches;
  co.schedule = opts.schedule;
  co.recompute = opts.recompute;
  co.optimizerStates = opts.optimizerStates;
  co.optimizerShards = std::max(1, opts.optimizerShards);
  if (opts.training) {
    co.optimizerSecondsPerParameter =
        cost.profile.optimizerStepSecondsPerParameter(opts.optimizer, opts.optimizerStates);
    co.accumulateSecondsPerParameter =
        std::max(1, opts.microBatches) * cost.profile.gradientAccumulateSecondsPerElement();
    co.accumulatedInPlace = &opts.accumulatedInPlace;
  }
  co.memoryBudget = opts.memoryBudget > 0 ? opts.memoryBudget : cost.profile.memoryCapacity;
  PIPEC_ASSIGN(ChainModel chain, ChainModel::build(g, p.order, cost, co));
  const size_t N = chain.size();
  const int per = static_cast<int>(opts.schedule.stagesPerDevice());
  if (opts.maxDevices > 0) {
    Status last;
    int maxK = static_cast<int>(std::min<size_t>(static_cast<size_t>(opts.maxDevices), N / per));
    for (int K = per > 1 ? 2 : 1; K <= maxK && p.stages.empty(); ++K) {
      if (Status ok = opts.schedule.check(static_cast<unsigned>(K),
                                          static_cast<unsigned>(opts.microBatches), opts.training);
          !ok) {
        last = ok;
        continue;
      }
      auto st = cutWithin(chain, K * per, opts.search);
      if (st)
        p.stages = st.take();
      else
        last = st.status();
    }
    if (p.stages.empty())
      return errorf("no K <= ", maxK, " (--devices ", opts.maxDevices, ", ", N,
                    " forward nodes) fits the memory budget; with K=", maxK, ": ", last.message());
  } else {
    if (!(p.order.empty() && opts.numStages == 1))
      PIPEC_TRY(opts.schedule.check(static_cast<unsigned>(opts.numStages),
                                    static_cast<unsigned>(opts.microBatches), opts.training));
    PIPEC_ASSIGN(p.stages, cutWithin(chain, opts.numStages * per, opts.search));
  }
  for (size_t s = 0; s < p.stages.size(); ++s)
    for (size_t i = p.stages[s].begin; i < p.stages[s].end; ++i)
      p.assign(p.order[i], static_cast<int>(s));
  PIPEC_TRY(assignNonForwardNodes(g, p));
  PIPEC_ASSIGN(p.estimate, estimatePartition(chain, p.stages));
  double n = static_cast<double>(N), K = static_cast<double>(p.stages.size());
  p.estimate.search = opts.search == "auto" ? (n * n * K <= kExactLimit ? "exact" : "bisect")
                                            : opts.search;
  return p;
}

} // namespace pipec::partitioner
