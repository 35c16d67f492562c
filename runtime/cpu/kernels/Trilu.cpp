//===- runtime/cpu/kernels/Trilu.cpp - Trilu ------------------------------===//
//
// Trilu (opset 14): keeps the upper (j >= i + k) or lower (j <= i + k)
// triangle of each matrix of the last two axes and zeroes the rest. k is an
// optional runtime i64 scalar. Every matrix row is one memcpy of the kept
// range and memsets of the rest (zero is all-zero bytes in every type).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/Parallel.h"

#include <algorithm>
#include <cstring>

namespace pipec::cpu {

namespace {
class TriluKernel final : public Kernel {
public:
  TriluKernel(int64_t batches, int64_t rows, int64_t cols, size_t esize, bool upper, bool hasK)
      : batches_(batches), rows_(rows), cols_(cols), esize_(esize), upper_(upper), hasK_(hasK) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const int64_t k = hasK_ && in[1] ? *static_cast<const int64_t *>(in[1]) : 0;
    const auto *src = static_cast<const char *>(in[0]);
    auto *dst = static_cast<char *>(out[0]);
    const int64_t total = batches_ * rows_;
    const size_t rowBytes = static_cast<size_t>(cols_) * esize_;
    parallelFor(total, total * rowBytes >= dm::kParallelBytes, [&](int64_t r) {
      const int64_t i = r % rows_;
      // Columns [lo, hi) are kept. Clamp before adding so that huge k
      // cannot overflow.
      const int64_t diag = std::clamp<int64_t>(k, -rows_ - 1, cols_ + 1) + i;
      const int64_t lo = upper_ ? std::clamp<int64_t>(diag, 0, cols_) : 0;
      const int64_t hi = upper_ ? cols_ : std::clamp<int64_t>(diag + 1, 0, cols_);
      char *o = dst + r * rowBytes;
      const char *s = src + r * rowBytes;
      std::memset(o, 0, static_cast<size_t>(lo) * esize_);
      if (hi > lo)
        std::memcpy(o + lo * esize_, s + lo * esize_, static_cast<size_t>(hi - lo) * esize_);
      std::memset(o + std::max(lo, hi) * esize_, 0,
                  static_cast<size_t>(cols_ - std::max(lo, hi)) * esize_);
    });
    return Status::ok();
  }

private:
  int64_t batches_, rows_, cols_;
  size_t esize_;
  bool upper_, hasK_;
};
} // namespace

Expected<KernelPtr> makeTriluKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  if (x.rank() < 2)
    return errorf(d.where(), ": input must have rank >= 2, got ", x.str());
  if (d.hasInput(1) && (d.inputs[1].dtype != DType::I64 || d.inputs[1].numel() != 1))
    return errorf(d.where(), ": k must be an i64 scalar, got ", d.inputs[1].str());
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, x.shape));
  const int64_t rows = x.shape[x.rank() - 2], cols = x.shape[x.rank() - 1];
  return KernelPtr(new TriluKernel(rows * cols != 0 ? x.numel() / (rows * cols) : 0, rows, cols, esize,
                                   attrInt(d.attrs, "upper", 1) != 0, d.hasInput(1)));
}

} // namespace pipec::cpu
