//===- runtime/cuda/DnnBodies.h - Pools, normalizations and cuDNN's pads -*- C++ -*-===//
//
// What one GPU thread computes in the kernels of runtime/cuda/DnnKernels.cu,
// the CNN ops cuDNN cannot compute as the CPU kernels do (the pools and
// their gradients, BatchNormalization and its three gradients,
// InstanceNormalization, LRN), as PIPEC_HD functions (runtime/cuda/Hd.h)
// that tests/unit/CudaBodiesTest.cpp runs on the host against the CPU
// kernels; and the host arithmetic that maps a convolution's pads onto
// cuDNN's symmetric ones (runtime/cuda/kernels/Conv.cpp). Each body keeps
// the CPU kernel's formula and order of operations:
//  - pools: a thread per output reads its window in the CPU's tap order
//    (runtime/cpu/kernels/Pool.cpp's loop); the gradients take a thread
//    per input element, which gathers the windows that read it in output
//    order, the order in which runtime/cpu/kernels/GradPool.cpp scatters
//    them: the CPU's sums, bitwise, without atomics;
//  - GlobalAveragePool adds in the CPU's 16 lanes (linalgSum), bitwise;
//  - per-channel statistics (BatchNormalization and its gradients,
//    InstanceNormalization) in double, by a block of kLanes threads per
//    channel: thread t adds the channel's elements t, t + kLanes, ... and
//    the partials fold as a fixed tree (foldLevel). The CPU adds in 16
//    lanes, so the doubles differ in their last bits and the float results
//    very rarely; the order depends on the shape alone, never on the
//    launch. cuDNN's batch normalization keeps an unbiased running
//    variance and statistics in float: not the CPU's, hence these;
//  - LRN: the window of channels in ascending order, in float, as the
//    CPU's loop.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/Hd.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace pipec::cuda::dnn {

// ---- Convolutions on cuDNN: its pads are symmetric.

/// One spatial dimension of a convolution (runtime/cpu/kernels/
/// LinalgCommon.h's LinalgWindowDim): for Conv and its gradients `in` is
/// X's size and `out` Y's; for ConvTranspose `in` is X's and `out` Y's too.
struct ConvDim {
  int64_t in = 0, out = 0, kernel = 1, stride = 1, dilation = 1, padBegin = 0, padEnd = 0;
  int64_t extent() const { return (kernel - 1) * dilation + 1; }
};

/// How one dimension runs with the pad `pad` at both ends: cuDNN sees a
/// size `size` on its side of the convolution (Conv: X's; ConvTranspose:
/// Y's), which the kernel makes from the node's by padding with `begin`
/// and `end` zeros (a negative count crops): a copy through the workspace
/// when `copy()`.
struct DimPlan {
  int64_t pad = 0, size = 0, begin = 0, end = 0;
  bool copy() const { return begin != 0 || end != 0; }
};

/// Conv, ConvGradInput and ConvGradWeight: X's dimension. Where pads are
/// symmetric, or cuDNN's windows with padBegin at both ends are the node's
/// (the node's shorter end padding is never reached: same output count),
/// X as it is; else X padded by the difference, convolved with the smaller
/// pad: (in + e0 + e1 + 2 s - extent) / stride + 1 is the node's output.
inline DimPlan convPlan(const ConvDim &w) {
  const int64_t span = w.in + 2 * w.padBegin - w.extent();
  if (w.padBegin == w.padEnd || (span >= 0 && span / w.stride + 1 == w.out))
    return {w.padBegin, w.in, 0, 0};
  const int64_t s = w.padBegin < w.padEnd ? w.padBegin : w.padEnd;
  return {s, w.in + (w.padBegin - s) + (w.padEnd - s), w.padBegin - s, w.padEnd - s};
}

/// ConvTranspose: Y's dimension, as cuDNN's backward data writes it. The
/// node's Y[o] is full[o + padBegin], full the transposed convolution
/// without pads (stride (in - 1) + extent wide, zeros beyond). Where a
/// symmetric pad padBegin gives cuDNN's convolution of Y back to X's size
/// (output_padding and the end pad then only decide Y's extent), Y as it
/// is; else full, cropped (or padded with zeros: negative pads,
/// output_shape beyond it) into Y.
inline DimPlan deconvPlan(const ConvDim &w) {
  const int64_t span = w.out + 2 * w.padBegin - w.extent();
  if (w.padBegin >= 0 && span >= 0 && span / w.stride + 1 == w.in)
    return {w.padBegin, w.out, 0, 0};
  const int64_t full = w.stride * (w.in - 1) + w.extent();
  return {0, full, -w.padBegin, w.out - full + w.padBegin};
}

