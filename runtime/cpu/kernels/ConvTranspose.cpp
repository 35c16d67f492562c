//===- runtime/cpu/kernels/ConvTranspose.cpp - ConvTranspose --------------===//
//
// ONNX ConvTranspose, opsets 1-11+: W is [C, M/group, k...]; group,
// strides, dilations, pads, output_padding, output_shape and auto_pad as the
// spec gives them:
//   out = stride * (in - 1) + output_padding + (k - 1) * dilation + 1
//         - pad_begin - pad_end
// and, with output_shape (or auto_pad SAME_*, whose output is in * stride),
// pads derived from total = stride * (in - 1) + output_padding + extent - out
// (SAME_UPPER puts the odd unit at the end, otherwise at the beginning).
//
// f32 with 1-3 spatial dimensions runs oneDNN deconvolution_forward with
// ONNX's weight layout described by strides (no reorder in our code;
// faster than the fallback: docs/cpu-linalg-kernels.md). The
// fallback computes col = W_g^T X_g per image (a GEMM batched over groups)
// and scatters col into the output (col2im), in parallel over output
// channels only, so each output element accumulates in a fixed order.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "runtime/cpu/kernels/LinalgGemm.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/Parallel.h"

namespace pipec::cpu {

namespace {

struct DeconvGeom {
  int64_t N = 0, C = 0, M = 0, G = 1;
  std::vector<LinalgWindowDim> dims; ///< `in` is X's size, `out` is Y's
  int64_t inSpatial = 1, outSpatial = 1, kernelSize = 1;
};

template <typename T> class ConvTransposeLoopKernel final : public Kernel {
public:
  ConvTransposeLoopKernel(DeconvGeom g, bool hasBias) : g_(std::move(g)), hasBias_(hasBias) {
    int64_t cg = g_.C / g_.G, mg = g_.M / g_.G, rows = mg * g_.kernelSize;
    colBytes_ = linalgRoundUp(g_.M * g_.kernelSize * g_.inSpatial * sizeof(T));
    // col_g [mg * k, in] = W_g^T [mg * k, cg] * X_g [cg, in], batched over groups.
    gemm_.ta = true;
    gemm_.M = rows;
    gemm_.N = g_.inSpatial;
    gemm_.K = cg;
    gemm_.lda = rows;
    gemm_.ldb = gemm_.ldc = g_.inSpatial;
    for (int64_t grp = 0; grp < g_.G; ++grp) {
      gemm_.aOff.push_back(grp * cg * rows);
      gemm_.bOff.push_back(grp * cg * g_.inSpatial);
      gemm_.cOff.push_back(grp * rows * g_.inSpatial);
    }
  }
  size_t workspaceBytes() const override { return colBytes_; }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    const T *w = static_cast<const T *>(in[1]);
    const T *bias = hasBias_ ? static_cast<const T *>(in[2]) : nullptr;
    if (hasBias_ && !bias)
      return errorf("ConvTranspose: bias is missing at run time");
    T *y = static_cast<T *>(out[0]);
    T *col = reinterpret_cast<T *>(linalgAlign(ctx.workspace));
    size_t nd = g_.dims.size();
    for (int64_t n = 0; n < g_.N; ++n) {
      gemm_.run(w, x + n * g_.C * g_.inSpatial, col);
      T *yn = y + n * g_.M * g_.outSpatial;
      // col2im: each output channel gathers its own rows of col.
      parallelFor(g_.M, g_.M * g_.kernelSize * g_.inSpatial > 32768, [&](int64_t m) {
        T *ym = yn + m * g_.outSpatial;
        std::fill(ym, ym + g_.outSpatial, bias ? bias[m] : T(0));
        for (int64_t kidx = 0; kidx < g_.kernelSize; ++kidx) {
          int64_t koff[8], rem = kidx;
          for (size_t k = nd; k-- > 0;) {
            koff[k] = rem % g_.dims[k].kernel * g_.dims[k].dilation - g_.dims[k].padBegin;
            rem /= g_.dims[k].kernel;
          }
          const T *c = col + (m * g_.kernelSize + kidx) * g_.inSpatial;
          int64_t i[8] = {0};
          for (int64_t p = 0; p < g_.inSpatial; ++p) {
            int64_t off = 0;
            bool inside = true;
            for (size_t k = 0; k < nd; ++k) {
              int64_t o = i[k] * g_.dims[k].stride + koff[k];
              inside &= o >= 0 && o < g_.dims[k].out;
              off = off * g_.dims[k].out + o;
            }
            if (inside)
              ym[off] += c[p];
            for (size_t k = nd; k-- > 0;) {
              if (++i[k] < g_.dims[k].in)
                break;
              i[k] = 0;
            }
          }
        }
      });
    }
    return Status::ok();
  }

private:
  DeconvGeom g_;
  bool hasBias_;
  size_t colBytes_ = 0;
  LinalgBatchedGemm<T> gemm_;
};

class ConvTransposeDnnlKernel final : public Kernel {
public:
  ConvTransposeDnnlKernel(LinalgDnnlPrim p, bool hasBias) : p_(std::move(p)), hasBias_(hasBias) {}
  size_t workspaceBytes() const override { return p_.scratchBytes; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const void *ptrs[4] = {in[0], in[1], out[0], nullptr};
    if (hasBias_) {
      if (!in[2])
        return errorf("ConvTranspose: bias is missing at run time");
      ptrs[2] = in[2];
      ptrs[3] = out[0];
    }
    return p_.run(ptrs, linalgAlign(ctx.workspace));
  }

private:
  LinalgDnnlPrim p_;
  bool hasBias_;
};

LinalgDnnlPrim makeDnnlDeconv(const DeconvGeom &g, bool hasBias) {
  LinalgDnnlPrim p;
  if (g.dims.empty() || g.dims.size() > 3)
    return p;
  std::vector<int64_t> xs = {g.N, g.C}, ys = {g.N, g.M}, strides, dil, pl, pr;
  for (const LinalgWindowDim &w : g.dims) {
    xs.push_back(w.in);
    ys.push_back(w.out);
    strides.push_back(w.stride);
    dil.push_back(w.dilation - 1);
    pl.push_back(w.padBegin);
    // oneDNN derives the output size from the pads alone; output_padding
    // shows up as less end padding.
    pr.push_back((w.in - 1) * w.stride + w.extent() - w.padBegin - w.out);
    if (w.padBegin < 0 || pr.back() < 0)
      return p;
  }
  try {
    using namespace dnnl;
    // Logical weights [G,] O/G, I/G, k... over ONNX's [C, M/G, k...] memory.
    int64_t cg = g.C / g.G, mg = g.M / g.G;
    std::vector<int64_t> wd, ws;
    if (g.G > 1) {
      wd = {g.G, mg, cg};
      ws = {cg * mg * g.kernelSize, g.kernelSize, mg * g.kernelSize};
    } else {
      wd = {g.M, g.C};
      ws = {g.kernelSize, g.M * g.kernelSize};
    }
    int64_t ks = g.kernelSize;
    for (const LinalgWindowDim &w : g.dims) {
      ks /= w.kernel;
      wd.push_back(w.kernel);
      ws.push_back(ks);
    }
    memory::desc xmd = linalgDnnlPlain(xs), ymd = linalgDnnlPlain(ys),
                 wmd(linalgDnnlDims(wd), memory::data_type::f32, linalgDnnlDims(ws)),
                 bmd = linalgDnnlPlain({g.M});
    deconvolution_forward::desc dd =
        hasBias ? deconvolution_forward::desc(prop_kind::forward_inference,
                                              algorithm::deconvolution_direct, xmd, wmd, bmd, ymd,
                                              linalgDnnlDims(strides), linalgDnnlDims(dil),
                                              linalgDnnlDims(pl), linalgDnnlDims(pr))
                : deconvolution_forward::desc(prop_kind::forward_inference,
                                              algorithm::deconvolution_direct, xmd, wmd, ymd,
                                              linalgDnnlDims(strides), linalgDnnlDims(dil),
                                              linalgDnnlDims(pl), linalgDnnlDims(pr));
    deconvolution_forward::primitive_desc pd(dd, linalgDnnlAttr(), linalgDnnlEngine());
    p.init<deconvolution_forward>(pd);
    p.args = {{DNNL_ARG_SRC, xmd}, {DNNL_ARG_WEIGHTS, wmd}};
    if (hasBias)
      p.args.push_back({DNNL_ARG_BIAS, bmd});
    p.args.push_back({DNNL_ARG_DST, ymd});
  } catch (const dnnl::error &) {
    return LinalgDnnlPrim();
  }
  return p;
}

} // namespace

