//===- runtime/cpu/kernels/Reduce.cpp - ReduceSum, ReduceMean, ... --------===//
//
// ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2
// ReduceLogSumExp ReduceSumSquare. Axes come from the attribute, or from
// input 1 from opset 13 (ReduceSum) / 18 (the others), which must then be a
// constant: axes decide the output shape, and pipec's compiler makes such
// inputs constants. Empty axes reduce everything unless
// noop_with_empty_axes, which reduces over no axis: each element alone
// (identity for Sum, Mean, Max, Min, Prod; |x| for L1 and L2; x^2 for
// SumSquare, as ONNX's reference implementation does).
//
// The factory collapses the shape into runs of kept and reduced dimensions.
// When the innermost run is reduced, each output folds contiguous runs (in 8
// lanes so GCC vectorizes; long single runs in fixed blocks of kChunk whose
// partials are combined in block order); otherwise tiles of up to kTile
// outputs advance together over the reduced elements, or, for one kept run
// over many rows, fixed blocks of rows sum into partial rows combined in
// block order. Every output's
// accumulation order is fixed by the geometry alone: results are bitwise the
// same for any thread count. Floats accumulate in their own type; integers
// in 64 bits (wrapping), except L2 and LogSumExp (double).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace pipec::cpu {

namespace {
using namespace ew;

constexpr int64_t kTile = 64;
constexpr int kLanes = 8;

template <typename T>
using WideInt = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
/// Accumulator of sum-like reductions.
template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, T, WideInt<T>>;
/// Accumulator of reductions with a float result (L2, LogSumExp).
template <typename T>
using RealAcc = std::conditional_t<std::is_floating_point_v<T>, T, double>;

template <typename A> inline A add(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <typename A> inline A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}
template <typename T, typename A> inline T toElem(A a) {
  if constexpr (std::is_floating_point_v<A> && std::is_integral_v<T>)
    return floatToInt<T>(a);
  else
    return static_cast<T>(a);
}

// Each reduction: init, map (element, per-output shift), combine, finish
// (accumulator, element count, shift).
template <typename T> struct RSum {
  using Acc = SumAcc<T>;
  static Acc init() { return Acc(0); }
  static Acc map(T x, T) { return Acc(x); }
  static Acc combine(Acc a, Acc b) { return add(a, b); }
  static T finish(Acc a, int64_t, T) { return toElem<T>(a); }
};
template <typename T> struct RMean : RSum<T> {
  using Acc = SumAcc<T>;
  static T finish(Acc a, int64_t n, T) {
    if constexpr (std::is_floating_point_v<T>)
      return a / static_cast<T>(n);
    else
      return n ? toElem<T>(a / static_cast<Acc>(n)) : T(0);
  }
};
template <typename T> struct RSumSquare : RSum<T> {
  using Acc = SumAcc<T>;
  static Acc map(T x, T) { return mul(Acc(x), Acc(x)); }
};
template <typename T> struct RL1 : RSum<T> {
  using Acc = SumAcc<T>;
  static Acc map(T x, T) {
    Acc v = Acc(x);
    if constexpr (std::is_floating_point_v<T>)
      return std::fabs(v);
    else if constexpr (std::is_signed_v<T>)
      return v < 0 ? static_cast<Acc>(0 - static_cast<uint64_t>(v)) : v;
    else
      return v;
  }
};
template <typename T> struct RL2 {
  using Acc = RealAcc<T>;
  static Acc init() { return Acc(0); }
  static Acc map(T x, T) { return Acc(x) * Acc(x); }
  static Acc combine(Acc a, Acc b) { return a + b; }
  static T finish(Acc a, int64_t, T) { return toElem<T>(std::sqrt(a)); }
};
template <typename T> struct RProd {
  using Acc = SumAcc<T>;
  static Acc init() { return Acc(1); }
  static Acc map(T x, T) { return Acc(x); }
  static Acc combine(Acc a, Acc b) { return mul(a, b); }
  static T finish(Acc a, int64_t, T) { return toElem<T>(a); }
};
/// Max and Min propagate NaN (numpy's maximum.reduce); the empty
/// reduction gives -inf / +inf (lowest / highest for integers).
template <typename T> struct RMax {
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  static Acc map(T x, T) { return x; }
  static Acc combine(Acc a, Acc b) { return (a > b || a != a) ? a : b; }
  static T finish(Acc a, int64_t, T) { return a; }
};
template <typename T> struct RMin {
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
  static Acc map(T x, T) { return x; }
  static Acc combine(Acc a, Acc b) { return (a < b || a != a) ? a : b; }
  static T finish(Acc a, int64_t, T) { return a; }
};
/// LogSumExp's first pass: the shift is the maximum, or 0 when that is not
/// finite (all -inf: the result is -inf; any +inf: +inf).
template <typename T> struct RShift : RMax<T> {
  static T finish(T a, int64_t, T) {
    if constexpr (std::is_floating_point_v<T>)
      return std::isfinite(a) ? a : T(0);
    else
      return a;
  }
};
template <typename T> struct RLogSumExp {
  using Acc = RealAcc<T>;
  static constexpr bool kShifted = true;
  static Acc init() { return Acc(0); }
  static Acc map(T x, T s) { return std::exp(Acc(x) - Acc(s)); }
  static Acc combine(Acc a, Acc b) { return a + b; }
  static T finish(Acc a, int64_t, T s) { return toElem<T>(std::log(a) + Acc(s)); }
};

template <typename Op> constexpr bool isShifted() {
  if constexpr (requires { Op::kShifted; })
    return Op::kShifted;
  else
    return false;
}

/// The collapsed geometry of one reduction.
struct Geometry {
  int64_t numOut = 1;  ///< output elements
  int64_t count = 1;   ///< reduced elements per output
  bool innerReduced = true;
  /// Innermost run: reduced (contiguous run length) or kept (tile width).
  int64_t inner = 1;
  /// Kept dims outside the inner run and their input strides.
  std::vector<int64_t> keptShape, keptStrides;
  /// Reduced dims outside the inner run and their input strides.
  std::vector<int64_t> redShape, redStrides;
  int64_t redOuter = 1; ///< product of redShape
  /// Long single runs are split into blocks of kChunk (see file comment).
  int64_t blocks = 0;
};

/// Input offset of multi-index `i` (row-major over `shape`).
inline int64_t offsetOf(int64_t i, const std::vector<int64_t> &shape,
                        const std::vector<int64_t> &strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

/// Steps a multi-index and its offset to the next element (row-major).
inline void advance(int64_t *idx, int64_t &off, const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &strides) {
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    off += strides[d];
    if (++idx[d] < shape[d])
      return;
    off -= idx[d] * strides[d];
    idx[d] = 0;
  }
}

template <typename T, template <typename> class OpT> class ReduceKernel final : public Kernel {
  using Op = OpT<T>;
  using Acc = typename Op::Acc;

public:
  explicit ReduceKernel(Geometry g) : g_(std::move(g)) {}

  size_t workspaceBytes() const override { return shiftBytes() + partialBytes(); }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    char *ws = static_cast<char *>(ctx.workspace);
    if (workspaceBytes() && !ws)
      return Status::error("reduction kernel run without its workspace");
    T *shift = nullptr;
    if constexpr (isShifted<Op>()) {
      shift = reinterpret_cast<T *>(ws);
      reduce<RShift<T>>(x, shift, nullptr, ws + shiftBytes());
    }
    reduce<Op>(x, y, shift, ws + shiftBytes());
    return Status::ok();
  }

private:
  static size_t align(size_t n) { return (n + 63) / 64 * 64; }
  size_t shiftBytes() const {
    return isShifted<Op>() ? align(static_cast<size_t>(g_.numOut) * sizeof(T)) : 0;
  }
  size_t partialBytes() const {
    const int64_t n = rowBlocks() ? rowBlocks() * g_.inner : g_.numOut * g_.blocks;
    return align(static_cast<size_t>(n) * std::max(sizeof(Acc), sizeof(typename RShift<T>::Acc)));
  }

