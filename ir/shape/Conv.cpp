//===- ir/shape/Conv.cpp - Convolution and pooling ------------------------===//
//
// Output sizes per spatial axis, with k' = (k - 1) * dilation + 1:
//   NOTSET: floor((in + pad_begin + pad_end - k') / stride) + 1 (pools with
//           ceil_mode round up, but a window must start inside the input or
//           the left padding, as PyTorch and ONNX's reference do);
//   VALID: ceil((in - k' + 1) / stride); SAME_UPPER/SAME_LOWER: ceil(in / stride).
// ConvTranspose: stride * (in - 1) + output_padding + k' - pads, or
// in * stride with SAME_*, or output_shape when given.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"
#include "support/FusedOps.h"

#include <algorithm>

namespace pipec::ir::shape {

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// The window attributes of a conv or pool over `n` spatial axes.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string autoPad;
};

/// Reads a list attribute of `n` values (or `dflt` for each when absent).
Expected<std::vector<int64_t>> listAttr(const ShapeContext &ctx, const char *name, size_t n,
                                        int64_t dflt) {
  if (!attrHas(ctx.attrs(), name))
    return std::vector<int64_t>(n, dflt);
  std::vector<int64_t> v = attrInts(ctx.attrs(), name);
  if (v.size() != n)
    return ctx.error(cat("attribute '", name, "' has ", v.size(), " values, expected ", n,
                         std::string(name) == "pads" ? " (begins, then ends)" : ""));
  return v;
}

Expected<Window> readWindow(const ShapeContext &ctx, const std::vector<int64_t> &kernel) {
  size_t n = kernel.size();
  Window w;
  w.kernel = kernel;
  PIPEC_ASSIGN(w.strides, listAttr(ctx, "strides", n, 1));
  PIPEC_ASSIGN(w.dilations, listAttr(ctx, "dilations", n, 1));
  PIPEC_ASSIGN(w.pads, listAttr(ctx, "pads", 2 * n, 0));
  w.autoPad = attrString(ctx.attrs(), "auto_pad", "NOTSET");
  if (w.autoPad != "NOTSET" && w.autoPad != "VALID" && w.autoPad != "SAME_UPPER" &&
      w.autoPad != "SAME_LOWER")
    return ctx.error(
        cat("auto_pad '", w.autoPad, "' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER"));
  for (size_t i = 0; i < n; ++i) {
    if (w.kernel[i] <= 0 || w.strides[i] <= 0 || w.dilations[i] <= 0)
      return ctx.error(cat("kernel ", shapeStr(w.kernel), ", strides ", shapeStr(w.strides),
                           " and dilations ", shapeStr(w.dilations), " must be positive"));
  }
  return w;
}

/// Output spatial sizes of a convolution or pool over `in`.
Expected<Shape> windowOutput(const ShapeContext &ctx, const Shape &in, const Window &w,
                             bool ceilMode) {
  size_t n = in.size();
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t k = (w.kernel[i] - 1) * w.dilations[i] + 1, s = w.strides[i];
    if (w.autoPad == "SAME_UPPER" || w.autoPad == "SAME_LOWER") {
      out[i] = ceilDiv(in[i], s);
    } else if (w.autoPad == "VALID") {
      out[i] = ceilDiv(in[i] - k + 1, s);
    } else {
      int64_t span = in[i] + w.pads[i] + w.pads[i + n] - k;
      out[i] = (ceilMode ? ceilDiv(span, s) : floorDiv(span, s)) + 1;
      // The last window must start inside the input or the left padding.
      if (ceilMode && out[i] > 0 && (out[i] - 1) * s >= in[i] + w.pads[i])
        --out[i];
    }
    if (out[i] <= 0)
      return ctx.error(cat("spatial axis ", i, ": the window (kernel ", w.kernel[i], ", dilation ",
                           w.dilations[i], ", stride ", s, ", pads ", w.pads[i], "+", w.pads[i + n],
                           ") does not fit input size ", in[i]));
  }
  return out;
}

} // namespace

