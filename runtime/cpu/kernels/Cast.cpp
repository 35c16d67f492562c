//===- runtime/cpu/kernels/Cast.cpp - Cast between numeric types ----------===//
//
// Cast among f32, f64, i8..i64, u8..u64 and bool. Float to integer
// truncates toward zero as numpy's astype (see ew::floatToInt for NaN and
// out-of-range values); anything to bool is `x != 0` (NaN is true); bool
// is 0 or 1. The `saturate` attribute (opset 19) only concerns float8 types,
// which pipec does not compute with, and is ignored. float16 and bfloat16
// (support/Half.h: round to nearest even) convert to and from f32 and f64
// (and between each other through f32): the casts `pipec --precision`
// inserts (passes/MixedPrecision.cpp). Strings are not supported.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "support/Half.h"

#include <cstring>

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename From, typename To, bool ToBool> class CastKernel final : public Kernel {
public:
  explicit CastKernel(int64_t n) : n_(n) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const From *__restrict x = static_cast<const From *>(in[0]);
    To *__restrict y = static_cast<To *>(out[0]);
    parallelChunks(n_, kChunk, [&](int64_t lo, int64_t hi) {
      // Local copies (see ew::parallelChunks): the loop vectorizes.
      const From *__restrict xv = x;
      To *__restrict yv = y;
      for (int64_t i = lo; i < hi; ++i) {
        if constexpr (ToBool)
          yv[i] = xv[i] != From(0) ? 1 : 0;
        else
          yv[i] = convertValue<To>(xv[i]);
      }
    });
    return Status::ok();
  }

private:
  int64_t n_;
};

/// Casts to and from the 16-bit floats: through float, rounding to nearest
/// even on the way in.
template <typename From, typename To> class HalfCastKernel final : public Kernel {
public:
  HalfCastKernel(int64_t n, DType from, DType to) : n_(n), from_(from), to_(to) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const From *__restrict x = static_cast<const From *>(in[0]);
    To *__restrict y = static_cast<To *>(out[0]);
    // One loop per conversion, chosen here, so that each vectorizes (the
    // bf16 ones are branch-free).
    auto loop = [&](auto convert) {
      parallelChunks(n_, kChunk, [&](int64_t lo, int64_t hi) {
        const From *__restrict xv = x;
        To *__restrict yv = y;
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i)
          yv[i] = convert(xv[i]);
      });
    };
    if constexpr (std::is_same_v<From, uint16_t> && std::is_same_v<To, uint16_t>) {
      if (from_ == DType::BF16)
        loop([to = to_](uint16_t v) { return to == DType::BF16 ? v : floatToHalf(bf16ToFloat(v)); });
      else
        loop([to = to_](uint16_t v) { return to == DType::F16 ? v : floatToBf16(halfToFloat(v)); });
    } else if constexpr (std::is_same_v<From, uint16_t>) {
      if (from_ == DType::BF16)
        loop([](uint16_t v) { return static_cast<To>(bf16ToFloat(v)); });
      else
        loop([](uint16_t v) { return static_cast<To>(halfToFloat(v)); });
    } else {
      // A double rounds twice: to float, then to 16 bits.
      if (to_ == DType::F16)
        loop([](From v) { return floatToHalf(static_cast<float>(v)); });
      else if constexpr (std::is_same_v<From, float>)
        parallelChunks(n_, kChunk, [&](int64_t lo, int64_t hi) { narrowToBf16(x + lo, y + lo, hi - lo); });
      else
        loop([](From v) { return floatToBf16(static_cast<float>(v)); });
    }
    return Status::ok();
  }

private:
  int64_t n_;
  DType from_, to_;
};

class CopyKernel final : public Kernel {
public:
  explicit CopyKernel(size_t bytes) : bytes_(bytes) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    if (bytes_ && in[0] != out[0])
      std::memcpy(out[0], in[0], bytes_);
    return Status::ok();
  }

private:
  size_t bytes_;
};
} // namespace

Expected<KernelPtr> makeCastKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, 1, 1, 1));
  const TensorDesc &x = d.inputs[0];
  const Attribute *to = attrFind(d.attrs, "to");
  if (!to || to->kind != Attribute::Kind::Int)
    return errorf(d.where(), ": attribute 'to' (int) is missing");
  if (!isKnownDType(static_cast<int32_t>(to->i)))
    return errorf(d.where(), ": 'to' = ", to->i, " is not a known type");
  const DType toType = static_cast<DType>(to->i);
  PIPEC_TRY(checkOutput(d, 0, toType, x.shape));
  const int64_t n = x.numel();
  auto half = [](DType t) { return t == DType::F16 || t == DType::BF16; };
  if (x.dtype != toType && (half(x.dtype) || half(toType))) {
    auto other = [&](DType t) { return half(t) || t == DType::F32 || t == DType::F64; };
    if (!other(x.dtype) || !other(toType))
      return errorf(d.where(), ": cast from ", dtypeName(x.dtype), " to ", dtypeName(toType),
                    ": the CPU kernel casts float16 and bfloat16 to and from f32, f64, f16 and bf16 only");
    if (half(x.dtype) && half(toType))
      return KernelPtr(new HalfCastKernel<uint16_t, uint16_t>(n, x.dtype, toType));
    if (half(x.dtype))
      return toType == DType::F32 ? KernelPtr(new HalfCastKernel<uint16_t, float>(n, x.dtype, toType))
                                  : KernelPtr(new HalfCastKernel<uint16_t, double>(n, x.dtype, toType));
    return x.dtype == DType::F32 ? KernelPtr(new HalfCastKernel<float, uint16_t>(n, x.dtype, toType))
                                 : KernelPtr(new HalfCastKernel<double, uint16_t>(n, x.dtype, toType));
  }
  for (DType t : {x.dtype, toType})
    if (!inTypeSet(t, kAll))
      return errorf(d.where(), ": cast from ", dtypeName(x.dtype), " to ", dtypeName(toType),
                    ": type ", dtypeName(t), " is not supported by the CPU kernel");
  if (x.dtype == toType)
    return KernelPtr(new CopyKernel(x.bytes()));
  return dispatchKernel<kAll>(d, x.dtype, "input", [&]<typename From>(TypeTag<From>) {
    if (toType == DType::Bool)
      return Expected<KernelPtr>(KernelPtr(new CastKernel<From, Bool, true>(n)));
    return dispatchKernel<kNumeric>(d, toType, "output",
                                    [&]<typename To>(TypeTag<To>) -> Expected<KernelPtr> {
                                      return KernelPtr(new CastKernel<From, To, false>(n));
                                    });
  });
}

} // namespace pipec::cpu
