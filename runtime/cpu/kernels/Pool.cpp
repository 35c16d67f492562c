//===- runtime/cpu/kernels/Pool.cpp - MaxPool, AveragePool, global pools --===//
//
// ONNX MaxPool (opsets 1-12: ceil_mode, dilations, storage_order, optional
// int64 Indices output; f32/f64 and, from opset 12, i8/u8), AveragePool
// (count_include_pad, ceil_mode; dilations from opset 19), GlobalAveragePool and GlobalMaxPool, for
// any number of spatial dimensions.
//
// f32 windowed pools use oneDNN pooling_v2_forward when it computes the
// same thing: ceil_mode is expressed as extra end padding, which oneDNN's
// include-padding average would count, so that case (and Indices, and
// other types) uses the loop, which is slower than oneDNN's JIT kernels
// (docs/cpu-linalg-kernels.md). The loop works per (n, c) plane in parallel;
// each output reads its window in a fixed order. In ceil_mode the divisor of
// count_include_pad counts the positions inside the padded input only.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "support/Parallel.h"

#include <limits>

namespace pipec::cpu {

namespace {

enum class PoolKind { Max, AvgIncludePad, AvgExcludePad };

struct PoolGeom {
  int64_t planes = 0; ///< N * C
  std::vector<LinalgWindowDim> dims;
  int64_t inSpatial = 1, outSpatial = 1;
  PoolKind kind = PoolKind::Max;
  bool columnMajorIndices = false; ///< storage_order = 1
};

/// Per spatial dimension and output position: the first input index of the
/// window, the valid kernel taps [k0, k1), and the taps inside the padded
/// input (the include-pad divisor factor).
struct PoolTaps {
  std::vector<std::vector<int64_t>> start, k0, k1, padded;
};

PoolTaps computeTaps(const PoolGeom &g) {
  PoolTaps t;
  for (const LinalgWindowDim &w : g.dims) {
    std::vector<int64_t> s(w.out), a(w.out), b(w.out), p(w.out);
    for (int64_t o = 0; o < w.out; ++o) {
      s[o] = o * w.stride - w.padBegin;
      int64_t lo = 0, hi = 0, cnt = 0;
      bool seen = false;
      for (int64_t k = 0; k < w.kernel; ++k) {
        int64_t i = s[o] + k * w.dilation;
        if (i >= 0 && i < w.in) {
          if (!seen)
            lo = k;
          seen = true;
          hi = k + 1;
        }
        if (i >= -w.padBegin && i < w.in + w.padEnd)
          ++cnt;
      }
      a[o] = lo;
      b[o] = seen ? hi : lo;
      p[o] = cnt;
    }
    t.start.push_back(std::move(s));
    t.k0.push_back(std::move(a));
    t.k1.push_back(std::move(b));
    t.padded.push_back(std::move(p));
  }
  return t;
}

template <typename T> class PoolLoopKernel final : public Kernel {
public:
  PoolLoopKernel(PoolGeom g, bool indices) : g_(std::move(g)), indices_(indices) {
    if (g_.dims.size() == 1) // 1-D runs as 2-D with a unit height
      g_.dims.insert(g_.dims.begin(), LinalgWindowDim{1, 1, 1, 1, 1, 0, 0});
    taps_ = computeTaps(g_);
    inStrides_ = rowMajorStrides(Shape(inShape()));
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    int64_t *ind = indices_ ? static_cast<int64_t *>(out[1]) : nullptr;
    if (g_.dims.size() == 2) {
      run2d(x, y, ind);
      return Status::ok();
    }
    size_t nd = g_.dims.size();
    parallelFor(g_.planes, g_.planes * g_.outSpatial > 4096, [&](int64_t plane) {
      const T *xp = x + plane * g_.inSpatial;
      int64_t o[8] = {0};
      for (int64_t p = 0; p < g_.outSpatial; ++p) {
        // Odometer over the valid taps of this window.
        int64_t k[8], lo[8], hi[8], st[8];
        bool empty = false;
        for (size_t dd = 0; dd < nd; ++dd) {
          lo[dd] = taps_.k0[dd][o[dd]];
          hi[dd] = taps_.k1[dd][o[dd]];
          st[dd] = taps_.start[dd][o[dd]];
          k[dd] = lo[dd];
          empty |= lo[dd] >= hi[dd];
        }
        LinalgAcc<T> sum = 0;
        T best = std::numeric_limits<T>::lowest();
        if constexpr (std::numeric_limits<T>::has_infinity)
          best = -std::numeric_limits<T>::infinity();
        int64_t bestIdx = -1, count = 0;
        while (!empty) {
          int64_t off = 0;
          for (size_t dd = 0; dd < nd; ++dd)
            off += (st[dd] + k[dd] * g_.dims[dd].dilation) * inStrides_[dd];
          T v = xp[off];
          if (g_.kind == PoolKind::Max) {
            if (v > best || bestIdx < 0) {
              best = v;
              bestIdx = off;
            }
          } else {
            sum += v;
          }
          ++count;
          size_t dd = nd;
          while (dd-- > 0) {
            if (++k[dd] < hi[dd])
              break;
            k[dd] = lo[dd];
          }
          if (dd == static_cast<size_t>(-1))
            break;
        }
        if (g_.kind == PoolKind::Max) {
          y[plane * g_.outSpatial + p] = best;
          if (ind)
            ind[plane * g_.outSpatial + p] = plane * g_.inSpatial + indexOf(bestIdx);
        } else {
          int64_t div = count;
          if (g_.kind == PoolKind::AvgIncludePad) {
            div = 1;
            for (size_t dd = 0; dd < nd; ++dd)
              div *= taps_.padded[dd][o[dd]];
          }
          y[plane * g_.outSpatial + p] = div ? static_cast<T>(sum / div) : T(0);
        }
        for (size_t dd = nd; dd-- > 0;) {
          if (++o[dd] < g_.dims[dd].out)
            break;
          o[dd] = 0;
        }
      }
    });
    return Status::ok();
  }

private:
  /// The 2-D case without the odometer: window bounds come from the taps.
  void run2d(const T *x, T *y, int64_t *ind) const {
    const LinalgWindowDim &H = g_.dims[0], &W = g_.dims[1];
    T lowest = std::numeric_limits<T>::lowest();
    if constexpr (std::numeric_limits<T>::has_infinity)
      lowest = -std::numeric_limits<T>::infinity();
    if (g_.kind == PoolKind::Max && !ind && isPlain2x2(H) && isPlain2x2(W)) {
      // 2x2 windows at stride 2 that tile the plane (VGG's pools): rows in
      // pairs, the same comparisons in the same order as below.
      parallelFor(g_.planes, g_.planes * g_.outSpatial > 4096, [&](int64_t plane) {
        const T *xp = x + plane * g_.inSpatial;
        T *yp = y + plane * g_.outSpatial;
        for (int64_t oh = 0; oh < H.out; ++oh) {
          const T *r0 = xp + 2 * oh * W.in, *r1 = r0 + W.in;
          T *dst = yp + oh * W.out;
          for (int64_t ow = 0; ow < W.out; ++ow) {
            T best = lowest;
            best = r0[2 * ow] > best ? r0[2 * ow] : best;
            best = r0[2 * ow + 1] > best ? r0[2 * ow + 1] : best;
            best = r1[2 * ow] > best ? r1[2 * ow] : best;
            best = r1[2 * ow + 1] > best ? r1[2 * ow + 1] : best;
            dst[ow] = best;
          }
        }
      });
      return;
    }
    parallelFor(g_.planes, g_.planes * g_.outSpatial > 4096, [&](int64_t plane) {
      const T *xp = x + plane * g_.inSpatial;
      T *yp = y + plane * g_.outSpatial;
      for (int64_t oh = 0; oh < H.out; ++oh) {
        int64_t hs = taps_.start[0][oh], h0 = taps_.k0[0][oh], h1 = taps_.k1[0][oh];
        for (int64_t ow = 0; ow < W.out; ++ow) {
          int64_t ws = taps_.start[1][ow], w0 = taps_.k0[1][ow], w1 = taps_.k1[1][ow];
          T &dst = yp[oh * W.out + ow];
          if (g_.kind == PoolKind::Max && !ind) {
            T best = lowest;
            for (int64_t kh = h0; kh < h1; ++kh) {
              const T *row = xp + (hs + kh * H.dilation) * W.in + ws;
              for (int64_t kw = w0; kw < w1; ++kw) {
                T v = row[kw * W.dilation];
                best = v > best ? v : best;
              }
            }
            dst = best;
          } else if (g_.kind == PoolKind::Max) {
            T best = lowest;
            int64_t bestIdx = -1;
            for (int64_t kh = h0; kh < h1; ++kh) {
              int64_t rowOff = (hs + kh * H.dilation) * W.in;
              for (int64_t kw = w0; kw < w1; ++kw) {
                int64_t off = rowOff + ws + kw * W.dilation;
                if (xp[off] > best || bestIdx < 0) {
                  best = xp[off];
                  bestIdx = off;
                }
              }
            }
            dst = best;
            ind[plane * g_.outSpatial + oh * W.out + ow] = plane * g_.inSpatial + indexOf(bestIdx);
          } else {
            LinalgAcc<T> sum = 0;
            for (int64_t kh = h0; kh < h1; ++kh) {
              const T *row = xp + (hs + kh * H.dilation) * W.in + ws;
              for (int64_t kw = w0; kw < w1; ++kw)
                sum += row[kw * W.dilation];
            }
            int64_t div = g_.kind == PoolKind::AvgIncludePad
                              ? taps_.padded[0][oh] * taps_.padded[1][ow]
                              : (h1 - h0) * (w1 - w0);
            dst = div ? static_cast<T>(sum / div) : T(0);
          }
        }
      }
    });
  }

  /// A dimension of windows 2 wide at stride 2, no pads, no dilation, and
  /// no row left over.
  static bool isPlain2x2(const LinalgWindowDim &w) {
    return w.kernel == 2 && w.stride == 2 && w.dilation == 1 && w.padBegin == 0 &&
           w.out * 2 <= w.in;
  }

  std::vector<int64_t> inShape() const {
    std::vector<int64_t> s;
    for (const LinalgWindowDim &w : g_.dims)
      s.push_back(w.in);
    return s;
  }
  /// Row-major spatial offset -> the index MaxPool reports.
  int64_t indexOf(int64_t off) const {
    if (!g_.columnMajorIndices || off < 0)
      return std::max<int64_t>(off, 0);
    int64_t r = 0, mul = 1;
    for (size_t dd = 0; dd < g_.dims.size(); ++dd) {
      int64_t i = off / inStrides_[dd] % g_.dims[dd].in;
      r += i * mul;
      mul *= g_.dims[dd].in;
    }
    return r;
  }

  PoolGeom g_;
  bool indices_;
  PoolTaps taps_;
  std::vector<int64_t> inStrides_;
};

class PoolDnnlKernel final : public Kernel {
public:
  explicit PoolDnnlKernel(LinalgDnnlPrim p) : p_(std::move(p)) {}
  size_t workspaceBytes() const override { return p_.scratchBytes; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const void *ptrs[2] = {in[0], out[0]};
    return p_.run(ptrs, linalgAlign(ctx.workspace));
  }

private:
  LinalgDnnlPrim p_;
};

/// oneDNN's pool of `g` on NC[D]HW tensors, or NHWC ones with `nhwc`.
LinalgDnnlPrim makeDnnlPool(const PoolGeom &g, int64_t N, int64_t C, bool nhwc = false) {
  LinalgDnnlPrim p;
  if (g.dims.empty() || g.dims.size() > 3 || (nhwc && g.dims.size() != 2))
    return p;
  std::vector<int64_t> xs = {N, C}, ys = {N, C}, strides, kernel, dil, pl, pr;
  for (const LinalgWindowDim &w : g.dims) {
    xs.push_back(w.in);
    ys.push_back(w.out);
    strides.push_back(w.stride);
    kernel.push_back(w.kernel);
    dil.push_back(w.dilation - 1);
    pl.push_back(w.padBegin);
    // oneDNN wants out == floor((in + pl + pr - extent) / stride) + 1.
    int64_t r = w.padEnd;
    if ((w.in + w.padBegin + r - w.extent()) / w.stride + 1 != w.out) {
      r = (w.out - 1) * w.stride + w.extent() - w.in - w.padBegin;
      if (g.kind == PoolKind::AvgIncludePad)
        return p; // the extra padding would count in the divisor
    }
    if (r < 0 || w.padBegin >= w.extent() || r >= w.extent())
      return p;
    pr.push_back(r);
  }
  try {
    using namespace dnnl;
    algorithm alg = g.kind == PoolKind::Max             ? algorithm::pooling_max
                    : g.kind == PoolKind::AvgIncludePad ? algorithm::pooling_avg_include_padding
                                                        : algorithm::pooling_avg_exclude_padding;
    memory::desc xmd = linalgDnnlPlain(xs), ymd = linalgDnnlPlain(ys);
    if (nhwc) {
      xmd = memory::desc(linalgDnnlDims(xs), memory::data_type::f32, memory::format_tag::nhwc);
      ymd = memory::desc(linalgDnnlDims(ys), memory::data_type::f32, memory::format_tag::nhwc);
    }
    pooling_v2_forward::desc pdsc(prop_kind::forward_inference, alg, xmd, ymd,
                                  linalgDnnlDims(strides), linalgDnnlDims(kernel),
                                  linalgDnnlDims(dil), linalgDnnlDims(pl), linalgDnnlDims(pr));
    pooling_v2_forward::primitive_desc pd(pdsc, linalgDnnlAttr(), linalgDnnlEngine());
    // Where oneDNN has no JIT kernel for the case it falls back to a
    // reference one, slower than the loop below (VGG's first 2x2/2 max
    // pool: docs/cpu-linalg-kernels.md).
    if (linalgDnnlIsReference(pd.impl_info_str()))
      return LinalgDnnlPrim();
    p.init<pooling_v2_forward>(pd);
    p.args = {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_DST, ymd}};
  } catch (const dnnl::error &) {
    return LinalgDnnlPrim();
  }
  return p;
}

template <typename T>
Expected<KernelPtr> makeWindowTyped(const OpDesc &d, PoolGeom g, bool indices, int64_t N,
                                    int64_t C) {
  if constexpr (linalgDnnlSupports<T>()) {
    if (!indices && oneDnnEnabled()) {
      LinalgDnnlPrim p = makeDnnlPool(g, N, C);
      if (p.valid())
        return KernelPtr(new PoolDnnlKernel(std::move(p)));
    }
  }
  return KernelPtr(new PoolLoopKernel<T>(std::move(g), indices));
}

/// The window pool of `d` on X of NC[D]HW shape `x` giving `y`: checks the
/// attributes against the shapes.
Expected<PoolGeom> poolGeom(const OpDesc &d, const Shape &x, const Shape &y, bool isMax, int64_t opset) {
  if (!attrHas(d.attrs, "kernel_shape"))
    return errorf(d.where(), ": attribute 'kernel_shape' is missing");
  PoolGeom g;
  g.planes = x[0] * x[1];
  Shape in(x.begin() + 2, x.end());
  bool ceil = attrInt(d.attrs, "ceil_mode", 0) != 0;
  // AveragePool has dilations from opset 19; before, the attribute does not
  // exist and a model that sets it is malformed.
  if (!isMax && opset < 19 && attrHas(d.attrs, "dilations") &&
      attrInts(d.attrs, "dilations") != std::vector<int64_t>(in.size(), 1))
    return errorf(d.where(), ": AveragePool-", opset,
                  " has no 'dilations' attribute (it was added in opset 19)");
  PIPEC_TRY(linalgResolveWindow(d, in, {}, ceil, &y, g.dims));
  PIPEC_TRY(linalgCheckSpatialOut(d, TensorDesc{d.outputs[0].dtype, y}, x[0], x[1], g.dims));
  for (const LinalgWindowDim &w : g.dims) {
    g.inSpatial *= w.in;
    g.outSpatial *= w.out;
  }
  g.kind = isMax                                      ? PoolKind::Max
           : attrInt(d.attrs, "count_include_pad", 0) ? PoolKind::AvgIncludePad
                                                      : PoolKind::AvgExcludePad;
  g.columnMajorIndices = attrInt(d.attrs, "storage_order", 0) != 0;
  return g;
}

Expected<KernelPtr> makeWindowPool(const OpDesc &d, bool isMax) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.empty() ||
      d.outputs.size() > (isMax ? 2u : 1u))
    return errorf(d.where(), ": expects 1 input and ", isMax ? "1 or 2 outputs" : "1 output",
                  ", got ", d.inputs.size(), " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3 || x.rank() > 10)
    return errorf(d.where(), ": X ", x.str(), " must have rank 3 to 10");
  if (d.outputs[0].dtype != x.dtype)
    return errorf(d.where(), ": Y ", d.outputs[0].str(), " and X ", x.str(), " differ in type");
  bool indices = isMax && linalgHasOutput(d, 1);
  if (indices && (d.outputs[1].dtype != DType::I64 || d.outputs[1].shape != d.outputs[0].shape))
    return errorf(d.where(), ": Indices ", d.outputs[1].str(), " must be i64 shaped like Y");
  PIPEC_ASSIGN(PoolGeom g, poolGeom(d, x.shape, d.outputs[0].shape, isMax, d.opset));
  int64_t N = x.shape[0], C = x.shape[1];
  auto make = [&](auto tag) { return makeWindowTyped<decltype(tag)>(d, g, indices, N, C); };
  if (isMax && x.dtype == DType::I8)
    return make(int8_t{});
  if (isMax && x.dtype == DType::U8)
    return make(uint8_t{});
  return linalgDispatchFloat(d, x.dtype, make);
}

