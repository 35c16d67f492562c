//===- support/DenseIds.h - Numbering the ids a part uses ------*- C++ -*-===//
//
// A device of a plan touches a few of the plan's tensors. Tables indexed by
// (tensor, micro-batch) over the whole plan made every device cost O(T x M)
// and a K-device compile O(T x M x K): 64 devices of a 450,000-tensor plan
// at M = 32 walked 900 million entries. DenseIds numbers the ids one part
// uses 0 .. n-1, in ascending id order (so loops over local ids visit ids
// in the order a loop over all ids would), and the tables shrink to n x M.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipec {

class DenseIds {
public:
  /// Ids are in [0, universe).
  explicit DenseIds(size_t universe) : local_(universe, -1) {}

  /// Records an id (again is harmless); call finish() after the last.
  void add(int32_t id) {
    if (local_[static_cast<size_t>(id)] < 0) {
      local_[static_cast<size_t>(id)] = 0;
      ids_.push_back(id);
    }
  }
  /// Numbers the recorded ids in ascending order.
  void finish() {
    std::sort(ids_.begin(), ids_.end());
    for (size_t i = 0; i < ids_.size(); ++i)
      local_[static_cast<size_t>(ids_[i])] = static_cast<int32_t>(i);
  }
  /// The local number of a recorded id; -1 for one never recorded.
  int32_t local(int32_t id) const { return local_[static_cast<size_t>(id)]; }
  /// The id with local number `i`.
  int32_t id(size_t i) const { return ids_[i]; }
  size_t size() const { return ids_.size(); }

private:
  std::vector<int32_t> local_;
  std::vector<int32_t> ids_;
};

} // namespace pipec
