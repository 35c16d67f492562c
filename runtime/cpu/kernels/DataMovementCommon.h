//===- runtime/cpu/kernels/DataMovementCommon.h - Data movement helpers -*- C++ -*-===//
//
// Shared by the data movement, shape and loss kernels: checks of an OpDesc,
// reads of compile-time constant inputs, and copy plans that the factory
// builds once and run() executes as memcpy of maximal contiguous runs.
// Everything that only moves data works on element size, never on element
// type, so one kernel moves f32, i64, bool or f16 bits alike.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Kernel.h"
#include "support/Parallel.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace pipec::cpu {

/// A plain copy of input 0 to output 0 (Identity.cpp); Reshape and friends
/// reuse it once they have checked their shapes.
Expected<KernelPtr> makeIdentityKernel(const OpDesc &d);

namespace dm {

/// Copies of more bytes than this are split across the calling thread's
/// OpenMP team; smaller ones stay on the calling thread.
constexpr size_t kParallelBytes = size_t(1) << 18;

//===--- OpDesc checks ------------------------------------------------===//

/// At least `minIn` described inputs (input 0..minIn-1 present) and
/// `minOut` outputs.
Status checkArity(const OpDesc &d, size_t minIn, size_t minOut);
/// Element size of a described tensor, an error for strings and
/// undefined types.
Expected<size_t> elementSize(const OpDesc &d, const TensorDesc &t, std::string_view what);
/// Output `i` must have this type and shape.
Status checkOutput(const OpDesc &d, size_t i, DType dtype, const Shape &shape);
/// Maps `axis` in [-rank, rank) to [0, rank).
Expected<int64_t> normalizeAxis(const OpDesc &d, int64_t axis, int64_t rank,
                                std::string_view what = "axis");
/// The values of input `i`, which must be a compile-time constant integer
/// tensor; `what` names it in errors ("starts").
Expected<std::vector<int64_t>> constInts(const OpDesc &d, size_t i, std::string_view what);
/// An integer list given by attribute `attr` before opset `inputSince` and by
/// constant input `input` from then on; `present` tells whether either was
/// given (absent lists are optional for most ops).
Expected<std::vector<int64_t>> intsAttrOrInput(const OpDesc &d, const char *attr,
                                               size_t input, int64_t inputSince,
                                               bool &present);
/// Writes `v` converted to `t` (any numeric type, f16 and bf16 rounded to
/// nearest even, bool as v != 0) into `out`.
Status encodeScalar(const OpDesc &d, double v, DType t, void *out);

//===--- Copy primitives ----------------------------------------------===//

/// Copies `n` elements of `esize` bytes from `src`, `srcStride` elements
/// apart (0 replicates one element), to contiguous `dst`.
void copyStrided(char *dst, const char *src, int64_t n, int64_t srcStride, size_t esize);
/// Writes the `esize`-byte pattern at `value` n times.
void fillElements(char *dst, const void *value, int64_t n, size_t esize);
/// `rows` rows of `rowBytes` bytes: dst + r*dstPitch <- src + r*srcPitch,
/// split across threads (by rows, or by byte ranges when rows are few).
void copyRows(char *dst, int64_t dstPitch, const char *src, int64_t srcPitch,
              int64_t rows, size_t rowBytes);

/// A gather from a strided view of the input into a contiguous output: the
/// output element at multi-index i is the input element at
/// offset + sum_d i_d * inStrides[d]. Strides may be zero (broadcast, Expand,
/// Tile) or negative (Slice with negative steps). The factory builds it with
/// dimensions coalesced, so run() copies maximal runs.
class StridedCopy {
public:
  StridedCopy() = default;
  StridedCopy(const Shape &outShape, const std::vector<int64_t> &inStrides,
              int64_t inOffset, size_t esize);
  void run(void *dst, const void *src) const;
  /// Coalesced dimensions and their input strides (for tests and for
  /// kernels that pick a faster path).
  const std::vector<int64_t> &dims() const { return dims_; }
  const std::vector<int64_t> &strides() const { return strides_; }
  int64_t offset() const { return offset_; }

private:
  std::vector<int64_t> dims_, strides_; ///< last dimension is the run
  int64_t offset_ = 0;
  int64_t rows_ = 0;
  size_t esize_ = 0;
};

/// A kernel whose whole run is one StridedCopy from input 0 to output 0
/// (Slice, Expand, Tile, Transpose keeping the innermost axis).
class StridedCopyKernel final : public Kernel {
public:
  explicit StridedCopyKernel(StridedCopy plan) : plan_(std::move(plan)) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    plan_.run(out[0], in[0]);
    return Status::ok();
  }

private:
  StridedCopy plan_;
};

