//===- codegen/MemoryPlanner.h - Static arena planning ---------*- C++ -*-===//
//
// Assigns every buffer an offset in one arena so that buffers whose
// lifetimes overlap never overlap in memory. Greedy by size (largest first,
// each at the lowest fitting offset), the heuristic TFLite and XLA use;
// deterministic for a given request list, and the same for every method.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <vector>

namespace pipec::codegen {

struct BufferRequest {
  uint64_t bytes = 0;
  int64_t start = 0; ///< first time step the buffer holds data
  int64_t end = 0;   ///< last time step it is read (inclusive)
};

struct MemoryPlan {
  std::vector<uint64_t> offsets; ///< one per request
  uint64_t peak = 0;             ///< arena size
  /// Largest sum of live buffer sizes at any time step: the lower bound no
  /// placement can beat.
  uint64_t liveBound = 0;
  /// Work the search did: placed buffers the scan looked at, or interval
  /// sets the tree visited (insertions and queries). A timing-free measure
  /// of the complexity, which tests bound.
  uint64_t searchSteps = 0;
};

/// How planMemory finds each offset; every method gives the same plan
/// (codegen/MemoryPlanner.cpp): a scan of the placed buffers (quadratic,
/// cheap per buffer), a segment tree over time (n log^2 n), or the scan
/// below 4,096 buffers and the tree from there.
enum class PlanMethod { Auto, Scan, Tree };

MemoryPlan planMemory(const std::vector<BufferRequest> &requests, uint64_t alignment = 64,
                      PlanMethod method = PlanMethod::Auto);

} // namespace pipec::codegen
