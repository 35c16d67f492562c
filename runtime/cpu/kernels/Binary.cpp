//===- runtime/cpu/kernels/Binary.cpp - Binary ops with broadcasting ------===//
//
// Add Sub Mul Div Mod Pow PRelu, the comparisons (Equal Greater
// GreaterOrEqual Less LessOrEqual) and the logical ops (And Or Xor): one
// kernel template over a functor, with numpy broadcasting prepared in the
// factory (BroadcastPlan). run() walks fixed chunks of the output; each
// segment is a flat loop specialised on the inner strides (both contiguous,
// one scalar, or both scalar), which GCC vectorizes.
//
// Integer semantics: arithmetic wraps (no signed overflow), Div truncates
// toward zero like C, x / 0 and x % 0 give 0, INT_MIN / -1 gives INT_MIN.
// Mod follows the divisor's sign (Python) unless fmod=1 (C fmod).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> using Unsigned = std::make_unsigned_t<T>;
/// Types whose arithmetic is done through unsigned to wrap instead of
/// overflowing (narrower ones promote to int, which cannot overflow here).
template <typename T>
constexpr bool kWraps = std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= 4;

struct Add {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kWraps<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
    else
      return static_cast<T>(a + b);
  }
};
struct Sub {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kWraps<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
    else
      return static_cast<T>(a - b);
  }
};
struct Mul {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (kWraps<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) * static_cast<Unsigned<T>>(b));
    else if constexpr (std::is_integral_v<T> && sizeof(T) < sizeof(int))
      return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
    else
      return a * b;
  }
};
struct Div {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if (b == 0)
        return T(0);
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1))
          return Neg(a);
      return static_cast<T>(a / b);
    }
  }
  template <typename T> static T Neg(T a) {
    return static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(a));
  }
};
/// C remainder (sign of the dividend), safe for 0 and -1 divisors.
template <typename T> inline T cRem(T a, T b) {
  if (b == 0)
    return T(0);
  if constexpr (std::is_signed_v<T>)
    if (b == T(-1))
      return T(0);
  return static_cast<T>(a % b);
}
struct FMod {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fmod(a, b);
    else
      return cRem(a, b);
  }
};
/// Python / numpy mod: the result takes the divisor's sign.
struct PyMod {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    } else if constexpr (std::is_unsigned_v<T>) {
      return cRem(a, b);
    } else {
      T r = cRem(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
    }
  }
};
/// Integer power by squaring (wrapping); negative exponents give 1/a^|e|
/// truncated.
template <typename T, typename E> inline T intPow(T a, E e) {
  if constexpr (std::is_signed_v<E>) {
    if (e < 0)
      return a == 1 ? T(1) : a == T(-1) ? ((e & 1) ? T(-1) : T(1)) : T(0);
  }
  using U = Unsigned<T>;
  U base = static_cast<U>(a), r = 1;
  for (uint64_t k = static_cast<uint64_t>(e); k; k >>= 1) {
    if (k & 1)
      r = static_cast<U>(r * base);
    base = static_cast<U>(base * base);
  }
  return static_cast<T>(r);
}
/// Pow with the base's type as result type (opset 12+ mixes types).
struct Pow {
  template <typename T, typename E> T operator()(T a, E e) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::pow(a, static_cast<T>(e));
    else if constexpr (std::is_integral_v<E>)
      return intPow(a, e);
    else
      return floatToInt<T>(std::pow(static_cast<double>(a), static_cast<double>(e)));
  }
};
struct PRelu {
  template <typename T> T operator()(T x, T slope) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? Mul{}(slope, x) : x;
  }
};
struct Equal {
  template <typename T> Bool operator()(T a, T b) const { return a == b; }
};
struct Greater {
  template <typename T> Bool operator()(T a, T b) const { return a > b; }
};
struct GreaterOrEqual {
  template <typename T> Bool operator()(T a, T b) const { return a >= b; }
};
struct Less {
  template <typename T> Bool operator()(T a, T b) const { return a < b; }
};
struct LessOrEqual {
  template <typename T> Bool operator()(T a, T b) const { return a <= b; }
};
struct And {
  Bool operator()(Bool a, Bool b) const { return (a != 0) & (b != 0); }
};
struct Or {
  Bool operator()(Bool a, Bool b) const { return (a != 0) | (b != 0); }
};
struct Xor {
  Bool operator()(Bool a, Bool b) const { return (a != 0) ^ (b != 0); }
};

template <typename A, typename B, typename Out, typename Op>
class BinaryKernel final : public Kernel {
public:
  BinaryKernel(BroadcastPlan plan, Op op) : plan_(std::move(plan)), op_(op) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const A *a = static_cast<const A *>(in[0]);
    const B *b = static_cast<const B *>(in[1]);
    Out *y = static_cast<Out *>(out[0]);
    if (plan_.flat) {
      parallelChunks(plan_.total, kChunk, [&](int64_t lo, int64_t hi) {
        contiguous(a + lo, b + lo, y + lo, hi - lo);
      });
      return Status::ok();
    }
    const bool sa = plan_.innerStride(0) != 0, sb = plan_.innerStride(1) != 0;
    parallelChunks(plan_.total, kChunk, [&](int64_t lo, int64_t hi) {
      forEachSegment(plan_, lo, hi, [&](int64_t o, const auto &off, int64_t len) {
        const A *pa = a + off[0];
        const B *pb = b + off[1];
        if (sa && sb)
          contiguous(pa, pb, y + o, len);
        else if (sb)
          scalarA(*pa, pb, y + o, len);
        else if (sa)
          scalarB(pa, *pb, y + o, len);
        else
          std::fill(y + o, y + o + len, op_(*pa, *pb));
      });
    });
    return Status::ok();
  }

