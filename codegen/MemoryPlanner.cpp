//===- codegen/MemoryPlanner.cpp - Static arena planning ------------------===//
//
// Greedy by size: each buffer, largest first, goes to the lowest offset x at
// which [x, x + size) meets no placed buffer whose lifetime overlaps its
// own. That offset is always 0 or the end of such a buffer.
//
// Finding it without scanning every placed buffer: a segment tree over the
// (compressed) time steps. A placed buffer is recorded at the O(log T)
// nodes that tile its lifetime ("cover") and in the "below" set of each of
// those nodes and their ancestors. The buffers whose lifetimes meet a
// query's are then exactly those in cover(a) for the ancestors a of the
// query's tiling nodes and in below(c) for the tiling nodes c themselves:
// O(log T) sets. Each set keeps the union of its buffers' offset ranges as
// disjoint intervals (buffers are never removed, so unions only grow). The
// search starts at x = 0 and, while some set has an interval meeting
// [x, x + size), moves x to that interval's end; every offset it passes is
// blocked, so the first x no set blocks is the lowest free one: the same
// offset the scan over all placed buffers gives (tests/unit/
// MemoryPlannerTest.cpp checks they agree).
//
// The scan is cheaper per buffer (one pass over a vector) but quadratic;
// below kTreeFrom buffers it runs instead, with the same result. On
// 1F1B-like stages (M micro-batches x L layers x 3 buffers, random sizes)
// the two are level at a few thousand buffers and the tree pulls away
// beyond; the sets in sorted vectors rather than std::map made the tree
// itself faster still (bench/results/log.md).
//
// From kSweepFrom buffers (MemoryPlanner.h) a stage is planned in time
// order instead, best fit into merged free blocks: O(n log n) with a small
// constant. Greedy by size sees every buffer before placing the first, so
// it packs better in general; on pipeline stages the two peaks come out
// close, and the sweep is much the faster (bench/results/log.md).
//
//===----------------------------------------------------------------------===//
#include "codegen/MemoryPlanner.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <vector>
#include <memory_resource>
#include <new>
#include <numeric>
#include <set>
#include <utility>

namespace pipec::codegen {

namespace {

/// Disjoint half-open offset intervals [start, end), merged on insertion,
/// in a sorted vector: most sets hold a handful of intervals (unions merge
/// neighbours), where a binary search over contiguous memory beats a
/// tree's pointer chasing and per-node allocation (bench/results/log.md).
/// The storage comes from the tree's pool.
class IntervalUnion {
public:
  explicit IntervalUnion(std::pmr::memory_resource *pool) : spans_(pool) {}
  void insert(uint64_t a, uint64_t b) {
    // First interval starting after a; the one before may overlap or touch.
    auto it = std::upper_bound(spans_.begin(), spans_.end(), a,
                               [](uint64_t v, const Span &s) { return v < s.start; });
    auto first = it;
    if (first != spans_.begin() && std::prev(first)->end >= a) {
      --first;
      a = first->start;
    }
    auto last = it;
    while (last != spans_.end() && last->start <= b)
      ++last;
    if (last != first)
      b = std::max(b, std::prev(last)->end);
    if (first == last) {
      spans_.insert(first, Span{a, b});
      return;
    }
    *first = Span{a, b};
    spans_.erase(std::next(first), last);
  }
  /// The end of an interval meeting [x, x + size), or 0 if none does.
  uint64_t blockEnd(uint64_t x, uint64_t size) const {
    auto it = std::upper_bound(spans_.begin(), spans_.end(), x,
                               [](uint64_t v, const Span &s) { return v < s.start; });
    if (it != spans_.begin() && std::prev(it)->end > x)
      return std::prev(it)->end;
    if (it != spans_.end() && it->start < x + size)
      return it->end;
    return 0;
  }
  bool empty() const { return spans_.empty(); }

private:
  struct Span {
    uint64_t start, end;
  };
  std::pmr::vector<Span> spans_;
};

class TimeTree {
public:
  explicit TimeTree(size_t steps) : n_(std::max<size_t>(steps, 1)) {
    // The sets live in arena_ and are never destroyed: walking every map
    // node to free it was a sizeable part of a large plan's time; the
    // resources hand all their memory back at once instead (the nodes hold
    // plain numbers).
    std::pmr::polymorphic_allocator<IntervalUnion> alloc(&arena_);
    cover_ = alloc.allocate(4 * n_);
    below_ = alloc.allocate(4 * n_);
    for (size_t i = 0; i < 4 * n_; ++i) {
      new (&cover_[i]) IntervalUnion(&pool_);
      new (&below_[i]) IntervalUnion(&pool_);
    }
  }
  TimeTree(const TimeTree &) = delete;
  TimeTree &operator=(const TimeTree &) = delete;

