//===- runtime/cpu/kernels/ArgMinMax.cpp - ArgMax and ArgMin --------------===//
//
// Index (i64) of the largest / smallest element along `axis`; the first one
// on ties, the last with select_last_index (opset 12). NaN counts as larger
// (ArgMax) or smaller (ArgMin) than any number, as numpy's argmax/argmin.
// The shape is viewed as [outer, axis, inner]; contiguous rows (inner = 1)
// or tiles of inner columns are independent tasks.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include <cmath>
#include <type_traits>

namespace pipec::cpu {

namespace {
using namespace ew;

constexpr int64_t kTile = 64;

template <typename T> inline bool isNaN(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return x != x;
  else
    return false;
}

/// Whether `x` replaces the current best `b`.
template <typename T, bool Max, bool Last> inline bool better(T x, T b) {
  if (isNaN(b))
    return Last && isNaN(x);
  if (isNaN(x))
    return true;
  if constexpr (Max)
    return Last ? x >= b : x > b;
  else
    return Last ? x <= b : x < b;
}

template <typename T, bool Max, bool Last> class ArgKernel final : public Kernel {
public:
  ArgKernel(int64_t outer, int64_t len, int64_t inner) : outer_(outer), len_(len), inner_(inner) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    int64_t *y = static_cast<int64_t *>(out[0]);
    const int64_t work = outer_ * len_ * inner_;
    const int64_t tiles = (inner_ + kTile - 1) / kTile;
    parallelTasks(outer_ * tiles, work, [&](int64_t t) {
      const int64_t o = t / tiles, k0 = (t % tiles) * kTile;
      const int64_t w = std::min(kTile, inner_ - k0);
      const T *base = x + o * len_ * inner_ + k0;
      T best[kTile];
      int64_t arg[kTile];
      for (int64_t k = 0; k < w; ++k) {
        best[k] = base[k];
        arg[k] = 0;
      }
      for (int64_t j = 1; j < len_; ++j) {
        const T *row = base + j * inner_;
        for (int64_t k = 0; k < w; ++k) {
          if (better<T, Max, Last>(row[k], best[k])) {
            best[k] = row[k];
            arg[k] = j;
          }
        }
      }
      std::copy(arg, arg + w, y + o * inner_ + k0);
    });
    return Status::ok();
  }

private:
  int64_t outer_, len_, inner_;
};
} // namespace

Expected<KernelPtr> makeArgMinMaxKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, 1, 1, 1));
  const bool isMax = d.opType == "ArgMax";
  if (!isMax && d.opType != "ArgMin")
    return errorf(d.where(), ": not ArgMax or ArgMin");
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(int64_t axis, normalizeAxis(d, attrInt(d.attrs, "axis", 0), x.rank()));
  const bool keepDims = attrInt(d.attrs, "keepdims", 1) != 0;
  const bool last = attrInt(d.attrs, "select_last_index", 0) != 0;
  int64_t outer = 1, inner = 1, len = x.shape[axis];
  Shape outShape;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i < axis)
      outer *= x.shape[i];
    else if (i > axis)
      inner *= x.shape[i];
    if (i != axis)
      outShape.push_back(x.shape[i]);
    else if (keepDims)
      outShape.push_back(1);
  }
  PIPEC_TRY(checkOutput(d, 0, DType::I64, outShape));
  if (len == 0 && outer * inner != 0)
    return errorf(d.where(), ": axis ", axis, " of shape ", shapeStr(x.shape),
                  " is empty, so there is no index to return");
  return dispatchKernel<kNumeric>(d, x.dtype, "input",
                                  [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                                    Kernel *k;
                                    if (isMax)
                                      k = last ? static_cast<Kernel *>(new ArgKernel<T, true, true>(outer, len, inner))
                                               : new ArgKernel<T, true, false>(outer, len, inner);
                                    else
                                      k = last ? static_cast<Kernel *>(new ArgKernel<T, false, true>(outer, len, inner))
                                               : new ArgKernel<T, false, false>(outer, len, inner);
                                    return KernelPtr(k);
                                  });
}

} // namespace pipec::cpu
