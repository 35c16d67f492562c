//===- runtime/cpu/kernels/GradLoss.cpp - Loss gradients ------------------===//
//
// pipec:SoftmaxCrossEntropyLossGrad(dLoss, scores, target [, weight]) and
// pipec:NegativeLogLikelihoodLossGrad(dLoss, input, target [, weight]),
// attributes reduction and ignore_index as the forward ops. Both give the
// gradient with respect to their second input, shaped [N, C, d...]:
//   SCE: dx[n,c,d] = g(n,d) * w_t * (softmax(x)[n,c,d] - [c == t])
//   NLL: dx[n,c,d] = -g(n,d) * w_t * [c == t]
// where t is the target at (n, d), w_t its class weight (1 without weights;
// 0 for the ignore index) and g is dLoss[n,d] (none), dLoss (sum) or
// dLoss / sum of w_t (mean). The total weight is summed serially in position
// order, and positions are independent: no result depends on the thread
// count. One file for the pair because they share the layout and scaling.
// Float exp is VecMath.h's expApprox (vectorized).
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
class LossGradKernel final : public Kernel {
public:
  LossGradKernel(std::string where, dm::LossLayout l, bool softmax)
      : where_(std::move(where)), l_(l), softmax_(softmax) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    PIPEC_TRY(dm::checkTargets(where_, l_, in[2]));
    if (l_.scoreType == DType::F32)
      compute<float>(in, out);
    else
      compute<double>(in, out);
    return Status::ok();
  }

private:
  template <typename T> void compute(const void *const *in, void *const *out) {
    const auto *dl = static_cast<const T *>(in[0]);
    const auto *x = static_cast<const T *>(in[1]);
    const void *target = in[2];
    const auto *w = l_.hasWeight ? static_cast<const T *>(in[3]) : nullptr;
    auto *dx = static_cast<T *>(out[0]);
    const int64_t N = l_.n, C = l_.c, D = l_.d;
    auto weightAt = [&](int64_t p) -> T {
      const int64_t t = dm::targetAt(l_, target, p);
      if (l_.hasIgnore && t == l_.ignoreIndex)
        return T(0);
      return w ? w[t] : T(1);
    };
    T scale = T(1);
    if (l_.reduction != dm::Reduction::None) {
      scale = dl[0];
      if (l_.reduction == dm::Reduction::Mean) {
        double total = 0.0;
        for (int64_t p = 0; p < N * D; ++p)
          total += static_cast<double>(weightAt(p));
        scale = static_cast<T>(static_cast<double>(scale) / total);
      }
    }
    const bool none = l_.reduction == dm::Reduction::None;
    // Positions in the forward's blocks (up to kBlock of one example), the
    // class axis outermost: with D > 1 every inner loop runs over adjacent
    // positions and vectorizes; each position still sums its exps in class
    // order, so the bits are those of a per-position loop.
    constexpr int64_t kBlock = dm::LossLayout::kBlock;
    const int64_t bpe = l_.blocksPerExample();
    parallelFor(l_.numBlocks(), N * C * D >= 16384, [&](int64_t b) {
      const int64_t n = b / bpe, d0 = (b % bpe) * kBlock;
      const int64_t len = std::min(D, d0 + kBlock) - d0;
      const T *xb = x + n * C * D + d0;
      T *gb = dx + n * C * D + d0;
      T g[kBlock];
      int64_t t[kBlock];
      for (int64_t j = 0; j < len; ++j) {
        const int64_t p = n * D + d0 + j;
        const T wt = weightAt(p);
        g[j] = (none ? dl[p] : scale) * wt;
        // A zero weight (ignored or weighted out) adds no one-hot term.
        t[j] = wt != T(0) ? dm::targetAt(l_, target, p) : -1;
      }
      if (!softmax_) {
        for (int64_t c = 0; c < C; ++c)
          std::fill(gb + c * D, gb + c * D + len, T(0));
      } else if (D == 1) {
        // [N, C] scores: one position per block, its classes adjacent.
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t c = 0; c < C; ++c)
          mx = mx < xb[c] ? xb[c] : mx;
        for (int64_t c = 0; c < C; ++c)
          gb[c] = expOf(xb[c] - mx);
        T sum = 0;
        for (int64_t c = 0; c < C; ++c)
          sum += gb[c];
        const T s = g[0], rs = T(1) / sum;
        for (int64_t c = 0; c < C; ++c)
          gb[c] = s * gb[c] * rs;
      } else {
        T mx[kBlock], sum[kBlock], r[kBlock];
        std::fill(mx, mx + len, -std::numeric_limits<T>::infinity());
        std::fill(sum, sum + len, T(0));
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < len; ++j) {
            // std::max on values: GCC does not vectorize the reference it
            // returns.
            const T v = xb[c * D + j];
            mx[j] = mx[j] < v ? v : mx[j];
          }
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < len; ++j) {
            const T e = expOf(xb[c * D + j] - mx[j]);
            gb[c * D + j] = e;
            sum[j] += e;
          }
        for (int64_t j = 0; j < len; ++j)
          r[j] = T(1) / sum[j];
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < len; ++j)
            gb[c * D + j] = g[j] * gb[c * D + j] * r[j];
      }
      for (int64_t j = 0; j < len; ++j)
        if (t[j] >= 0)
          gb[t[j] * D + j] -= g[j];
    });
  }

  std::string where_;
  dm::LossLayout l_;
  bool softmax_;
};

Expected<KernelPtr> makeLossGrad(const OpDesc &d, bool softmax) {
  if (d.inputs.size() < 3 || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 3 or 4 inputs and 1 output");
  // View the node as the forward loss (scores, target, weight -> loss) to
  // share the forward's checks and layout.
  OpDesc fwd = d;
  fwd.inputs.assign(d.inputs.begin() + 1, d.inputs.end());
  fwd.constInputs.clear();
  fwd.outputs = {d.inputs[0]};
  PIPEC_ASSIGN(dm::LossLayout l, dm::lossLayout(fwd));
  PIPEC_TRY(dm::checkOutput(d, 0, l.scoreType, d.inputs[1].shape));
  return KernelPtr(new LossGradKernel(d.where(), l, softmax));
}
} // namespace

Expected<KernelPtr> makeSoftmaxCrossEntropyLossGradKernel(const OpDesc &d) {
  return makeLossGrad(d, true);
}

Expected<KernelPtr> makeNegativeLogLikelihoodLossGradKernel(const OpDesc &d) {
  return makeLossGrad(d, false);
}

} // namespace pipec::cpu
