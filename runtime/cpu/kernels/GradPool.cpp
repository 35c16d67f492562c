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
// results do not depend on the thread count. MaxPool's 2-D gradient adds
// straight into dX in its type; the others accumulate in double.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "support/Parallel.h"

#include <limits>
#include <vector>

namespace pipec::cpu {

namespace {

enum class PoolGradKind { Max, AvgIncludePad, AvgExcludePad };

/// One spatial dimension's windows, per output index: the first input
/// index, the valid taps [lo, hi) and the taps inside the padded input.
struct PoolGradTaps {
  std::vector<int64_t> start, lo, hi, padded;
};

template <typename T> class PoolGradKernel final : public Kernel {
public:
  PoolGradKernel(std::vector<LinalgWindowDim> dims, int64_t planes, PoolGradKind kind)
      : dims_(std::move(dims)), planes_(planes), kind_(kind) {
    for (const LinalgWindowDim &w : dims_) {
      inSp_ *= w.in;
      outSp_ *= w.out;
      PoolGradTaps t;
      for (int64_t o = 0; o < w.out; ++o) {
        const int64_t st = o * w.stride - w.padBegin;
        int64_t lo = w.kernel, hi = 0, cnt = 0;
        for (int64_t k = 0; k < w.kernel; ++k) {
          const int64_t i = st + k * w.dilation;
          if (i >= 0 && i < w.in) {
            lo = std::min(lo, k);
            hi = k + 1;
          }
          if (i >= -w.padBegin && i < w.in + w.padEnd)
            ++cnt;
        }
        t.start.push_back(st);
        t.lo.push_back(lo);
        t.hi.push_back(std::max(lo, hi));
        t.padded.push_back(cnt);
      }
      taps_.push_back(std::move(t));
    }
    strides_.assign(dims_.size(), 1);
    for (size_t i = dims_.size(); i-- > 1;)
      strides_[i - 1] = strides_[i] * dims_[i].in;
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = kind_ == PoolGradKind::Max ? static_cast<const T *>(in[1]) : nullptr;
    T *dx = static_cast<T *>(out[0]);
    if (kind_ == PoolGradKind::Max && dims_.size() == 2) {
      // Each output's gradient goes to one input: added straight into dX (a
      // position is the maximum of at most a few overlapping windows).
      parallelFor(planes_, planes_ * outSp_ > 4096, [&](int64_t plane) {
        T *op = dx + plane * inSp_;
        std::fill(op, op + inSp_, T(0));
        maxPlane2d(x + plane * inSp_, dy + plane * outSp_, op);
      });
      return Status::ok();
    }
    parallelFor(planes_, planes_ * outSp_ > 4096, [&](int64_t plane) {
      // One accumulator per thread, reused from plane to plane.
      thread_local std::vector<LinalgAcc<T>> acc;
      acc.assign(static_cast<size_t>(inSp_), 0);
      const T *xp = x ? x + plane * inSp_ : nullptr;
      const T *gp = dy + plane * outSp_;
      if (dims_.size() == 2)
        plane2d(xp, gp, acc.data());
      else
        planeNd(xp, gp, acc.data());
      T *op = dx + plane * inSp_;
      for (int64_t i = 0; i < inSp_; ++i)
        op[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    });
    return Status::ok();
  }

private:
  /// The common 2-D case with the windows' taps from the tables.
  void plane2d(const T *xp, const T *gp, LinalgAcc<T> *acc) const {
    const LinalgWindowDim &H = dims_[0], &W = dims_[1];
    const PoolGradTaps &th = taps_[0], &tw = taps_[1];
    for (int64_t oh = 0; oh < H.out; ++oh) {
      const int64_t hs = th.start[oh], h0 = th.lo[oh], h1 = th.hi[oh];
      for (int64_t ow = 0; ow < W.out; ++ow) {
        const int64_t ws = tw.start[ow], w0 = tw.lo[ow], w1 = tw.hi[ow];
        const T g = gp[oh * W.out + ow];
        if (h0 >= h1 || w0 >= w1)
          continue;
        if (kind_ == PoolGradKind::Max) {
          int64_t best = -1;
          T bestV = T(0);
          for (int64_t kh = h0; kh < h1; ++kh) {
            const int64_t row = (hs + kh * H.dilation) * W.in + ws;
            for (int64_t kw = w0; kw < w1; ++kw) {
              const int64_t off = row + kw * W.dilation;
              if (best < 0 || xp[off] > bestV) {
                best = off;
                bestV = xp[off];
              }
            }
          }
          acc[best] += g;
          continue;
        }
        const int64_t div = kind_ == PoolGradKind::AvgIncludePad
                                ? th.padded[oh] * tw.padded[ow]
                                : (h1 - h0) * (w1 - w0);
        const LinalgAcc<T> share = static_cast<LinalgAcc<T>>(g) / div;
        for (int64_t kh = h0; kh < h1; ++kh) {
          LinalgAcc<T> *row = acc + (hs + kh * H.dilation) * W.in + ws;
          for (int64_t kw = w0; kw < w1; ++kw)
            row[kw * W.dilation] += share;
        }
      }
    }
  }

  /// MaxPool's 2-D gradient into a zeroed plane of dX.
  void maxPlane2d(const T *xp, const T *gp, T *op) const {
    const LinalgWindowDim &H = dims_[0], &W = dims_[1];
    const PoolGradTaps &th = taps_[0], &tw = taps_[1];
    for (int64_t oh = 0; oh < H.out; ++oh) {
      const int64_t hs = th.start[oh], h0 = th.lo[oh], h1 = th.hi[oh];
      if (h0 >= h1)
        continue;
      for (int64_t ow = 0; ow < W.out; ++ow) {
        const int64_t ws = tw.start[ow], w0 = tw.lo[ow], w1 = tw.hi[ow];
        if (w0 >= w1)
          continue;
        // The first maximum in window order, as the forward picks it.
        int64_t best = (hs + h0 * H.dilation) * W.in + ws + w0 * W.dilation;
        T bestV = xp[best];
        for (int64_t kh = h0; kh < h1; ++kh) {
          const int64_t row = (hs + kh * H.dilation) * W.in + ws;
          for (int64_t kw = w0; kw < w1; ++kw) {
            const int64_t off = row + kw * W.dilation;
            if (xp[off] > bestV) {
              best = off;
              bestV = xp[off];
            }
          }
        }
        op[best] += gp[oh * W.out + ow];
      }
    }
  }

  /// Any number of dimensions: an odometer over outputs and taps.
  void planeNd(const T *xp, const T *gp, LinalgAcc<T> *acc) const {
    const size_t nd = dims_.size();
    int64_t o[10] = {0};
    for (int64_t p = 0; p < outSp_; ++p) {
      int64_t lo[10], hi[10], st[10], k[10], padded = 1, count = 1;
      bool empty = false;
      for (size_t d = 0; d < nd; ++d) {
        const PoolGradTaps &t = taps_[d];
        st[d] = t.start[o[d]];
        lo[d] = k[d] = t.lo[o[d]];
        hi[d] = t.hi[o[d]];
        empty |= lo[d] >= hi[d];
        padded *= t.padded[o[d]];
        count *= hi[d] - lo[d];
      }
      if (!empty) {
        int64_t best = -1;
        T bestV = T(0);
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
            acc[off] += share;
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
          acc[best] += gp[p];
      }
      for (size_t d = nd; d-- > 0;) {
        if (++o[d] < dims_[d].out)
          break;
        o[d] = 0;
      }
    }
  }

  std::vector<LinalgWindowDim> dims_;
  std::vector<PoolGradTaps> taps_;
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
