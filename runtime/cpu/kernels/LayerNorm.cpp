//===- runtime/cpu/kernels/LayerNorm.cpp - LayerNormalization -------------===//
//
// ONNX LayerNormalization, opset 17: X is viewed as [rows, cols] with
// cols = prod(X.shape[axis:]); every row is normalized by its own mean and
// biased variance, then scaled by Scale and shifted by the optional B (both
// unidirectionally broadcast to X.shape[axis:]). Optional outputs Mean and
// InvStdDev (shape X.shape[:axis] + ones) take the row statistics, in their
// own element type (stash_type: f32 by default).
//
// f32 runs oneDNN's layer_normalization_forward (measured faster than the
// loop); f64 and the PIPEC_LINALG_NO_DNNL fallback run a loop whose
// statistics are summed in double in a fixed order per row (linalgSum),
// rows in parallel, so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "support/Parallel.h"

#include <cmath>

namespace pipec::cpu {

namespace {

template <typename T, typename U> class LayerNormKernel final : public Kernel {
public:
  int64_t rows = 0, cols = 0;
  double epsilon = 1e-5;
  bool hasBias = false, hasMean = false, hasInvStd = false;
  /// Broadcast offsets of Scale / B over a row; empty when they are full rows.
  std::vector<int64_t> scaleIdx, biasIdx;

  size_t workspaceBytes() const override {
    return 2 * linalgRoundUp(static_cast<size_t>(cols) * sizeof(T));
  }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    const T *scale = static_cast<const T *>(in[1]);
    const T *bias = hasBias ? static_cast<const T *>(in[2]) : nullptr;
    if (!scale || (hasBias && !bias))
      return errorf("LayerNormalization: Scale or B is missing at run time");
    T *y = static_cast<T *>(out[0]);
    U *meanOut = hasMean ? static_cast<U *>(out[1]) : nullptr;
    U *invOut = hasInvStd ? static_cast<U *>(out[2]) : nullptr;
    unsigned char *ws = linalgAlign(ctx.workspace);
    scale = expand(scale, scaleIdx, reinterpret_cast<T *>(ws));
    if (bias)
      bias = expand(bias, biasIdx, reinterpret_cast<T *>(ws + linalgRoundUp(cols * sizeof(T))));
    parallelFor(rows, rows * cols > 16384, [&](int64_t r) {
      const T *xr = x + r * cols;
      T *yr = y + r * cols;
      double m = cols ? linalgSum(xr, cols) / cols : 0.0;
      double q = cols ? linalgSumSqDev(xr, cols, m) / cols : 0.0;
      double inv = 1.0 / std::sqrt(q + epsilon);
      T tm = static_cast<T>(m), ti = static_cast<T>(inv);
      if (bias)
        for (int64_t i = 0; i < cols; ++i)
          yr[i] = (xr[i] - tm) * ti * scale[i] + bias[i];
      else
        for (int64_t i = 0; i < cols; ++i)
          yr[i] = (xr[i] - tm) * ti * scale[i];
      if (meanOut)
        meanOut[r] = static_cast<U>(m);
      if (invOut)
        invOut[r] = static_cast<U>(inv);
    });
    return Status::ok();
  }

private:
  const T *expand(const T *p, const std::vector<int64_t> &idx, T *buf) const {
    if (idx.empty())
      return p;
    for (int64_t i = 0; i < cols; ++i)
      buf[i] = p[idx[i]];
    return buf;
  }
};

/// f32 through oneDNN's layer_normalization_forward on the [rows, cols]
/// view; with Mean or InvStdDev requested it runs the training propagation
/// kind, which outputs mean and variance, and turns the variance into
/// 1 / sqrt(variance + epsilon). oneDNN parallelizes over rows, so the
/// result does not depend on the thread count either.
class LayerNormDnnlKernel final : public Kernel {
public:
  int64_t rows = 0, cols = 0;
  float epsilon = 1e-5f;
  bool hasBias = false, hasMean = false, hasInvStd = false, stats = false;
  std::vector<int64_t> scaleIdx, biasIdx;
  LinalgDnnlPrim prim;

