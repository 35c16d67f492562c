//===- runtime/cpu/kernels/Transpose.cpp - Transpose ----------------------===//
//
// Transpose (opsets 1-13), perm defaulting to the reversed axes. The factory
// coalesces axes that stay adjacent. When the input's innermost axis stays
// innermost the transpose is a StridedCopy of contiguous runs (memcpy).
// Otherwise it is a batch of 2-D transposes between the output axis that is
// contiguous in the input (p) and the output's innermost axis (q), done in
// 32x32 tiles so that reads and writes both stay in cache.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "runtime/cpu/kernels/Transpose16.h"
#include "support/Parallel.h"

#include <algorithm>

namespace pipec::cpu {

namespace {
template <size_t S> struct Elem {
  unsigned char b[S];
};


class BlockedTransposeKernel final : public Kernel {
public:
  static constexpr int64_t kTile = 32;

  /// `dims`, `inStrides`: coalesced output axes; `p`: the axis with input
  /// stride 1 (not the last one).
  BlockedTransposeKernel(std::vector<int64_t> dims, std::vector<int64_t> inStrides, size_t p,
                         size_t esize)
      : esize_(esize) {
    const std::vector<int64_t> outStrides = rowMajorStrides(dims);
    rows_ = dims[p];
    cols_ = dims.back();
    colStrideIn_ = inStrides.back();
    rowStrideOut_ = outStrides[p];
    for (size_t k = 0; k + 1 < dims.size(); ++k)
      if (k != p) {
        batchDims_.push_back(dims[k]);
        batchIn_.push_back(inStrides[k]);
        batchOut_.push_back(outStrides[k]);
      }
    batches_ = numElements(batchDims_);
    tilesR_ = (rows_ + kTile - 1) / kTile;
    tilesC_ = (cols_ + kTile - 1) / kTile;
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    switch (esize_) {
    case 1: transpose<1>(in[0], out[0]); break;
    case 2: transpose<2>(in[0], out[0]); break;
    case 4: transpose<4>(in[0], out[0]); break;
    case 8: transpose<8>(in[0], out[0]); break;
    default: break; // the factory admits only these sizes
    }
    return Status::ok();
  }

private:
  template <size_t S> void transpose(const void *src, void *dst) const {
    const auto *in = static_cast<const Elem<S> *>(src);
    auto *out = static_cast<Elem<S> *>(dst);
    const int64_t tasks = batches_ * tilesR_ * tilesC_;
    const int64_t bytes = batches_ * rows_ * cols_ * static_cast<int64_t>(S);
    parallelFor(tasks, bytes >= int64_t(dm::kParallelBytes) && tasks > 1, [&](int64_t t) {
      int64_t b = t / (tilesR_ * tilesC_), tile = t % (tilesR_ * tilesC_);
      const int64_t r0 = (tile / tilesC_) * kTile, c0 = (tile % tilesC_) * kTile;
      const int64_t r1 = std::min(rows_, r0 + kTile), c1 = std::min(cols_, c0 + kTile);
      int64_t inBase = 0, outBase = 0;
      for (int64_t k = static_cast<int64_t>(batchDims_.size()) - 1; k >= 0; --k) {
        const int64_t i = b % batchDims_[k];
        b /= batchDims_[k];
        inBase += i * batchIn_[k];
        outBase += i * batchOut_[k];
      }
      // Output rows of the tile are contiguous in the output; its columns
      // are contiguous in the input. A 32x32 tile of either fits in L1.
      if constexpr (S == 4) {
        // Whole 16x16 blocks in registers; the rest element by element.
        const int64_t rb = r0 + (r1 - r0) / 16 * 16, cb = c0 + (c1 - c0) / 16 * 16;
        for (int64_t r = r0; r < rb; r += 16)
          for (int64_t c = c0; c < cb; c += 16)
            transposeTile16(reinterpret_cast<const float *>(in + inBase + r + c * colStrideIn_),
                           colStrideIn_,
                           reinterpret_cast<float *>(out + outBase + r * rowStrideOut_ + c),
                           rowStrideOut_);
        copyElements(in + inBase, out + outBase, rb, r1, c0, c1);
        copyElements(in + inBase, out + outBase, r0, rb, cb, c1);
        return;
      }
      copyElements(in + inBase, out + outBase, r0, r1, c0, c1);
    });
  }

  /// Element by element: rows [r0, r1) and columns [c0, c1) of one 2-D
  /// transpose whose input and output start at `in` and `out`.
  template <typename E>
  void copyElements(const E *in, E *out, int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    for (int64_t r = r0; r < r1; ++r) {
      E *o = out + r * rowStrideOut_;
      const E *i = in + r;
      for (int64_t c = c0; c < c1; ++c)
        o[c] = i[c * colStrideIn_];
    }
  }

  size_t esize_;
  int64_t rows_ = 0, cols_ = 0, colStrideIn_ = 0, rowStrideOut_ = 0;
  std::vector<int64_t> batchDims_, batchIn_, batchOut_;
  int64_t batches_ = 1, tilesR_ = 0, tilesC_ = 0;
};
} // namespace

Expected<KernelPtr> makeTransposeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  const int64_t rank = x.rank();
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  std::vector<int64_t> perm = attrInts(d.attrs, "perm");
  if (!attrHas(d.attrs, "perm"))
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool valid = static_cast<int64_t>(perm.size()) == rank;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < rank && !seen[perm[i]];
    if (valid)
      seen[perm[i]] = true;
  }
  if (!valid)
    return errorf(d.where(), ": perm ", shapeStr(perm), " is not a permutation of ", rank,
                  " axes");

  const std::vector<int64_t> inStrides = rowMajorStrides(x.shape);
  Shape outShape;
  std::vector<int64_t> strides;
  for (int64_t a : perm) {
    outShape.push_back(x.shape[a]);
    strides.push_back(inStrides[a]);
  }
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, outShape));

  std::vector<int64_t> dims = outShape;
  dm::coalesce(dims, strides);
  const bool sizeOk = esize == 1 || esize == 2 || esize == 4 || esize == 8;
  if (strides.back() != 1 && sizeOk && dims.back() > 1) {
    auto p = std::find(strides.begin(), strides.end(), 1);
    if (p != strides.end())
      return KernelPtr(new BlockedTransposeKernel(
          dims, strides, static_cast<size_t>(p - strides.begin()), esize));
  }
  return KernelPtr(new dm::StridedCopyKernel(dm::StridedCopy(dims, strides, 0, esize)));
}

} // namespace pipec::cpu