  /// One kept run reduced over many rows (a bias gradient: [rows, N] summed
  /// over the rows): the rows go in fixed blocks, each task streaming its
  /// block's rows in order into a partial row, and the partials are then
  /// combined in block order. The 64-output tiles below would read 256
  /// bytes a row, a row apart: 1024 columns put every read on another
  /// page, about half the memory bandwidth. Blocks of at least 32 rows, at
  /// most 16 of them; none for fewer than 64 rows or a run over 64K.
  int64_t rowBlockRows() const { return std::max<int64_t>(32, (g_.redOuter + 15) / 16); }
  int64_t rowBlocks() const {
    const Geometry &g = g_;
    if (g.innerReduced || g.inner < kTile || g.inner > 65536 || g.numOut != g.inner || g.redOuter < 64)
      return 0;
    return (g.redOuter + rowBlockRows() - 1) / rowBlockRows();
  }

  /// Folds `n` contiguous elements in kLanes lanes, combined as a tree.
  template <typename O>
  static typename O::Acc foldRun(const T *__restrict x, int64_t n, T s) {
    using A = typename O::Acc;
    if (n < 2 * kLanes) {
      A a = O::init();
      for (int64_t i = 0; i < n; ++i)
        a = O::combine(a, O::map(x[i], s));
      return a;
    }
    A l[kLanes];
    for (int j = 0; j < kLanes; ++j)
      l[j] = O::init();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        l[j] = O::combine(l[j], O::map(x[i + j], s));
    for (int j = 0; i < n; ++i, ++j)
      l[j] = O::combine(l[j], O::map(x[i], s));
    return O::combine(O::combine(O::combine(l[0], l[1]), O::combine(l[2], l[3])),
                      O::combine(O::combine(l[4], l[5]), O::combine(l[6], l[7])));
  }