// ---- Pools.

inline constexpr int kMaxPoolDims = 8;

enum class PoolKind : int32_t { Max, AvgIncludePad, AvgExcludePad };

/// The windows of a pool over [planes, in...] giving [planes, out...]
/// (runtime/cpu/kernels/LinalgCommon.h's linalgResolveWindow resolves
/// them).
struct PoolGeom {
  int nd = 0;
  int64_t planes = 0, inSp = 1, outSp = 1;
  int64_t in[kMaxPoolDims] = {}, out[kMaxPoolDims] = {}, kernel[kMaxPoolDims] = {}, stride[kMaxPoolDims] = {},
          dilation[kMaxPoolDims] = {}, padBegin[kMaxPoolDims] = {}, padEnd[kMaxPoolDims] = {};
};

/// Output o's window along dimension d: its first input index, its valid
/// taps [lo, hi) (empty where it reads only padding) and its taps inside
/// the padded input (count_include_pad's divisor).
struct Taps {
  int64_t start = 0, lo = 0, hi = 0, padded = 0;
};

/// Steps the window position `k` (one tap per dimension, the last fastest)
/// to the next tap; false past the last.
PIPEC_HD inline bool nextTap(const Taps *t, int64_t *k, int nd) {
  for (int d = nd - 1; d >= 0; --d) {
    if (++k[d] < t[d].hi)
      return true;
    k[d] = t[d].lo;
  }
  return false;
}

PIPEC_HD inline Taps tapsOf(const PoolGeom &g, int d, int64_t o) {
  Taps t;
  t.start = o * g.stride[d] - g.padBegin[d];
  bool seen = false;
  for (int64_t k = 0; k < g.kernel[d]; ++k) {
    const int64_t i = t.start + k * g.dilation[d];
    if (i >= 0 && i < g.in[d]) {
      if (!seen)
        t.lo = k;
      seen = true;
      t.hi = k + 1;
    }
    if (i >= -g.padBegin[d] && i < g.in[d] + g.padEnd[d])
      ++t.padded;
  }
  if (!seen)
    t.hi = t.lo;
  return t;
}

/// The index MaxPool reports for a window's plane offset `off` (row-major;
/// storage_order 1: column-major), as Pool.cpp's indexOf.
PIPEC_HD inline int64_t poolIndexOf(const PoolGeom &g, int64_t off, bool columnMajor) {
  if (!columnMajor || off < 0)
    return off < 0 ? 0 : off;
  int64_t r = 0, mul = 1, stride = g.inSp;
  for (int d = 0; d < g.nd; ++d) {
    stride /= g.in[d];
    r += off / stride % g.in[d] * mul;
    mul *= g.in[d];
  }
  return r;
}

/// Output `item` ([planes, out...] row-major) of MaxPool or AveragePool:
/// the window's taps in row-major order. MaxPool keeps the first maximum
/// where `firstTakes` (Pool.cpp's loop with Indices or over other than 1
/// or 2 dimensions: `v > best || none yet`, so a leading NaN stays) and
/// otherwise `v > best ? v : best` from -inf; its index, plane * inSp +
/// poolIndexOf, goes to *index where given. AveragePool sums in double
/// and divides by the taps inside the input (or the padded input).
PIPEC_HD inline float poolOutput(const PoolGeom &g, PoolKind kind, bool firstTakes, bool columnMajor, const float *x,
                                 int64_t item, int64_t *index) {
  const int64_t plane = item / g.outSp;
  int64_t p = item % g.outSp;
  Taps t[kMaxPoolDims];
  int64_t k[kMaxPoolDims];
  bool empty = false;
  int64_t padded = 1;
  for (int d = g.nd - 1; d >= 0; --d) {
    t[d] = tapsOf(g, d, p % g.out[d]);
    p /= g.out[d];
    k[d] = t[d].lo;
    empty |= t[d].lo >= t[d].hi;
    padded *= t[d].padded;
  }
  const float *xp = x + plane * g.inSp;
  double sum = 0;
  float best = -INFINITY;
  int64_t bestIdx = -1, count = 0;
  while (!empty) {
    int64_t off = 0;
    for (int d = 0; d < g.nd; ++d)
      off = off * g.in[d] + t[d].start + k[d] * g.dilation[d];
    const float v = xp[off];
    if (kind == PoolKind::Max) {
      if (!firstTakes) {
        best = v > best ? v : best;
      } else if (v > best || bestIdx < 0) {
        best = v;
        bestIdx = off;
      }
    } else {
      sum += v;
    }
    ++count;
    if (!nextTap(t, k, g.nd))
      break;
  }
  if (kind == PoolKind::Max) {
    if (index)
      *index = plane * g.inSp + poolIndexOf(g, bestIdx, columnMajor);
    return best;
  }
  const int64_t div = kind == PoolKind::AvgIncludePad ? padded : count;
  return div ? static_cast<float>(sum / static_cast<double>(div)) : 0.0f;
}