  /// Records a buffer living over time indices [lo, hi] at [a, b).
  void insert(size_t lo, size_t hi, uint64_t a, uint64_t b) { insert(1, 0, n_ - 1, lo, hi, a, b); }

  /// The lowest x with [x, x + size) free over time indices [lo, hi].
  /// The lowest offset free over [lo, hi], and over [lo2, hi2] too unless
  /// lo2 is SIZE_MAX.
  uint64_t lowestFree(size_t lo, size_t hi, uint64_t size, size_t lo2 = SIZE_MAX, size_t hi2 = 0) {
    sets_.clear();
    collect(1, 0, n_ - 1, lo, hi, sets_);
    if (lo2 != SIZE_MAX)
      collect(1, 0, n_ - 1, lo2, hi2, sets_);
    const std::vector<const IntervalUnion *> &sets = sets_;
    // Round the sets until none has moved x for a whole round: x is then
    // free in every set.
    uint64_t x = 0;
    const size_t n = sets.size();
    for (size_t i = 0, sinceMove = 0; sinceMove < n; i = i + 1 == n ? 0 : i + 1) {
      ++steps_;
      const uint64_t end = sets[i]->blockEnd(x, size);
      if (end > x) {
        x = end;
        sinceMove = 0;
      } else {
        ++sinceMove;
      }
    }
    return x;
  }

private:
  /// Returns whether [lo, hi] covers the node's range entirely.
  void insert(size_t node, size_t l, size_t r, size_t lo, size_t hi, uint64_t a, uint64_t b) {
    if (hi < l || r < lo)
      return;
    ++steps_;
    below_[node].insert(a, b); // the node's range meets the lifetime
    if (lo <= l && r <= hi) {
      cover_[node].insert(a, b);
      return;
    }
    const size_t m = l + (r - l) / 2;
    insert(2 * node, l, m, lo, hi, a, b);
    insert(2 * node + 1, m + 1, r, lo, hi, a, b);
  }

