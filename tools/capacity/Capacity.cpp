//===- tools/capacity/Capacity.cpp - Largest model that fits K devices -------===//
#include "tools/capacity/Capacity.h"

#include "partitioner/Partitioner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace pipec::partitioner {

namespace {

constexpr int kParts = 6;

std::array<double, kParts> partsOf(const MemoryBreakdown &m) {
  return {m.weights, m.gradients, m.optimizerState, m.activations, m.communication, m.workspace};
}

MemoryBreakdown fromParts(const std::array<double, kParts> &p) {
  MemoryBreakdown m;
  m.weights = p[0];
  m.gradients = p[1];
  m.optimizerState = p[2];
  m.activations = p[3];
  m.communication = p[4];
  m.workspace = p[5];
  return m;
}

const char *kPartNames[kParts] = {"weights",    "gradients",     "optimizer state",
                                  "activations", "communication", "workspace"};

/// A small instance of the family: its chain and where each block starts.
struct Instance {
  int blocks = 0;
  ChainModel chain;
  /// start[l]: chain index of block l's first node; start[blocks]: the first
  /// node of the fixed back part (chain.size() if there is none).
  std::vector<size_t> start;
};

/// Checks that the forward chain is front, block 0, ..., block L-1, back.
Expected<std::vector<size_t>> blockStarts(const LayerFamily &f,
                                          const std::vector<const ir::Node *> &order, int L) {
  std::vector<size_t> start(static_cast<size_t>(L) + 1, order.size());
  int current = -1; // block of the previous node; -1 in the front part
  bool back = false;
  for (size_t i = 0; i < order.size(); ++i) {
    int b = f.blockOf(*order[i]);
    if (b == current)
      continue;
    bool ok = false;
    if (b == -1 && current == L - 1 && !back) {
      back = true;
      start[static_cast<size_t>(L)] = i;
      ok = true;
    } else if (!back && b == current + 1 && b < L) {
      start[static_cast<size_t>(b)] = i;
      ok = true;
    }
    if (!ok)
      return errorf(f.name, " with ", L, " blocks: forward node '", order[i]->name(), "' (",
                    order[i]->opType(), ") of block ", b, " follows block ", current,
                    "; the blocks are not contiguous in the forward chain");
    current = b;
  }
  if (current != L - 1 && !back)
    return errorf(f.name, " with ", L, " blocks: the chain ends in block ", current);
  return start;
}

Expected<Instance> makeInstance(const LayerFamily &f, const ir::Graph &g, int L,
                                const CostModel &cost, const ChainOptions &co) {
  std::vector<const ir::Node *> order;
  for (const ir::Node *n : g.nodes())
    if (n->phase() == ir::Phase::Forward)
      order.push_back(n);
  Instance inst;
  inst.blocks = L;
  PIPEC_ASSIGN(inst.start, blockStarts(f, order, L));
  PIPEC_ASSIGN(inst.chain, ChainModel::build(g, order, cost, co));
  return inst;
}

enum class Kind { Only, First, Middle, Last };

Kind kindOf(int s, int K) {
  if (K == 1)
    return Kind::Only;
  return s == 0 ? Kind::First : s == K - 1 ? Kind::Last : Kind::Middle;
}

/// Stage of kind `k` holding all but two of the instance's blocks (all of
/// them for Only): [begin, end) of its chain, and the blocks it holds.
struct Range {
  size_t begin, end;
  int blocks;
};

Range rangeOf(const Instance &in, Kind k) {
  const int n = in.blocks - 2;
  const size_t N = in.chain.size();
  switch (k) {
  case Kind::Only:
    return {0, N, in.blocks};
  case Kind::First:
    return {0, in.start[static_cast<size_t>(n)], n};
  case Kind::Middle:
    return {in.start[1], in.start[static_cast<size_t>(1 + n)], n};
  case Kind::Last:
    return {in.start[2], N, n};
  }
  return {0, N, in.blocks};
}

/// Memory of stage s of K as an affine function of its block count.
struct StageFit {
  std::array<double, kParts> at0{}, slope{};
  double x0 = 0;
  std::string recompute;
  MemoryBreakdown at(double blocks) const {
    std::array<double, kParts> p;
    for (int i = 0; i < kParts; ++i)
      p[i] = at0[i] + slope[i] * (blocks - x0);
    return fromParts(p);
  }
};

double relError(double predicted, double actual, double scale) {
  return std::fabs(predicted - actual) / std::max(1.0, scale);
}

constexpr double kFitTolerance = 1e-6;

/// Fits stage s of K on instances 0 and 1; checks on instance 2.
Expected<StageFit> fitStage(const std::array<Instance, 3> &in, int s, int K, double *fitError,
                            const std::string &label) {
  const Kind k = kindOf(s, K);
  std::array<MemoryBreakdown, 3> mem;
  std::array<double, 3> x{};
  StageFit fit;
  for (int i = 0; i < 3; ++i) {
    Range r = rangeOf(in[i], k);
    StageEstimate e = in[i].chain.evaluate(r.begin, r.end, s, K);
    mem[i] = e.memory;
    x[i] = r.blocks;
    if (i == 0)
      fit.recompute = e.recompute;
  }
  auto p0 = partsOf(mem[0]), p1 = partsOf(mem[1]), p2 = partsOf(mem[2]);
  fit.x0 = x[0];
  for (int j = 0; j < kParts; ++j)
    fit.slope[j] = (p1[j] - p0[j]) / (x[1] - x[0]);
  fit.at0 = p0;
  MemoryBreakdown pred = fit.at(x[2]);
  auto pp = partsOf(pred);
  for (int j = 0; j < kParts; ++j) {
    double err = relError(pp[j], p2[j], mem[2].total());
    *fitError = std::max(*fitError, err);
    if (err > kFitTolerance)
      return errorf(label, ": stage ", s, " of ", K, " is not affine in its blocks: ",
                    kPartNames[j], " measured ", p0[j], ", ", p1[j], ", ", p2[j], " bytes at ",
                    x[0], ", ", x[1], ", ", x[2], " blocks, the fit predicts ", pp[j],
                    " at ", x[2]);
  }
  double slope = fit.at(x[0] + 1).total() - fit.at(x[0]).total();
  if (!(slope > 0))
    return errorf(label, ": stage ", s, " of ", K, " does not grow with its blocks (",
                  slope, " bytes per block); the capacity would be unbounded");
  return fit;
}

struct Split {
  bool fits = false;
  std::vector<int64_t> blocks;
};

/// The even split of L blocks over the stages, ceilings to the stages with
/// the most room; fits if every stage is within the budget.
Split evenSplit(const std::vector<StageFit> &fits, int64_t L, double budget) {
  const int64_t K = static_cast<int64_t>(fits.size());
  const int64_t q = L / K, r = L % K;
  Split sp;
  sp.blocks.assign(static_cast<size_t>(K), q);
  if (q < 1)
    return sp;
  std::vector<std::pair<double, size_t>> up;
  for (size_t s = 0; s < fits.size(); ++s)
    up.push_back({fits[s].at(static_cast<double>(q + 1)).total(), s});
  std::stable_sort(up.begin(), up.end());
  for (int64_t i = 0; i < r; ++i)
    sp.blocks[up[static_cast<size_t>(i)].second] = q + 1;
  sp.fits = true;
  for (size_t s = 0; s < fits.size(); ++s)
    if (fits[s].at(static_cast<double>(sp.blocks[s])).total() > budget)
      sp.fits = false;
  return sp;
}

} // namespace

