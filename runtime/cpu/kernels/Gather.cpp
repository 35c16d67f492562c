//===- runtime/cpu/kernels/Gather.cpp - Gather ----------------------------===//
//
// Gather (opsets 1-13) along any axis with i32 or i64 indices, negative ones
// counting from the end. Viewing data as [outer, dim, inner] and the output
// as [outer, indices, inner], each output row is one memcpy of the inner
// block the index selects. Indices are runtime data: they are all checked
// before any copy, and one out of range is an error naming the node, the
// index and its position, never a read out of bounds.
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

class GatherKernel final : public Kernel {
public:
  GatherKernel(std::string where, int64_t axis, int64_t outer, int64_t dim, int64_t count,
               int64_t innerElems, size_t esize, bool idx64)
      : where_(std::move(where)), axis_(axis), outer_(outer), dim_(dim), count_(count),
        innerElems_(innerElems), esize_(esize), idx64_(idx64) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const void *idx = in[1];
    for (int64_t j = 0; j < count_; ++j) {
      int64_t v = index(idx, j);
      if (v < -dim_ || v >= dim_)
        return errorf(where_, ": index ", v, " at position ", j, " is out of range [",
                      -dim_, ", ", dim_ - 1, "] for axis ", axis_, " of size ", dim_);
    }
    const auto *src = static_cast<const char *>(in[0]);
    auto *dst = static_cast<char *>(out[0]);
    if (innerElems_ == 1) {
      switch (esize_) {
      case 1: return gatherElems<1>(src, idx, dst);
      case 2: return gatherElems<2>(src, idx, dst);
      case 4: return gatherElems<4>(src, idx, dst);
      case 8: return gatherElems<8>(src, idx, dst);
      default: break;
      }
    }
    const size_t rowBytes = static_cast<size_t>(innerElems_) * esize_;
    const int64_t rows = outer_ * count_;
    parallelFor(rows, rows * rowBytes >= dm::kParallelBytes && rows > 1, [&](int64_t r) {
      const int64_t o = r / count_;
      const int64_t v = normalized(idx, r % count_);
      std::memcpy(dst + r * rowBytes, src + (o * dim_ + v) * rowBytes, rowBytes);
    });
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
  /// One element per index (gathering along the last axis).
  template <size_t S> Status gatherElems(const char *src, const void *idx, char *dst) const {
    auto *o = reinterpret_cast<Elem<S> *>(dst);
    const auto *s = reinterpret_cast<const Elem<S> *>(src);
    const int64_t rows = outer_ * count_;
    parallelFor(rows, rows * S >= dm::kParallelBytes, [&](int64_t r) {
      o[r] = s[(r / count_) * dim_ + normalized(idx, r % count_)];
    });
    return Status::ok();
  }

  std::string where_;
  int64_t axis_, outer_, dim_, count_, innerElems_;
  size_t esize_;
  bool idx64_;
};
} // namespace

Expected<KernelPtr> makeGatherKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0], &ind = d.inputs[1];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "data"));
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32)
    return errorf(d.where(), ": indices must be i32 or i64, got ", dtypeName(ind.dtype));
  if (x.rank() < 1)
    return errorf(d.where(), ": data must have rank >= 1, got ", x.str());
  PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, attrInt(d.attrs, "axis", 0), x.rank()));
  Shape outShape(x.shape.begin(), x.shape.begin() + axis);
  outShape.insert(outShape.end(), ind.shape.begin(), ind.shape.end());
  outShape.insert(outShape.end(), x.shape.begin() + axis + 1, x.shape.end());
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, outShape));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= x.shape[i];
  for (int64_t i = axis + 1; i < x.rank(); ++i)
    inner *= x.shape[i];
  return KernelPtr(new GatherKernel(d.where(), axis, outer, x.shape[axis], ind.numel(), inner,
                                    esize, ind.dtype == DType::I64));
}

} // namespace pipec::cpu
