//===- tests/unit/MemoryPlannerTest.cpp - Static arena planning -----------===//
#include "codegen/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <random>

using namespace pipec::codegen;

namespace {

/// No two buffers that are live at the same time overlap in memory, every
/// offset is aligned, and the peak covers every buffer.
void expectValid(const std::vector<BufferRequest> &r, const MemoryPlan &p, uint64_t align) {
  ASSERT_EQ(p.offsets.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % align, 0u);
    EXPECT_LE(p.offsets[i] + r[i].bytes, p.peak);
    for (size_t j = i + 1; j < r.size(); ++j) {
      bool timeOverlap = !(r[i].end < r[j].start || r[j].end < r[i].start);
      bool memOverlap = p.offsets[i] < p.offsets[j] + r[j].bytes && p.offsets[j] < p.offsets[i] + r[i].bytes;
      EXPECT_FALSE(timeOverlap && memOverlap) << "buffers " << i << " and " << j << " collide";
    }
  }
  EXPECT_GE(p.peak, p.liveBound);
}

} // namespace

TEST(MemoryPlanner, ChainReusesMemory) {
  // A chain a -> b -> c -> d of equal buffers: at most two are live at once.
  std::vector<BufferRequest> r = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  MemoryPlan p = planMemory(r, 64);
  expectValid(r, p, 64);
  EXPECT_EQ(p.liveBound, 2u * 1024);
  EXPECT_EQ(p.peak, 2u * 1024);
}

TEST(MemoryPlanner, DisjointLifetimesShareOneOffset) {
  std::vector<BufferRequest> r = {{4096, 0, 0}, {4096, 1, 1}, {4096, 2, 2}};
  MemoryPlan p = planMemory(r, 64);
  expectValid(r, p, 64);
  EXPECT_EQ(p.peak, 4096u);
}

TEST(MemoryPlanner, RandomRequestsAreValidAndNearTheBound) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> r;
    int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      int64_t s = rng() % 100, len = rng() % 20;
      r.push_back({1 + rng() % 100000, s, s + len});
    }
    MemoryPlan p = planMemory(r, 64);
    expectValid(r, p, 64);
    // Greedy by size is a heuristic; on these inputs it stays within 2x of
    // the live-size lower bound.
    EXPECT_LE(p.peak, 2 * p.liveBound);
  }
}

TEST(MemoryPlanner, IsDeterministic) {
  std::vector<BufferRequest> r = {{300, 0, 5}, {300, 2, 7}, {800, 1, 3}, {100, 4, 9}, {300, 6, 8}};
  EXPECT_EQ(planMemory(r, 64).offsets, planMemory(r, 64).offsets);
}
