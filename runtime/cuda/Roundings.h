//===- runtime/cuda/Roundings.h - A GPU's weight roundings, once a step -*- C++ -*-===//
//
// Under --precision bf16 or fp16 a product reads its f32 weight rounded to
// the 16-bit type. The CPU keeps one rounding per weight and step
// (runtime/cpu/kernels/DnnlHalfGemm.cpp's CpuHalfWeights); a GPU did it in
// each product's workspace at every run: for each micro-batch's forward
// and backward. Roundings is the bookkeeping of the GPU's kernel::
// HalfWeights (runtime/cuda/CudaBackend.cpp): one buffer per weight and
// type in device memory, the rounding enqueued on the device's stream at
// the first read of a step, the later reads of the step given the buffer.
// Stream order makes the rounding follow the weight's update and precede
// the step's products.
//
// Recorded instructions (CUDA graphs): the first reader's recording holds
// the launch, so its replay rounds the weight at each step and the other
// readers' recordings, which read the buffer, follow it, the order of a
// step's instructions being fixed. A recording that fails ran nothing, so
// the roundings it enqueued are forgotten (endCapture(false)) and made
// again by the next read.
//
// No CUDA here: the device's allocation and launch are given as functions,
// so the bookkeeping is tested on the host (tests/unit/CudaBodiesTest.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace pipec::cuda {

class Roundings {
public:
  /// Device memory of `bytes`, or null.
  using Alloc = std::function<void *(uint64_t bytes)>;
  /// Enqueues dst[i] = src[i] rounded to `t` for i < n; false if it cannot.
  using Round = std::function<bool(const float *src, void *dst, int64_t n, DType t)>;

  Roundings(Alloc alloc, Round round) : alloc_(std::move(alloc)), round_(std::move(round)) {}

  /// The rounding of the `n` floats at `src` to `t` for `step`, enqueued
  /// now unless it was for this step already; null where its memory or
  /// its launch failed.
  const uint16_t *get(const float *src, int64_t n, DType t, uint64_t step) {
    Entry &e = entries_[{src, t}];
    if (!e.data || e.n != n) {
      void *d = alloc_(static_cast<uint64_t>(n) * sizeof(uint16_t));
      if (!d)
        return nullptr;
      bytes_ += static_cast<uint64_t>(n) * sizeof(uint16_t);
      e = Entry{d, n, false, 0};
    }
    if (e.made && e.step == step)
      return static_cast<const uint16_t *>(e.data);
    if (capturing_)
      undo_.push_back({{src, t}, {e.made, e.step}});
    e.made = false;
    if (!round_(src, e.data, n, t))
      return nullptr;
    e.made = true;
    e.step = step;
    ++launches_;
    return static_cast<const uint16_t *>(e.data);
  }
  /// A recording (a CUDA graph's capture) begins: what get() enqueues
  /// until endCapture is recorded, not run.
  void beginCapture() {
    capturing_ = true;
    undo_.clear();
  }
  /// The recording ended: `recorded`, its launches replay with it; else
  /// nothing it enqueued ran, and the roundings made in it are as before.
  void endCapture(bool recorded) {
    if (!recorded)
      for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
        Entry &e = entries_[it->first];
        e.made = it->second.first;
        e.step = it->second.second;
      }
    capturing_ = false;
    undo_.clear();
  }
  /// Device memory the roundings take.
  uint64_t bytes() const { return bytes_; }
  /// Roundings enqueued so far.
  uint64_t launches() const { return launches_; }

private:
  using Key = std::pair<const float *, DType>;
  struct Entry {
    void *data = nullptr;
    int64_t n = 0;
    bool made = false;
    uint64_t step = 0;
  };
  Alloc alloc_;
  Round round_;
  std::map<Key, Entry> entries_;
  bool capturing_ = false;
  /// Entries get() remade during the capture, and what they were.
  std::vector<std::pair<Key, std::pair<bool, uint64_t>>> undo_;
  uint64_t bytes_ = 0, launches_ = 0;
};

} // namespace pipec::cuda