  /// The sets whose buffers meet [lo, hi]: cover() on the way down to the
  /// tiling nodes, below() at them.
  void collect(size_t node, size_t l, size_t r, size_t lo, size_t hi,
               std::vector<const IntervalUnion *> &sets) const {
    if (hi < l || r < lo)
      return;
    if (lo <= l && r <= hi) {
      if (!below_[node].empty())
        sets.push_back(&below_[node]);
      return;
    }
    if (!cover_[node].empty())
      sets.push_back(&cover_[node]);
    const size_t m = l + (r - l) / 2;
    collect(2 * node, l, m, lo, hi, sets);
    collect(2 * node + 1, m + 1, r, lo, hi, sets);
  }

public:
  uint64_t steps() const { return steps_; }

private:
  size_t n_;
  uint64_t steps_ = 0;
  std::vector<const IntervalUnion *> sets_; // lowestFree's, reused
  std::pmr::monotonic_buffer_resource arena_;
  std::pmr::unsynchronized_pool_resource pool_{&arena_}; // map nodes, reused once erased
  /// cover_: buffers whose lifetime contains the node's range; below_:
  /// buffers whose lifetime meets it (so also those of its descendants).
  IntervalUnion *cover_ = nullptr, *below_ = nullptr;
};

} // namespace

namespace {
/// Buffers from which the tree search runs instead of the scan.
constexpr size_t kTreeFrom = 4096;
template <typename Aligned>
void placeByScan(const std::vector<BufferRequest> &, const std::vector<size_t> &, const Aligned &, MemoryPlan &);
template <typename Aligned>
void placeByTree(const std::vector<BufferRequest> &, const std::vector<size_t> &, const Aligned &, MemoryPlan &);
template <typename Aligned>
void placeBySweep(const std::vector<BufferRequest> &, const Aligned &, MemoryPlan &);

/// The indices 0 .. n-1 ordered by key(i), ties in index order: a counting
/// sort when the keys (time steps) span at most a few times n values, a
/// comparison sort otherwise: a large compile sorts millions of requests by
/// time, and a comparison sort of them showed in its time.
template <typename Key> std::vector<size_t> orderByKey(size_t n, const Key &key) {
  std::vector<size_t> order(n);
  if (n == 0)
    return order;
  int64_t lo = key(0), hi = key(0);
  for (size_t i = 1; i < n; ++i) {
    lo = std::min(lo, key(i));
    hi = std::max(hi, key(i));
  }
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (span > 4 * static_cast<uint64_t>(n) + 1024) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
    return order;
  }
  std::vector<size_t> count(static_cast<size_t>(span) + 1, 0);
  for (size_t i = 0; i < n; ++i)
    ++count[static_cast<size_t>(key(i) - lo) + 1];
  for (size_t k = 1; k < count.size(); ++k)
    count[k] += count[k - 1];
  for (size_t i = 0; i < n; ++i)
    order[count[static_cast<size_t>(key(i) - lo)]++] = i;
  return order;
}
template <typename Aligned>
void addLiveBound(const std::vector<BufferRequest> &, const Aligned &, MemoryPlan &);
} // namespace

MemoryPlan planMemory(const std::vector<BufferRequest> &requests, uint64_t alignment, PlanMethod method) {
  MemoryPlan plan;
  size_t n = requests.size();
  plan.offsets.assign(n, 0);
  auto aligned = [&](uint64_t b) { return (b + alignment - 1) / alignment * alignment; };

  const bool wraps = std::any_of(requests.begin(), requests.end(),
                                 [](const BufferRequest &r) { return r.wrapEnd >= 0; });
  if (wraps && method != PlanMethod::Scan)
    method = n < kTreeFrom && method == PlanMethod::Auto ? PlanMethod::Scan : PlanMethod::Tree;
  if (method == PlanMethod::Sweep || (method == PlanMethod::Auto && n >= kSweepFrom)) {
    placeBySweep(requests, aligned, plan);
  } else {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (requests[a].bytes != requests[b].bytes)
        return requests[a].bytes > requests[b].bytes;
      return requests[a].start < requests[b].start;
    });
    if (method == PlanMethod::Scan || (method == PlanMethod::Auto && n < kTreeFrom))
      placeByScan(requests, order, aligned, plan);
    else
      placeByTree(requests, order, aligned, plan);
  }
  addLiveBound(requests, aligned, plan);
  return plan;
}

