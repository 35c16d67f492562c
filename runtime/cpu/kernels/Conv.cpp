//===- runtime/cpu/kernels/Conv.cpp - Conv (1-D, 2-D, 3-D) ----------------===//
//
// ONNX Conv, opsets 1-11+: group, strides, dilations, explicit pads or
// auto_pad (SAME_UPPER, SAME_LOWER, VALID), optional bias, any number of
// spatial dimensions. f32 with 1-3 spatial dimensions runs a oneDNN
// convolution_forward primitive created in the factory, on the plain
// (NC[D]HW / [G]OI[D]HW) layouts the graph uses. Everything else (f64, rank
// > 5, a case oneDNN declines) runs im2col + a GEMM batched over groups per
// image; im2col fills independent rows in parallel and LinalgBatchedGemm
// tiles the GEMM independently of the thread count. oneDNN is the faster
// of the two on ResNet-like 3x3, 1x1, 7x7/2 and 1-D convolutions, and even
// on depthwise 3x3 (bench/results/log.md).
//
// pipec:NhwcConv (made by channels-last, passes/Layout.cpp) is the same
// convolution on X [N, H, W, C] and Y [N, OH, OW, M], with an optional
// Relu, Clip or LeakyRelu applied to Y: oneDNN's primitive reads and writes that
// layout itself (only the weights are reordered, once), the activation is
// its eltwise post-op. On the plain NCHW path the two reorders around a
// small convolution can cost more than the convolution itself (a depthwise
// 3x3 of MobileNetV2 on AVX-512: bench/results/log.md). Where
// oneDNN has no NHWC kernel of its own (AVX2), ungrouped convolutions run
// on its blocked layout between reorders instead (makeDnnlConv says why).
// Without oneDNN the loop runs on NCHW copies in the workspace.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "runtime/cpu/kernels/LinalgGemm.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/FusedOps.h"
#include "support/Parallel.h"

#include <string_view>