namespace {
/// Conv's output shape for X (NC[D]HW) `x`, with W and B checked.
Expected<Shape> convOutput(const ShapeContext &ctx, const Shape &x) {
  const Shape &wt = ctx.inputType(1).shape;
  if (wt.size() != x.size())
    return ctx.error(cat("W ", shapeStr(wt), " must have the rank of X ", shapeStr(x)));
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  if (attrHas(ctx.attrs(), "kernel_shape") && attrInts(ctx.attrs(), "kernel_shape") != kernel)
    return ctx.error(cat("kernel_shape ", shapeStr(attrInts(ctx.attrs(), "kernel_shape")),
                         " differs from the spatial dimensions of W ", shapeStr(wt)));
  int64_t group = attrInt(ctx.attrs(), "group", 1);
  if (group <= 0 || x[1] != wt[1] * group || wt[0] % group != 0)
    return ctx.error(cat("X has ", x[1], " channels and W ", shapeStr(wt), " expects ", wt[1],
                         " per group times group ", group,
                         " (and a multiple of group output channels)"));
  if (ctx.hasInput(2) && ctx.inputType(2).shape != Shape{wt[0]})
    return ctx.error(cat("B must have shape [", wt[0], "], got ", ctx.inputType(2).str()));
  PIPEC_ASSIGN(Window w, readWindow(ctx, kernel));
  PIPEC_ASSIGN(Shape spatial, windowOutput(ctx, Shape(x.begin() + 2, x.end()), w, false));
  Shape y = {x[0], wt[0]};
  y.insert(y.end(), spatial.begin(), spatial.end());
  return y;
}
} // namespace

Status convRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 3));
  PIPEC_ASSIGN(DType t, expectProductDType(ctx, {2}));
  PIPEC_ASSIGN(Shape y, convOutput(ctx, ctx.inputType(0).shape));
  out[0] = {t, std::move(y)};
  return Status::ok();
}

/// pipec:NhwcConv(X, W[, B]) {Conv's attributes, activation}: Conv on X
/// [N, H, W, C] giving Y [N, OH, OW, M]; W and B as Conv's; f32 (X and W
/// bf16 or f16 under output_dtype).
Status nhwcConvRule(const ShapeContext &ctx, Outputs &out) {
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const bool half = i < 2 && ctx.attrs().count(kProductOutputDType);
    if (!ctx.hasInput(i) || (ctx.inputType(i).dtype != DType::F32 && !half))
      return ctx.error(cat(inputLabel(ctx, i), " must be an f32 tensor"));
  }
  PIPEC_ASSIGN(DType t, expectProductDType(ctx, {2}));
  if (t != DType::F32)
    return ctx.error("X and W must be f32 (bf16 or f16 under output_dtype)");
  const Shape &x = ctx.inputType(0).shape;
  if (x.size() != 4)
    return ctx.error(cat("X ", shapeStr(x), " must be [N, H, W, C]"));
  if (auto e = convEpilogueOf(ctx.attrs()); !e)
    return ctx.error(e.status().message());
  PIPEC_ASSIGN(Shape y, convOutput(ctx, permuteShape(x, toNchwPerm())));
  out[0] = TensorDesc{DType::F32, permuteShape(y, toNhwcPerm())};
  return Status::ok();
}

Status convTransposeRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 3));
  PIPEC_ASSIGN(DType t, expectProductDType(ctx, {2}));
  const Shape &x = ctx.inputType(0).shape, &wt = ctx.inputType(1).shape;
  if (wt.size() != x.size())
    return ctx.error(cat("W ", shapeStr(wt), " must have the rank of X ", shapeStr(x)));
  size_t n = x.size() - 2;
  int64_t group = attrInt(ctx.attrs(), "group", 1);
  if (group <= 0 || x[1] != wt[0])
    return ctx.error(cat("X has ", x[1], " channels, W ", shapeStr(wt), " expects ", wt[0]));
  int64_t m = wt[1] * group;
  if (ctx.hasInput(2) && ctx.inputType(2).shape != Shape{m})
    return ctx.error(cat("B must have shape [", m, "], got ", ctx.inputType(2).str()));
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  if (attrHas(ctx.attrs(), "kernel_shape") && attrInts(ctx.attrs(), "kernel_shape") != kernel)
    return ctx.error(cat("kernel_shape ", shapeStr(attrInts(ctx.attrs(), "kernel_shape")),
                         " differs from the spatial dimensions of W ", shapeStr(wt)));
  PIPEC_ASSIGN(Window w, readWindow(ctx, kernel));
  PIPEC_ASSIGN(std::vector<int64_t> outPad, listAttr(ctx, "output_padding", n, 0));
  Shape y = {x[0], m};
  if (attrHas(ctx.attrs(), "output_shape")) {
    // Either the spatial sizes or a full shape whose last n entries count.
    std::vector<int64_t> os = attrInts(ctx.attrs(), "output_shape");
    if (os.size() != n && os.size() != n + 2)
      return ctx.error(cat("output_shape ", shapeStr(os), " must list ", n, " spatial sizes"));
    y.insert(y.end(), os.end() - static_cast<std::ptrdiff_t>(n), os.end());
  } else {
    for (size_t i = 0; i < n; ++i) {
      int64_t k = (w.kernel[i] - 1) * w.dilations[i] + 1, in = x[i + 2];
      int64_t d;
      if (w.autoPad == "SAME_UPPER" || w.autoPad == "SAME_LOWER")
        d = in * w.strides[i];
      else if (w.autoPad == "VALID")
        d = w.strides[i] * (in - 1) + outPad[i] + k;
      else
        d = w.strides[i] * (in - 1) + outPad[i] + k - w.pads[i] - w.pads[i + n];
      if (d <= 0)
        return ctx.error(cat("spatial axis ", i, " would have size ", d));
      y.push_back(d);
    }
  }
  out[0] = {t, std::move(y)};
  return Status::ok();
}