/// MaxPoolGrad's first pass: the plane offset of the first maximum of
/// output `item`'s window in tap order (GradPool.cpp's pick), -1 where the
/// window reads only padding.
PIPEC_HD inline int64_t poolArgmax(const PoolGeom &g, const float *x, int64_t item) {
  const int64_t plane = item / g.outSp;
  int64_t p = item % g.outSp;
  Taps t[kMaxPoolDims];
  int64_t k[kMaxPoolDims];
  for (int d = g.nd - 1; d >= 0; --d) {
    t[d] = tapsOf(g, d, p % g.out[d]);
    p /= g.out[d];
    k[d] = t[d].lo;
    if (t[d].lo >= t[d].hi)
      return -1;
  }
  const float *xp = x + plane * g.inSp;
  int64_t best = -1;
  float bestV = 0.0f;
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < g.nd; ++d)
      off = off * g.in[d] + t[d].start + k[d] * g.dilation[d];
    if (best < 0 || xp[off] > bestV) {
      best = off;
      bestV = xp[off];
    }
    if (!nextTap(t, k, g.nd))
      return best;
  }
}

/// The gradient at input element `item` ([planes, in...] row-major) of a
/// pool: the outputs whose windows read it, in output order (the tap
/// index k descending in every dimension), which is the order in which
/// GradPool.cpp adds them into it. MaxPool's count where the element is
/// their first maximum (`argmax`, poolArgmax's plane offsets as int32),
/// summed in float over two dimensions (GradPool.cpp's maxPlane2d) and
/// in double otherwise; AveragePool's share g / divisor, in double.
PIPEC_HD inline float poolGradInput(const PoolGeom &g, PoolKind kind, const float *dy, const int32_t *argmax,
                                    int64_t item) {
  const int64_t plane = item / g.inSp, local = item % g.inSp;
  int64_t i[kMaxPoolDims], k[kMaxPoolDims], o[kMaxPoolDims];
  int64_t r = local;
  for (int d = g.nd - 1; d >= 0; --d) {
    i[d] = r % g.in[d];
    r /= g.in[d];
    k[d] = g.kernel[d] - 1;
    if (k[d] < 0)
      return 0.0f;
  }
  const bool floatSum = kind == PoolKind::Max && g.nd == 2;
  const float *gp = dy + plane * g.outSp;
  const int32_t *ap = argmax ? argmax + plane * g.outSp : nullptr;
  double acc = 0;
  float facc = 0.0f;
  while (true) {
    bool reads = true;
    int64_t flat = 0;
    for (int d = 0; d < g.nd && reads; ++d) {
      const int64_t t = i[d] + g.padBegin[d] - k[d] * g.dilation[d];
      reads = t >= 0 && t % g.stride[d] == 0 && t / g.stride[d] < g.out[d];
      o[d] = t / g.stride[d];
      flat = flat * g.out[d] + o[d];
    }
    if (reads) {
      if (kind == PoolKind::Max) {
        if (ap[flat] == local) {
          if (floatSum)
            facc += gp[flat];
          else
            acc += gp[flat];
        }
      } else {
        int64_t div = 1;
        for (int d = 0; d < g.nd; ++d) {
          const Taps t = tapsOf(g, d, o[d]);
          div *= kind == PoolKind::AvgIncludePad ? t.padded : t.hi - t.lo;
        }
        acc += static_cast<double>(gp[flat]) / static_cast<double>(div);
      }
    }
    int d = g.nd - 1;
    for (; d >= 0; --d) {
      if (k[d] > 0) {
        --k[d];
        break;
      }
      k[d] = g.kernel[d] - 1;
    }
    if (d < 0)
      break;
  }
  return floatSum ? facc : static_cast<float>(acc);
}

