//===- codegen/MemoryPlanner.cpp - Static arena planning ------------------===//
#include "codegen/MemoryPlanner.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace pipec::codegen {

MemoryPlan planMemory(const std::vector<BufferRequest> &requests, uint64_t alignment) {
  MemoryPlan plan;
  size_t n = requests.size();
  plan.offsets.assign(n, 0);
  auto aligned = [&](uint64_t b) { return (b + alignment - 1) / alignment * alignment; };

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes)
      return requests[a].bytes > requests[b].bytes;
    return requests[a].start < requests[b].start;
  });

  // Placed buffers, kept sorted by offset, scanned for time overlap.
  struct Placed {
    uint64_t offset, size;
    int64_t start, end;
  };
  std::vector<Placed> placed;
  placed.reserve(n);
  for (size_t idx : order) {
    const BufferRequest &r = requests[idx];
    uint64_t size = aligned(std::max<uint64_t>(r.bytes, 1));
    uint64_t best = 0;
    bool found = false;
    uint64_t cursor = 0;
    for (const Placed &p : placed) {
      if (p.end < r.start || p.start > r.end)
        continue; // lifetimes do not overlap
      if (p.offset >= cursor + size) {
        best = cursor;
        found = true;
        break;
      }
      cursor = std::max(cursor, p.offset + p.size);
    }
    if (!found)
      best = cursor;
    plan.offsets[idx] = best;
    Placed np{best, size, r.start, r.end};
    auto pos = std::upper_bound(placed.begin(), placed.end(), np,
                                [](const Placed &a, const Placed &b) { return a.offset < b.offset; });
    placed.insert(pos, np);
    plan.peak = std::max(plan.peak, best + size);
  }

  // Live-size lower bound by a sweep over start/end events.
  std::map<int64_t, int64_t> delta;
  for (const BufferRequest &r : requests) {
    int64_t s = static_cast<int64_t>(aligned(std::max<uint64_t>(r.bytes, 1)));
    delta[r.start] += s;
    delta[r.end + 1] -= s;
  }
  int64_t live = 0;
  for (const auto &[t, d] : delta) {
    live += d;
    plan.liveBound = std::max<uint64_t>(plan.liveBound, static_cast<uint64_t>(live));
  }
  return plan;
}

} // namespace pipec::codegen