namespace pipec::cpu {

namespace {

/// The shape of a convolution shared by both paths.
struct ConvGeom {
  int64_t N = 0, C = 0, M = 0, G = 1;
  std::vector<LinalgWindowDim> dims;
  int64_t inSpatial = 1, outSpatial = 1, kernelSize = 1;
};

/// Unrolls `channels` channels of one image into col, a
/// [channels * kernelSize, outSpatial] matrix (zero where the window is in
/// the padding); group g's rows start at g * (C/G) * kernelSize.
template <typename T> void im2col(const ConvGeom &g, const T *x, int64_t channels, T *col) {
  size_t nd = g.dims.size();
  int64_t rows = channels * g.kernelSize;
  parallelFor(rows, rows * g.outSpatial > 32768, [&](int64_t r) {
    int64_t c = r / g.kernelSize, kidx = r % g.kernelSize;
    // Kernel offset per dimension.
    int64_t koff[8], rem = kidx;
    for (size_t k = nd; k-- > 0;) {
      koff[k] = rem % g.dims[k].kernel * g.dims[k].dilation;
      rem /= g.dims[k].kernel;
    }
    const T *xc = x + c * g.inSpatial;
    T *dst = col + r * g.outSpatial;
    if (nd == 2) { // The common case, without the odometer.
      const LinalgWindowDim &h = g.dims[0], &w = g.dims[1];
      for (int64_t oh = 0; oh < h.out; ++oh) {
        int64_t ih = oh * h.stride - h.padBegin + koff[0];
        T *drow = dst + oh * w.out;
        if (ih < 0 || ih >= h.in) {
          std::fill(drow, drow + w.out, T(0));
          continue;
        }
        const T *xrow = xc + ih * w.in;
        for (int64_t ow = 0; ow < w.out; ++ow) {
          int64_t iw = ow * w.stride - w.padBegin + koff[1];
          drow[ow] = iw >= 0 && iw < w.in ? xrow[iw] : T(0);
        }
      }
      return;
    }
    int64_t o[8] = {0};
    for (int64_t p = 0; p < g.outSpatial; ++p) {
      int64_t off = 0;
      bool inside = true;
      for (size_t k = 0; k < nd; ++k) {
        int64_t i = o[k] * g.dims[k].stride - g.dims[k].padBegin + koff[k];
        inside &= i >= 0 && i < g.dims[k].in;
        off = off * g.dims[k].in + i;
      }
      dst[p] = inside ? xc[off] : T(0);
      for (size_t k = nd; k-- > 0;) {
        if (++o[k] < g.dims[k].out)
          break;
        o[k] = 0;
      }
    }
  });
}

template <typename T> class ConvLoopKernel final : public Kernel {
public:
  ConvLoopKernel(ConvGeom g, bool hasBias) : g_(std::move(g)), hasBias_(hasBias) {
    int64_t cg = g_.C / g_.G, mg = g_.M / g_.G, kdim = cg * g_.kernelSize;
    direct_ = true; // 1x1, stride 1, no padding: X is its own im2col matrix.
    for (const LinalgWindowDim &w : g_.dims)
      direct_ &= w.kernel == 1 && w.stride == 1 && w.padBegin == 0 && w.padEnd == 0;
    colBytes_ = direct_ ? 0 : linalgRoundUp(g_.C * g_.kernelSize * g_.outSpatial * sizeof(T));
    // Y_g [mg, out] = W_g [mg, kdim] * col_g [kdim, out], batched over groups.
    gemm_.M = mg;
    gemm_.N = g_.outSpatial;
    gemm_.K = kdim;
    gemm_.lda = kdim;
    gemm_.ldb = gemm_.ldc = g_.outSpatial;
    for (int64_t grp = 0; grp < g_.G; ++grp) {
      gemm_.aOff.push_back(grp * mg * kdim);
      gemm_.bOff.push_back(grp * kdim * g_.outSpatial);
      gemm_.cOff.push_back(grp * mg * g_.outSpatial);
    }
  }
  size_t workspaceBytes() const override { return colBytes_; }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const T *bias = hasBias_ ? static_cast<const T *>(in[2]) : nullptr;
    if (hasBias_ && !bias)
      return errorf("Conv: bias is missing at run time");
    compute(static_cast<const T *>(in[0]), static_cast<const T *>(in[1]), bias,
            static_cast<T *>(out[0]), linalgAlign(ctx.workspace));
    return Status::ok();
  }

