//===- runtime/cpu/kernels/GatherElements.cpp - GatherElements ------------===//
//
// GatherElements (opsets 11-13): out[i] = data[i with i[axis] replaced by
// indices[i]], indices i32 or i64, negative ones counting from the end. The
// indices may be smaller than data on every axis. Rows of the indices' last
// axis share one data base offset, computed once per row; the inner loop
// then moves one element per index. Indices are checked before any copy.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/Parallel.h"

#include <cstring>

namespace pipec::cpu {

namespace {
template <size_t S> struct Elem {
  unsigned char b[S];
};

class GatherElementsKernel final : public Kernel {
public:
  GatherElementsKernel(std::string where, int64_t axis, Shape indShape,
                       std::vector<int64_t> dataStrides, int64_t dim, size_t esize, bool idx64)
      : where_(std::move(where)), axis_(axis), indShape_(std::move(indShape)),
        dataStrides_(std::move(dataStrides)), dim_(dim), esize_(esize), idx64_(idx64) {
    count_ = numElements(indShape_);
    last_ = indShape_.empty() ? 1 : indShape_.back();
    rows_ = last_ ? count_ / last_ : 0;
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    for (int64_t j = 0; j < count_; ++j) {
      int64_t v = index(in[1], j);
      if (v < -dim_ || v >= dim_)
        return errorf(where_, ": index ", v, " at position ", j, " is out of range [", -dim_,
                      ", ", dim_ - 1, "] for axis ", axis_, " of size ", dim_);
    }
    const auto *src = static_cast<const char *>(in[0]);
    auto *dst = static_cast<char *>(out[0]);
    switch (esize_) {
    case 1: gather<1>(src, in[1], dst); break;
    case 2: gather<2>(src, in[1], dst); break;
    case 4: gather<4>(src, in[1], dst); break;
    case 8: gather<8>(src, in[1], dst); break;
    default:
      return errorf(where_, ": elements of ", esize_, " bytes are not supported");
    }
    return Status::ok();
  }

private:
  int64_t index(const void *idx, int64_t j) const {
    return idx64_ ? static_cast<const int64_t *>(idx)[j] : static_cast<const int32_t *>(idx)[j];
  }
  int64_t normalized(const void *idx, int64_t j) const {
    int64_t v = index(idx, j);
    return v < 0 ? v + dim_ : v;
  }

  template <size_t S> void gather(const char *src, const void *idx, char *dst) const {
    const auto *s = reinterpret_cast<const Elem<S> *>(src);
    auto *o = reinterpret_cast<Elem<S> *>(dst);
    const int64_t rank = static_cast<int64_t>(indShape_.size());
    const int64_t axisStride = dataStrides_[axis_];
    const bool alongLast = axis_ == rank - 1;
    parallelFor(rows_, count_ * S >= dm::kParallelBytes && rows_ > 1, [&](int64_t r) {
      // Data offset of the row, without the axis' own contribution.
      int64_t base = 0;
      for (int64_t k = rank - 2, q = r; k >= 0; --k) {
        const int64_t i = q % indShape_[k];
        q /= indShape_[k];
        if (k != axis_)
          base += i * dataStrides_[k];
      }
      const int64_t first = r * last_;
      if (alongLast) {
        for (int64_t j = 0; j < last_; ++j)
          o[first + j] = s[base + normalized(idx, first + j)];
      } else {
        for (int64_t j = 0; j < last_; ++j)
          o[first + j] = s[base + j + normalized(idx, first + j) * axisStride];
      }
    });
  }

  std::string where_;
  int64_t axis_;
  Shape indShape_;
  std::vector<int64_t> dataStrides_;
  int64_t dim_, count_ = 0, last_ = 0, rows_ = 0;
  size_t esize_;
  bool idx64_;
};
} // namespace

Expected<KernelPtr> makeGatherElementsKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0], &ind = d.inputs[1];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "data"));
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32)
    return errorf(d.where(), ": indices must be i32 or i64, got ", dtypeName(ind.dtype));
  if (x.rank() < 1 || ind.rank() != x.rank())
    return errorf(d.where(), ": data ", x.str(), " and indices ", ind.str(),
                  " must have the same rank >= 1");
  PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, attrInt(d.attrs, "axis", 0), x.rank()));
  for (int64_t k = 0; k < x.rank(); ++k)
    if (k != axis && ind.shape[k] > x.shape[k])
      return errorf(d.where(), ": indices ", ind.str(), " exceed data ", x.str(), " on axis ", k);
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, ind.shape));
  if (esize != 1 && esize != 2 && esize != 4 && esize != 8)
    return errorf(d.where(), ": elements of ", esize, " bytes are not supported");
  return KernelPtr(new GatherElementsKernel(d.where(), axis, ind.shape,
                                            rowMajorStrides(x.shape), x.shape[axis], esize,
                                            ind.dtype == DType::I64));
}

} // namespace pipec::cpu