private:
  void contiguous(const A *__restrict a, const B *__restrict b, Out *__restrict y,
                  int64_t n) const {
    const Op op = op_;
    for (int64_t i = 0; i < n; ++i)
      y[i] = op(a[i], b[i]);
  }
  void scalarA(A a, const B *__restrict b, Out *__restrict y, int64_t n) const {
    const Op op = op_;
    for (int64_t i = 0; i < n; ++i)
      y[i] = op(a, b[i]);
  }
  void scalarB(const A *__restrict a, B b, Out *__restrict y, int64_t n) const {
    const Op op = op_;
    for (int64_t i = 0; i < n; ++i)
      y[i] = op(a[i], b);
  }

  BroadcastPlan plan_;
  Op op_;
};

/// Checks shapes and output type, prepares broadcasting, and instantiates
/// the kernel for the input types: same-typed inputs from `Set`, or (Pow)
/// a base from `Set` and an exponent from `ExpSet`.
template <unsigned Set, bool BoolOut = false, unsigned ExpSet = 0, typename Op>
Expected<KernelPtr> makeBinary(const OpDesc &d, Op op) {
  const TensorDesc &a = d.inputs[0], &b = d.inputs[1];
  constexpr bool kMixed = ExpSet != 0;
  if (!kMixed && a.dtype != b.dtype)
    return errorf(d.where(), ": input types differ: ", dtypeName(a.dtype), " and ",
                  dtypeName(b.dtype));
  PIPEC_ASSIGN(Shape shape, broadcastShapes(d, {a.shape, b.shape}));
  PIPEC_TRY(checkOutput(d, 0, BoolOut ? DType::Bool : a.dtype, shape));
  PIPEC_ASSIGN(BroadcastPlan plan, makeBroadcastPlan(d, shape, {a.shape, b.shape}));
  return dispatchKernel<Set>(
      d, a.dtype, "input", [&]<typename A>(TypeTag<A>) -> Expected<KernelPtr> {
        using Out = std::conditional_t<BoolOut, Bool, A>;
        if constexpr (kMixed) {
          return dispatchKernel<ExpSet>(
              d, b.dtype, "exponent", [&]<typename B>(TypeTag<B>) -> Expected<KernelPtr> {
                return KernelPtr(new BinaryKernel<A, B, Out, Op>(std::move(plan), op));
              });
        } else {
          return KernelPtr(new BinaryKernel<A, A, Out, Op>(std::move(plan), op));
        }
      });
}
} // namespace

Expected<KernelPtr> makeBinaryKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 2, 1, 1));
  const std::string &op = d.opType;
  if (op == "Add") return makeBinary<kNumeric>(d, Add{});
  if (op == "Sub") return makeBinary<kNumeric>(d, Sub{});
  if (op == "Mul") return makeBinary<kNumeric>(d, Mul{});
  if (op == "Div") return makeBinary<kNumeric>(d, Div{});
  if (op == "Mod") {
    if (attrInt(d.attrs, "fmod", 0) != 0)
      return makeBinary<kNumeric>(d, FMod{});
    return makeBinary<kNumeric>(d, PyMod{});
  }
  if (op == "Pow") {
    if (d.opset < 12 && d.inputs[0].dtype != d.inputs[1].dtype)
      return errorf(d.where(), ": before opset 12 base and exponent must have one type");
    return makeBinary<kFloats | kSignedInts, false, kNumeric>(d, Pow{});
  }
  if (op == "PRelu") {
    // Slope broadcasts one way, to the shape of X. Before opset 7 a 1-D
    // slope of C values is per channel (axis 1): view it as [C, 1, ...].
    if (d.opset < 7 && d.inputs[1].rank() == 1 && d.inputs[0].rank() > 2 &&
        d.inputs[1].shape[0] == d.inputs[0].shape[1] && d.inputs[1].shape[0] > 1) {
      OpDesc legacy = d;
      legacy.inputs[1].shape.resize(static_cast<size_t>(d.inputs[0].rank() - 1), 1);
      legacy.opset = 7;
      return makeBinaryKernel(legacy);
    }
    const TensorDesc &x = d.inputs[0], &slope = d.inputs[1];
    PIPEC_ASSIGN(Shape shape, broadcastShapes(d, {x.shape, slope.shape}));
    if (shape != x.shape)
      return errorf(d.where(), ": slope of shape ", shapeStr(slope.shape),
                    " does not broadcast to X of shape ", shapeStr(x.shape));
    return makeBinary<kNumeric>(d, PRelu{});
  }
  if (op == "Equal") return makeBinary<kAll, true>(d, Equal{});
  if (op == "Greater") return makeBinary<kNumeric, true>(d, Greater{});
  if (op == "GreaterOrEqual") return makeBinary<kNumeric, true>(d, GreaterOrEqual{});
  if (op == "Less") return makeBinary<kNumeric, true>(d, Less{});
  if (op == "LessOrEqual") return makeBinary<kNumeric, true>(d, LessOrEqual{});
  if (op == "And") return makeBinary<kBool, true>(d, And{});
  if (op == "Or") return makeBinary<kBool, true>(d, Or{});
  if (op == "Xor") return makeBinary<kBool, true>(d, Xor{});
  return errorf(d.where(), ": not a binary elementwise op");
}

} // namespace pipec::cpu
