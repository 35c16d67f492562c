//===- runtime/cpu/kernels/GradLayerNormScale.cpp - pipec:LayerNormalizationScaleGrad
//
// dScale of LayerNormalization: sum over rows of dY * xhat, xhat the
// normalized X (statistics recomputed from X with linalgSum's lanes).
// Statistics are per row; the column sums run over rows in order, so the
// result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/LinalgCommon.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> class LayerNormScaleGradKernel final : public Kernel {
public:
  LayerNormScaleGradKernel(int64_t rows, int64_t cols, double eps)
      : rows_(rows), cols_(cols), eps_(eps) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    T *ds = static_cast<T *>(out[0]);
    const int64_t C = cols_;
    std::vector<double> mean(static_cast<size_t>(rows_)), rstd(static_cast<size_t>(rows_));
    parallelTasks(rows_, rows_ * C, [&](int64_t r) {
      const T *xr = x + r * C;
      const double m = linalgSum(xr, C) / static_cast<double>(C);
      const double v = linalgSumSqDev(xr, C, m) / static_cast<double>(C);
      mean[static_cast<size_t>(r)] = m;
      rstd[static_cast<size_t>(r)] = 1.0 / std::sqrt(v + eps_);
    });
    // Column sums over the rows in ascending order, a row at a time so
    // that the loop over columns vectorizes.
    // Chunks of columns for the threads: up to eight of at least 16 columns
    // (a transformer's 256 columns make eight). parallelChunks may pass one
    // range of all columns on one thread: the accumulators cover kBlock
    // columns at a time.
    constexpr int64_t kBlock = 256;
    const int64_t chunk = std::clamp<int64_t>((C / 8 + 15) / 16 * 16, 16, kBlock);
    parallelChunks(C, chunk, [&](int64_t lo, int64_t hi) {
      double acc[kBlock];
      for (int64_t b = lo; b < hi; b += kBlock) {
        const int64_t n = std::min(kBlock, hi - b);
        std::fill(acc, acc + n, 0.0);
        for (int64_t r = 0; r < rows_; ++r) {
          const T *__restrict dyr = dy + r * C + b;
          const T *__restrict xr = x + r * C + b;
          const double m = mean[static_cast<size_t>(r)], rs = rstd[static_cast<size_t>(r)];
          for (int64_t i = 0; i < n; ++i)
            acc[i] += static_cast<double>(dyr[i]) * (xr[i] - m) * rs;
        }
        for (int64_t i = 0; i < n; ++i)
          ds[b + i] = static_cast<T>(acc[i]);
      }
    });
    return Status::ok();
  }

private:
  int64_t rows_, cols_;
  double eps_;
};
} // namespace

Expected<KernelPtr> makeLayerNormalizationScaleGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const TensorDesc &x = d.inputs[1];
  if (d.inputs[0] != x)
    return errorf(d.where(), ": dY is ", d.inputs[0].str(), " but X is ", x.str());
  PIPEC_ASSIGN(int64_t axis, normalizeAxis(d, attrInt(d.attrs, "axis", -1), x.rank()));
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < x.rank(); ++i)
    (i < axis ? rows : cols) *= x.shape[static_cast<size_t>(i)];
  if (d.outputs.size() != 1 || d.outputs[0].dtype != x.dtype || d.outputs[0].numel() != cols)
    return errorf(d.where(), ": the output must hold ", cols, " elements of ",
                  dtypeName(x.dtype));
  const double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  return dispatchKernel<kFloats>(d, x.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   return KernelPtr(
                                       new LayerNormScaleGradKernel<T>(rows, cols, eps));
                                 });
}

} // namespace pipec::cpu