/// GlobalAveragePool of a plane of n elements: the CPU's linalgSum (16
/// lanes in double, element i in lane i mod 16, the lanes added pairwise),
/// divided by n.
PIPEC_HD inline float globalAverage(const float *x, int64_t n) {
  if (n == 0)
    return 0.0f;
  double acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += static_cast<double>(x[i + j]);
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += static_cast<double>(x[i]);
  for (int h = 8; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j)
      acc[j] += acc[j + h];
  return static_cast<float>(acc[0] / static_cast<double>(n));
}

/// GlobalMaxPool of a plane: from the first element, `v > best ? v : best`.
PIPEC_HD inline float globalMax(const float *x, int64_t n) {
  if (n == 0)
    return 0.0f;
  float best = x[0];
  for (int64_t i = 1; i < n; ++i)
    best = x[i] > best ? x[i] : best;
  return best;
}

// ---- LRN.

/// LRN across channels of [N, C, spatial]: scale = alpha / size, the
/// bias and -beta, rounded to float as the CPU kernel does.
struct LrnArgs {
  int64_t N = 0, C = 0, spatial = 0, size = 1;
  float scale = 0.0f, bias = 1.0f, negBeta = -0.75f;
};

PIPEC_HD inline float powOf(float a, float b) {
#if defined(__CUDA_ARCH__)
  return powf(a, b);
#else
  return std::pow(a, b);
#endif
}

/// Element `item`: X over the window's sum of squares (channels
/// c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), clipped, in
/// ascending order, in float) as runtime/cpu/kernels/LRN.cpp's loop.
PIPEC_HD inline float lrnOutput(const LrnArgs &a, const float *x, int64_t item) {
  const int64_t s = item % a.spatial, p = item / a.spatial, n = p / a.C, c = p % a.C;
  const int64_t before = (a.size - 1) / 2, after = a.size - 1 - before;
  const int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after > a.C - 1 ? a.C - 1 : c + after;
  float sum = 0.0f;
  for (int64_t i = lo; i <= hi; ++i) {
    const float v = x[(n * a.C + i) * a.spatial + s];
    sum += v * v;
  }
  return x[item] * powOf(a.bias + a.scale * sum, a.negBeta);
}

// ---- Per-channel statistics: a block of kLanes threads per channel.

inline constexpr int kLanes = 256;

/// Thread t's share of channel c of [N, C, inner]: the sums of the K
/// terms f(offset, terms) of the channel's elements t, t + T, t + 2T, ...
/// in (n, i) order, in double.
template <int K, typename F>
PIPEC_HD inline void channelLane(int64_t N, int64_t C, int64_t inner, int64_t c, int t, int T, F &&f, double (&s)[K]) {
  for (int k = 0; k < K; ++k)
    s[k] = 0;
  const int64_t count = N * inner;
  if (t >= count)
    return;
  int64_t n = t / inner, i = t % inner;
  const int64_t q = T / inner, rem = T % inner;
  for (int64_t e = t; e < count; e += T) {
    double v[K];
    f((n * C + c) * inner + i, v);
    for (int k = 0; k < K; ++k)
      s[k] += v[k];
    i += rem;
    n += q;
    if (i >= inner) {
      i -= inner;
      ++n;
    }
  }
}

/// One level of the block's fold: partial l adds partial l + h (h = T/2,
/// T/4, ..., 1), so partial 0 ends with the channel's sum.
PIPEC_HD inline void foldLevel(double *s, int l, int h) {
  if (l < h)
    s[l] = s[l] + s[l + h];
}