namespace {
/// A pool's output shape for X (NC[D]HW) `x`.
Expected<Shape> poolOutput(const ShapeContext &ctx, const Shape &x) {
  size_t n = x.size() - 2;
  if (!attrHas(ctx.attrs(), "kernel_shape"))
    return ctx.error("attribute 'kernel_shape' is required");
  std::vector<int64_t> kernel = attrInts(ctx.attrs(), "kernel_shape");
  if (kernel.size() != n)
    return ctx.error(
        cat("kernel_shape ", shapeStr(kernel), " must have ", n, " values for input ", shapeStr(x)));
  PIPEC_ASSIGN(Window w, readWindow(ctx, kernel));
  bool ceilMode = attrInt(ctx.attrs(), "ceil_mode", 0) != 0;
  PIPEC_ASSIGN(Shape spatial, windowOutput(ctx, Shape(x.begin() + 2, x.end()), w, ceilMode));
  Shape y = {x[0], x[1]};
  y.insert(y.end(), spatial.begin(), spatial.end());
  return y;
}
} // namespace

Status poolRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 3));
  const TensorDesc &x = ctx.inputType(0);
  PIPEC_ASSIGN(Shape y, poolOutput(ctx, x.shape));
  out[0] = {x.dtype, y};
  // MaxPool's optional Indices output (flattened positions, int64).
  if (out.size() > 1)
    out[1] = {DType::I64, y};
  return Status::ok();
}

/// pipec:NhwcMaxPool and pipec:NhwcAveragePool(X) {the ONNX pool's
/// attributes}: the pool on X [N, H, W, C] giving Y [N, OH, OW, C]; f32.
Status nhwcPoolRule(const ShapeContext &ctx, Outputs &out) {
  const TensorDesc &x = ctx.inputType(0);
  if (x.dtype != DType::F32 || x.shape.size() != 4)
    return ctx.error(cat("X ", x.str(), " must be f32 [N, H, W, C]"));
  PIPEC_ASSIGN(Shape y, poolOutput(ctx, permuteShape(x.shape, toNchwPerm())));
  out[0] = TensorDesc{DType::F32, permuteShape(y, toNhwcPerm())};
  return Status::ok();
}

Status averagePoolRule(const ShapeContext &ctx, Outputs &out) {
  // The attribute exists from opset 19; before, a model that sets it is
  // malformed (MaxPool has had it since opset 10).
  if (ctx.opset() < 19 && attrHas(ctx.attrs(), "dilations")) {
    std::vector<int64_t> d = attrInts(ctx.attrs(), "dilations");
    if (std::any_of(d.begin(), d.end(), [](int64_t v) { return v != 1; }))
      return ctx.error(cat("AveragePool-", ctx.opset(), " has no attribute 'dilations' (",
                           shapeStr(d), "); it was added in opset 19"));
  }
  return poolRule(ctx, out);
}

Status globalPoolRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_TRY(expectMinRank(ctx, 0, 2));
  const TensorDesc &x = ctx.inputType(0);
  Shape y(x.shape.size(), 1);
  y[0] = x.shape[0];
  y[1] = x.shape[1];
  out[0] = {x.dtype, std::move(y)};
  return Status::ok();
}

} // namespace pipec::ir::shape
