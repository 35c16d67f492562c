//===- runtime/cpu/kernels/Variadic.cpp - Max Min Sum Mean of n inputs ----===//
//
// Folds n broadcast inputs into the output in input order: y = x0, then
// y = f(y, xk) for k = 1..n-1 (Mean divides by n at the end). Each output
// element's operations happen in that fixed order whatever the thread count.
// Work is split into fixed chunks of the output; within a chunk all inputs
// are folded before moving on, so the chunk stays in cache. Max and Min
// propagate NaN like numpy's maximum/minimum.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include <cmath>
#include <type_traits>

namespace pipec::cpu {

namespace {
using namespace ew;

struct MaxOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return (a > b || a != a) ? a : b;
    else
      return a > b ? a : b;
  }
};
struct MinOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return (a < b || a != a) ? a : b;
    else
      return a < b ? a : b;
  }
};
struct SumOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) +
                            static_cast<std::make_unsigned_t<T>>(b));
    else
      return a + b;
  }
};

template <typename T, typename Op> class VariadicKernel final : public Kernel {
public:
  VariadicKernel(std::vector<BroadcastPlan> plans, int64_t total, Op op, bool mean)
      : plans_(std::move(plans)), total_(total), op_(op), mean_(mean) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    T *y = static_cast<T *>(out[0]);
    const Op op = op_;
    parallelChunks(total_, kChunk, [&](int64_t lo, int64_t hi) {
      for (size_t k = 0; k < plans_.size(); ++k) {
        const T *x = static_cast<const T *>(in[k]);
        const BroadcastPlan &p = plans_[k];
        forEachSegment(p, lo, hi, [&](int64_t o, const auto &off, int64_t len) {
          T *__restrict dst = y + o;
          const T *__restrict src = x + off[0];
          if (k == 0) {
            if (p.innerStride(0))
              std::copy(src, src + len, dst);
            else
              std::fill(dst, dst + len, *src);
          } else if (p.innerStride(0)) {
            for (int64_t i = 0; i < len; ++i)
              dst[i] = op(dst[i], src[i]);
          } else {
            const T v = *src;
            for (int64_t i = 0; i < len; ++i)
              dst[i] = op(dst[i], v);
          }
        });
      }
      if constexpr (std::is_floating_point_v<T>) {
        if (mean_) {
          const T n = static_cast<T>(plans_.size());
          for (int64_t i = lo; i < hi; ++i)
            y[i] = y[i] / n;
        }
      }
    });
    return Status::ok();
  }

private:
  std::vector<BroadcastPlan> plans_;
  int64_t total_;
  Op op_;
  bool mean_;
};

template <unsigned Set, typename Op>
Expected<KernelPtr> makeVariadic(const OpDesc &d, Op op, bool mean) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (!d.hasInput(i))
      return errorf(d.where(), ": input ", i, " is missing");
    if (d.inputs[i].dtype != d.inputs[0].dtype)
      return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype),
                    ", input 0 is ", dtypeName(d.inputs[0].dtype));
    shapes.push_back(d.inputs[i].shape);
  }
  PIPEC_ASSIGN(Shape shape, broadcastShapes(d, shapes));
  PIPEC_TRY(checkOutput(d, 0, d.inputs[0].dtype, shape));
  std::vector<BroadcastPlan> plans;
  for (const Shape &s : shapes) {
    PIPEC_ASSIGN(BroadcastPlan p, makeBroadcastPlan(d, shape, {s}));
    plans.push_back(std::move(p));
  }
  int64_t total = numElements(shape);
  return dispatchKernel<Set>(d, d.inputs[0].dtype, "input",
                             [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                               return KernelPtr(
                                   new VariadicKernel<T, Op>(std::move(plans), total, op, mean));
                             });
}
} // namespace

Expected<KernelPtr> makeVariadicKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, SIZE_MAX, 1, 1));
  const std::string &op = d.opType;
  if (op == "Max") return makeVariadic<kNumeric>(d, MaxOp{}, false);
  if (op == "Min") return makeVariadic<kNumeric>(d, MinOp{}, false);
  if (op == "Sum") return makeVariadic<kNumeric>(d, SumOp{}, false);
  if (op == "Mean") return makeVariadic<kFloats>(d, SumOp{}, true);
  return errorf(d.where(), ": not a variadic elementwise op");
}

} // namespace pipec::cpu
