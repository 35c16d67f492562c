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
  const int64_t rank = x.rank();
  if (rank < 1 || c.rank() > rank)
    return errorf(d.where(), ": the mask ", c.str(), " does not broadcast to ", x.str());
  // cond's strides along x's axes (0 where it broadcasts).
  std::vector<int64_t> st(static_cast<size_t>(rank), 0);
  int64_t stride = 1;
  for (int64_t a = c.rank() - 1; a >= 0; --a) {
    const int64_t xa = a + rank - c.rank();
    if (c.shape[a] != 1 && c.shape[a] != x.shape[xa])
      return errorf(d.where(), ": the mask ", c.str(), " does not broadcast to ", x.str());
    st[static_cast<size_t>(xa)] = c.shape[a] == 1 ? 0 : stride;
    stride *= c.shape[a];
  }
  const int64_t n = x.shape[rank - 1], rows = n ? x.numel() / n : 0;
  std::vector<int64_t> condRow(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int64_t a = rank - 2; a >= 0; --a) {
      off += rem % x.shape[a] * st[static_cast<size_t>(a)];
      rem /= x.shape[a];
    }
    condRow[static_cast<size_t>(r)] = off;
  }
  const double scale = attrFloat(d.attrs, "scale", 1.0f), fill = attrFloat(d.attrs, "fill", -INFINITY);
  const bool fillWhen = attrInt(d.attrs, "fill_when", 1) != 0;
  const int64_t step = st[static_cast<size_t>(rank - 1)];
  return dispatchKernel<kFloats>(d, x.dtype, "input", [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    return KernelPtr(new MaskedSoftmaxKernel<T>(rows, n, condRow, step, static_cast<T>(scale),
                                                static_cast<T>(fill), fillWhen));
  });
}

} // namespace pipec::cpu