/// pipec:NhwcMaxPool / NhwcAveragePool without oneDNN: the loop on NCHW
/// copies of X and Y in the workspace.
class NhwcPoolLoopKernel final : public Kernel {
public:
  NhwcPoolLoopKernel(const PoolGeom &g, int64_t N, int64_t C) : loop_(g, false), N_(N), C_(C), g_(g) {
    xBytes_ = linalgRoundUp(static_cast<size_t>(g.planes * g.inSpatial) * sizeof(float));
    yBytes_ = linalgRoundUp(static_cast<size_t>(g.planes * g.outSpatial) * sizeof(float));
  }
  size_t workspaceBytes() const override { return xBytes_ + yBytes_ + 64; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    unsigned char *ws = linalgAlign(ctx.workspace);
    float *x = reinterpret_cast<float *>(ws), *y = reinterpret_cast<float *>(ws + xBytes_);
    linalgTransposeImages(static_cast<const float *>(in[0]), x, N_, g_.inSpatial, C_);
    const void *lin[1] = {x};
    void *lout[2] = {y, nullptr}; // no Indices: the loop never reads lout[1]
    PIPEC_TRY(loop_.run(ctx, lin, lout));
    linalgTransposeImages(y, static_cast<float *>(out[0]), N_, C_, g_.outSpatial);
    return Status::ok();
  }

private:
  PoolLoopKernel<float> loop_;
  int64_t N_, C_;
  PoolGeom g_;
  size_t xBytes_ = 0, yBytes_ = 0;
};

