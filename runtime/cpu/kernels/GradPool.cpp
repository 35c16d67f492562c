//===- runtime/cpu/kernels/GradPool.cpp - pipec:MaxPoolGrad, AveragePoolGrad
//
// Gradients of the windowed pools, with the forward's attributes
// (kernel_shape, strides, pads or auto_pad, dilations, ceil_mode,
// count_include_pad), any number of spatial dimensions:
//   MaxPoolGrad(dY, X) -> dX: each output's gradient goes to the first
//     maximum of its window in window order (recomputed from X, as the
//     forward picks it).
//   AveragePoolGrad(dY) -> dX of attribute `shape`: each output's gradient
//     is spread over its valid taps divided by the forward's divisor.
// Planes (n, c) are independent tasks, each accumulated in output order:
// results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "support/Parallel.h"

#include <limits>
#include <vector>

namespace pipec::cpu {

namespace {

enum class PoolGradKind { Max, AvgIncludePad, AvgExcludePad };

template <typename T> class PoolGradKernel final : public Kernel {
public:
  PoolGradKernel(std::vector<LinalgWindowDim> dims, int64_t planes, PoolGradKind kind)
      : dims_(std::move(dims)), planes_(planes), kind_(kind) {
    for (const LinalgWindowDim &w : dims_) {
      inSp_ *= w.in;
      outSp_ *= w.out;
    }
    strides_.assign(dims_.size(), 1);
    for (size_t i = dims_.size(); i-- > 1;)
      strides_[i - 1] = strides_[i] * dims_[i].in;
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = kind_ == PoolGradKind::Max ? static_cast<const T *>(in[1]) : nullptr;
    T *dx = static_cast<T *>(out[0]);
    const size_t nd = dims_.size();
    parallelFor(planes_, planes_ * outSp_ > 4096, [&](int64_t plane) {
      std::vector<LinalgAcc<T>> acc(static_cast<size_t>(inSp_), 0);
      const T *xp = x ? x + plane * inSp_ : nullptr;
      const T *gp = dy + plane * outSp_;
      int64_t o[8] = {0};
      for (int64_t p = 0; p < outSp_; ++p) {
        // The valid taps [lo, hi) of this window per dimension.
        int64_t lo[8], hi[8], st[8], k[8], padded = 1;
        bool empty = false;
        for (size_t d = 0; d < nd; ++d) {
          const LinalgWindowDim &w = dims_[d];
          st[d] = o[d] * w.stride - w.padBegin;
          lo[d] = w.kernel;
          hi[d] = 0;
          int64_t cnt = 0;
          for (int64_t t = 0; t < w.kernel; ++t) {
            const int64_t i = st[d] + t * w.dilation;
            if (i >= 0 && i < w.in) {
              lo[d] = std::min(lo[d], t);
              hi[d] = t + 1;
            }
            if (i >= -w.padBegin && i < w.in + w.padEnd)
              ++cnt;
          }
          if (lo[d] >= hi[d])
            empty = true;
          k[d] = lo[d];
          padded *= cnt;
        }
        if (!empty) {
          int64_t best = -1, count = 1;
          T bestV = T(0);
          if (kind_ == PoolGradKind::AvgExcludePad)
            for (size_t d = 0; d < nd; ++d)
              count *= hi[d] - lo[d];
          const int64_t div = kind_ == PoolGradKind::AvgIncludePad ? padded : count;
          const LinalgAcc<T> share =
              kind_ == PoolGradKind::Max ? 0 : static_cast<LinalgAcc<T>>(gp[p]) / div;
          while (true) {
            int64_t off = 0;
            for (size_t d = 0; d < nd; ++d)
              off += (st[d] + k[d] * dims_[d].dilation) * strides_[d];
            if (kind_ == PoolGradKind::Max) {
              if (best < 0 || xp[off] > bestV) {
                best = off;
                bestV = xp[off];
              }
            } else {
              acc[static_cast<size_t>(off)] += share;
            }
            size_t d = nd;
            while (d-- > 0) {
              if (++k[d] < hi[d])
                break;
              k[d] = lo[d];
            }
            if (d == static_cast<size_t>(-1))
              break;
          }
          if (kind_ == PoolGradKind::Max)
            acc[static_cast<size_t>(best)] += gp[p];
        }
        for (size_t d = nd; d-- > 0;) {
          if (++o[d] < dims_[d].out)
            break;
          o[d] = 0;
        }
      }
      T *op = dx + plane * inSp_;
      for (int64_t i = 0; i < inSp_; ++i)
        op[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    });
    return Status::ok();
  }

private:
  std::vector<LinalgWindowDim> dims_;
  std::vector<int64_t> strides_;
  int64_t planes_, inSp_ = 1, outSp_ = 1;
  PoolGradKind kind_;
};

Expected<KernelPtr> makePoolGrad(const OpDesc &d, bool isMax) {
  const size_t nIn = isMax ? 2 : 1;
  if (d.inputs.size() != nIn || !d.hasInput(0) || (isMax && !d.hasInput(1)) ||
      d.outputs.size() != 1)
    return errorf(d.where(), ": expects ", nIn, " input(s) and 1 output, got ", d.inputs.size(),
                  " and ", d.outputs.size());
  const TensorDesc &dy = d.inputs[0];
  Shape xs;
  if (isMax) {
    if (d.inputs[1].dtype != dy.dtype)
      return errorf(d.where(), ": X ", d.inputs[1].str(), " and dY ", dy.str(),
                    " differ in type");
    xs = d.inputs[1].shape;
  } else {
    if (!attrHas(d.attrs, "shape"))
      return errorf(d.where(), ": attribute 'shape' is missing");
    xs = attrInts(d.attrs, "shape");
  }
  if (xs.size() < 3 || xs.size() > 10 || dy.shape.size() != xs.size())
    return errorf(d.where(), ": X ", shapeStr(xs), " and dY ", dy.str(),
                  " must have the same rank, 3 to 10");
  if (d.outputs[0].dtype != dy.dtype || d.outputs[0].shape != xs)
    return errorf(d.where(), ": dX ", d.outputs[0].str(), " is not ", dtypeName(dy.dtype),
                  shapeStr(xs));
  if (!attrHas(d.attrs, "kernel_shape"))
    return errorf(d.where(), ": attribute 'kernel_shape' is missing");
  Shape in(xs.begin() + 2, xs.end());
  std::vector<LinalgWindowDim> dims;
  const bool ceil = attrInt(d.attrs, "ceil_mode", 0) != 0;
  PIPEC_TRY(linalgResolveWindow(d, in, {}, ceil, &dy.shape, dims));
  PIPEC_TRY(linalgCheckSpatialOut(d, dy, xs[0], xs[1], dims));
  const PoolGradKind kind = isMax ? PoolGradKind::Max
                            : attrInt(d.attrs, "count_include_pad", 0)
                                ? PoolGradKind::AvgIncludePad
                                : PoolGradKind::AvgExcludePad;
  const int64_t planes = xs[0] * xs[1];
  return linalgDispatchFloat(d, dy.dtype, [&](auto tag) -> Expected<KernelPtr> {
    return KernelPtr(new PoolGradKernel<decltype(tag)>(dims, planes, kind));
  });
}

} // namespace

Expected<KernelPtr> makeMaxPoolGradKernel(const OpDesc &d) { return makePoolGrad(d, true); }
Expected<KernelPtr> makeAveragePoolGradKernel(const OpDesc &d) { return makePoolGrad(d, false); }

} // namespace pipec::cpu