  size_t workspaceBytes() const override {
    return 2 * linalgRoundUp(cols * sizeof(float)) + 2 * linalgRoundUp(rows * sizeof(float)) +
           prim.scratchBytes;
  }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const float *scale = static_cast<const float *>(in[1]);
    const float *bias = hasBias ? static_cast<const float *>(in[2]) : nullptr;
    if (!scale || (hasBias && !bias))
      return errorf("LayerNormalization: Scale or B is missing at run time");
    unsigned char *ws = linalgAlign(ctx.workspace);
    float *scaleBuf = reinterpret_cast<float *>(ws);
    ws += linalgRoundUp(cols * sizeof(float));
    float *biasBuf = reinterpret_cast<float *>(ws);
    ws += linalgRoundUp(cols * sizeof(float));
    float *meanBuf = reinterpret_cast<float *>(ws);
    ws += linalgRoundUp(rows * sizeof(float));
    float *varBuf = reinterpret_cast<float *>(ws);
    ws += linalgRoundUp(rows * sizeof(float));
    if (!scaleIdx.empty()) {
      for (int64_t i = 0; i < cols; ++i)
        scaleBuf[i] = scale[scaleIdx[i]];
      scale = scaleBuf;
    }
    if (bias && !biasIdx.empty()) {
      for (int64_t i = 0; i < cols; ++i)
        biasBuf[i] = bias[biasIdx[i]];
      bias = biasBuf;
    }
    // Argument order: see makeDnnlLayerNorm.
    const void *ptrs[6];
    int n = 0;
    ptrs[n++] = in[0];
    ptrs[n++] = out[0];
    if (stats) {
      ptrs[n++] = hasMean ? out[1] : meanBuf;
      ptrs[n++] = varBuf;
    }
    ptrs[n++] = scale;
    if (bias)
      ptrs[n++] = bias;
    PIPEC_TRY(prim.run(ptrs, ws));
    if (hasInvStd) {
      float *inv = static_cast<float *>(out[2]);
      for (int64_t r = 0; r < rows; ++r)
        inv[r] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(varBuf[r]) + epsilon));
    }
    return Status::ok();
  }
};

/// The oneDNN path for f32 (Mean and InvStdDev f32); null if declined.
std::unique_ptr<LayerNormDnnlKernel> makeDnnlLayerNorm(int64_t rows, int64_t cols, float eps,
                                                       bool hasBias, bool hasMean, bool hasInv) {
  if (rows == 0 || cols == 0)
    return nullptr;
  auto k = std::make_unique<LayerNormDnnlKernel>();
  k->rows = rows;
  k->cols = cols;
  k->epsilon = eps;
  k->hasBias = hasBias;
  k->hasMean = hasMean;
  k->hasInvStd = hasInv;
  k->stats = hasMean || hasInv;
  try {
    using namespace dnnl;
    memory::desc md = linalgDnnlPlain({rows, cols}), sd = linalgDnnlPlain({rows}),
                 cd = linalgDnnlPlain({cols});
    normalization_flags flags = normalization_flags::use_scale;
    if (hasBias)
      flags = flags | normalization_flags::use_shift;
    prop_kind pk = k->stats ? prop_kind::forward_training : prop_kind::forward_inference;
    layer_normalization_forward::desc ld(pk, md, sd, eps, flags);
    layer_normalization_forward::primitive_desc pd(ld, linalgDnnlAttr(), linalgDnnlEngine());
    k->prim.init<layer_normalization_forward>(pd);
    k->prim.args = {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}};
    if (k->stats) {
      k->prim.args.push_back({DNNL_ARG_MEAN, sd});
      k->prim.args.push_back({DNNL_ARG_VARIANCE, sd});
    }
    k->prim.args.push_back({DNNL_ARG_SCALE, cd});
    if (hasBias)
      k->prim.args.push_back({DNNL_ARG_SHIFT, cd});
  } catch (const dnnl::error &) {
    return nullptr;
  }
  return k;
}