Expected<KernelPtr> makeNhwcPool(const OpDesc &d, bool isMax) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 1 input and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &x = d.inputs[0], &y = d.outputs[0];
  if (x.dtype != DType::F32 || y.dtype != DType::F32 || x.rank() != 4 || y.rank() != 4)
    return errorf(d.where(), ": X ", x.str(), " and Y ", y.str(), " must be f32 [N, H, W, C]");
  const Shape xs = permuteShape(x.shape, toNchwPerm());
  // The pipec op takes dilations whatever the opset (channels-last keeps
  // the ONNX node's, which its shape rule checked).
  PIPEC_ASSIGN(PoolGeom g, poolGeom(d, xs, permuteShape(y.shape, toNchwPerm()), isMax, 19));
  if (oneDnnEnabled()) {
    LinalgDnnlPrim p = makeDnnlPool(g, xs[0], xs[1], true);
    if (p.valid())
      return KernelPtr(new PoolDnnlKernel(std::move(p)));
  }
  return KernelPtr(new NhwcPoolLoopKernel(g, xs[0], xs[1]));
}

template <typename T> class GlobalPoolKernel final : public Kernel {
public:
  GlobalPoolKernel(int64_t planes, int64_t spatial, bool isMax)
      : planes_(planes), spatial_(spatial), isMax_(isMax) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    parallelFor(planes_, planes_ * spatial_ > 32768, [&](int64_t p) {
      const T *xp = x + p * spatial_;
      if (isMax_) {
        T best = spatial_ ? xp[0] : T(0);
        for (int64_t i = 1; i < spatial_; ++i)
          best = xp[i] > best ? xp[i] : best;
        y[p] = best;
      } else {
        y[p] = spatial_ ? static_cast<T>(linalgSum(xp, spatial_) / spatial_) : T(0);
      }
    });
    return Status::ok();
  }

