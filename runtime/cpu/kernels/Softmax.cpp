//===- runtime/cpu/kernels/Softmax.cpp - Softmax and LogSoftmax -----------===//
//
// Numerically stable: subtract the maximum along the axis before exp. The
// factory reduces the shape to [outer, axis, inner]: before opset 13 the
// input is coerced to 2-D at `axis` (default 1), so inner = 1 and the axis
// spans every later dimension; from 13 the op runs along `axis` (default
// -1). Rows (inner = 1) are contiguous loops; otherwise tiles of up to
// kTile inner columns advance together so the inner loop is contiguous.
// Rows and tiles are independent tasks, each summed in a fixed order, so
// the result does not depend on the thread count. Float exp is VecMath.h's
// expApprox (vectorized); a row's maximum and sum are taken in 16 lanes
// combined in a fixed order (SoftmaxRow.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/SoftmaxRow.h"
#include "runtime/cpu/kernels/VecMath.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

constexpr int64_t kTile = 64;

template <typename T, bool Log> class SoftmaxKernel final : public Kernel {
public:
  SoftmaxKernel(int64_t outer, int64_t axis, int64_t inner)
      : outer_(outer), axis_(axis), inner_(inner) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    if (axis_ == 0)
      return Status::ok();
    const int64_t work = outer_ * axis_ * inner_;
    if (inner_ == 1) {
      parallelTasks(outer_, work, [&](int64_t o) { row(x + o * axis_, y + o * axis_); });
      return Status::ok();
    }
    const int64_t tiles = (inner_ + kTile - 1) / kTile;
    parallelTasks(outer_ * tiles, work, [&](int64_t task) {
      const int64_t o = task / tiles, k0 = (task % tiles) * kTile;
      const int64_t off = o * axis_ * inner_ + k0;
      tile(x + off, y + off, std::min(kTile, inner_ - k0));
    });
    return Status::ok();
  }

private:
  void row(const T *__restrict x, T *__restrict y) const { softmaxRow<T, Log>(x, y, axis_); }

  /// `w` inner columns starting at x / y, strided by inner_ along the axis.
  void tile(const T *__restrict x, T *__restrict y, int64_t w) const {
    T m[kTile], s[kTile];
    for (int64_t k = 0; k < w; ++k) {
      m[k] = x[k];
      s[k] = 0;
    }
    for (int64_t j = 1; j < axis_; ++j) {
      const T *xr = x + j * inner_;
      for (int64_t k = 0; k < w; ++k)
        m[k] = xr[k] > m[k] ? xr[k] : m[k];
    }
    for (int64_t j = 0; j < axis_; ++j) {
      const T *xr = x + j * inner_;
      T *yr = y + j * inner_;
      for (int64_t k = 0; k < w; ++k) {
        yr[k] = expOf(xr[k] - m[k]);
        s[k] += yr[k];
      }
    }
    for (int64_t k = 0; k < w; ++k)
      s[k] = Log ? m[k] + std::log(s[k]) : T(1) / s[k];
    for (int64_t j = 0; j < axis_; ++j) {
      const T *xr = x + j * inner_;
      T *yr = y + j * inner_;
      for (int64_t k = 0; k < w; ++k)
        yr[k] = Log ? xr[k] - s[k] : yr[k] * s[k];
    }
  }

  int64_t outer_, axis_, inner_;
};
} // namespace

Expected<KernelPtr> makeSoftmaxKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, 1, 1, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_TRY(checkOutput(d, 0, x.dtype, x.shape));
  const bool log = d.opType == "LogSoftmax";
  if (!log && d.opType != "Softmax")
    return errorf(d.where(), ": not Softmax or LogSoftmax");
  const bool coerce2d = d.opset < 13;
  int64_t axis = attrInt(d.attrs, "axis", coerce2d ? 1 : -1);
  // Coercing a 1-D input at the default axis 1 makes rows of one element.
  if (!(coerce2d && axis == x.rank())) {
    PIPEC_ASSIGN(axis, normalizeAxis(d, axis, x.rank()));
  }
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i < axis)
      outer *= x.shape[i];
    else if (i == axis || coerce2d)
      len *= x.shape[i];
    else
      inner *= x.shape[i];
  }
  return dispatchKernel<kFloats>(d, x.dtype, "input",
                                 [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                   if (log)
                                     return KernelPtr(new SoftmaxKernel<T, true>(outer, len, inner));
                                   return KernelPtr(new SoftmaxKernel<T, false>(outer, len, inner));
                                 });
}

} // namespace pipec::cpu
