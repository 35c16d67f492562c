//===- runtime/cpu/kernels/NegativeLogLikelihoodLoss.cpp - NLL loss -------===//
//
// NegativeLogLikelihoodLoss (opsets 12-13): input [N, C, d1..dk] of
// log-probabilities, target [N, d1..dk] (i32/i64), optional weight [C];
// reduction none/sum/mean, ignore_index. loss = -input[n, t, d] * weight[t]
// (0 where t is ignored); mean divides by the sum of the weights used.
//
// Targets are checked first (one out of [0, C) is an error, not a read out
// of bounds). Sums are taken over a fixed partition of positions into
// blocks and the block sums added in order, so the result is bitwise the
// same for any thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/Parallel.h"

#include <algorithm>

namespace pipec::cpu {

namespace {
class NllKernel final : public Kernel {
public:
  NllKernel(std::string where, dm::LossLayout l) : where_(std::move(where)), l_(l) {}

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
    const auto *x = static_cast<const T *>(in[0]);
    const auto *w = l_.hasWeight ? static_cast<const T *>(in[2]) : nullptr;
    auto *o = static_cast<T *>(out[0]);
    const int64_t bpe = l_.blocksPerExample(), blocks = l_.numBlocks();
    parallelFor(blocks, l_.n * l_.d >= 16384, [&](int64_t b) {
      const int64_t n = b / bpe, d0 = (b % bpe) * dm::LossLayout::kBlock;
      const int64_t d1 = std::min(l_.d, d0 + dm::LossLayout::kBlock);
      dm::lossBlockTail(l_, in[1], w, o, sums, b, n * l_.d + d0, d1 - d0,
                        [&](int64_t j, int64_t t) { return -x[(n * l_.c + t) * l_.d + d0 + j]; });
    });
    if (l_.reduction != dm::Reduction::None)
      dm::finishLoss(l_, sums, o);
  }

  std::string where_;
  dm::LossLayout l_;
};
} // namespace

Expected<KernelPtr> makeNegativeLogLikelihoodLossKernel(const OpDesc &d) {
  PIPEC_ASSIGN(dm::LossLayout l, dm::lossLayout(d));
  return KernelPtr(new NllKernel(d.where(), l));
}

} // namespace pipec::cpu
