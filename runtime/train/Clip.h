//===- runtime/train/Clip.h - Gradient clipping by global norm --*- C++ -*-===//
//
// torch.nn.utils.clip_grad_norm_ (L2 norm): the total norm is the square root
// of the sum, over all gradients, of their squared elements; if
// clip_coef = max_norm / (total_norm + 1e-6) is below 1 every gradient is
// multiplied by it (rounded to float).
//
// The sum is computed in double in a fixed order: each gradient is cut into
// chunks of kTrainChunk elements, each chunk summed left to right, chunk sums
// added in chunk order, gradients added in the order given. The norm, and so
// the clipped gradients, are therefore bitwise independent of the thread
// count, and of how gradients are spread over pipeline stages as long as the
// caller lists them in one global order (stages exchange their per-gradient
// squared sums and add them in that order: see gradSquaredSum()).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <vector>

namespace pipec::train {

/// One gradient buffer.
struct GradRef {
  float *data = nullptr;
  int64_t n = 0;
};

/// Sum of squares of one gradient, in double, in the fixed chunk order.
double gradSquaredSum(const float *g, int64_t n);

/// The squared sum of one chunk (at most kTrainChunk elements starting at a
/// chunk boundary) as gradSquaredSum() adds it: gradSquaredSum() is the sum
/// of its chunks' in chunk order.
double chunkSquaredSum(const float *x, int64_t len);

/// chunkSquaredSum() fed piece by piece: add() the chunk's elements in
/// order, in pieces of any length, then total() is bitwise
/// chunkSquaredSum() of the whole chunk. (The optimizer's one-pass update
/// sums each piece just before it updates it, while the piece is in L1;
/// the chunks' sums sit side by side, one cache line each, for the threads
/// that update the chunks at once.)
class alignas(64) ChunkSquares {
public:
  static constexpr int kLanes = 8;
  /// The next `len` elements of the chunk.
  void add(const float *x, int64_t len);
  double total() const;

private:
  double lane_[kLanes] = {};
  int64_t pos_ = 0; ///< elements added so far
};

/// Multiplies `n` elements by `scale` (float), in parallel chunks.
void scaleGrad(float *g, int64_t n, float scale);

/// The clip factor for a total norm: min(1, maxNorm / (totalNorm + 1e-6)),
/// as clip_grad_norm_ computes it.
double clipCoefficient(double totalNorm, double maxNorm);

/// Clips `grads` in place to global L2 norm `maxNorm` and returns the norm
/// before clipping (for metrics). `maxNorm` must be > 0. A non-finite norm is
/// an error when `errorIfNonfinite` (torch's error_if_nonfinite); otherwise
/// the gradients are scaled as torch would (by 0 for an infinite norm, NaN
/// stays NaN) and the norm is returned.
Expected<double> clipGradNorm(const std::vector<GradRef> &grads, double maxNorm,
                              bool errorIfNonfinite = false);

} // namespace pipec::train
