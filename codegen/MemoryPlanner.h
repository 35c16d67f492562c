//===- codegen/MemoryPlanner.h - Static arena planning ---------*- C++ -*-===//
//
// Assigns every buffer an offset in one arena so that buffers whose
// lifetimes overlap never overlap in memory. Greedy by size (largest first,
// each at the lowest fitting offset), the heuristic TFLite and XLA use;
// deterministic for a given request list, and the same for every method.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipec::codegen {

struct BufferRequest {
  uint64_t bytes = 0;
  int64_t start = 0; ///< first time step the buffer holds data
  int64_t end = 0;   ///< last time step it is read (inclusive)
  /// A buffer of a cyclic program (a no-flush pipeline schedule's step)
  /// that the next run of the program still reads lives again over
  /// [0, wrapEnd] (wrapEnd < start); -1: it does not wrap.
  int64_t wrapEnd = -1;
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

/// How planMemory places the buffers (codegen/MemoryPlanner.cpp).
///  - Scan and Tree: greedy by size, the same plan either way: a scan of the
///    placed buffers (quadratic, cheap per buffer) or a segment tree over
///    time (n log^2 n).
///  - Sweep: in time order, each buffer into the smallest free block that
///    holds it (best fit, freed blocks merged), the arena growing at its end
///    otherwise: O(n log n) with a small constant, much faster than the
///    tree on large stages, its peak close to greedy's on pipeline stages
///    (the tests and bench/results/log.md have the figures); a different
///    plan.
///  - Auto: the scan below 4,096 buffers, the tree below kSweepFrom
///    (MemoryPlanner.cpp), the sweep from there.
/// Requests that wrap (BufferRequest::wrapEnd) are placed by the scan or
/// the tree: the sweep, asked for or chosen by Auto, gives way to the tree.
enum class PlanMethod { Auto, Scan, Tree, Sweep };
/// Auto's switch from the tree to the sweep.
inline constexpr size_t kSweepFrom = 131072;
/// And for a whole plan: from this many tensor instances over all devices
/// the plan emitter asks every device for the sweep (the tree's n log^2 n
/// summed over many devices of a long chain was most of its compile:
/// bench/results/log.md).
inline constexpr size_t kSweepTotalFrom = size_t(1) << 20;

MemoryPlan planMemory(const std::vector<BufferRequest> &requests, uint64_t alignment = 64,
                      PlanMethod method = PlanMethod::Auto);

} // namespace pipec::codegen
