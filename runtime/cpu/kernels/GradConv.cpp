//===- runtime/cpu/kernels/GradConv.cpp - pipec:ConvGradInput/ConvGradWeight
//
// The gradients of a 1-D or 2-D Conv (group, strides, pads or auto_pad,
// dilations; the forward's attributes, and `shape`, the shape of the
// result):
//   ConvGradInput(dY, W) -> dX: every (n, c) plane of dX gathers, in a fixed
//     order (output channel of c's group, kernel tap, output position), the
//     products dY * W of the taps that read it.
//   ConvGradWeight(dY, X) -> dW: every (m, c) filter sums dY * X over images
//     and output positions, in order, in double.
// Direct loops parallel over independent outputs only: results do not
// depend on the thread count. 1-D runs as 2-D with a unit height.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"

#include <vector>

namespace pipec::cpu {

namespace {

/// A 2-D convolution's geometry (1-D with a unit height).
struct ConvGradGeom {
  int64_t N = 0, C = 0, M = 0, G = 1;
  LinalgWindowDim h, w;
};

/// Reads the geometry from X's and W's shapes and the attributes, and checks
/// dY against it.
Status resolveConvGrad(const OpDesc &d, const Shape &xs, const Shape &ws, const Shape &ys,
                       ConvGradGeom &g) {
  if (xs.size() < 3 || xs.size() > 4 || ws.size() != xs.size() || ys.size() != xs.size())
    return errorf(d.where(), ": X ", shapeStr(xs), ", W ", shapeStr(ws), " and dY ",
                  shapeStr(ys), " must all be 1-D or 2-D convolution shapes");
  g.N = xs[0];
  g.C = xs[1];
  g.M = ws[0];
  g.G = attrInt(d.attrs, "group", 1);
  if (g.G < 1 || g.C % g.G != 0 || g.M % g.G != 0 || ws[1] * g.G != g.C)
    return errorf(d.where(), ": group ", g.G, " does not fit X channels ", g.C, " and W ",
                  shapeStr(ws));
  Shape in(xs.begin() + 2, xs.end());
  std::vector<int64_t> kw(ws.begin() + 2, ws.end());
  std::vector<LinalgWindowDim> dims;
  PIPEC_TRY(linalgResolveWindow(d, in, kw, false, nullptr, dims));
  if (dims.size() == 1)
    dims.insert(dims.begin(), LinalgWindowDim{1, 1, 1, 1, 1, 0, 0});
  g.h = dims[0];
  g.w = dims[1];
  Shape want = {g.N, g.M};
  for (size_t i = 2; i < ys.size(); ++i)
    want.push_back(dims[dims.size() - (ys.size() - i)].out);
  if (ys != want)
    return errorf(d.where(), ": dY ", shapeStr(ys), " is not the convolution output ",
                  shapeStr(want));
  return Status::ok();
}

template <typename T> class ConvGradInputKernel final : public Kernel {
public:
  explicit ConvGradInputKernel(ConvGradGeom g) : g_(g) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *w = static_cast<const T *>(in[1]);
    T *dx = static_cast<T *>(out[0]);
    const LinalgWindowDim &H = g_.h, &W = g_.w;
    const int64_t cg = g_.C / g_.G, mg = g_.M / g_.G;
    const int64_t inSp = H.in * W.in, outSp = H.out * W.out, ks = H.kernel * W.kernel;
    const int64_t planes = g_.N * g_.C;
#pragma omp parallel for schedule(static) if (planes * inSp * mg * ks > 32768)
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t n = p / g_.C, c = p % g_.C, grp = c / cg, cl = c % cg;
      std::vector<LinalgAcc<T>> acc(static_cast<size_t>(inSp), 0);
      for (int64_t m = grp * mg; m < (grp + 1) * mg; ++m) {
        const T *dym = dy + (n * g_.M + m) * outSp;
        const T *wm = w + (m * cg + cl) * ks;
        for (int64_t kh = 0; kh < H.kernel; ++kh)
          for (int64_t kw = 0; kw < W.kernel; ++kw) {
            const LinalgAcc<T> wv = wm[kh * W.kernel + kw];
            for (int64_t oh = 0; oh < H.out; ++oh) {
              const int64_t ih = oh * H.stride - H.padBegin + kh * H.dilation;
              if (ih < 0 || ih >= H.in)
                continue;
              const T *dyr = dym + oh * W.out;
              LinalgAcc<T> *ar = acc.data() + ih * W.in;
              for (int64_t ow = 0; ow < W.out; ++ow) {
                const int64_t iw = ow * W.stride - W.padBegin + kw * W.dilation;
                if (iw >= 0 && iw < W.in)
                  ar[iw] += dyr[ow] * wv;
              }
            }
          }
      }
      T *o = dx + p * inSp;
      for (int64_t i = 0; i < inSp; ++i)
        o[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    }
    return Status::ok();
  }

private:
  ConvGradGeom g_;
};

template <typename T> class ConvGradWeightKernel final : public Kernel {
public:
  explicit ConvGradWeightKernel(ConvGradGeom g) : g_(g) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    T *dw = static_cast<T *>(out[0]);
    const LinalgWindowDim &H = g_.h, &W = g_.w;
    const int64_t cg = g_.C / g_.G, mg = g_.M / g_.G;
    const int64_t inSp = H.in * W.in, outSp = H.out * W.out, ks = H.kernel * W.kernel;
    const int64_t filters = g_.M * cg;
#pragma omp parallel for schedule(static) if (filters * ks * g_.N * outSp > 32768)
    for (int64_t f = 0; f < filters; ++f) {
      const int64_t m = f / cg, cl = f % cg, c = (m / mg) * cg + cl;
      for (int64_t kh = 0; kh < H.kernel; ++kh)
        for (int64_t kw = 0; kw < W.kernel; ++kw) {
          LinalgAcc<T> s = 0;
          for (int64_t n = 0; n < g_.N; ++n) {
            const T *dym = dy + (n * g_.M + m) * outSp;
            const T *xc = x + (n * g_.C + c) * inSp;
            for (int64_t oh = 0; oh < H.out; ++oh) {
              const int64_t ih = oh * H.stride - H.padBegin + kh * H.dilation;
              if (ih < 0 || ih >= H.in)
                continue;
              const T *dyr = dym + oh * W.out;
              const T *xr = xc + ih * W.in;
              for (int64_t ow = 0; ow < W.out; ++ow) {
                const int64_t iw = ow * W.stride - W.padBegin + kw * W.dilation;
                if (iw >= 0 && iw < W.in)
                  s += static_cast<LinalgAcc<T>>(dyr[ow]) * xr[iw];
              }
            }
          }
          dw[f * ks + kh * W.kernel + kw] = static_cast<T>(s);
        }
    }
    return Status::ok();
  }

private:
  ConvGradGeom g_;
};