  /// Y = conv(X, W) + bias (bias may be null); `ws`: workspaceBytes(),
  /// aligned.
  void compute(const T *x, const T *w, const T *bias, T *y, unsigned char *ws) const {
    T *col = reinterpret_cast<T *>(ws);
    for (int64_t n = 0; n < g_.N; ++n) {
      const T *xn = x + n * g_.C * g_.inSpatial;
      if (!direct_)
        im2col(g_, xn, g_.C, col);
      gemm_.run(w, direct_ ? xn : col, y + n * g_.M * g_.outSpatial);
    }
    if (bias) {
      int64_t planes = g_.N * g_.M;
      parallelFor(planes, planes * g_.outSpatial > 32768, [&](int64_t p) {
        T bv = bias[p % g_.M];
        T *yp = y + p * g_.outSpatial;
        for (int64_t i = 0; i < g_.outSpatial; ++i)
          yp[i] += bv;
      });
    }
  }

private:
  ConvGeom g_;
  bool hasBias_ = false;
  bool direct_ = false;
  size_t colBytes_ = 0;
  LinalgBatchedGemm<T> gemm_;
};

/// The epilogue's activation on `n` values.
void applyEpilogue(const ConvEpilogue &e, float *y, int64_t n) {
  if (e.kind == ConvEpilogue::None)
    return;
  parallelFor((n + 4095) / 4096, n > 32768, [&](int64_t b) {
    float *p = y + b * 4096;
    const int64_t m = std::min<int64_t>(4096, n - b * 4096);
    if (e.kind == ConvEpilogue::Relu) {
      for (int64_t i = 0; i < m; ++i)
        p[i] = p[i] < 0.0f ? 0.0f : p[i];
    } else if (e.kind == ConvEpilogue::LeakyRelu) {
      for (int64_t i = 0; i < m; ++i)
        p[i] = p[i] >= 0.0f ? p[i] : e.alpha * p[i];
    } else {
      for (int64_t i = 0; i < m; ++i)
        p[i] = p[i] < e.lo ? e.lo : p[i] > e.hi ? e.hi : p[i];
    }
  });
}

/// pipec:NhwcConv without oneDNN: the loop on NCHW copies of X and Y in the
/// workspace.
class NhwcConvLoopKernel final : public Kernel {
public:
  NhwcConvLoopKernel(const ConvGeom &g, bool hasBias, ConvEpilogue e)
      : g_(g), loop_(g, hasBias), hasBias_(hasBias), epilogue_(e) {
    xBytes_ = linalgRoundUp(static_cast<size_t>(g.N * g.C * g.inSpatial) * sizeof(float));
    yBytes_ = linalgRoundUp(static_cast<size_t>(g.N * g.M * g.outSpatial) * sizeof(float));
  }
  size_t workspaceBytes() const override { return xBytes_ + yBytes_ + loop_.workspaceBytes() + 64; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const float *bias = hasBias_ ? static_cast<const float *>(in[2]) : nullptr;
    if (hasBias_ && !bias)
      return errorf("NhwcConv: bias is missing at run time");
    unsigned char *ws = linalgAlign(ctx.workspace);
    float *x = reinterpret_cast<float *>(ws), *y = reinterpret_cast<float *>(ws + xBytes_);
    linalgTransposeImages(static_cast<const float *>(in[0]), x, g_.N, g_.inSpatial, g_.C);
    loop_.compute(x, static_cast<const float *>(in[1]), bias, y, ws + xBytes_ + yBytes_);
    float *dst = static_cast<float *>(out[0]);
    linalgTransposeImages(y, dst, g_.N, g_.M, g_.outSpatial);
    applyEpilogue(epilogue_, dst, g_.N * g_.M * g_.outSpatial);
    return Status::ok();
  }

private:
  ConvGeom g_;
  ConvLoopKernel<float> loop_;
  bool hasBias_;
  ConvEpilogue epilogue_;
  size_t xBytes_ = 0, yBytes_ = 0;
};

class ConvDnnlKernel final : public Kernel {
public:
  ConvDnnlKernel(LinalgDnnlBlocked p, bool hasBias) : p_(std::move(p)), hasBias_(hasBias) {}
  size_t workspaceBytes() const override { return p_.bytes; }
  size_t heldBytes() const override { return p_.heldBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    // Argument order X, W, [B], Y (see makeDnnlConv).
    const void *ptrs[4] = {in[0], in[1], out[0], nullptr};
    if (hasBias_) {
      if (!in[2])
        return errorf("Conv: bias is missing at run time");
      ptrs[2] = in[2];
      ptrs[3] = out[0];
    }
    // The weights' reordered copy is kept while they do not change: for a
    // step in training, for good in inference (where the step count moves
    // at every run and nothing writes a weight).
    return p_.run(ptrs, linalgAlign(ctx.workspace), 0, ctx.training ? ctx.step : 0);
  }

private:
  LinalgDnnlBlocked p_;
  bool hasBias_;
};

/// Whether oneDNN runs an NHWC convolution with a kernel made for it
/// (brgconv), rather than its direct kernel reading NHWC: probed once on a
/// 64-channel 3x3 convolution, so it follows PIPEC_MAX_CPU_ISA.
bool linalgDnnlHasNhwcConv() {
  static const bool has = [] {
    try {
      using namespace dnnl;
      const auto f32 = memory::data_type::f32;
      memory::desc x({2, 64, 16, 16}, f32, memory::format_tag::nhwc);
      memory::desc w({64, 64, 3, 3}, f32, memory::format_tag::any);
      convolution_forward::desc cd(prop_kind::forward_inference, algorithm::convolution_direct, x, w, x,
                                   {1, 1}, {1, 1}, {1, 1});
      convolution_forward::primitive_desc pd(cd, linalgDnnlAttr(), linalgDnnlEngine());
      return std::string_view(pd.impl_info_str()).substr(0, 3) == "brg";
    } catch (const dnnl::error &) {
      return false;
    }
  }();
  return has;
}

/// The oneDNN path on the layouts it prefers, with reorders from and to the
/// graph's plain ones (LinalgDnnlBlocked); an invalid plan when oneDNN
/// declines the case. `nhwc`: X and Y are [N, H, W, C] and the primitive
/// works on them as they are, with `epilogue` as its post-op.
/// `operands`: the type the primitive reads X and W in (f32, or bf16/f16
/// under output_dtype, taken only where linalgDnnlNativeHalf); Y and B are
/// f32. `wF32`: W is given in f32 all the same (a weight under
/// output_dtype), rounded to `operands` by its reorder.
LinalgDnnlBlocked makeDnnlConv(const ConvGeom &g, bool hasBias, bool nhwc = false, ConvEpilogue epilogue = {},
                               dnnl::memory::data_type operands = dnnl::memory::data_type::f32,
                               bool wF32 = false) {
  LinalgDnnlBlocked p;
  if (g.dims.empty() || g.dims.size() > 3)
    return p;
  try {
    using namespace dnnl;
    const LinalgDnnlConvShape cs = linalgDnnlConvShape(g.N, g.C, g.M, g.G, g.dims);
    const memory::data_type f32 = memory::data_type::f32;
    auto any = [](const std::vector<int64_t> &d, memory::data_type t) {
      return memory::desc(linalgDnnlDims(d), t, memory::format_tag::any);
    };
    if (nhwc && g.dims.size() != 2)
      return p;
    auto channelsLast = [](const std::vector<int64_t> &d, memory::data_type t) {
      return memory::desc(linalgDnnlDims(d), t, memory::format_tag::nhwc);
    };
    const memory::desc xmd = nhwc ? channelsLast(cs.src, operands) : linalgDnnlPlain(cs.src, operands),
                       ymd = nhwc ? channelsLast(cs.dst, f32) : linalgDnnlPlain(cs.dst),
                       wmd = linalgDnnlPlain(cs.weights, wF32 ? f32 : operands), bmd = linalgDnnlPlain({g.M});
    // On NHWC the primitive reads and writes the tensors as they are, but
    // where the output has 4 pixels or fewer and the channels come in 16s
    // (ResNet's last stage at 64x64: [16, 512, 2, 2]) oneDNN's direct
    // kernel on 16-channel blocks beats its NHWC one with the weights out
    // of cache (at 4x4 NHWC already wins: bench/results/log.md), and the
    // reorders of activations that small cost next to nothing.
    const bool blocked = nhwc && g.G == 1 && g.C % 16 == 0 && g.M % 16 == 0 && g.outSpatial <= 4;
    auto block16 = [](const std::vector<int64_t> &d, memory::data_type t) {
      return memory::desc(linalgDnnlDims(d), t, memory::format_tag::nChw16c);
    };
    // Where oneDNN has no kernel of its own for NHWC (brgconv: avx512_core
    // and up in oneDNN 2.6; on AVX2 its direct kernel takes NHWC at a
    // loss), the primitive runs on the blocked layout it picks, with
    // reorders of X and Y around it: on an AVX2 CPU the blocked kernel
    // with both reorders beat NHWC on ungrouped 3x3 convolutions, and the
    // CNNs' inference steps gained or held (bench/results/log.md). Grouped
    // convolutions keep NHWC.
    const bool pick = nhwc && !blocked && g.G == 1 && !linalgDnnlHasNhwcConv();
    const memory::desc xc = blocked ? block16(cs.src, operands) : nhwc && !pick ? xmd : any(cs.src, operands),
                       yc = blocked ? block16(cs.dst, f32) : nhwc && !pick ? ymd : any(cs.dst, f32);
    const memory::dims st = linalgDnnlDims(cs.strides), dl = linalgDnnlDims(cs.dilations),
                       p0 = linalgDnnlDims(cs.padBegin), p1 = linalgDnnlDims(cs.padEnd);
    convolution_forward::desc cd =
        hasBias ? convolution_forward::desc(prop_kind::forward_inference,
                                            algorithm::convolution_direct, xc, any(cs.weights, operands),
                                            bmd, yc, st, dl, p0, p1)
                : convolution_forward::desc(prop_kind::forward_inference,
                                            algorithm::convolution_direct, xc, any(cs.weights, operands),
                                            yc, st, dl, p0, p1);
    primitive_attr attr = linalgDnnlAttr();
    if (epilogue.kind != ConvEpilogue::None) {
      post_ops po;
      // oneDNN's relu with alpha is s > 0 ? s : alpha s: the LeakyRelu
      // kernel's values, signed zeros and NaNs included.
      if (epilogue.kind == ConvEpilogue::Relu)
        po.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
      else if (epilogue.kind == ConvEpilogue::LeakyRelu)
        po.append_eltwise(1.0f, algorithm::eltwise_relu, epilogue.alpha, 0.0f);
      else
        po.append_eltwise(1.0f, algorithm::eltwise_clip, epilogue.lo, epilogue.hi);
      attr.set_post_ops(po);
    }
    convolution_forward::primitive_desc pd(cd, attr, linalgDnnlEngine());
    if (linalgDnnlIsReference(pd.impl_info_str()))
      return LinalgDnnlBlocked(); // the loop is faster than oneDNN's reference kernel
    if (operands != f32 && !linalgDnnlNativeHalf(pd.impl_info_str()))
      return LinalgDnnlBlocked(); // the emulation is faster
    p.main.init<convolution_forward>(pd);
    // run() passes X, W, B, Y; without a bias, slot 2 is Y.
    p.main.args = {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}};
    std::vector<memory::desc> plain = {xmd, wmd};
    if (hasBias) {
      p.main.args.push_back({DNNL_ARG_BIAS, pd.bias_desc()});
      plain.push_back(bmd);
    }
    p.main.args.push_back({DNNL_ARG_DST, pd.dst_desc()});
    plain.push_back(ymd);
    std::vector<bool> output(plain.size(), false);
    output.back() = true;
    p.addReorders(plain, output);
  } catch (const dnnl::error &) {
    return LinalgDnnlBlocked();
  }
  return p;
}

