//===- tests/unit/CapacityTest.cpp - GPipe's Table 1 with pipec's memory model ===//
//
// The capacity search (tools/capacity/Capacity.h) on the GPT sample family:
// the direction and size of GPipe's Table 1 on an 8 GB accelerator
// (recompute and K = 8 fit more than 20 times the parameters of one device
// without recompute), capacity growing with K, and the extrapolation from
// small instances checked against a model of the answer's size built and
// evaluated directly.
//
//===----------------------------------------------------------------------===//
#include "tools/capacity/Capacity.h"
#include "partitioner/Partitioner.h"
#include "tools/capacity/GptFamily.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace pipec;
using namespace pipec::partitioner;

namespace {

CapacityQuery query(std::string label, int K, int M, int64_t B, std::string rec) {
  CapacityQuery q;
  q.label = std::move(label);
  q.numStages = K;
  q.microBatches = M;
  q.microBatchSize = B;
  q.recompute = std::move(rec);
  q.profile = "accel-8gb";
  auto gpipe = pipeline::Schedule::parse("gpipe"); // the schedule of GPipe's table
  EXPECT_TRUE(gpipe.isOk()) << gpipe.status().message();
  if (gpipe.isOk())
    q.schedule = *gpipe;
  return q;
}

} // namespace

TEST(Capacity, GPipeTable1Direction) {
  samples::GptOptions dims;
  dims.dmodel = 1024;
  dims.heads = 16;
  dims.seq = 512;
  dims.vocab = 8192;
  LayerFamily f = capacity::gptFamily(dims);
  const int M = 8;
  const int64_t B = 1;
  std::vector<CapacityQuery> qs{query("Naive-1", 1, 1, M * B, "none")};
  for (int K : {1, 2, 4, 8})
    qs.push_back(query("Pipeline-" + std::to_string(K), K, M, B, "full"));
  auto rs = maxTrainableBlocks(f, qs);
  ASSERT_TRUE(rs.isOk()) << rs.status().message();
  for (const CapacityResult &r : *rs) {
    std::printf("%-11s K=%d M=%d recompute %-4s: %lld blocks, %.4g parameters, stage %d at "
                "%.4g of %.4g bytes (fit error %.2g)\n",
                r.query.label.c_str(), r.query.numStages, r.query.microBatches,
                r.query.recompute.c_str(), static_cast<long long>(r.blocks), r.parameters,
                r.bindingStage, r.binding().total(), r.memoryBudget, r.fitError);
    EXPECT_LE(r.binding().total(), r.memoryBudget) << r.query.label;
    EXPECT_LT(r.fitError, 1e-9) << r.query.label;
  }
  const CapacityResult &naive = (*rs)[0], &p1 = (*rs)[1], &p8 = (*rs)[4];
  EXPECT_GE(naive.blocks, 2) << "Naive-1 should fit a nontrivial model";
  EXPECT_GT(p1.parameters, naive.parameters);
  // GPipe's Table 1: 22x (AmoebaNet), 19x (Transformer). Here 16.5x:
  // Naive-1 fits 16 blocks since attention is one pipec:Attention node
  // whose scores are never stashed (12 before, 19.8x; 10 and 21.9x before
  // the sample's GELU was one fused node).
  EXPECT_GT(p8.parameters, 15 * naive.parameters)
      << "Pipeline-8 / Naive-1 = " << p8.parameters / naive.parameters;
  for (size_t i = 2; i < rs->size(); ++i)
    EXPECT_GT((*rs)[i].blocks, (*rs)[i - 1].blocks) << (*rs)[i].query.label;
  // Parameters of the GPT sample: embeddings and head (vocab x d twice,
  // seq x d, the final LayerNorm) and 12 d^2 + 13 d per block.
  const double d = 1024;
  EXPECT_DOUBLE_EQ(naive.parametersPerBlock, 12 * d * d + 13 * d);
  EXPECT_DOUBLE_EQ(naive.fixedParameters, 2 * 8192 * d + 512 * d + 2 * d);
}

