//===- runtime/cpu/kernels/Unary.cpp - Unary elementwise ops --------------===//
//
// Every one-input, one-output elementwise op of ONNX (Abs ... ThresholdedRelu,
// IsInf, IsNaN, Not) as one kernel template over a functor table: the
// factory picks the functor and its attributes by OpDesc::opType, run() is a
// flat loop over fixed chunks (parallel, thread-count independent). Float
// math uses the std:: functions in the element's own precision, except exp,
// tanh and erf on float (Exp, Tanh, Erf, Sigmoid, Elu, Selu, Celu, Gelu,
// Mish's tanh), which use VecMath.h's vectorizable approximations.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/VecMath.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> using Unsigned = std::make_unsigned_t<T>;

// ---- Functors. Integer variants wrap instead of overflowing (-INT_MIN).
struct Abs {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else if constexpr (std::is_integral_v<T>)
      return x < 0 ? static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(x)) : x;
    else
      return std::fabs(x);
  }
};
struct Neg {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(x));
    else
      return -x;
  }
};
struct Sign {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return x > 0 ? T(1) : x < 0 ? T(-1) : x == 0 ? T(0) : x; // NaN stays NaN
    else
      return x > 0 ? T(1) : x < 0 ? static_cast<T>(-1) : T(0);
  }
};
struct Relu {
  template <typename T> T operator()(T x) const { return reluOf(x); }
};
struct Ceil {
  template <typename T> T operator()(T x) const { return std::ceil(x); }
};
struct Floor {
  template <typename T> T operator()(T x) const { return std::floor(x); }
};
/// Round half to even: nearbyint under the default rounding mode.
struct Round {
  template <typename T> T operator()(T x) const { return std::nearbyint(x); }
};

#define PIPEC_UNARY_FN(Name, fn)                                                \
  struct Name {                                                                \
    template <typename T> T operator()(T x) const { return fn(x); }            \
  };
PIPEC_UNARY_FN(Acos, std::acos)
PIPEC_UNARY_FN(Acosh, std::acosh)
PIPEC_UNARY_FN(Asin, std::asin)
PIPEC_UNARY_FN(Asinh, std::asinh)
PIPEC_UNARY_FN(Atan, std::atan)
PIPEC_UNARY_FN(Atanh, std::atanh)
PIPEC_UNARY_FN(Cos, std::cos)
PIPEC_UNARY_FN(Cosh, std::cosh)
PIPEC_UNARY_FN(Sin, std::sin)
PIPEC_UNARY_FN(Sinh, std::sinh)
PIPEC_UNARY_FN(Tan, std::tan)
PIPEC_UNARY_FN(Tanh, tanhOf)
PIPEC_UNARY_FN(Exp, expOf)
PIPEC_UNARY_FN(Log, std::log)
PIPEC_UNARY_FN(Sqrt, std::sqrt)
#undef PIPEC_UNARY_FN

struct Erf {
  template <typename T> T operator()(T x) const { return erfOf(x); }
};