template <typename T> Expected<KernelPtr> makeTyped(const OpDesc &d, ConvGeom g, bool hasBias) {
  if constexpr (linalgDnnlSupports<T>()) {
    if (oneDnnEnabled()) {
      LinalgDnnlBlocked p = makeDnnlConv(g, hasBias);
      // Weights that change only between steps are reordered once a step,
      // not once a micro-batch.
      if (d.isStepInvariant(1))
        p.keepReordered(1);
      if (p.valid())
        return KernelPtr(new ConvDnnlKernel(std::move(p), hasBias));
    }
  }
  return KernelPtr(new ConvLoopKernel<T>(std::move(g), hasBias));
}

} // namespace

namespace {
/// The convolution of `d` on X of NC[D]HW shape `x` giving `y`: checks the
/// attributes against the shapes.
Expected<ConvGeom> convGeom(const OpDesc &d, const Shape &x, const TensorDesc &y) {
  const TensorDesc &w = d.inputs[1];
  bool hasBias = d.hasInput(2);
  ConvGeom g;
  g.N = x[0];
  g.C = x[1];
  g.M = w.shape[0];
  g.G = attrInt(d.attrs, "group", 1);
  if (g.G < 1 || g.C % g.G != 0 || g.M % g.G != 0 || w.shape[1] * g.G != g.C)
    return errorf(d.where(), ": group ", g.G, " does not fit X channels ", g.C, " and W ", w.str());
  if (hasBias && d.inputs[2].shape != Shape{g.M})
    return errorf(d.where(), ": bias ", d.inputs[2].str(), " is not [", g.M, "]");
  Shape in(x.begin() + 2, x.end());
  std::vector<int64_t> kw(w.shape.begin() + 2, w.shape.end());
  if (attrInts(d.attrs, "kernel_shape", kw) != kw)
    return errorf(d.where(), ": kernel_shape differs from W ", w.str());
  PIPEC_TRY(linalgResolveWindow(d, in, kw, false, nullptr, g.dims));
  PIPEC_TRY(linalgCheckSpatialOut(d, y, g.N, g.M, g.dims));
  for (const LinalgWindowDim &dim : g.dims) {
    g.inSpatial *= dim.in;
    g.outSpatial *= dim.out;
    g.kernelSize *= dim.kernel;
  }
  return g;
}
} // namespace

