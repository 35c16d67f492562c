//===- runtime/cpu/kernels/Clip.cpp - Clip to [min, max] ------------------===//
//
// Before opset 11 the bounds are float attributes; from 11 they are optional
// scalar inputs of the input's type, read in the factory when constant and
// at run time otherwise. An omitted bound is the type's lowest / highest
// value. y = min(max(x, lo), hi): with lo > hi every element becomes hi, as
// the spec says, and NaN passes through.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include <limits>

namespace pipec::cpu {

namespace {
using namespace ew;

/// Where a bound comes from.
enum class Bound { Fixed, Runtime };

template <typename T> class ClipKernel final : public Kernel {
public:
  ClipKernel(int64_t n, Bound loKind, T lo, Bound hiKind, T hi)
      : n_(n), loKind_(loKind), hiKind_(hiKind), lo_(lo), hi_(hi) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    T lo = lo_, hi = hi_;
    if (loKind_ == Bound::Runtime && in[1])
      lo = *static_cast<const T *>(in[1]);
    if (hiKind_ == Bound::Runtime && in[2])
      hi = *static_cast<const T *>(in[2]);
    const T *__restrict x = static_cast<const T *>(in[0]);
    T *__restrict y = static_cast<T *>(out[0]);
    parallelChunks(n_, kChunk, [&](int64_t b, int64_t e) {
      // Local copies (see ew::parallelChunks): the loop vectorizes.
      const T *__restrict xv = x;
      T *__restrict yv = y;
      const T l = lo, h = hi;
      for (int64_t i = b; i < e; ++i) {
        T v = xv[i] < l ? l : xv[i];
        yv[i] = v > h ? h : v;
      }
    });
    return Status::ok();
  }

private:
  int64_t n_;
  Bound loKind_, hiKind_;
  T lo_, hi_;
};
} // namespace

Expected<KernelPtr> makeClipKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, d.opset < 11 ? 1 : 3, 1, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_TRY(checkOutput(d, 0, x.dtype, x.shape));
  const unsigned types = d.opset < 12 ? kFloats : kNumeric;
  return dispatchKernel<kNumeric>(d, x.dtype, "input", [&]<typename T>(TypeTag<T>)
                                                           -> Expected<KernelPtr> {
    if (!inTypeSet(x.dtype, types))
      return errorf(d.where(), ": input type ", dtypeName(x.dtype), " needs opset 12");
    Bound kinds[2] = {Bound::Fixed, Bound::Fixed};
    T values[2] = {std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()};
    if (d.opset < 11) {
      if (const Attribute *a = attrFind(d.attrs, "min"))
        values[0] = static_cast<T>(a->f);
      if (const Attribute *a = attrFind(d.attrs, "max"))
        values[1] = static_cast<T>(a->f);
    } else {
      for (size_t k = 1; k <= 2; ++k) {
        if (!d.hasInput(k))
          continue;
        const TensorDesc &b = d.inputs[k];
        if (b.dtype != x.dtype || b.numel() != 1)
          return errorf(d.where(), ": ", k == 1 ? "min" : "max", " must be a scalar of type ",
                        dtypeName(x.dtype), ", it is ", b.str());
        if (const Tensor *c = d.constInput(k)) {
          if (c->dtype() != x.dtype || c->numel() != 1)
            return errorf(d.where(), ": constant ", k == 1 ? "min" : "max", " is ",
                          c->desc().str());
          values[k - 1] = *c->data<T>();
        } else {
          kinds[k - 1] = Bound::Runtime;
        }
      }
    }
    return KernelPtr(new ClipKernel<T>(x.numel(), kinds[0], values[0], kinds[1], values[1]));
  });
}

} // namespace pipec::cpu
