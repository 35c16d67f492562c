//===- runtime/cpu/kernels/GradGather.cpp - pipec:GatherGrad --------------===//
//
// The gradient of Gather (embedding look-up): zeros of the data shape
// (attribute `shape`) into which dY is scatter-added along `axis`:
//   dData[o, idx[j], k] += dY[o, j, k].
// Repeated indices accumulate in index order j; outer slices o are
// independent tasks, so the result does not depend on the thread count.
// Negative indices count from the end, as Gather's.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include <cstring>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T, typename Index> class GatherGradKernel final : public Kernel {
public:
  GatherGradKernel(std::string where, int64_t outer, int64_t dim, int64_t count, int64_t inner)
      : where_(std::move(where)), outer_(outer), dim_(dim), count_(count), inner_(inner) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const Index *idx = static_cast<const Index *>(in[1]);
    T *dx = static_cast<T *>(out[0]);
    for (int64_t j = 0; j < count_; ++j) {
      const auto i = static_cast<int64_t>(idx[j]);
      if (i < -dim_ || i >= dim_)
        return errorf(where_, ": index ", i, " at position ", j, " is out of range [", -dim_,
                      ", ", dim_, ")");
    }
    std::memset(dx, 0, static_cast<size_t>(outer_ * dim_ * inner_) * sizeof(T));
    parallelTasks(outer_, outer_ * count_ * inner_, [&](int64_t o) {
      for (int64_t j = 0; j < count_; ++j) {
        int64_t i = static_cast<int64_t>(idx[j]);
        if (i < 0)
          i += dim_;
        const T *src = dy + (o * count_ + j) * inner_;
        T *dst = dx + (o * dim_ + i) * inner_;
        for (int64_t k = 0; k < inner_; ++k)
          dst[k] += src[k];
      }
    });
    return Status::ok();
  }

private:
  std::string where_;
  int64_t outer_, dim_, count_, inner_;
};
} // namespace

Expected<KernelPtr> makeGatherGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const TensorDesc &dy = d.inputs[0], &idx = d.inputs[1];
  const Shape data = attrInts(d.attrs, "shape");
  const auto rank = static_cast<int64_t>(data.size());
  PIPEC_ASSIGN(int64_t axis, normalizeAxis(d, attrInt(d.attrs, "axis", 0), rank));
  PIPEC_TRY(checkOutput(d, 0, dy.dtype, data));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= i == axis ? 1 : data[static_cast<size_t>(i)];
  const int64_t count = idx.numel();
  if (dy.numel() != outer * count * inner)
    return errorf(d.where(), ": dY ", dy.str(), " does not match indices ", idx.str(),
                  " and data shape ", shapeStr(data));
  const int64_t dim = data[static_cast<size_t>(axis)];
  return dispatchKernel<kFloats>(d, dy.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   if (idx.dtype == DType::I64)
                                     return KernelPtr(new GatherGradKernel<T, int64_t>(
                                         d.where(), outer, dim, count, inner));
                                   if (idx.dtype == DType::I32)
                                     return KernelPtr(new GatherGradKernel<T, int32_t>(
                                         d.where(), outer, dim, count, inner));
                                   return errorf(d.where(), ": indices must be i32 or i64");
                                 });
}

} // namespace pipec::cpu