/// Conv or pipec:NhwcConv under output_dtype: oneDNN's 16-bit convolution
/// where it runs on the CPU's 16-bit instructions, else the emulation
/// (HalfProduct.cpp).
static Expected<KernelPtr> makeHalfConv(const OpDesc &d, bool nhwc, KernelFactory f32) {
  PIPEC_ASSIGN(OpDesc w, linalgWidenedProduct(d));
  PIPEC_TRY(linalgCheckConvOperands(w));
  if (oneDnnEnabled() && w.inputs[0].rank() >= 3 && w.inputs[0].rank() <= 5 && (!nhwc || w.inputs[0].rank() == 4)) {
    const TensorDesc &x = w.inputs[0], &y = w.outputs[0];
    auto epilogue = nhwc ? convEpilogueOf(d.attrs) : Expected<ConvEpilogue>(ConvEpilogue{});
    if (!epilogue)
      return errorf(d.where(), ": ", epilogue.status().message());
    PIPEC_ASSIGN(ConvGeom g, nhwc ? convGeom(w, permuteShape(x.shape, toNchwPerm()),
                                             TensorDesc{y.dtype, permuteShape(y.shape, toNchwPerm())})
                                  : convGeom(w, x.shape, y));
    // X 16-bit; W 16-bit, or an f32 weight the reorder rounds (once a
    // step where it is step-invariant: keepReordered).
    if (d.inputs[0].dtype == DType::F32)
      return makeLinalgWidenedProductKernel(d, f32);
    LinalgDnnlBlocked p = makeDnnlConv(g, w.hasInput(2), nhwc, *epilogue, linalgDnnlHalfType(d.inputs[0].dtype),
                                       d.inputs[1].dtype == DType::F32);
    if (d.isStepInvariant(1))
      p.keepReordered(1);
    if (p.valid())
      return KernelPtr(new ConvDnnlKernel(std::move(p), w.hasInput(2)));
  }
  return makeLinalgWidenedProductKernel(d, f32);
}