/// The channel sums of K terms as a block of T threads computes them,
/// thread by thread on the host (tests/unit/CudaBodiesTest.cpp).
template <int K, typename F>
void hostChannelSums(int64_t N, int64_t C, int64_t inner, int64_t c, int T, F &&f, double (&out)[K]) {
  std::vector<double> part[K];
  for (int k = 0; k < K; ++k)
    part[k].assign(static_cast<size_t>(T), 0.0);
  for (int t = 0; t < T; ++t) {
    double s[K];
    channelLane<K>(N, C, inner, c, t, T, f, s);
    for (int k = 0; k < K; ++k)
      part[k][static_cast<size_t>(t)] = s[k];
  }
  for (int h = T / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l)
      for (int k = 0; k < K; ++k)
        foldLevel(part[k].data(), l, h);
  for (int k = 0; k < K; ++k)
    out[k] = part[k][0];
}

/// The per-channel passes of the normalizations.
enum class NormPass : int32_t {
  Forward,   ///< BatchNormalization: ta, tb and the statistics outputs
  Stats,     ///< pipec:BatchNormalizationStats: mu, rstd
  Grad,      ///< pipec:BatchNormalizationGrad: the coefficients of dX, the sums
  ScaleGrad, ///< pipec:BatchNormalizationScaleGrad from dY and X
  Instance,  ///< InstanceNormalization: ta, tb per (n, c) plane
};

/// What the passes read and write ([N, C, inner] tensors, [C] vectors;
/// null where absent). InstanceNormalization runs with N = 1, C = the
/// planes and `scaleC` the channels.
struct NormArgs {
  NormPass pass = NormPass::Forward;
  int64_t N = 0, C = 0, inner = 0, scaleC = 0;
  double epsilon = 1e-5, momentum = 0.9;
  bool training = false;
  const float *x = nullptr, *dy = nullptr, *scale = nullptr, *bias = nullptr, *mean = nullptr, *var = nullptr,
              *mu = nullptr, *rstd = nullptr;
  /// Forward and Instance: Y = X ta + tb per channel (the workspace).
  float *ta = nullptr, *tb = nullptr;
  float *runMean = nullptr, *runVar = nullptr, *savedMean = nullptr, *savedVar = nullptr;
  float *muOut = nullptr, *rstdOut = nullptr;
  /// Grad: per channel mean, rstd, scale * rstd, mean(dY), mean(dY xhat)
  /// (the workspace), and the [2, C] sums output.
  double *coef = nullptr;
  float *sums = nullptr;
  float *dScale = nullptr, *dBias = nullptr;

  PIPEC_HD int64_t count() const { return N * inner; }
  /// Whether the pass sums over the channel.
  PIPEC_HD bool reduces() const {
    switch (pass) {
    case NormPass::Forward:
    case NormPass::Stats:
      return training && count() > 0;
    case NormPass::Grad:
      return (training && count() > 0) || sums;
    case NormPass::ScaleGrad:
      return true;
    case NormPass::Instance:
      return count() > 0;
    }
    return false;
  }
};

/// The terms of the statistics (the CPU's linalgChannelStats): d and d^2,
/// d = x - shift, shift the channel's first element.
PIPEC_HD inline void momentTerms(const NormArgs &a, double shift, int64_t off, double (&v)[2]) {
  const double d = static_cast<double>(a.x[off]) - shift;
  v[0] = d;
  v[1] = d * d;
}

/// The terms of the gradients' sums (GradBatchNorm.cpp's channelSums): dY
/// and dY xhat, xhat = (x - mu) rstd.
PIPEC_HD inline void gradTerms(const NormArgs &a, double m, double r, int64_t off, double (&v)[2]) {
  const double gv = a.dy[off];
  v[0] = gv;
  v[1] = gv * ((a.x[off] - m) * r);
}

/// The shift of the statistics of channel c: its first element.
PIPEC_HD inline double momentShift(const NormArgs &a, int64_t c) {
  return a.count() > 0 ? static_cast<double>(a.x[c * a.inner]) : 0.0;
}

/// Mean and biased variance from the shifted sums, as linalgChannelStats.
PIPEC_HD inline void momentsOf(const double (&s)[2], int64_t count, double shift, double &mean, double &var) {
  if (count == 0) {
    mean = var = 0.0;
    return;
  }
  const double n = static_cast<double>(count), m = s[0] / n;
  mean = shift + m;
  const double v = s[1] / n - m * m;
  var = v > 0.0 ? v : 0.0;
}

