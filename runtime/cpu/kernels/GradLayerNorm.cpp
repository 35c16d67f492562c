//===- runtime/cpu/kernels/GradLayerNorm.cpp - pipec:LayerNormalizationGrad
//
// dX of LayerNormalization over the dimensions [axis, rank) from dY, X and
// scale (statistics recomputed from X in double with linalgSum's lanes, as
// the forward's own loop computes them): with
// xhat = (x - mean) * rstd and g = dY * scale,
//   dX = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// Rows are independent tasks, each summed in laneSum's fixed order:
// thread-count independent.
//
// With three outputs (autodiff's form when X, scale and bias all need
// gradients) the same pass over the rows also gives
//   dScale = sum over rows of dY * xhat,   dBias = sum over rows of dY,
// the work of LayerNormalizationScaleGrad and a ReduceSum, without reading
// dY and X twice more and recomputing the statistics. The rows go in
// blocks whose size depends on the shape alone (at least 32 rows, at most
// 64 blocks); each block sums its rows in order in double, then the
// blocks are added in order: thread-count independent too.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/LinalgCommon.h"

#include <algorithm>
#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> class LayerNormGradKernel final : public Kernel {
public:
  LayerNormGradKernel(int64_t rows, int64_t cols, double eps, bool params)
      : rows_(rows), cols_(cols), eps_(eps), params_(params) {
    blockRows_ = std::max<int64_t>(32, (rows_ + 63) / 64);
    blocks_ = (rows_ + blockRows_ - 1) / blockRows_;
  }
  size_t workspaceBytes() const override {
    return params_ ? static_cast<size_t>(blocks_ * cols_) * 2 * sizeof(double) + 64 : 0;
  }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    const T *scale = static_cast<const T *>(in[2]);
    T *dx = static_cast<T *>(out[0]);
    const int64_t C = cols_;
    // Row r's dX; with `acc`, also dY * xhat into acc[0, C) and dY into
    // acc[C, 2C).
    auto row = [&](int64_t r, double *acc) {
      const T *xr = x + r * C, *gr = dy + r * C;
      T *o = dx + r * C;
      const double mean = linalgSum(xr, C) / static_cast<double>(C);
      const double var = linalgSumSqDev(xr, C, mean) / static_cast<double>(C);
      const double rstd = 1.0 / std::sqrt(var + eps_);
      // mean(g) and mean(g * xhat) in one pass, then dX (and the
      // parameters' sums) in one more: bitwise the separate passes.
      const auto [sg, sgx] = laneSum2(
          C, [&](int64_t i) { return static_cast<double>(gr[i]) * scale[i]; },
          [&](int64_t i) { return static_cast<double>(gr[i]) * scale[i] * (xr[i] - mean) * rstd; });
      const double mg = sg / static_cast<double>(C), mgx = sgx / static_cast<double>(C);
      if (acc) {
        double *__restrict ds = acc, *__restrict db = acc + C;
        for (int64_t i = 0; i < C; ++i) {
          const double gy = static_cast<double>(gr[i]);
          const double g = gy * scale[i];
          const double xhat = (xr[i] - mean) * rstd;
          o[i] = static_cast<T>(rstd * (g - mg - xhat * mgx));
          ds[i] += gy * xhat;
          db[i] += gy;
        }
        return;
      }
      for (int64_t i = 0; i < C; ++i) {
        const double g = static_cast<double>(gr[i]) * scale[i];
        const double xhat = (xr[i] - mean) * rstd;
        o[i] = static_cast<T>(rstd * (g - mg - xhat * mgx));
      }
    };
    if (!params_) {
      parallelTasks(rows_, rows_ * C, [&](int64_t r) { row(r, nullptr); });
      return Status::ok();
    }
    if (!ctx.workspace)
      return Status::error("LayerNormalizationGrad run without its workspace");
    double *part = reinterpret_cast<double *>(linalgAlign(ctx.workspace));
    parallelTasks(blocks_, rows_ * C, [&](int64_t b) {
      double *acc = part + b * 2 * C;
      std::fill(acc, acc + 2 * C, 0.0);
      for (int64_t r = b * blockRows_; r < std::min(rows_, (b + 1) * blockRows_); ++r)
        row(r, acc);
    });
    T *ds = static_cast<T *>(out[1]), *db = static_cast<T *>(out[2]);
    parallelChunks(C, std::max<int64_t>(16, (C / 8 + 15) / 16 * 16), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        double s = 0, t = 0;
        for (int64_t b = 0; b < blocks_; ++b) {
          s += part[b * 2 * C + i];
          t += part[b * 2 * C + C + i];
        }
        ds[i] = static_cast<T>(s);
        db[i] = static_cast<T>(t);
      }
    });
    return Status::ok();
  }

private:
  int64_t rows_, cols_;
  double eps_;
  bool params_; ///< dScale and dBias too
  int64_t blockRows_ = 1, blocks_ = 0;
};
} // namespace

Expected<KernelPtr> makeLayerNormalizationGradKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 3, 3, 1, 3));
  if (d.outputs.size() == 2)
    return errorf(d.where(), ": expects dX, or dX, dScale and dBias");
  const TensorDesc &x = d.inputs[1];
  if (d.inputs[0] != x)
    return errorf(d.where(), ": dY is ", d.inputs[0].str(), " but X is ", x.str());
  PIPEC_TRY(checkOutput(d, 0, x.dtype, x.shape));
  PIPEC_ASSIGN(int64_t axis, normalizeAxis(d, attrInt(d.attrs, "axis", -1), x.rank()));
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < x.rank(); ++i)
    (i < axis ? rows : cols) *= x.shape[static_cast<size_t>(i)];
  if (d.inputs[2].dtype != x.dtype || d.inputs[2].numel() != cols)
    return errorf(d.where(), ": scale ", d.inputs[2].str(), " must hold ", cols, " elements");
  const bool params = d.outputs.size() == 3;
  for (size_t i = 1; i < d.outputs.size(); ++i)
    if (d.outputs[i].dtype != x.dtype || d.outputs[i].numel() != cols)
      return errorf(d.where(), ": output ", i, " must hold ", cols, " elements of ", dtypeName(x.dtype));
  const double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  return dispatchKernel<kFloats>(d, x.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   return KernelPtr(new LayerNormGradKernel<T>(rows, cols, eps, params));
                                 });
}

} // namespace pipec::cpu