/// A kernel whose output 0 is a value fixed when it is prepared (Range,
/// Shape, Size, Constant): run() copies it.
class ConstantOutputKernel final : public Kernel {
public:
  explicit ConstantOutputKernel(Tensor value) : value_(std::move(value)) {}
  Status run(ExecContext &, const void *const *, void *const *out) override {
    if (value_.bytes())
      std::memcpy(out[0], value_.raw(), value_.bytes());
    return Status::ok();
  }

private:
  Tensor value_;
};

/// Drops size-1 dimensions and merges neighbours that are contiguous in both
/// the output (row-major) and the input (strides). Leaves at least one
/// dimension; an empty tensor keeps a zero dimension.
void coalesce(std::vector<int64_t> &dims, std::vector<int64_t> &strides);

//===--- Losses -------------------------------------------------------===//

enum class Reduction { None, Sum, Mean };

/// The layout shared by NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss:
/// scores [N, C, d1..dk] viewed as [N, C, D], targets [N, d1..dk] as [N, D].
struct LossLayout {
  int64_t n = 0, c = 0, d = 0;
  Reduction reduction = Reduction::Mean;
  bool hasIgnore = false;
  int64_t ignoreIndex = 0;
  bool hasWeight = false;
  DType scoreType = DType::F32;
  DType targetType = DType::I64;
  /// Loss blocks: positions of one example in runs of kBlock, a fixed
  /// partition so that sums do not depend on the thread count.
  static constexpr int64_t kBlock = 64;
  int64_t blocksPerExample() const { return (d + kBlock - 1) / kBlock; }
  int64_t numBlocks() const { return n * blocksPerExample(); }
  /// Workspace: a (loss, weight) pair of doubles per block for sum/mean.
  size_t workspaceBytes() const {
    return reduction == Reduction::None ? 0 : size_t(numBlocks()) * 2 * sizeof(double);
  }
};

/// Checks inputs (scores, target, optional weight [C]) and output 0 and
/// reads reduction and ignore_index.
Expected<LossLayout> lossLayout(const OpDesc &d);

/// Checks every target is in [0, C) or the ignore index; the error starts
/// with `where` (OpDesc::where()) and names the position and the value.
Status checkTargets(const std::string &where, const LossLayout &l, const void *target);

/// Target at position p of the [N, D] view.
inline int64_t targetAt(const LossLayout &l, const void *target, int64_t p) {
  return l.targetType == DType::I64 ? static_cast<const int64_t *>(target)[p]
                                    : static_cast<const int32_t *>(target)[p];
}

/// The tail both losses share, over the `len` positions of block `b`
/// starting at position `first` of the [N, D] view: each position's loss is
/// `term(j, t)` (-log p of its target t) times the target's weight, 0 where
/// the target is ignored; written to out[p] (reduction none) or summed with
/// the weights into the block's (loss, weight) pair of `sums`. Not inlined:
/// one compiled copy serves the serial and the threaded loop over blocks,
/// so that the compiler's contraction of `loss += term * weight` into an
/// FMA cannot differ between them (float64 sums would then depend on the
/// thread count).
template <typename T, typename Term>
__attribute__((noinline)) void lossBlockTail(const LossLayout &l, const void *target, const T *weights, T *out, double *sums, int64_t b,
                   int64_t first, int64_t len, Term term) {
  const bool none = l.reduction == Reduction::None;
  double loss = 0.0, weight = 0.0;
  for (int64_t j = 0; j < len; ++j) {
    const int64_t p = first + j, t = targetAt(l, target, p);
    T lv = 0, wv = 0;
    if (!(l.hasIgnore && t == l.ignoreIndex)) {
      wv = weights ? weights[t] : T(1);
      lv = term(j, t) * wv;
    }
    if (none) {
      out[p] = lv;
    } else {
      loss += lv;
      weight += wv;
    }
  }
  if (!none) {
    sums[2 * b] = loss;
    sums[2 * b + 1] = weight;
  }
}

/// Sums the per-block (loss, weight) pairs in block order and writes the
/// reduced loss (sum, or sum / total weight for mean) to `out`.
template <typename T>
void finishLoss(const LossLayout &l, const double *blockSums, T *out) {
  double loss = 0.0, weight = 0.0;
  for (int64_t b = 0; b < l.numBlocks(); ++b) {
    loss += blockSums[2 * b];
    weight += blockSums[2 * b + 1];
  }
  *out = static_cast<T>(l.reduction == Reduction::Sum ? loss : loss / weight);
}

} // namespace dm
} // namespace pipec::cpu