// The answer, built at its size and evaluated directly: the same stage
// memory as the extrapolation, and one more block does not fit. A small
// width and budget keep the direct model small; K = 3 and 1F1B exercise a
// middle stage and in-flight counts that depend on the stage.
TEST(Capacity, ExtrapolationMatchesDirectEvaluation) {
  samples::GptOptions dims;
  dims.dmodel = 128;
  dims.heads = 4;
  dims.seq = 64;
  dims.vocab = 512;
  LayerFamily f = capacity::gptFamily(dims);
  struct Case {
    const char *schedule, *recompute;
    double mib;
  };
  for (Case c : {Case{"gpipe", "full", 22}, Case{"1f1b", "none", 44}, Case{"1f1b", "full", 30}}) {
    const char *schedule = c.schedule;
    CapacityQuery q = query("Pipeline-3", 3, 4, 2, c.recompute);
    auto parsed = pipeline::Schedule::parse(schedule);
    ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
    q.schedule = *parsed;
    q.memoryBudget = c.mib * (1 << 20);
    auto r = maxTrainableBlocks(f, q);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    ASSERT_GE(r->blocks, 6) << schedule;
    const int64_t L = r->blocks;
    std::printf("%s, recompute %s: %lld blocks fit 3 x %g MiB, split", schedule, c.recompute,
                static_cast<long long>(L), c.mib);
    for (int64_t b : r->blocksPerStage)
      std::printf(" %lld", static_cast<long long>(b));
    std::printf("\n");

    auto g = f.build(L, q.microBatchSize);
    ASSERT_TRUE(g.isOk()) << g.status().message();
    std::vector<const ir::Node *> order;
    for (const ir::Node *n : (*g)->nodes())
      if (n->phase() == ir::Phase::Forward)
        order.push_back(n);
    PartitionOptions po;
    po.profile = q.profile;
    auto made = makeCostModel(po);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    CostModel cost = made.take();
    ChainOptions co;
    co.training = true;
    co.microBatches = q.microBatches;
    co.schedule = q.schedule;
    co.recompute = q.recompute;
    co.optimizerStates = q.optimizerStates;
    co.memoryBudget = q.memoryBudget;
    auto chain = ChainModel::build(**g, order, cost, co);
    ASSERT_TRUE(chain.isOk()) << chain.status().message();
    // Cut positions: the first node of each stage's first block.
    auto firstNodeOfBlock = [&](int64_t l) {
      for (size_t i = 0; i < order.size(); ++i)
        if (f.blockOf(*order[i]) == l)
          return i;
      return order.size();
    };
    std::vector<size_t> cuts{0};
    int64_t next = 0;
    for (size_t s = 0; s + 1 < r->blocksPerStage.size(); ++s) {
      next += r->blocksPerStage[s];
      cuts.push_back(firstNodeOfBlock(next));
    }
    cuts.push_back(order.size());
    double params = 0;
    for (int s = 0; s < 3; ++s) {
      StageEstimate e = chain->evaluate(cuts[s], cuts[s + 1], s, 3);
      params += e.parameters;
      const MemoryBreakdown &x = r->stageMemory[static_cast<size_t>(s)];
      EXPECT_NEAR(e.memory.total(), x.total(), 1e-9 * x.total()) << schedule << " stage " << s;
      EXPECT_NEAR(e.memory.activations, x.activations, 1e-9 * x.total());
      EXPECT_NEAR(e.memory.weights, x.weights, 1e-9 * x.total());
      EXPECT_LE(e.memory.total(), q.memoryBudget);
    }
    EXPECT_DOUBLE_EQ(params, r->parameters);
    // L + 1 blocks, built and evaluated directly: every even split (any
    // choice of the stages that get the extra block) has a stage over budget.
    auto g1 = f.build(L + 1, q.microBatchSize);
    ASSERT_TRUE(g1.isOk()) << g1.status().message();
    std::vector<const ir::Node *> order1;
    for (const ir::Node *n : (*g1)->nodes())
      if (n->phase() == ir::Phase::Forward)
        order1.push_back(n);
    auto chain1 = ChainModel::build(**g1, order1, cost, co);
    ASSERT_TRUE(chain1.isOk()) << chain1.status().message();
    auto start1 = [&](int64_t l) {
      for (size_t i = 0; i < order1.size(); ++i)
        if (f.blockOf(*order1[i]) == l)
          return i;
      return order1.size();
    };
    const int64_t q1 = (L + 1) / 3, r1 = (L + 1) % 3;
    int splits = 0;
    for (int mask = 0; mask < 8; ++mask) {
      if (__builtin_popcount(mask) != r1)
        continue;
      ++splits;
      std::vector<size_t> c{0};
      int64_t at = 0;
      for (int s = 0; s < 2; ++s) {
        at += q1 + ((mask >> s) & 1);
        c.push_back(start1(at));
      }
      c.push_back(order1.size());
      double worst = 0;
      for (int s = 0; s < 3; ++s)
        worst = std::max(worst, chain1->evaluate(c[s], c[s + 1], s, 3).memory.total());
      EXPECT_GT(worst, q.memoryBudget) << schedule << ": " << L + 1 << " blocks fit, split mask "
                                       << mask;
    }
    EXPECT_GT(splits, 0);
  }
}

TEST(Capacity, RefusesAutoRecompute) {
  samples::GptOptions dims;
  LayerFamily f = capacity::gptFamily(dims);
  auto r = maxTrainableBlocks(f, query("auto", 2, 4, 1, "auto"));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("auto"), std::string::npos);
}
