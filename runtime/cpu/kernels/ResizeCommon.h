//===- runtime/cpu/kernels/ResizeCommon.h - Separable resampling -*- C++ -*-===//
//
// Shared by Resize/Upsample (Resize.cpp) and pipec:ResizeGrad
// (GradResize.cpp): a linear map that is a product of per-axis maps
// (support/Resize.h's ResizeTaps) applied one axis at a time. Each pass
// views its input as [outer, nIn, inner] and writes [outer, nOut, inner];
// every output row is the weighted sum of the input rows its taps name, in
// tap order, computed by one thread. Rows are independent, so the result
// does not depend on the thread count; the gradient uses the transposed
// taps (ResizeTaps::transposed), which gather in increasing output order,
// so it is deterministic too, without atomics. Axes whose map is the
// identity get no pass; the passes run in the order that shrinks first.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "support/Resize.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

namespace pipec::cpu::resize {

template <typename T> struct Pass {
  int64_t outer = 1, nIn = 1, nOut = 1, inner = 1;
  std::vector<int64_t> start, idx;
  std::vector<T> w;
};

/// Output rows [r0, r1) of a pass (row r = outer index r / nOut, output
/// coordinate r % nOut). Not inlined: the serial and the threaded loop run
/// the same compiled code, so contraction into FMAs cannot differ between
/// them (results would then depend on the thread count).
template <typename T>
__attribute__((noinline)) void passRows(const Pass<T> &p, const T *__restrict in, T *__restrict out,
                                        int64_t r0, int64_t r1) {
  const int64_t inner = p.inner, nOut = p.nOut, nIn = p.nIn;
  const int64_t *start = p.start.data(), *idx = p.idx.data();
  const T *w = p.w.data();
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t q = r / nOut, o = r % nOut;
    T *__restrict dst = out + r * inner;
    const T *base = in + q * nIn * inner;
    const int64_t k0 = start[o], k1 = start[o + 1];
    if (k0 == k1) {
      std::fill(dst, dst + inner, T(0));
      continue;
    }
    if (inner == 1) {
      T acc = w[k0] * base[idx[k0]];
      for (int64_t k = k0 + 1; k < k1; ++k)
        acc += w[k] * base[idx[k]];
      dst[0] = acc;
      continue;
    }
    {
      const T *__restrict s = base + idx[k0] * inner;
      const T wk = w[k0];
      for (int64_t i = 0; i < inner; ++i)
        dst[i] = wk * s[i];
    }
    for (int64_t k = k0 + 1; k < k1; ++k) {
      const T *__restrict s = base + idx[k] * inner;
      const T wk = w[k];
      for (int64_t i = 0; i < inner; ++i)
        dst[i] += wk * s[i];
    }
  }
}