Expected<std::vector<CapacityResult>>
maxTrainableBlocks(const LayerFamily &family, const std::vector<CapacityQuery> &queries,
                   CapacityProbe probe) {
  if (probe[0] < 1 || probe[1] <= probe[0] || probe[2] == probe[0] || probe[2] == probe[1] ||
      probe[2] < 1)
    return errorf("capacity probe sizes must be distinct and at least 1, the first two "
                  "increasing (got ",
                  probe[0], ", ", probe[1], ", ", probe[2], ")");
  for (const CapacityQuery &q : queries) {
    if (q.numStages < 1 || q.microBatches < 1 || q.microBatchSize < 1)
      return errorf(q.label, ": K (", q.numStages, "), M (", q.microBatches,
                    ") and the micro-batch size (", q.microBatchSize, ") must be at least 1");
    if (q.schedule.stagesPerDevice() != 1)
      return errorf(q.label, ": the ", q.schedule.name(), " schedule runs ",
                    q.schedule.stagesPerDevice(),
                    " stages per device; capacity cuts one stage per device");
    PIPEC_TRY(q.schedule.check(static_cast<unsigned>(q.numStages),
                               static_cast<unsigned>(q.microBatches))
                  .withContext(q.label));
    if (q.recompute == "auto")
      return errorf(q.label, ": recompute 'auto' changes policy with the stage size; "
                             "capacity takes none, selective or full");
    PIPEC_TRY(checkRecomputePolicy(q.recompute));
  }
  std::vector<CapacityResult> results(queries.size());
  // Graphs are built once per micro-batch size (the graph's batch).
  std::map<int64_t, std::vector<size_t>> byBatch;
  for (size_t i = 0; i < queries.size(); ++i)
    byBatch[queries[i].microBatchSize].push_back(i);
  for (const auto &[batch, members] : byBatch) {
    std::vector<std::array<Instance, 3>> inst(members.size());
    for (int p = 0; p < 3; ++p) {
      const int L = probe[static_cast<size_t>(p)] + 2;
      PIPEC_ASSIGN(std::unique_ptr<ir::Graph> g, family.build(L, batch));
      for (size_t m = 0; m < members.size(); ++m) {
        const CapacityQuery &q = queries[members[m]];
        PartitionOptions po;
        po.profile = q.profile;
        PIPEC_ASSIGN(CostModel cost, makeCostModel(po));
        ChainOptions co;
        co.training = true;
        co.microBatches = q.microBatches;
        co.schedule = q.schedule;
        co.recompute = q.recompute;
        co.optimizerStates = q.optimizerStates;
        co.memoryBudget = q.memoryBudget > 0 ? q.memoryBudget : cost.profile.memoryCapacity;
        PIPEC_ASSIGN(inst[m][static_cast<size_t>(p)], makeInstance(family, *g, L, cost, co));
      }
    }
    for (size_t m = 0; m < members.size(); ++m) {
      const CapacityQuery &q = queries[members[m]];
      CapacityResult &r = results[members[m]];
      const auto &in = inst[m];
      r.query = q;
      r.memoryBudget = in[0].chain.options().memoryBudget;
      const std::string label = q.label.empty() ? family.name : family.name + ", " + q.label;
      // Parameters: the whole model, affine in L.
      std::array<double, 3> params{}, x{};
      for (int i = 0; i < 3; ++i) {
        params[i] = in[i].chain.evaluate(0, in[i].chain.size(), 0, 1).parameters;
        x[i] = in[i].blocks;
      }
      r.parametersPerBlock = (params[1] - params[0]) / (x[1] - x[0]);
      r.fixedParameters = params[0] - r.parametersPerBlock * x[0];
      double perr = relError(r.fixedParameters + r.parametersPerBlock * x[2], params[2], params[2]);
      r.fitError = perr;
      if (perr > kFitTolerance)
        return errorf(label, ": parameters are not affine in the blocks: ", params[0], ", ",
                      params[1], ", ", params[2], " at ", x[0], ", ", x[1], ", ", x[2], " blocks");
      std::vector<StageFit> fits;
      for (int s = 0; s < q.numStages; ++s) {
        PIPEC_ASSIGN(StageFit f, fitStage(in, s, q.numStages, &r.fitError, label));
        fits.push_back(std::move(f));
      }
      const int64_t K = q.numStages;
      Split best = evenSplit(fits, K, r.memoryBudget);
      if (best.fits) {
        // Largest L: double, then bisect (memory never falls as L grows).
        int64_t lo = K, hi = 2 * K;
        const int64_t kMaxBlocks = int64_t(1) << 40;
        while (evenSplit(fits, hi, r.memoryBudget).fits) {
          lo = hi;
          hi *= 2;
          if (hi > kMaxBlocks)
            return errorf(label, ": more than ", kMaxBlocks, " blocks fit");
        }
        while (hi - lo > 1) {
          int64_t mid = lo + (hi - lo) / 2;
          (evenSplit(fits, mid, r.memoryBudget).fits ? lo : hi) = mid;
        }
        r.blocks = lo;
        best = evenSplit(fits, lo, r.memoryBudget);
        r.parameters = r.fixedParameters + r.parametersPerBlock * static_cast<double>(lo);
      }
      r.blocksPerStage = best.blocks;
      double room = std::numeric_limits<double>::infinity();
      for (size_t s = 0; s < fits.size(); ++s) {
        r.stageMemory.push_back(fits[s].at(static_cast<double>(best.blocks[s])));
        r.stageRecompute.push_back(fits[s].recompute);
        double left = r.memoryBudget - r.stageMemory.back().total();
        if (left < room) {
          room = left;
          r.bindingStage = static_cast<int>(s);
        }
      }
    }
  }
  return results;
}