  template <typename O> void reduce(const T *x, T *y, const T *shift, char *partialWs) const {
    using A = typename O::Acc;
    const Geometry &g = g_;
    const int64_t total = g.numOut * g.count;
    auto shiftOf = [&](int64_t o) { return shift ? shift[o] : T(0); };
    if (g.innerReduced && g.blocks) {
      // Long single runs: fixed blocks in parallel, then block order.
      A *part = reinterpret_cast<A *>(partialWs);
      parallelTasks(g.numOut * g.blocks, total, [&](int64_t t) {
        const int64_t o = t / g.blocks, b = t % g.blocks;
        const int64_t lo = b * kChunk, n = std::min(kChunk, g.inner - lo);
        part[t] = foldRun<O>(x + offsetOf(o, g.keptShape, g.keptStrides) + lo, n, shiftOf(o));
      });
      parallelTasks(g.numOut, g.numOut * g.blocks, [&](int64_t o) {
        A a = O::init();
        for (int64_t b = 0; b < g.blocks; ++b)
          a = O::combine(a, part[o * g.blocks + b]);
        y[o] = O::finish(a, g.count, shiftOf(o));
      });
      return;
    }
    if (g.innerReduced) {
      parallelTasks(g.numOut, total, [&](int64_t o) {
        const T *base = x + offsetOf(o, g.keptShape, g.keptStrides);
        const T s = shiftOf(o);
        A a = O::init();
        std::array<int64_t, kMaxRank> idx{};
        int64_t off = 0;
        for (int64_t r = 0; r < g.redOuter; ++r) {
          a = O::combine(a, foldRun<O>(base + off, g.inner, s));
          advance(idx.data(), off, g.redShape, g.redStrides);
        }
        y[o] = O::finish(a, g.count, s);
      });
      return;
    }
    if (const int64_t blocks = rowBlocks()) {
      A *part = reinterpret_cast<A *>(partialWs);
      const int64_t rows = rowBlockRows(), n = g.inner;
      parallelTasks(blocks, total, [&](int64_t b) {
        A *__restrict a = part + b * n;
        for (int64_t k = 0; k < n; ++k)
          a[k] = O::init();
        // Row r0's multi-index over the reduced dims and its offset.
        std::array<int64_t, kMaxRank> idx{};
        const int64_t r0 = b * rows;
        int64_t off = 0;
        for (int64_t d = static_cast<int64_t>(g.redShape.size()) - 1, i = r0; d >= 0; --d) {
          const auto u = static_cast<size_t>(d);
          idx[u] = i % g.redShape[u];
          off += idx[u] * g.redStrides[u];
          i /= g.redShape[u];
        }
        for (int64_t r = r0; r < std::min(g.redOuter, r0 + rows); ++r) {
          const T *__restrict p = x + off;
          if (shift) {
            for (int64_t k = 0; k < n; ++k)
              a[k] = O::combine(a[k], O::map(p[k], shift[k]));
          } else {
            for (int64_t k = 0; k < n; ++k)
              a[k] = O::combine(a[k], O::map(p[k], T(0)));
          }
          advance(idx.data(), off, g.redShape, g.redStrides);
        }
      });
      parallelChunks(n, kTile, [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) {
          A a = O::init();
          for (int64_t b = 0; b < blocks; ++b)
            a = O::combine(a, part[b * n + k]);
          y[k] = O::finish(a, g.count, shiftOf(k));
        }
      });
      return;
    }
    // Inner run kept: tiles of outputs advance together.
    const int64_t outer = g.inner ? g.numOut / g.inner : 0;
    const int64_t tiles = (g.inner + kTile - 1) / kTile;
    parallelTasks(outer * tiles, total, [&](int64_t t) {
      const int64_t o = t / tiles, k0 = (t % tiles) * kTile;
      const int64_t w = std::min(kTile, g.inner - k0);
      const T *base = x + offsetOf(o, g.keptShape, g.keptStrides) + k0;
      const int64_t y0 = o * g.inner + k0;
      A a[kTile];
      T s[kTile];
      for (int64_t k = 0; k < w; ++k) {
        a[k] = O::init();
        s[k] = shiftOf(y0 + k);
      }
      std::array<int64_t, kMaxRank> idx{};
      int64_t off = 0;
      for (int64_t r = 0; r < g.redOuter; ++r) {
        const T *__restrict p = base + off;
        for (int64_t k = 0; k < w; ++k)
          a[k] = O::combine(a[k], O::map(p[k], s[k]));
        advance(idx.data(), off, g.redShape, g.redStrides);
      }
      for (int64_t k = 0; k < w; ++k)
        y[y0 + k] = O::finish(a[k], g.count, s[k]);
    });
  }

  Geometry g_;
};

