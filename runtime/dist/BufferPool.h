//===- runtime/dist/BufferPool.h - Recycled message buffers ----*- C++ -*-===//
//
// The transports copy a message's bytes into a buffer of their own so that
// send() returns at once. Allocating a fresh buffer per message costs page
// faults for every large tensor, on the sender's critical path, so buffers
// are recycled: take() returns the smallest free buffer that fits (or a new
// one), give() hands one back. Not thread-safe: a transport whose threads
// share a pool locks around it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace pipec::runtime {

/// A message's bytes: `size` of them in use, `capacity` allocated.
struct MessageBuffer {
  std::unique_ptr<char[]> data;
  size_t capacity = 0, size = 0;
};

class BufferPool {
public:
  /// A buffer of at least `bytes` (size set to `bytes`).
  MessageBuffer take(size_t bytes) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].capacity >= bytes && (best == free_.size() || free_[i].capacity < free_[best].capacity))
        best = i;
    MessageBuffer b;
    if (best < free_.size()) {
      b = std::move(free_[best]);
      free_[best] = std::move(free_.back());
      free_.pop_back();
    } else {
      b.data.reset(new char[std::max<size_t>(bytes, 1)]);
      b.capacity = bytes;
    }
    b.size = bytes;
    return b;
  }
  void give(MessageBuffer b) { free_.push_back(std::move(b)); }

private:
  std::vector<MessageBuffer> free_;
};

} // namespace pipec::runtime
