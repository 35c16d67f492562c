//===- runtime/train/Clip.cpp - Gradient clipping by global norm ----------===//
#include "runtime/train/Clip.h"

#include "runtime/train/Optimizer.h"
#include "support/Parallel.h"

#include <algorithm>
#include <cmath>

namespace pipec::train {

void ChunkSquares::add(const float *x, int64_t len) {
  // Element i of the chunk goes to lane i mod kLanes, and each lane adds its
  // elements in order: the compiler may not reassociate (no -ffast-math), so
  // the sum is the same for every build, thread count and cut into pieces,
  // and the lanes vectorize where one chain of dependent additions would
  // not.
  const float *__restrict in = x;
  int64_t i = 0;
  for (; i < len && (pos_ + i) % kLanes != 0; ++i) {
    double v = in[i];
    lane_[(pos_ + i) % kLanes] += v * v;
  }
  double lane[kLanes];
  for (int j = 0; j < kLanes; ++j)
    lane[j] = lane_[j];
  for (; i + kLanes <= len; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      double v = in[i + j];
      lane[j] += v * v;
    }
  for (int j = 0; i < len; ++i, ++j) {
    double v = in[i];
    lane[j] += v * v;
  }
  for (int j = 0; j < kLanes; ++j)
    lane_[j] = lane[j];
  pos_ += len;
}

double ChunkSquares::total() const {
  double lane[kLanes];
  for (int j = 0; j < kLanes; ++j)
    lane[j] = lane_[j];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      lane[j] += lane[j + w];
  return lane[0];
}

double chunkSquaredSum(const float *x, int64_t len) {
  ChunkSquares s;
  s.add(x, len);
  return s.total();
}

double gradSquaredSum(const float *g, int64_t n) {
  if (n <= 0)
    return 0.0;
  int64_t chunks = (n + kTrainChunk - 1) / kTrainChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  parallelFor(chunks, chunks > 1, [&](int64_t c) {
    int64_t lo = c * kTrainChunk, hi = std::min(n, lo + kTrainChunk);
    partial[static_cast<size_t>(c)] = chunkSquaredSum(g + lo, hi - lo);
  });
  double total = 0.0;
  for (double s : partial)
    total += s;
  return total;
}

void scaleGrad(float *g, int64_t n, float scale) {
  int64_t chunks = (n + kTrainChunk - 1) / kTrainChunk;
  parallelFor(chunks, chunks > 1, [&](int64_t c) {
    int64_t lo = c * kTrainChunk, hi = std::min(n, lo + kTrainChunk);
    for (int64_t i = lo; i < hi; ++i)
      g[i] = g[i] * scale;
  });
}

double clipCoefficient(double totalNorm, double maxNorm) {
  // torch.clamp(clip_coef, max=1.0) keeps a NaN, and so does this.
  double coef = maxNorm / (totalNorm + 1e-6);
  return coef < 1.0 || std::isnan(coef) ? coef : 1.0;
}

Expected<double> clipGradNorm(const std::vector<GradRef> &grads, double maxNorm,
                              bool errorIfNonfinite) {
  if (!(maxNorm > 0) || !std::isfinite(maxNorm))
    return errorf("gradient clipping: max norm ", maxNorm, " must be a positive number");
  double sum = 0.0;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].n < 0 || (grads[i].n > 0 && !grads[i].data))
      return errorf("gradient clipping: gradient ", i, " is null or has a negative size");
    sum += gradSquaredSum(grads[i].data, grads[i].n);
  }
  double norm = std::sqrt(sum);
  if (!std::isfinite(norm) && errorIfNonfinite)
    return errorf("gradient clipping: the total gradient norm is ", norm,
                  " (a gradient holds inf or NaN)");
  double coef = clipCoefficient(norm, maxNorm);
  if (coef < 1.0 || std::isnan(coef)) {
    float scale = static_cast<float>(coef);
    for (const GradRef &g : grads)
      scaleGrad(g.data, g.n, scale);
  }
  return norm;
}

} // namespace pipec::train