/// Collapses `shape` with `reduced` flags into the kernel geometry.
Geometry makeGeometry(const Shape &shape, const std::vector<bool> &reduced) {
  const std::vector<int64_t> strides = rowMajorStrides(shape);
  // Runs of (size, stride of the run's last dim, reduced) after dropping unit
  // dims and merging neighbours of the same kind.
  struct Run {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<Run> runs;
  Geometry g;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (reduced[i])
      g.count *= shape[i];
    else
      g.numOut *= shape[i];
    if (shape[i] == 1)
      continue;
    if (!runs.empty() && runs.back().reduced == reduced[i]) {
      runs.back().size *= shape[i];
      runs.back().stride = strides[i];
    } else {
      runs.push_back({shape[i], strides[i], reduced[i]});
    }
  }
  if (runs.empty())
    runs.push_back({1, 1, true});
  const Run last = runs.back();
  runs.pop_back();
  g.innerReduced = last.reduced;
  g.inner = last.size;
  for (const Run &r : runs) {
    (r.reduced ? g.redShape : g.keptShape).push_back(r.size);
    (r.reduced ? g.redStrides : g.keptStrides).push_back(r.stride);
  }
  g.redOuter = numElements(g.redShape);
  if (g.innerReduced && g.redShape.empty() && g.inner >= 4 * kChunk)
    g.blocks = (g.inner + kChunk - 1) / kChunk;
  return g;
}

