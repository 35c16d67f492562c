//===- runtime/cuda/RowBodies.h - Rows shared by a group of lanes -*- C++ -*-===//
//
// The row kernels' bodies with a row's work shared by L lanes (L a power of
// two up to 32: a GPU warp, or part of one): lane l takes the row's
// elements l, l + L, ... in order and keeps a partial, and the partials
// fold as foldSum() does: partial[l] += partial[l + h] for h = L/2, ..., 1,
// which a warp does with __shfl_down_sync (lane l adds lane l + h's value
// to its own), so lane 0 ends with the host's bits. Each row op is cut into
// stages between folds; a stage is a PIPEC_HD function of one lane, which
// the CUDA kernels (runtime/cuda/RowKernels.cu) run per thread and the
// host drivers below run lane by lane (tests/unit/CudaBodiesTest.cpp
// checks them against the CPU kernels without a GPU). No atomics, and the
// order depends on L alone, never on the launch.
//
// The softmax rows take L = 16: lane l's sum is treeSum(16)'s partial l,
// so they are bitwise the one-thread-a-row bodies (runtime/cuda/Bodies.h)
// and the CPU kernels. The loss and the layer normalization add in lanes
// (L = 32) where the one-thread bodies add in index order: rounding of a
// float (or, for the normalization's double statistics, of a double) moves.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/VecMath.h"
#include "runtime/cuda/Hd.h"

#include <cmath>
#include <cstdint>