/// The passes of a separable map from `in` through per-axis `taps`
/// (taps[a].inSize == in[a]); `extrapolation` is written where any axis's
/// taps mark the output outside the input (tf_crop_and_resize).
template <typename T> class SeparablePlan {
public:
  SeparablePlan(const Shape &in, const std::vector<ResizeTaps> &taps, double extrapolation)
      : extrapolation_(static_cast<T>(extrapolation)) {
    const size_t rank = in.size();
    Shape cur = in;
    inElems_ = numElements(in);
    std::vector<size_t> order;
    for (size_t a = 0; a < rank; ++a) {
      if (!taps[a].identity())
        order.push_back(a);
      if (taps[a].anyOutside())
        fixup_ = true;
    }
    // Shrinking axes first (fewer rows for the later passes); ties: the
    // innermost first.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const double ra = double(taps[a].outSize) / double(std::max<int64_t>(1, taps[a].inSize));
      const double rb = double(taps[b].outSize) / double(std::max<int64_t>(1, taps[b].inSize));
      return ra != rb ? ra < rb : a > b;
    });
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t a = order[k];
      Pass<T> p;
      p.outer = std::accumulate(cur.begin(), cur.begin() + a, int64_t(1), std::multiplies<>());
      p.inner = std::accumulate(cur.begin() + a + 1, cur.end(), int64_t(1), std::multiplies<>());
      p.nIn = cur[a];
      p.nOut = taps[a].outSize;
      p.start = taps[a].start;
      p.idx = taps[a].idx;
      p.w.assign(taps[a].w.begin(), taps[a].w.end());
      cur[a] = p.nOut;
      if (k + 1 < order.size()) {
        size_t &b = buf_[k % 2];
        b = std::max(b, static_cast<size_t>(numElements(cur)));
      }
      passes_.push_back(std::move(p));
    }
    out_ = cur;
    if (fixup_)
      for (size_t a = 0; a < rank; ++a)
        outside_.push_back(taps[a].outside);
  }

  size_t workspaceBytes() const { return (buf_[0] + buf_[1]) * sizeof(T); }
  /// The passes in the order they run; elements of the two intermediate
  /// buffers (what the CUDA kernel plans alike); whether any output is
  /// the extrapolation value.
  const std::vector<Pass<T>> &passes() const { return passes_; }
  size_t bufferElems(size_t k) const { return buf_[k]; }
  bool extrapolates() const { return fixup_; }

  void run(const T *x, T *y, void *workspace) const {
    if (passes_.empty()) {
      if (inElems_)
        std::memcpy(y, x, static_cast<size_t>(inElems_) * sizeof(T));
    }
    T *bufs[2] = {static_cast<T *>(workspace), static_cast<T *>(workspace) + buf_[0]};
    const T *src = x;
    for (size_t k = 0; k < passes_.size(); ++k) {
      const Pass<T> &p = passes_[k];
      T *dst = k + 1 == passes_.size() ? y : bufs[k % 2];
      const int64_t rows = p.outer * p.nOut;
      const int64_t chunk = std::max<int64_t>(1, ew::kChunk / std::max<int64_t>(1, p.inner));
      ew::parallelChunks(rows, chunk, [&p, src, dst](int64_t r0, int64_t r1) {
        passRows<T>(p, src, dst, r0, r1);
      });
      src = dst;
    }
    if (fixup_)
      fill(y);
  }

private:
  /// Writes the extrapolation value where any axis samples outside.
  void fill(T *y) const {
    const size_t rank = out_.size();
    if (rank == 0)
      return;
    const int64_t inner = out_.back();
    const int64_t rows = inner ? numElements(out_) / inner : 0;
    const std::vector<uint8_t> &last = outside_.back();
    for (int64_t r = 0; r < rows; ++r) {
      bool all = false;
      for (int64_t a = static_cast<int64_t>(rank) - 2, q = r; a >= 0; --a) {
        all |= outside_[a][q % out_[a]] != 0;
        q /= out_[a];
      }
      T *row = y + r * inner;
      for (int64_t i = 0; i < inner; ++i)
        if (all || last[i])
          row[i] = extrapolation_;
    }
  }

  std::vector<Pass<T>> passes_;
  Shape out_;
  int64_t inElems_ = 0;
  size_t buf_[2] = {0, 0};
  bool fixup_ = false;
  std::vector<std::vector<uint8_t>> outside_;
  T extrapolation_;
};

/// What a Resize or Upsample node reads, or a pipec:ResizeGrad node's
/// forward: its spec, the input the map reads (X, or dY for the gradient)
/// and per axis its taps (the forward's transposed for the gradient),
/// checked against the node's output. Shared with the CUDA kernel.
struct ResizeNode {
  ResizeSpec spec;
  Shape in;
  std::vector<ResizeTaps> taps;
};
Expected<ResizeNode> resizeNode(const OpDesc &d);

/// A kernel whose whole run is a SeparablePlan from input 0 to output 0.
template <typename T> class SeparableKernel final : public Kernel {
public:
  explicit SeparableKernel(SeparablePlan<T> plan) : plan_(std::move(plan)) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    plan_.run(static_cast<const T *>(in[0]), static_cast<T *>(out[0]), ctx.workspace);
    return Status::ok();
  }
  size_t workspaceBytes() const override { return plan_.workspaceBytes(); }

private:
  SeparablePlan<T> plan_;
};

} // namespace pipec::cpu::resize
