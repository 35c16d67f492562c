//===- runtime/cpu/kernels/LayerNorm.cpp - LayerNormalization -------------===//
//
// ONNX LayerNormalization, opset 17: X is viewed as [rows, cols] with
// cols = prod(X.shape[axis:]); every row is normalized by its own mean and
// biased variance, then scaled by Scale and shifted by the optional B (both
// unidirectionally broadcast to X.shape[axis:]). Optional outputs Mean and
// InvStdDev (shape X.shape[:axis] + ones) take the row statistics, in their
// own element type (stash_type: f32 by default).
//
// Statistics are summed in double in a fixed order per row, and rows run in
// parallel, so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"

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
      bias = expand(bias, biasIdx,
                    reinterpret_cast<T *>(ws + linalgRoundUp(cols * sizeof(T))));
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * cols;
      T *yr = y + r * cols;
      double s = 0, q = 0;
      for (int64_t i = 0; i < cols; ++i)
        s += xr[i];
      double m = cols ? s / cols : 0.0;
      for (int64_t i = 0; i < cols; ++i) {
        double dlt = xr[i] - m;
        q += dlt * dlt;
      }
      double inv = 1.0 / std::sqrt((cols ? q / cols : 0.0) + epsilon);
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
    }
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
  k->rows = k->cols ? x.numel() / k->cols : numElements(Shape(x.shape.begin(), x.shape.begin() + axis));
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
  return KernelPtr(std::move(k));
}

} // namespace

Expected<KernelPtr> makeLayerNormalizationKernel(const OpDesc &d) {
  if (d.inputs.size() < 2 || d.inputs.size() > 3 || !d.hasInput(0) || !d.hasInput(1) ||
      d.outputs.empty() || d.outputs.size() > 3)
    return errorf(d.where(), ": expects 2 or 3 inputs and 1 to 3 outputs, got ",
                  d.inputs.size(), " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  int64_t axis = attrInt(d.attrs, "axis", -1);
  if (axis < -x.rank() || axis >= x.rank())
    return errorf(d.where(), ": axis ", axis, " is out of range for X ", x.str());
  if (axis < 0)
    axis += x.rank();
  for (size_t i = 1; i < d.inputs.size(); ++i)
    if (d.hasInput(i) && d.inputs[i].dtype != x.dtype)
      return errorf(d.where(), ": input ", i, " ", d.inputs[i].str(),
                    " differs in type from X ", x.str());
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