namespace pipec::cuda::rows {

/// The fold of L partials, as a warp's shuffles add them.
template <typename T> PIPEC_HD inline T foldSum(T *partial, int L) {
  for (int h = L / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l)
      partial[l] = partial[l] + partial[l + h];
  return partial[0];
}
/// The maximum's fold; a lane without elements holds -inf.
PIPEC_HD inline float foldMax(float *partial, int L) {
  for (int h = L / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l)
      partial[l] = partial[l + h] > partial[l] ? partial[l + h] : partial[l];
  return partial[0];
}

/// Lane l's maximum of n elements strided by `stride`.
PIPEC_HD inline float laneMax(const float *x, int64_t n, int64_t stride, int lane, int L) {
  if (lane >= n)
    return -INFINITY;
  float m = x[lane * stride];
  for (int64_t i = lane + L; i < n; i += L)
    m = x[i * stride] > m ? x[i * stride] : m;
  return m;
}

// ---- Softmax, LogSoftmax, pipec:MaskedSoftmax over contiguous rows.

/// y = exp(x - max) on the lane's elements; their sum.
PIPEC_HD inline float softmaxExpSum(const float *x, float *y, int64_t n, float max, int lane, int L) {
  float s = 0.0f;
  for (int64_t i = lane; i < n; i += L) {
    y[i] = cpu::expOf(x[i] - max);
    s += y[i];
  }
  return s;
}
/// The lane's outputs from the row's maximum and sum.
template <bool Log>
PIPEC_HD inline void softmaxWrite(const float *x, float *y, int64_t n, float max, float sum, int lane, int L) {
  if constexpr (Log) {
    const float shift = max + logf(sum);
    for (int64_t i = lane; i < n; i += L)
      y[i] = x[i] - shift;
  } else {
    const float r = 1.0f / sum;
    for (int64_t i = lane; i < n; i += L)
      y[i] *= r;
  }
}

/// The host's run of a softmax row over L lanes.
template <bool Log> inline void softmaxRowLanes(const float *x, float *y, int64_t n, int L) {
  float p[32];
  for (int l = 0; l < L; ++l)
    p[l] = laneMax(x, n, 1, l, L);
  const float m = foldMax(p, L);
  for (int l = 0; l < L; ++l)
    p[l] = softmaxExpSum(x, y, n, m, l, L);
  const float s = foldSum(p, L);
  for (int l = 0; l < L; ++l)
    softmaxWrite<Log>(x, y, n, m, s, l, L);
}

// ---- SoftmaxCrossEntropyLoss and its gradient at one position: C scores
// strided by `stride`, target t.

PIPEC_HD inline float laneExpSum(const float *x, int64_t C, int64_t stride, float max, int lane, int L) {
  float s = 0.0f;
  for (int64_t c = lane; c < C; c += L)
    s += cpu::expOf(x[c * stride] - max);
  return s;
}
PIPEC_HD inline float sceLossOf(const float *x, int64_t stride, int64_t t, float max, float sum) {
  return logf(sum) + max - x[t * stride];
}
/// The lane's classes of dx = g (softmax - onehot).
PIPEC_HD inline void sceGradWrite(const float *x, float *dx, int64_t C, int64_t stride, int64_t t, float g, float max,
                                  float sum, int lane, int L) {
  const float r = 1.0f / sum;
  for (int64_t c = lane; c < C; c += L)
    dx[c * stride] = g * (cpu::expOf(x[c * stride] - max) * r - (c == t ? 1.0f : 0.0f));
}

/// The host's run of a position's maximum and sum of exp(x - max).
struct MaxSum {
  float max, sum;
};
inline MaxSum maxExpSumLanes(const float *x, int64_t C, int64_t stride, int L) {
  float p[32];
  for (int l = 0; l < L; ++l)
    p[l] = laneMax(x, C, stride, l, L);
  const float m = foldMax(p, L);
  for (int l = 0; l < L; ++l)
    p[l] = laneExpSum(x, C, stride, m, l, L);
  return {m, foldSum(p, L)};
}
inline float sceLossLanes(const float *x, int64_t C, int64_t stride, int64_t t, int L) {
  const MaxSum ms = maxExpSumLanes(x, C, stride, L);
  return sceLossOf(x, stride, t, ms.max, ms.sum);
}
inline void sceGradLanes(const float *x, float *dx, int64_t C, int64_t stride, int64_t t, float g, int L) {
  const MaxSum ms = maxExpSumLanes(x, C, stride, L);
  for (int l = 0; l < L; ++l)
    sceGradWrite(x, dx, C, stride, t, g, ms.max, ms.sum, l, L);
}

// ---- The losses' positions: SoftmaxCrossEntropyLoss and
// NegativeLogLikelihoodLoss over scores [N, C, D], targets [N, D] (int32 or
// int64), optional class weights [C], an ignore index, reduction none (0),
// sum (1) or mean (2), as runtime/cpu/kernels/DataMovementCommon.h's
// LossLayout.

struct LossGeometry {
  int64_t n = 0, c = 0, d = 0;
  bool softmax = true; ///< SCE; else NLL (the scores are log-probabilities)
  bool hasIgnore = false;
  int64_t ignoreIndex = 0;
  bool target32 = false;
  int reduction = 2;
};

/// Position p's target `t` and its weight `w` (weights[t], or 1; 0 where
/// the target is ignored, and then t = -1: no one-hot term); false for a
/// target outside [0, C) that is not ignored.
PIPEC_HD inline bool lossTargetWeight(const LossGeometry &g, const void *target, const float *weights, int64_t p,
                                      int64_t &t, float &w) {
  t = g.target32 ? static_cast<const int32_t *>(target)[p] : static_cast<const int64_t *>(target)[p];
  if (g.hasIgnore && t == g.ignoreIndex) {
    t = -1;
    w = 0.0f;
    return true;
  }
  if (t < 0 || t >= g.c)
    return false;
  w = weights ? weights[t] : 1.0f;
  if (w == 0.0f)
    t = -1;
  return true;
}

/// SoftmaxGrad (`log`: LogSoftmaxGrad) of a contiguous row of n on L
/// lanes: the lane's part of sum(dY Y) (sum(dY)), its elements l, l + L,
/// ... in order; the lanes fold (foldSum).
PIPEC_HD inline float softmaxGradLaneSum(const float *dy, const float *y, int64_t n, bool log, int lane, int L) {
  float s = 0.0f;
  for (int64_t i = lane; i < n; i += L)
    s += log ? dy[i] : dy[i] * y[i];
  return s;
}
/// The lane's dX from the row's sum: Y (dY - s), or dY - exp(Y) s.
PIPEC_HD inline void softmaxGradLaneWrite(const float *dy, const float *y, float *dx, int64_t n, float s, bool log,
                                          int lane, int L) {
  for (int64_t i = lane; i < n; i += L)
    dx[i] = log ? dy[i] - cpu::expOf(y[i]) * s : y[i] * (dy[i] - s);
}
/// The host's run of a SoftmaxGrad row over L lanes.
inline void softmaxGradRowOnLanes(const float *dy, const float *y, float *dx, int64_t n, bool log, int L) {
  float p[32];
  for (int l = 0; l < L; ++l)
    p[l] = softmaxGradLaneSum(dy, y, n, log, l, L);
  const float s = foldSum(p, L);
  for (int l = 0; l < L; ++l)
    softmaxGradLaneWrite(dy, y, dx, n, s, log, l, L);
}

/// The loss's sums over its p positions on L lanes (one warp): lane l
/// adds positions l, l + L, ... in order, in double, and the lanes fold
/// (foldSum). `s`: the losses; `w`: the weights (1 each without them).
PIPEC_HD inline void lossLaneSums(const float *loss, const float *weight, int64_t p, int lane, int L, double &s,
                                  double &w) {
  s = 0.0;
  w = 0.0;
  for (int64_t i = lane; i < p; i += L) {
    s += static_cast<double>(loss[i]);
    w += weight ? static_cast<double>(weight[i]) : 1.0;
  }
}
/// The targets' total weight (the mean's divisor for the gradient) on L
/// lanes, as lossLaneSums adds.
PIPEC_HD inline double lossLaneWeight(const LossGeometry &g, const void *target, const float *weights, int lane,
                                      int L) {
  double s = 0.0;
  for (int64_t p = lane; p < g.n * g.d; p += L) {
    int64_t t;
    float w;
    if (lossTargetWeight(g, target, weights, p, t, w))
      s += static_cast<double>(w);
  }
  return s;
}

/// The gradient's factor at position `pos` before the weight: dLoss[pos]
/// (none), dLoss[0] (sum) or dLoss[0] / the total weight (mean), rounded
/// as the CPU kernel rounds it.
PIPEC_HD inline float lossScale(const LossGeometry &g, const float *dl, int64_t pos, double totalWeight) {
  if (g.reduction == 0)
    return dl[pos];
  if (g.reduction == 1)
    return dl[0];
  return static_cast<float>(static_cast<double>(dl[0]) / totalWeight);
}

/// NLL's gradient at class c of a position: -g at the target, 0 elsewhere
/// (0 - g, the CPU's subtraction, so that a zero g gives +0).
PIPEC_HD inline float nllGradOf(int64_t c, int64_t t, float g) { return c == t ? 0.0f - g : 0.0f; }

// ---- Layer normalization of a row of `cols`, statistics in double.

PIPEC_HD inline double laneSum(const float *x, int64_t n, int lane, int L) {
  double s = 0.0;
  for (int64_t i = lane; i < n; i += L)
    s += x[i];
  return s;
}
PIPEC_HD inline double laneSquaredDeviation(const float *x, int64_t n, double mean, int lane, int L) {
  double q = 0.0;
  for (int64_t i = lane; i < n; i += L) {
    const double d = x[i] - mean;
    q += d * d;
  }
  return q;
}
PIPEC_HD inline double meanOf(double sum, int64_t n) { return n ? sum / static_cast<double>(n) : 0.0; }
PIPEC_HD inline double rstdOf(double squares, int64_t n, double eps) { return 1.0 / sqrt(meanOf(squares, n) + eps); }

PIPEC_HD inline void layerNormWrite(const float *x, const float *scale, const float *bias, float *y, int64_t cols,
                                    double mean, double rstd, int lane, int L) {
  for (int64_t i = lane; i < cols; i += L)
    y[i] = static_cast<float>((x[i] - mean) * rstd * scale[i] + (bias ? bias[i] : 0.0f));
}
/// The lane's sums of g = dY scale and of g xhat.
struct GradSums {
  double g = 0, gx = 0;
};
PIPEC_HD inline GradSums layerNormGradSums(const float *dy, const float *x, const float *scale, int64_t cols,
                                           double mean, double rstd, int lane, int L) {
  GradSums s;
  for (int64_t i = lane; i < cols; i += L) {
    const double g = static_cast<double>(dy[i]) * scale[i];
    s.g += g;
    s.gx += g * (x[i] - mean) * rstd;
  }
  return s;
}
PIPEC_HD inline void layerNormGradWrite(const float *dy, const float *x, const float *scale, float *dx, int64_t cols,
                                        double mean, double rstd, double mg, double mgx, int lane, int L) {
  for (int64_t i = lane; i < cols; i += L) {
    const double g = static_cast<double>(dy[i]) * scale[i];
    const double xhat = (x[i] - mean) * rstd;
    dx[i] = static_cast<float>(rstd * (g - mg - xhat * mgx));
  }
}

/// The host's run of a row's mean and 1 / sqrt(variance + eps).
struct RowMoments {
  double mean, rstd;
};
inline RowMoments momentsLanes(const float *x, int64_t cols, double eps, int L) {
  double p[32];
  for (int l = 0; l < L; ++l)
    p[l] = laneSum(x, cols, l, L);
  const double mean = meanOf(foldSum(p, L), cols);
  for (int l = 0; l < L; ++l)
    p[l] = laneSquaredDeviation(x, cols, mean, l, L);
  return {mean, rstdOf(foldSum(p, L), cols, eps)};
}
inline void layerNormRowLanes(const float *x, const float *scale, const float *bias, float *y, int64_t cols,
                              double eps, int L) {
  const RowMoments m = momentsLanes(x, cols, eps, L);
  for (int l = 0; l < L; ++l)
    layerNormWrite(x, scale, bias, y, cols, m.mean, m.rstd, l, L);
}
inline void layerNormGradRowLanes(const float *dy, const float *x, const float *scale, float *dx, int64_t cols,
                                  double eps, int L) {
  const RowMoments m = momentsLanes(x, cols, eps, L);
  const double mean = m.mean, rstd = m.rstd;
  double p[32], q[32];
  for (int l = 0; l < L; ++l) {
    const GradSums s = layerNormGradSums(dy, x, scale, cols, mean, rstd, l, L);
    p[l] = s.g;
    q[l] = s.gx;
  }
  const double mg = meanOf(foldSum(p, L), cols), mgx = meanOf(foldSum(q, L), cols);
  for (int l = 0; l < L; ++l)
    layerNormGradWrite(dy, x, scale, dx, cols, mean, rstd, mg, mgx, l, L);
}

} // namespace pipec::cuda::rows