Status linalgResolveDeconvWindow(const OpDesc &d, const Shape &in, const std::vector<int64_t> &kernel,
                                 std::vector<LinalgWindowDim> &dims) {
  size_t n = in.size();
  std::vector<int64_t> strides = attrInts(d.attrs, "strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> dil = attrInts(d.attrs, "dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = attrInts(d.attrs, "pads", std::vector<int64_t>(2 * n, 0));
  std::vector<int64_t> outPad = attrInts(d.attrs, "output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> outShape = attrInts(d.attrs, "output_shape");
  std::string autoPad = attrString(d.attrs, "auto_pad", "NOTSET");
  if (outShape.size() > n) // Some exporters give N and C too.
    outShape.erase(outShape.begin(), outShape.end() - n);
  if (strides.size() != n || dil.size() != n || pads.size() != 2 * n || outPad.size() != n ||
      (!outShape.empty() && outShape.size() != n))
    return errorf(d.where(), ": strides/dilations/pads/output_padding/output_shape have ",
                  strides.size(), "/", dil.size(), "/", pads.size(), "/", outPad.size(), "/",
                  outShape.size(), " values for ", n, " spatial dimensions");
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (!same && autoPad != "NOTSET" && autoPad != "VALID" && !autoPad.empty())
    return errorf(d.where(), ": unknown auto_pad '", autoPad, "'");
  dims.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    LinalgWindowDim &w = dims[i];
    w.in = in[i];
    w.kernel = kernel[i];
    w.stride = strides[i];
    w.dilation = dil[i];
    if (w.kernel < 1 || w.stride < 1 || w.dilation < 1 || outPad[i] < 0)
      return errorf(d.where(), ": dimension ", i, " has kernel ", w.kernel, ", stride ", w.stride,
                    ", dilation ", w.dilation, ", output_padding ", outPad[i]);
    int64_t full = w.stride * (w.in - 1) + outPad[i] + w.extent();
    if (!outShape.empty() || same) {
      w.out = outShape.empty() ? w.in * w.stride : outShape[i];
      // Floor division, as the spec's reference: a negative total (output
      // larger than the natural size) grows the end, like output_padding.
      int64_t total = full - w.out;
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      if (autoPad == "SAME_UPPER") {
        w.padBegin = half;
        w.padEnd = total - half;
      } else {
        w.padBegin = total - half;
        w.padEnd = half;
      }
    } else {
      if (autoPad != "VALID") {
        w.padBegin = pads[i];
        w.padEnd = pads[i + n];
      }
      w.out = full - w.padBegin - w.padEnd;
    }
    if (w.out < 0)
      return errorf(d.where(), ": output size ", w.out, " in dimension ", i);
  }
  return Status::ok();
}

namespace {

template <typename T> Expected<KernelPtr> makeTyped(const OpDesc &d, DeconvGeom g, bool hasBias) {
  if constexpr (linalgDnnlSupports<T>()) {
    if (oneDnnEnabled()) {
      LinalgDnnlPrim p = makeDnnlDeconv(g, hasBias);
      if (p.valid())
        return KernelPtr(new ConvTransposeDnnlKernel(std::move(p), hasBias));
    }
  }
  return KernelPtr(new ConvTransposeLoopKernel<T>(std::move(g), hasBias));
}

} // namespace

Expected<KernelPtr> makeConvTransposeKernel(const OpDesc &d) {
  if (linalgIsHalfProduct(d)) // the emulation (HalfProduct.cpp)
    return makeLinalgWidenedProductKernel(d, makeConvTransposeKernel);
  PIPEC_TRY(linalgCheckConvOperands(d));
  const TensorDesc &x = d.inputs[0], &w = d.inputs[1];
  DType t = x.dtype;
  bool hasBias = d.hasInput(2);
  DeconvGeom g;
  g.N = x.shape[0];
  g.C = x.shape[1];
  g.G = attrInt(d.attrs, "group", 1);
  if (g.G < 1 || w.shape[0] != g.C || g.C % g.G != 0)
    return errorf(d.where(), ": group ", g.G, " does not fit X channels ", g.C, " and W ", w.str());
  g.M = w.shape[1] * g.G;
  if (hasBias && d.inputs[2].shape != Shape{g.M})
    return errorf(d.where(), ": bias ", d.inputs[2].str(), " is not [", g.M, "]");
  Shape in(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> kw(w.shape.begin() + 2, w.shape.end());
  if (attrInts(d.attrs, "kernel_shape", kw) != kw)
    return errorf(d.where(), ": kernel_shape differs from W ", w.str());
  PIPEC_TRY(linalgResolveDeconvWindow(d, in, kw, g.dims));
  PIPEC_TRY(linalgCheckSpatialOut(d, d.outputs[0], g.N, g.M, g.dims));
  for (const LinalgWindowDim &dim : g.dims) {
    g.inSpatial *= dim.in;
    g.outSpatial *= dim.out;
    g.kernelSize *= dim.kernel;
  }
  return linalgDispatchFloat(d, t,
                             [&](auto tag) { return makeTyped<decltype(tag)>(d, g, hasBias); });
}

} // namespace pipec::cpu
