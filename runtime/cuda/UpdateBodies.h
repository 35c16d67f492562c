//===- runtime/cuda/UpdateBodies.h - The device update's bodies -*- C++ -*-===//
//
// A training step's parameter update where the parameters live (a GPU):
// one multi-tensor pass over all of a device's parameters, cut into the
// chunks the CPU cuts them into (train::kTrainChunk elements of one
// parameter). What a thread computes is here, as PIPEC_HD functions that
// nvcc compiles into runtime/cuda/Update.cu's kernels and the host
// compiler into runtime/cuda/Update.cpp's host run (the emulated device of
// the CPU tests). Each follows train::StepUpdate and train::Optimizer
// operation by operation:
//  - squares: the gradient scaled by 1/M in place (the mean over
//    micro-batches), then each chunk's squared sum in eight lanes (element
//    i of a chunk to lane i mod 8, each lane in order, in double; the lanes
//    added as a tree): train::ChunkSquares' order. Products of two floats
//    are exact in double, so a fused multiply-add changes nothing;
//  - decide: a parameter's squared sum is its chunks' in chunk order, the
//    total the parameters' in parameter order; the skip and clip decisions
//    are StepUpdate's;
//  - apply: the gradient scaled by the clip coefficient (when below 1 or
//    NaN), then the optimizer's element update, torch.optim's formulas in
//    Optimizer.cpp's order. The file that compiles them for the GPU is
//    built without multiply-add contraction (as the CPU's optimizer is),
//    so the GPU's updates are bitwise the CPU's.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/Hd.h"
#include "support/UpdateScalars.h"

#include <cmath>
#include <cstdint>