Expected<CapacityResult> maxTrainableBlocks(const LayerFamily &family, const CapacityQuery &query,
                                            CapacityProbe probe) {
  PIPEC_ASSIGN(std::vector<CapacityResult> r, maxTrainableBlocks(family, std::vector<CapacityQuery>{query}, probe));
  return r[0];
}

nlohmann::json capacityToJson(const CapacityResult &r) {
  const CapacityQuery &q = r.query;
  nlohmann::json stages = nlohmann::json::array();
  for (size_t s = 0; s < r.stageMemory.size(); ++s)
    stages.push_back({{"blocks", r.blocksPerStage[s]},
                      {"recompute", r.stageRecompute[s]},
                      {"memory", memoryToJson(r.stageMemory[s])}});
  return {{"config", q.label},
          {"devices", q.numStages},
          {"micro_batches", q.microBatches},
          {"micro_batch_size", q.microBatchSize},
          {"mini_batch", q.microBatchSize * q.microBatches},
          {"schedule", q.schedule.name()},
          {"recompute", q.recompute},
          {"optimizer_states", q.optimizerStates},
          {"profile", q.profile},
          {"memory_budget", r.memoryBudget},
          {"max_blocks", r.blocks},
          {"parameters", r.parameters},
          {"fixed_parameters", r.fixedParameters},
          {"parameters_per_block", r.parametersPerBlock},
          {"binding_stage", r.bindingStage},
          {"binding_memory", memoryToJson(r.binding())},
          {"fit_error", r.fitError},
          {"stages", stages}};
}

} // namespace pipec::partitioner