/// Offsets of a tensor of shape `s` broadcast over `target`, or empty when
/// `s` is `target` up to leading ones.
Status broadcastIndex(const OpDesc &d, const Shape &s, const Shape &target,
                      std::vector<int64_t> &idx) {
  Shape bc;
  if (s.size() > target.size() || !linalgBroadcastShapes(s, target, bc) || bc != target)
    return errorf(d.where(), ": ", shapeStr(s), " does not broadcast to the normalized shape ",
                  shapeStr(target));
  idx.clear();
  if (numElements(s) == numElements(target))
    return Status::ok();
  std::vector<int64_t> st = linalgBroadcastStrides(s, target);
  int64_t n = numElements(target);
  idx.resize(n);
  std::vector<int64_t> pos(target.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < target.size(); ++k)
      off += pos[k] * st[k];
    idx[i] = off;
    for (size_t k = target.size(); k-- > 0;) {
      if (++pos[k] < target[k])
        break;
      pos[k] = 0;
    }
  }
  return Status::ok();
}

template <typename T, typename U> Expected<KernelPtr> makeTyped(const OpDesc &d, int64_t axis) {
  auto k = std::make_unique<LayerNormKernel<T, U>>();
  const TensorDesc &x = d.inputs[0];
  Shape norm(x.shape.begin() + axis, x.shape.end());
  k->cols = numElements(norm);
  k->rows =
      k->cols ? x.numel() / k->cols : numElements(Shape(x.shape.begin(), x.shape.begin() + axis));
  k->epsilon = attrFloat(d.attrs, "epsilon", 1e-5f);
  PIPEC_TRY(broadcastIndex(d, d.inputs[1].shape, norm, k->scaleIdx));
  k->hasBias = d.hasInput(2);
  if (k->hasBias)
    PIPEC_TRY(broadcastIndex(d, d.inputs[2].shape, norm, k->biasIdx));
  k->hasMean = linalgHasOutput(d, 1);
  k->hasInvStd = linalgHasOutput(d, 2);
  Shape statShape(x.shape.begin(), x.shape.begin() + axis);
  statShape.resize(x.shape.size(), 1);
  for (size_t i = 1; i < 3; ++i)
    if (linalgHasOutput(d, i) && d.outputs[i].shape != statShape)
      return errorf(d.where(), ": output ", i, " ", d.outputs[i].str(), " is not shaped ",
                    shapeStr(statShape));
  if constexpr (std::is_same_v<T, float> && std::is_same_v<U, float>) {
    if (oneDnnEnabled()) {
      auto dk = makeDnnlLayerNorm(k->rows, k->cols, static_cast<float>(k->epsilon), k->hasBias,
                                  k->hasMean, k->hasInvStd);
      if (dk) {
        dk->scaleIdx = std::move(k->scaleIdx);
        dk->biasIdx = std::move(k->biasIdx);
        return KernelPtr(std::move(dk));
      }
    }
  }
  return KernelPtr(std::move(k));
}

} // namespace

Expected<KernelPtr> makeLayerNormalizationKernel(const OpDesc &d) {
  if (d.inputs.size() < 2 || d.inputs.size() > 3 || !d.hasInput(0) || !d.hasInput(1) ||
      d.outputs.empty() || d.outputs.size() > 3)
    return errorf(d.where(), ": expects 2 or 3 inputs and 1 to 3 outputs, got ", d.inputs.size(),
                  " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  int64_t axis = attrInt(d.attrs, "axis", -1);
  if (axis < -x.rank() || axis >= x.rank())
    return errorf(d.where(), ": axis ", axis, " is out of range for X ", x.str());
  if (axis < 0)
    axis += x.rank();
  for (size_t i = 1; i < d.inputs.size(); ++i)
    if (d.hasInput(i) && d.inputs[i].dtype != x.dtype)
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(), " differs in type from X ",
                    x.str());
  if (d.outputs[0] != x)
    return errorf(d.where(), ": output ", d.outputs[0].str(), " differs from X ", x.str());
  DType u = DType::F32;
  for (size_t i = 1; i < 3; ++i)
    if (linalgHasOutput(d, i))
      u = d.outputs[i].dtype;
  if ((linalgHasOutput(d, 1) && d.outputs[1].dtype != u) || (u != DType::F32 && u != DType::F64))
    return errorf(d.where(), ": Mean and InvStdDev must both be f32 or f64");
  return linalgDispatchFloat(d, x.dtype, [&](auto tag) -> Expected<KernelPtr> {
    using T = decltype(tag);
    if (u == DType::F64)
      return makeTyped<T, double>(d, axis);
    return makeTyped<T, float>(d, axis);
  });
}

} // namespace pipec::cpu