namespace pipec::cuda::update {

/// train::kTrainChunk (runtime/EmulatedGpu.cpp checks they agree).
inline constexpr int64_t kChunk = int64_t(1) << 14;
/// train::ChunkSquares::kLanes.
inline constexpr int kLanes = 8;
/// State buffers an optimizer keeps at most (adam with amsgrad; rmsprop
/// centered with momentum).
inline constexpr int kMaxStates = 3;

/// One chunk of one parameter: device addresses of its elements.
struct Chunk {
  float *param = nullptr;
  float *grad = nullptr; ///< the step's summed gradient (scaled in place)
  float *state[kMaxStates] = {};
  int64_t n = 0;         ///< elements, at most kChunk
  int32_t index = 0;     ///< the parameter's index in the table
  int32_t pad = 0;
};

/// What decide() leaves for apply(), in device memory.
struct Control {
  double total = 0; ///< the squared sum over the device's parameters
  double coef = 1;  ///< the clip coefficient
  int32_t skip = 0; ///< non-finite gradients: apply() changes nothing
  int32_t scale = 0; ///< apply() multiplies the gradients by coef first
};

/// Lane `lane` of a chunk's squared sum, scaling the lane's gradient
/// elements by `scale` first when it is not 1.
PIPEC_HD inline double laneSquares(const Chunk &c, float scale, int lane) {
  double acc = 0.0;
  for (int64_t i = lane; i < c.n; i += kLanes) {
    float g = c.grad[i];
    if (scale != 1.0f) {
      g = g * scale;
      c.grad[i] = g;
    }
    const double v = g;
    acc += v * v;
  }
  return acc;
}

/// A chunk's squared sum from its lanes (train::ChunkSquares::total).
PIPEC_HD inline double laneTotal(const double *lanes) {
  double l[kLanes];
  for (int j = 0; j < kLanes; ++j)
    l[j] = lanes[j];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      l[j] += l[j + w];
  return l[0];
}

/// The squared sum of parameter p: its chunks' (firstChunk[p] ..
/// firstChunk[p + 1] - 1) in order.
PIPEC_HD inline double paramSquares(const double *lanes, const int32_t *firstChunk, int32_t p) {
  double s = 0.0;
  for (int32_t c = firstChunk[p]; c < firstChunk[p + 1]; ++c)
    s += laneTotal(lanes + static_cast<int64_t>(c) * kLanes);
  return s;
}

/// train::clipCoefficient.
PIPEC_HD inline double clipCoefficient(double totalNorm, double maxNorm) {
  const double coef = maxNorm / (totalNorm + 1e-6);
  return coef < 1.0 || coef != coef ? coef : 1.0;
}

/// StepUpdate's decision over one device's parameters: skip a non-finite
/// step (when asked), else the clip coefficient (clip > 0).
PIPEC_HD inline Control decide(const double *squares, int32_t params, double clip, bool skipNonFinite) {
  Control k;
  double total = 0.0;
  for (int32_t p = 0; p < params; ++p)
    total += squares[p];
  k.total = total;
  if (skipNonFinite && !(total - total == 0.0)) { // inf or NaN
    k.skip = 1;
    return k;
  }
  if (clip > 0) {
    k.coef = clipCoefficient(sqrt(total), clip);
    k.scale = k.coef < 1.0 || k.coef != k.coef;
  }
  return k;
}

/// torch.lerp(a, b, w) as ATen's CPU kernel computes it.
PIPEC_HD inline float lerp(float a, float b, float w, bool small) {
  return small ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

/// One element's optimizer update (train::Optimizer's loops).
PIPEC_HD inline void updateElement(const train::UpdateScalars &s, float *p, float g, float *const *state,
                                   int64_t i) {
  using K = train::UpdateScalars;
  if (s.kind == K::Sgd) {
    float d = g;
    if (s.l2)
      d = d + s.wd * p[i];
    if (s.momentum) {
      float *buf = state[0];
      const float b = s.first ? d : buf[i] * s.mu + s.oneMinusDamp * d;
      buf[i] = b;
      d = s.nesterov ? d + s.mu * b : b;
    }
    p[i] = p[i] + s.negLr * d;
  } else if (s.kind == K::Adam) {
    float pi = p[i];
    if (s.l2)
      g = g + s.wd * pi;
    if (s.decoupled)
      pi = pi * s.decay;
    float *m = state[0], *v = state[1];
    const float mi = lerp(m[i], g, s.lerpWeight, s.lerpSmall);
    float vi = v[i] * s.beta2;
    vi = vi + s.oneMinusBeta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    float vd = vi;
    if (s.amsgrad) {
      const float vmax = state[2][i];
      vd = vmax < vi ? vi : vmax; // std::max(vmax, vi)
      state[2][i] = vd;
    }
    const float denom = sqrtf(vd) / s.bc2Sqrt + s.eps;
    p[i] = pi + s.negStepSize * mi / denom;
  } else {
    if (s.l2)
      g = g + s.wd * p[i];
    float *sq = state[0];
    float v = sq[i] * s.alpha;
    v = v + s.oneMinusAlpha * g * g;
    sq[i] = v;
    float avg;
    if (s.centered) {
      float *gavg = state[s.states - 1];
      const float ga = lerp(gavg[i], g, s.lerpWeight, s.lerpSmall);
      gavg[i] = ga;
      avg = sqrtf(v + -1.0f * ga * ga);
    } else {
      avg = sqrtf(v);
    }
    avg = avg + s.eps;
    if (s.momentum) {
      float *buf = state[1];
      const float b = buf[i] * s.mu + 1.0f * g / avg;
      buf[i] = b;
      p[i] = p[i] + s.negLr * b;
    } else {
      p[i] = p[i] + s.negLr * g / avg;
    }
  }
}

/// Element i of a chunk in apply(): the clip scaling, then the update
/// (unless `update` is false: gradients only).
PIPEC_HD inline void applyElement(const Chunk &c, const Control &k, const train::UpdateScalars &s, bool update,
                                  int64_t i) {
  float g = c.grad[i];
  if (k.scale) {
    g = g * static_cast<float>(k.coef);
    c.grad[i] = g;
  }
  if (update)
    updateElement(s, c.param, g, c.state, i);
}

/// The step's gradient summed over micro-batches where it is computed:
/// micro-batch 0's copied, the later ones added (Session::collect's sum).
PIPEC_HD inline void accumulateElement(float *dst, const float *src, bool first, int64_t i) {
  dst[i] = first ? src[i] : dst[i] + src[i];
}

} // namespace pipec::cuda::update
