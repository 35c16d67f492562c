//===- runtime/cpu/kernels/SoftmaxCrossEntropyLoss.cpp - SCE loss ---------===//
//
// SoftmaxCrossEntropyLoss (opsets 12-13): scores [N, C, d1..dk], labels
// [N, d1..dk] (i32/i64), optional weights [C]; reduction none/sum/mean,
// ignore_index, and the optional second output log_prob = log_softmax(scores,
// axis 1). The loss is NegativeLogLikelihoodLoss of log_prob.
//
// Work is cut into fixed blocks of up to 64 positions of one example: a
// block keeps its max and sum of exponentials per position on the stack and
// walks the class axis outermost, so both [N, C] and [N, C, D] layouts read
// memory in order. Block sums are added in block order: the result does not
// depend on the thread count. Labels are checked before any work. Float
// exp is VecMath.h's expApprox (vectorized); the sums stay in class order.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "runtime/cpu/kernels/VecMath.h"
#include "support/Parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pipec::cpu {

namespace {
/// Classes whose exps are buffered at once when a block has one position.
constexpr int64_t kExpChunk = 256;

class SceKernel final : public Kernel {
public:
  SceKernel(std::string where, dm::LossLayout l, bool logProb)
      : where_(std::move(where)), l_(l), logProb_(logProb) {}

  size_t workspaceBytes() const override { return l_.workspaceBytes(); }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    PIPEC_TRY(dm::checkTargets(where_, l_, in[1]));
    if (l_.scoreType == DType::F32)
      compute<float>(in, out, static_cast<double *>(ctx.workspace));
    else
      compute<double>(in, out, static_cast<double *>(ctx.workspace));
    return Status::ok();
  }

private:
  template <typename T> void compute(const void *const *in, void *const *out, double *sums) {
    constexpr int64_t kBlock = dm::LossLayout::kBlock;
    const auto *x = static_cast<const T *>(in[0]);
    const auto *w = l_.hasWeight ? static_cast<const T *>(in[2]) : nullptr;
    auto *o = static_cast<T *>(out[0]);
    T *lp = logProb_ ? static_cast<T *>(out[1]) : nullptr;
    const int64_t C = l_.c, D = l_.d;
    const int64_t bpe = l_.blocksPerExample(), blocks = l_.numBlocks();
    parallelFor(blocks, l_.n * C * D >= 16384, [&](int64_t b) {
      const int64_t n = b / bpe, d0 = (b % bpe) * kBlock;
      const int64_t len = std::min(D, d0 + kBlock) - d0;
      const T *xb = x + n * C * D + d0;
      T mx[kBlock];
      double lse[kBlock];
      std::fill(mx, mx + len, -std::numeric_limits<T>::infinity());
      std::fill(lse, lse + len, 0.0);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < len; ++j) {
          // std::max on values: GCC does not vectorize the reference it
          // returns.
          const T v = xb[c * D + j];
          mx[j] = mx[j] < v ? v : mx[j];
        }
      if (len == 1) {
        // One position ([N, C] scores): the loop over j cannot vectorize, so
        // the exps go through a stack buffer, computed in a loop that does,
        // and are then added in class order as below.
        T e[kExpChunk];
        for (int64_t c0 = 0; c0 < C; c0 += kExpChunk) {
          const int64_t m = std::min(kExpChunk, C - c0);
          for (int64_t c = 0; c < m; ++c)
            e[c] = expOf(xb[(c0 + c) * D] - mx[0]);
          for (int64_t c = 0; c < m; ++c)
            lse[0] += e[c];
        }
      } else {
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < len; ++j)
            lse[j] += expOf(xb[c * D + j] - mx[j]);
      }
      for (int64_t j = 0; j < len; ++j)
        lse[j] = mx[j] + std::log(lse[j]);
      if (lp) {
        T *lb = lp + n * C * D + d0;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < len; ++j)
            lb[c * D + j] = static_cast<T>(xb[c * D + j] - lse[j]);
      }
      dm::lossBlockTail(l_, in[1], w, o, sums, b, n * D + d0, len,
                        [&](int64_t j, int64_t t) { return static_cast<T>(lse[j] - xb[t * D + j]); });
    });
    if (l_.reduction != dm::Reduction::None)
      dm::finishLoss(l_, sums, o);
  }

  std::string where_;
  dm::LossLayout l_;
  bool logProb_;
};
} // namespace

Expected<KernelPtr> makeSoftmaxCrossEntropyLossKernel(const OpDesc &d) {
  PIPEC_ASSIGN(dm::LossLayout l, dm::lossLayout(d));
  const bool logProb = d.outputs.size() > 1 && d.outputs[1].dtype != DType::Undefined;
  if (logProb)
    PIPEC_TRY(dm::checkOutput(d, 1, l.scoreType, d.inputs[0].shape));
  return KernelPtr(new SceKernel(d.where(), l, logProb));
}

} // namespace pipec::cpu
