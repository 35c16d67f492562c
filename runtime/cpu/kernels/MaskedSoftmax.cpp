//===- runtime/cpu/kernels/MaskedSoftmax.cpp - pipec:MaskedSoftmax --------===//
//
// y = Softmax over the last axis of v, v = fill where cond == fill_when,
// else x * scale: the scaled, masked attention scores that fuse-masked-
// softmax (passes/Fusion.cpp) makes of Mul (or Div), Where and Softmax.
// cond (bool) broadcasts to x numpy-style, right-aligned. One pass writes v
// into y, then each row is the Softmax kernel's (SoftmaxRow.h), in place;
// rows are independent tasks, so the result does not depend on the thread
// count. f32 and f64.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/SoftmaxRow.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> class MaskedSoftmaxKernel final : public Kernel {
public:
  MaskedSoftmaxKernel(int64_t rows, int64_t n, std::vector<int64_t> condRow, int64_t condStep, T scale,
                      T fill, bool fillWhen)
      : rows_(rows), n_(n), condRow_(std::move(condRow)), condStep_(condStep), scale_(scale),
        fill_(fill), fillWhen_(fillWhen) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    const bool *cond = static_cast<const bool *>(in[1]);
    T *y = static_cast<T *>(out[0]);
    parallelTasks(rows_, rows_ * n_, [&](int64_t r) {
      const T *xr = x + r * n_;
      const bool *cr = cond + condRow_[static_cast<size_t>(r)];
      T *yr = y + r * n_;
      if (condStep_ == 1) { // a contiguous mask row: a loop that vectorizes
        for (int64_t i = 0; i < n_; ++i)
          yr[i] = cr[i] == fillWhen_ ? fill_ : xr[i] * scale_;
      } else {
        const bool v = cr[0] == fillWhen_; // one mask value for the row
        for (int64_t i = 0; i < n_; ++i)
          yr[i] = v ? fill_ : xr[i] * scale_;
      }
      softmaxRow<T, false>(yr, yr, n_);
    });
    return Status::ok();
  }

private:
  int64_t rows_, n_;
  std::vector<int64_t> condRow_; ///< per row of x: the offset of cond's row
  int64_t condStep_;             ///< cond's stride along the last axis (0 or 1)
  T scale_, fill_;
  bool fillWhen_;
};

} // namespace

Expected<KernelPtr> makeMaskedSoftmaxKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const TensorDesc &x = d.inputs[0], &c = d.inputs[1];
  PIPEC_TRY(checkOutput(d, 0, x.dtype, x.shape));
  if (c.dtype != DType::Bool)
    return errorf(d.where(), ": the mask must be bool, it is ", c.str());
  std::vector<int64_t> condRow;
  int64_t step = 0;
  if (!maskRows(c.shape, x.shape, condRow, step))
    return errorf(d.where(), ": the mask ", c.str(), " does not broadcast to ", x.str());
  const int64_t n = x.rank() ? x.shape.back() : 0, rows = n ? x.numel() / n : 0;
  const double scale = attrFloat(d.attrs, "scale", 1.0f), fill = attrFloat(d.attrs, "fill", -INFINITY);
  const bool fillWhen = attrInt(d.attrs, "fill_when", 1) != 0;
  return dispatchKernel<kFloats>(d, x.dtype, "input", [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    return KernelPtr(new MaskedSoftmaxKernel<T>(rows, n, condRow, step, static_cast<T>(scale),
                                                static_cast<T>(fill), fillWhen));
  });
}

} // namespace pipec::cpu
