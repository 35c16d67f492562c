//===- support/DisjointSets.h - Union-find over indices ---------*- C++ -*-===//
//
// Disjoint sets of the indices [0, n), with path halving. The plan emitter
// and the schedule validator both group a view's output with its input as
// one buffer.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <vector>

namespace pipec {

class DisjointSets {
public:
  explicit DisjointSets(size_t n) : parent_(n) {
    for (size_t k = 0; k < n; ++k)
      parent_[k] = k;
  }
  /// The representative of k's set.
  size_t find(size_t k) {
    while (parent_[k] != k)
      k = parent_[k] = parent_[parent_[k]];
    return k;
  }
  /// Joins the sets of `keep` and `other` under keep's representative, which
  /// it returns; the caller merges whatever it keeps per set.
  size_t join(size_t keep, size_t other) {
    size_t a = find(keep), b = find(other);
    parent_[b] = a;
    return a;
  }

private:
  std::vector<size_t> parent_;
};

} // namespace pipec