namespace {

template <typename Aligned>
void placeByScan(const std::vector<BufferRequest> &requests, const std::vector<size_t> &order,
                 const Aligned &aligned, MemoryPlan &plan) {
  // Placed buffers, kept sorted by offset, scanned for time overlap.
  struct Placed {
    uint64_t offset, size;
    int64_t start, end, wrapEnd;
  };
  auto meets = [](const Placed &p, const BufferRequest &r) {
    auto overlap = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a0 <= b1 && b0 <= a1; };
    return overlap(p.start, p.end, r.start, r.end) || (p.wrapEnd >= 0 && overlap(0, p.wrapEnd, r.start, r.end)) ||
           (r.wrapEnd >= 0 && overlap(p.start, p.end, 0, r.wrapEnd)) || (p.wrapEnd >= 0 && r.wrapEnd >= 0);
  };
  std::vector<Placed> placed;
  placed.reserve(order.size());
  for (size_t idx : order) {
    const BufferRequest &r = requests[idx];
    const uint64_t size = aligned(std::max<uint64_t>(r.bytes, 1));
    uint64_t best = 0, cursor = 0;
    bool found = false;
    for (const Placed &p : placed) {
      ++plan.searchSteps;
      if (!meets(p, r))
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
    Placed np{best, size, r.start, r.end, r.wrapEnd};
    auto pos = std::upper_bound(placed.begin(), placed.end(), np,
                                [](const Placed &a, const Placed &b) { return a.offset < b.offset; });
    placed.insert(pos, np);
    plan.peak = std::max(plan.peak, best + size);
  }
}

template <typename Aligned>
void placeByTree(const std::vector<BufferRequest> &requests, const std::vector<size_t> &order,
                 const Aligned &aligned, MemoryPlan &plan) {
  const size_t n = requests.size();
  // Lifetimes meet when their [start, end] intervals share a time step:
  // compress the steps that start or end one, keeping that relation.
  std::vector<int64_t> times;
  times.reserve(2 * n);
  for (const BufferRequest &r : requests) {
    times.push_back(r.start);
    times.push_back(r.end);
    if (r.wrapEnd >= 0) {
      times.push_back(0);
      times.push_back(r.wrapEnd);
    }
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  auto index = [&](int64_t t) {
    return static_cast<size_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
  };

  TimeTree tree(times.size());
  for (size_t idx : order) {
    const BufferRequest &r = requests[idx];
    const uint64_t size = aligned(std::max<uint64_t>(r.bytes, 1));
    const size_t lo = index(r.start), hi = index(std::max(r.start, r.end));
    const bool wraps = r.wrapEnd >= 0;
    const size_t wrapHi = wraps ? index(r.wrapEnd) : 0;
    const uint64_t best = tree.lowestFree(lo, hi, size, wraps ? index(0) : SIZE_MAX, wrapHi);
    plan.offsets[idx] = best;
    tree.insert(lo, hi, best, best + size);
    if (wraps)
      tree.insert(index(0), wrapHi, best, best + size);
    plan.peak = std::max(plan.peak, best + size);
  }
  plan.searchSteps = tree.steps();
}

/// Best fit in time order. At each start time the buffers that ended
/// before it are freed first (their blocks merged with free neighbours;
/// a block reaching the arena's end shrinks the end instead), then the
/// buffers starting there are placed, largest first, each into the
/// smallest free block that holds it (the lowest such on a tie), or at the
/// end of the arena (taking a free block that reaches the end).
template <typename Aligned>
void placeBySweep(const std::vector<BufferRequest> &requests, const Aligned &aligned, MemoryPlan &plan) {
  const size_t n = requests.size();
  auto endOf = [&](size_t i) { return std::max(requests[i].start, requests[i].end); };
  // By start (largest first within a start, then by index), and by end.
  std::vector<size_t> byStart = orderByKey(n, [&](size_t i) { return requests[i].start; });
  for (size_t a = 0, b; a < n; a = b) {
    for (b = a + 1; b < n && requests[byStart[b]].start == requests[byStart[a]].start;)
      ++b;
    std::stable_sort(byStart.begin() + static_cast<std::ptrdiff_t>(a),
                     byStart.begin() + static_cast<std::ptrdiff_t>(b),
                     [&](size_t x, size_t y) { return requests[x].bytes > requests[y].bytes; });
  }
  const std::vector<size_t> byEnd = orderByKey(n, endOf);
  // Node containers on a pool: a node each per free block, allocated and
  // freed at every step.
  std::pmr::unsynchronized_pool_resource pool;
  std::pmr::map<uint64_t, uint64_t> freeAt(&pool);               // offset -> size
  std::pmr::set<std::pair<uint64_t, uint64_t>> freeBySize(&pool); // (size, offset)
  uint64_t top = 0;
  auto release = [&](uint64_t off, uint64_t size) {
    auto next = freeAt.lower_bound(off);
    if (next != freeAt.end() && next->first == off + size) {
      size += next->second;
      freeBySize.erase({next->second, next->first});
      next = freeAt.erase(next);
    }
    if (next != freeAt.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        size += prev->second;
        freeBySize.erase({prev->second, prev->first});
        freeAt.erase(prev);
      }
    }
    if (off + size == top) {
      top = off;
      return;
    }
    freeAt.emplace(off, size);
    freeBySize.emplace(size, off);
  };
  size_t e = 0;
  for (size_t idx : byStart) {
    const BufferRequest &r = requests[idx];
    while (e < n && endOf(byEnd[e]) < r.start) {
      const size_t k = byEnd[e++];
      release(plan.offsets[k], aligned(std::max<uint64_t>(requests[k].bytes, 1)));
    }
    ++plan.searchSteps;
    const uint64_t size = aligned(std::max<uint64_t>(r.bytes, 1));
    uint64_t off;
    auto fit = freeBySize.lower_bound({size, 0});
    if (fit != freeBySize.end()) {
      const auto [blockSize, blockAt] = *fit;
      freeBySize.erase(fit);
      freeAt.erase(blockAt);
      off = blockAt;
      if (blockSize > size) {
        freeAt.emplace(blockAt + size, blockSize - size);
        freeBySize.emplace(blockSize - size, blockAt + size);
      }
    } else {
      off = top;
      if (!freeAt.empty()) {
        auto last = std::prev(freeAt.end());
        if (last->first + last->second == top) {
          off = last->first;
          freeBySize.erase({last->second, last->first});
          freeAt.erase(last);
        }
      }
      top = off + size;
    }
    plan.offsets[idx] = off;
    plan.peak = std::max(plan.peak, off + size);
  }
}

/// The live-size lower bound, by a sweep over start/end events.
template <typename Aligned>
void addLiveBound(const std::vector<BufferRequest> &given, const Aligned &aligned, MemoryPlan &plan) {
  // A wrapping buffer counts over both of its pieces.
  std::vector<BufferRequest> split;
  for (const BufferRequest &r : given)
    if (r.wrapEnd >= 0)
      split.push_back({r.bytes, 0, r.wrapEnd});
  if (!split.empty())
    split.insert(split.begin(), given.begin(), given.end());
  const std::vector<BufferRequest> &requests = split.empty() ? given : split;
  // Sizes added at each start and removed after each end, summed in time
  // order (starts and ends in one order by time; at equal times the sum
  // is taken after all of them, as one map entry per time would).
  const size_t n = requests.size();
  auto timeOf = [&](size_t e) { return e < n ? requests[e].start : requests[e - n].end + 1; };
  const std::vector<size_t> events = orderByKey(2 * n, timeOf);
  int64_t live = 0;
  for (size_t k = 0; k < events.size(); ++k) {
    const size_t e = events[k];
    const BufferRequest &r = requests[e < n ? e : e - n];
    const int64_t s = static_cast<int64_t>(aligned(std::max<uint64_t>(r.bytes, 1)));
    live += e < n ? s : -s;
    if (k + 1 == events.size() || timeOf(events[k + 1]) != timeOf(e))
      plan.liveBound = std::max<uint64_t>(plan.liveBound, static_cast<uint64_t>(std::max<int64_t>(live, 0)));
  }
}

} // namespace

} // namespace pipec::codegen