Expected<KernelPtr> makeConvKernel(const OpDesc &d) {
  if (linalgIsHalfProduct(d))
    return makeHalfConv(d, false, makeConvKernel);
  PIPEC_TRY(linalgCheckConvOperands(d));
  PIPEC_ASSIGN(ConvGeom g, convGeom(d, d.inputs[0].shape, d.outputs[0]));
  bool hasBias = d.hasInput(2);
  return linalgDispatchFloat(d, d.inputs[0].dtype,
                             [&](auto tag) { return makeTyped<decltype(tag)>(d, g, hasBias); });
}

Expected<KernelPtr> makeNhwcConvKernel(const OpDesc &d) {
  if (linalgIsHalfProduct(d))
    return makeHalfConv(d, true, makeNhwcConvKernel);
  PIPEC_TRY(linalgCheckConvOperands(d));
  const TensorDesc &x = d.inputs[0], &y = d.outputs[0];
  if (x.dtype != DType::F32 || x.rank() != 4 || y.rank() != 4)
    return errorf(d.where(), ": X ", x.str(), " and Y ", y.str(), " must be f32 [N, H, W, C]");
  auto epilogue = convEpilogueOf(d.attrs);
  if (!epilogue)
    return errorf(d.where(), ": ", epilogue.status().message());
  PIPEC_ASSIGN(ConvGeom g, convGeom(d, permuteShape(x.shape, toNchwPerm()),
                                    TensorDesc{y.dtype, permuteShape(y.shape, toNchwPerm())}));
  const bool hasBias = d.hasInput(2);
  if (oneDnnEnabled()) {
    LinalgDnnlBlocked p = makeDnnlConv(g, hasBias, true, *epilogue);
    if (d.isStepInvariant(1))
      p.keepReordered(1);
    if (p.valid())
      return KernelPtr(new ConvDnnlKernel(std::move(p), hasBias));
  }
  return KernelPtr(new NhwcConvLoopKernel(g, hasBias, *epilogue));
}

} // namespace pipec::cpu