/// What the pass writes for channel c once its sums `s` are known (thread
/// 0 of the channel's block): the CPU kernels' per-channel arithmetic.
PIPEC_HD inline void normChannel(const NormArgs &a, int64_t c, const double (&s)[2], double shift) {
  switch (a.pass) {
  case NormPass::Forward: {
    double m, v;
    if (a.training) {
      momentsOf(s, a.count(), shift, m, v);
      if (a.runMean) {
        a.runMean[c] = static_cast<float>(a.mean[c] * a.momentum + m * (1.0 - a.momentum));
        a.runVar[c] = static_cast<float>(a.var[c] * a.momentum + v * (1.0 - a.momentum));
      }
      if (a.savedMean) {
        a.savedMean[c] = static_cast<float>(m);
        a.savedVar[c] = static_cast<float>(v);
      }
    } else {
      m = a.mean[c];
      v = a.var[c];
      if (a.runMean) {
        a.runMean[c] = a.mean[c];
        a.runVar[c] = a.var[c];
      }
      if (a.savedMean) {
        a.savedMean[c] = a.mean[c];
        a.savedVar[c] = a.var[c];
      }
    }
    const double k = a.scale[c] / sqrt(v + a.epsilon);
    a.ta[c] = static_cast<float>(k);
    a.tb[c] = static_cast<float>(a.bias[c] - m * k);
    return;
  }
  case NormPass::Stats: {
    double m, v;
    if (a.training) {
      momentsOf(s, a.count(), shift, m, v);
    } else {
      m = a.mean[c];
      v = a.var[c];
    }
    a.muOut[c] = static_cast<float>(m);
    a.rstdOut[c] = static_cast<float>(1.0 / sqrt(v + a.epsilon));
    return;
  }
  case NormPass::Grad: {
    const double m = a.mu[c], r = a.rstd[c], k = a.scale[c] * r;
    double mdy = 0, mdyx = 0;
    if (a.training && a.count() > 0) {
      mdy = s[0] / static_cast<double>(a.count());
      mdyx = s[1] / static_cast<double>(a.count());
    }
    if (a.sums) {
      a.sums[c] = static_cast<float>(s[0]);
      a.sums[a.C + c] = static_cast<float>(s[1]);
    }
    double *co = a.coef + 5 * c;
    co[0] = m;
    co[1] = r;
    co[2] = k;
    co[3] = mdy;
    co[4] = mdyx;
    return;
  }
  case NormPass::ScaleGrad:
    if (a.dBias)
      a.dBias[c] = static_cast<float>(s[0]);
    if (a.dScale)
      a.dScale[c] = static_cast<float>(s[1]);
    return;
  case NormPass::Instance: {
    // s: the plane's sum, then its sum of squared deviations from the mean.
    const double n = static_cast<double>(a.count());
    const double m = a.count() ? s[0] / n : 0.0, v = a.count() ? s[1] / n : 0.0;
    const int64_t ch = c % a.scaleC;
    const double k = a.scale[ch] / sqrt(v + a.epsilon);
    a.ta[c] = static_cast<float>(k);
    a.tb[c] = static_cast<float>(a.bias[ch] - m * k);
    return;
  }
  }
}

/// Y = X ta + tb at element e of [N, C, inner] (BatchNormalization,
/// InstanceNormalization with N = 1 and C = the planes).
PIPEC_HD inline float normApply(const float *x, const float *ta, const float *tb, int64_t C, int64_t inner, int64_t e) {
  const int64_t c = e / inner % C;
  return x[e] * ta[c] + tb[c];
}

/// dX at element e (GradBatchNorm.cpp): scale rstd dY in inference;
/// scale rstd (dY - mean(dY) - xhat mean(dY xhat)) with batch statistics.
PIPEC_HD inline float bnGradApply(const float *dy, const float *x, const double *coef, int64_t C, int64_t inner,
                                  bool training, int64_t e) {
  const double *co = coef + 5 * (e / inner % C);
  if (!training)
    return static_cast<float>(co[2] * dy[e]);
  const double xhat = (x[e] - co[0]) * co[1];
  return static_cast<float>(co[2] * (dy[e] - co[3] - xhat * co[4]));
}

} // namespace pipec::cuda::dnn