template <template <typename> class OpT, unsigned Set>
Expected<KernelPtr> makeReduce(const OpDesc &d, Geometry g) {
  return dispatchKernel<Set>(d, d.inputs[0].dtype, "input",
                             [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                               return KernelPtr(new ReduceKernel<T, OpT>(std::move(g)));
                             });
}
} // namespace

Expected<KernelPtr> makeReduceKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, 2, 1, 1));
  const TensorDesc &x = d.inputs[0];
  const int64_t rank = x.rank();
  const int64_t axesInputOpset = d.opType == "ReduceSum" ? 13 : 18;
  const bool axesInput = d.opset >= axesInputOpset;
  std::vector<int64_t> axes;
  if (axesInput) {
    if (attrHas(d.attrs, "axes"))
      return errorf(d.where(), ": from opset ", d.opset, " axes is an input, not an attribute");
    if (d.hasInput(1)) {
      const Tensor *a = d.constInput(1);
      if (!a)
        return errorf(d.where(), ": axes must be a constant (it decides the output shape)");
      if (a->dtype() != DType::I64 || a->shape().size() > 1)
        return errorf(d.where(), ": axes must be a 1-D i64 tensor, it is ", a->desc().str());
      axes = a->toInts();
    }
  } else {
    if (d.hasInput(1))
      return errorf(d.where(), ": before opset ", axesInputOpset,
                    " axes is an attribute, not an input");
    axes = attrInts(d.attrs, "axes");
  }
  const bool keepDims = attrInt(d.attrs, "keepdims", 1) != 0;
  const bool noop = attrInt(d.attrs, "noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t a : axes) {
    PIPEC_ASSIGN(int64_t ax, normalizeAxis(d, a, rank));
    if (reduced[ax])
      return errorf(d.where(), ": axis ", a, " is listed twice");
    reduced[ax] = true;
  }
  Shape outShape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      outShape.push_back(x.shape[i]);
    else if (keepDims)
      outShape.push_back(1);
  }
  PIPEC_TRY(checkOutput(d, 0, x.dtype, outShape));
  Geometry g = makeGeometry(x.shape, reduced);
  if (g.redShape.size() > static_cast<size_t>(kMaxRank))
    return errorf(d.where(), ": ", g.redShape.size(),
                  " separate runs of reduced axes; the CPU kernel handles ", kMaxRank);

  const std::string &op = d.opType;
  if (op == "ReduceSum") return makeReduce<RSum, kNumeric>(d, std::move(g));
  if (op == "ReduceMean") return makeReduce<RMean, kNumeric>(d, std::move(g));
  if (op == "ReduceMax") return makeReduce<RMax, kNumeric | kBool>(d, std::move(g));
  if (op == "ReduceMin") return makeReduce<RMin, kNumeric | kBool>(d, std::move(g));
  if (op == "ReduceProd") return makeReduce<RProd, kNumeric>(d, std::move(g));
  if (op == "ReduceL1") return makeReduce<RL1, kNumeric>(d, std::move(g));
  if (op == "ReduceL2") return makeReduce<RL2, kNumeric>(d, std::move(g));
  if (op == "ReduceSumSquare") return makeReduce<RSumSquare, kNumeric>(d, std::move(g));
  if (op == "ReduceLogSumExp") return makeReduce<RLogSumExp, kNumeric>(d, std::move(g));
  return errorf(d.where(), ": not a reduction");
}

} // namespace pipec::cpu