struct Reciprocal {
  template <typename T> T operator()(T x) const { return T(1) / x; }
};
struct Sigmoid {
  template <typename T> T operator()(T x) const { return T(1) / (T(1) + expOf(-x)); }
};
/// log(1 + exp(x)) without overflow for large x.
template <typename T> inline T softplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
struct Softplus {
  template <typename T> T operator()(T x) const { return softplus(x); }
};
struct Softsign {
  template <typename T> T operator()(T x) const { return x / (T(1) + std::fabs(x)); }
};
struct Mish {
  template <typename T> T operator()(T x) const { return x * tanhOf(softplus(x)); }
};
struct Celu {
  double alpha;
  template <typename T> T operator()(T x) const {
    T a = T(alpha);
    return std::max(T(0), x) + std::min(T(0), a * (expOf(x / a) - T(1)));
  }
};
struct Elu {
  double alpha;
  template <typename T> T operator()(T x) const {
    return x >= T(0) ? x : T(alpha) * (expOf(x) - T(1));
  }
};
struct Selu {
  double alpha, gamma;
  template <typename T> T operator()(T x) const {
    return x > T(0) ? T(gamma) * x : T(gamma) * (T(alpha) * expOf(x) - T(alpha));
  }
};
struct LeakyRelu {
  double alpha;
  template <typename T> T operator()(T x) const { return x >= T(0) ? x : T(alpha) * x; }
};
struct ThresholdedRelu {
  double alpha;
  template <typename T> T operator()(T x) const { return x > T(alpha) ? x : T(0); }
};
struct HardSigmoid {
  double alpha, beta;
  template <typename T> T operator()(T x) const {
    return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
  }
};
struct HardSwish {
  template <typename T> T operator()(T x) const {
    return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
  }
};
struct GeluErf {
  template <typename T> T operator()(T x) const { return geluErfOf(x); }
};
struct GeluTanh {
  template <typename T> T operator()(T x) const { return geluTanhOf(x); }
};
struct IsNaN {
  template <typename T> Bool operator()(T x) const { return std::isnan(x) ? 1 : 0; }
};
struct IsInf {
  bool negative, positive;
  template <typename T> Bool operator()(T x) const {
    return ((positive && x == std::numeric_limits<T>::infinity()) ||
            (negative && x == -std::numeric_limits<T>::infinity()))
               ? 1
               : 0;
  }
};
struct Not {
  template <typename T> Bool operator()(T x) const { return x ? 0 : 1; }
};

// ---- The kernel.
template <typename T, typename Out, typename Op> class UnaryKernel final : public Kernel {
public:
  UnaryKernel(Op op, int64_t n) : op_(op), n_(n) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *__restrict x = static_cast<const T *>(in[0]);
    Out *__restrict y = static_cast<Out *>(out[0]);
    const Op op = op_;
    parallelChunks(n_, kChunk, [&](int64_t b, int64_t e) {
      // Local copies (see ew::parallelChunks): the loop vectorizes.
      const T *__restrict xv = x;
      Out *__restrict yv = y;
      const Op f = op;
      for (int64_t i = b; i < e; ++i)
        yv[i] = f(xv[i]);
    });
    return Status::ok();
  }

private:
  Op op_;
  int64_t n_;
};

/// Prepares `op` for the node's input type (one of `Set`). Predicates
/// (`BoolOut`) produce bool; the rest keep the input type.
template <unsigned Set, bool BoolOut = false, typename Op>
Expected<KernelPtr> makeUnary(const OpDesc &d, Op op) {
  const TensorDesc &x = d.inputs[0];
  PIPEC_TRY(checkOutput(d, 0, BoolOut ? DType::Bool : x.dtype, x.shape));
  return dispatchKernel<Set>(d, x.dtype, "input",
                             [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
                               using Out = std::conditional_t<BoolOut, Bool, T>;
                               return KernelPtr(new UnaryKernel<T, Out, Op>(op, x.numel()));
                             });
}

double attrF(const OpDesc &d, const char *name, double dflt) {
  return attrFloat(d.attrs, name, static_cast<float>(dflt));
}
} // namespace