/// Shared factory: `weight` selects ConvGradWeight (dY, X) over
/// ConvGradInput (dY, W).
Expected<KernelPtr> makeConvGrad(const OpDesc &d, bool weight) {
  if (d.inputs.size() != 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &dy = d.inputs[0], &other = d.inputs[1];
  if (other.dtype != dy.dtype)
    return errorf(d.where(), ": ", other.str(), " and dY ", dy.str(), " differ in type");
  if (!attrHas(d.attrs, "shape"))
    return errorf(d.where(), ": attribute 'shape' is missing");
  Shape result = attrInts(d.attrs, "shape");
  if (d.outputs[0].shape != result || d.outputs[0].dtype != dy.dtype)
    return errorf(d.where(), ": output ", d.outputs[0].str(), " is not ", dtypeName(dy.dtype),
                  shapeStr(result));
  ConvGradGeom g;
  PIPEC_TRY(weight ? resolveConvGrad(d, other.shape, result, dy.shape, g)
                   : resolveConvGrad(d, result, other.shape, dy.shape, g));
  return linalgDispatchFloat(d, dy.dtype, [&](auto tag) -> Expected<KernelPtr> {
    using T = decltype(tag);
    if (weight)
      return KernelPtr(new ConvGradWeightKernel<T>(g));
    return KernelPtr(new ConvGradInputKernel<T>(g));
  });
}

} // namespace

Expected<KernelPtr> makeConvGradInputKernel(const OpDesc &d) { return makeConvGrad(d, false); }
Expected<KernelPtr> makeConvGradWeightKernel(const OpDesc &d) { return makeConvGrad(d, true); }

} // namespace pipec::cpu