private:
  int64_t planes_, spatial_;
  bool isMax_;
};

Expected<KernelPtr> makeGlobalPool(const OpDesc &d, bool isMax) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 1 input and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 3");
  Shape want = {x.shape[0], x.shape[1]};
  want.resize(x.shape.size(), 1);
  if (d.outputs[0].shape != want || d.outputs[0].dtype != x.dtype)
    return errorf(d.where(), ": output ", d.outputs[0].str(), ", expected ",
                  TensorDesc{x.dtype, want}.str());
  int64_t planes = x.shape[0] * x.shape[1], spatial = x.numel() / std::max<int64_t>(planes, 1);
  if (planes == 0)
    spatial = 0;
  return linalgDispatchFloat(d, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    return KernelPtr(new GlobalPoolKernel<T>(planes, spatial, isMax));
  });
}

} // namespace

Expected<KernelPtr> makeMaxPoolKernel(const OpDesc &d) { return makeWindowPool(d, true); }
Expected<KernelPtr> makeAveragePoolKernel(const OpDesc &d) { return makeWindowPool(d, false); }
Expected<KernelPtr> makeGlobalMaxPoolKernel(const OpDesc &d) { return makeGlobalPool(d, true); }
Expected<KernelPtr> makeNhwcMaxPoolKernel(const OpDesc &d) { return makeNhwcPool(d, true); }
Expected<KernelPtr> makeNhwcAveragePoolKernel(const OpDesc &d) { return makeNhwcPool(d, false); }
Expected<KernelPtr> makeGlobalAveragePoolKernel(const OpDesc &d) {
  return makeGlobalPool(d, false);
}

} // namespace pipec::cpu