Expected<KernelPtr> makeUnaryKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, 1, 1, 1));
  const std::string &op = d.opType;
  constexpr unsigned kSigned = kFloats | kSignedInts;
  // Integer and float.
  if (op == "Abs") return makeUnary<kNumeric>(d, Abs{});
  if (op == "Neg") return makeUnary<kSigned>(d, Neg{});
  if (op == "Sign") return makeUnary<kNumeric>(d, Sign{});
  if (op == "Relu") return makeUnary<kSigned>(d, Relu{});
  if (op == "Not") return makeUnary<kBool, true>(d, Not{});
  // Float only.
  if (op == "Ceil") return makeUnary<kFloats>(d, Ceil{});
  if (op == "Floor") return makeUnary<kFloats>(d, Floor{});
  if (op == "Round") return makeUnary<kFloats>(d, Round{});
  if (op == "Acos") return makeUnary<kFloats>(d, Acos{});
  if (op == "Acosh") return makeUnary<kFloats>(d, Acosh{});
  if (op == "Asin") return makeUnary<kFloats>(d, Asin{});
  if (op == "Asinh") return makeUnary<kFloats>(d, Asinh{});
  if (op == "Atan") return makeUnary<kFloats>(d, Atan{});
  if (op == "Atanh") return makeUnary<kFloats>(d, Atanh{});
  if (op == "Cos") return makeUnary<kFloats>(d, Cos{});
  if (op == "Cosh") return makeUnary<kFloats>(d, Cosh{});
  if (op == "Sin") return makeUnary<kFloats>(d, Sin{});
  if (op == "Sinh") return makeUnary<kFloats>(d, Sinh{});
  if (op == "Tan") return makeUnary<kFloats>(d, Tan{});
  if (op == "Tanh") return makeUnary<kFloats>(d, Tanh{});
  if (op == "Exp") return makeUnary<kFloats>(d, Exp{});
  if (op == "Log") return makeUnary<kFloats>(d, Log{});
  if (op == "Sqrt") return makeUnary<kFloats>(d, Sqrt{});
  if (op == "Erf") return makeUnary<kFloats>(d, Erf{});
  if (op == "Reciprocal") return makeUnary<kFloats>(d, Reciprocal{});
  if (op == "Sigmoid") return makeUnary<kFloats>(d, Sigmoid{});
  if (op == "Softplus") return makeUnary<kFloats>(d, Softplus{});
  if (op == "Softsign") return makeUnary<kFloats>(d, Softsign{});
  if (op == "Mish") return makeUnary<kFloats>(d, Mish{});
  if (op == "HardSwish") return makeUnary<kFloats>(d, HardSwish{});
  if (op == "Celu") {
    double alpha = attrF(d, "alpha", 1.0);
    if (alpha == 0)
      return errorf(d.where(), ": alpha must not be 0");
    return makeUnary<kFloats>(d, Celu{alpha});
  }
  if (op == "Elu") return makeUnary<kFloats>(d, Elu{attrF(d, "alpha", 1.0)});
  if (op == "Selu")
    return makeUnary<kFloats>(d, Selu{attrF(d, "alpha", 1.67326319217681884765625),
                                      attrF(d, "gamma", 1.05070102214813232421875)});
  if (op == "LeakyRelu") return makeUnary<kFloats>(d, LeakyRelu{attrF(d, "alpha", 0.01)});
  if (op == "ThresholdedRelu")
    return makeUnary<kFloats>(d, ThresholdedRelu{attrF(d, "alpha", 1.0)});
  if (op == "HardSigmoid")
    return makeUnary<kFloats>(d, HardSigmoid{attrF(d, "alpha", 0.2), attrF(d, "beta", 0.5)});
  if (op == "Gelu") {
    std::string approx = attrString(d.attrs, "approximate", "none");
    if (approx == "none")
      return makeUnary<kFloats>(d, GeluErf{});
    if (approx == "tanh")
      return makeUnary<kFloats>(d, GeluTanh{});
    return errorf(d.where(), ": approximate must be 'none' or 'tanh', not '", approx, "'");
  }
  // Float in, bool out.
  if (op == "IsNaN") return makeUnary<kFloats, true>(d, IsNaN{});
  if (op == "IsInf")
    return makeUnary<kFloats, true>(d, IsInf{attrInt(d.attrs, "detect_negative", 1) != 0,
                                             attrInt(d.attrs, "detect_positive", 1) != 0});
  return errorf(d.where(), ": not a unary elementwise op");
}

} // namespace pipec::cpu
