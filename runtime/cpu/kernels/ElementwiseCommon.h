//===- runtime/cpu/kernels/ElementwiseCommon.h - Elementwise helpers -*- C++ -*-===//
//
// Shared by the elementwise and reduction kernels (Unary.cpp, Binary.cpp,
// Variadic.cpp, Where.cpp, Cast.cpp, Clip.cpp, Dropout.cpp, Softmax.cpp,
// Reduce.cpp, ArgMinMax.cpp):
//  - compile-time dispatch from a DType to the C++ element type;
//  - parallel loops over fixed-size chunks, so the split of work never
//    depends on the thread count (and neither do the results);
//  - numpy broadcasting prepared once per node (BroadcastPlan) and walked as
//    contiguous segments whose inner strides are 0 or 1, so the per-element
//    loops stay flat and auto-vectorizable.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Kernel.h"
#include "support/Parallel.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace pipec::cpu::ew {

/// y[i] = floatToBf16(x[i]) (support/Half.h: round to nearest even, a NaN
/// kept quiet with its sign and top payload), bit for bit, with AVX-512 or
/// AVX2 integer arithmetic: the compiler's vectorization of the scalar
/// formula narrows 32-bit lanes to 16 one element at a time. Not
/// AVX512_BF16's vcvtneps2bf16, which flushes subnormals to zero. One
/// thread; callers split large arrays.
void narrowToBf16(const float *x, uint16_t *y, int64_t n);

/// y[i] = bf16ToFloat(x[i]) (exact), vectorized. One thread.
void widenBf16(const uint16_t *x, float *y, int64_t n);

/// y[i] = floatToHalf(x[i]) and halfToFloat (support/Half.h), one thread.
void narrowToHalf(const float *x, uint16_t *y, int64_t n);
void widenHalf(const uint16_t *x, float *y, int64_t n);

/// A type carrier for generic lambdas: `[&]<typename T>(TypeTag<T>) {...}`.
template <typename T> struct TypeTag {
  using type = T;
};

/// Sets of element types a kernel accepts (bit masks over DType groups).
enum TypeSet : unsigned {
  kFloats = 1u << 0,      ///< f32, f64
  kSignedInts = 1u << 1,  ///< i8, i16, i32, i64
  kUnsignedInts = 1u << 2, ///< u8, u16, u32, u64
  kBool = 1u << 3,
  kInts = kSignedInts | kUnsignedInts,
  kNumeric = kFloats | kInts,
  kAll = kNumeric | kBool,
};

/// Whether `t` belongs to `set`.
inline bool inTypeSet(DType t, unsigned set) {
  switch (t) {
  case DType::F32:
  case DType::F64: return set & kFloats;
  case DType::I8:
  case DType::I16:
  case DType::I32:
  case DType::I64: return set & kSignedInts;
  case DType::U8:
  case DType::U16:
  case DType::U32:
  case DType::U64: return set & kUnsignedInts;
  case DType::Bool: return set & kBool;
  default: return false;
  }
}

/// Bool tensors hold one byte per element, 0 or 1.
using Bool = uint8_t;

/// Calls `f(TypeTag<T>{})` for the C++ type of `t`, instantiating `f` only
/// for the types in `Set`; for any other type returns `fallback()`.
template <unsigned Set, typename F, typename G>
auto dispatch(DType t, F &&f, G &&fallback) -> decltype(fallback()) {
  switch (t) {
  case DType::F32:
    if constexpr ((Set & kFloats) != 0) return f(TypeTag<float>{});
    break;
  case DType::F64:
    if constexpr ((Set & kFloats) != 0) return f(TypeTag<double>{});
    break;
  case DType::I8:
    if constexpr ((Set & kSignedInts) != 0) return f(TypeTag<int8_t>{});
    break;
  case DType::I16:
    if constexpr ((Set & kSignedInts) != 0) return f(TypeTag<int16_t>{});
    break;
  case DType::I32:
    if constexpr ((Set & kSignedInts) != 0) return f(TypeTag<int32_t>{});
    break;
  case DType::I64:
    if constexpr ((Set & kSignedInts) != 0) return f(TypeTag<int64_t>{});
    break;
  case DType::U8:
    if constexpr ((Set & kUnsignedInts) != 0) return f(TypeTag<uint8_t>{});
    break;
  case DType::U16:
    if constexpr ((Set & kUnsignedInts) != 0) return f(TypeTag<uint16_t>{});
    break;
  case DType::U32:
    if constexpr ((Set & kUnsignedInts) != 0) return f(TypeTag<uint32_t>{});
    break;
  case DType::U64:
    if constexpr ((Set & kUnsignedInts) != 0) return f(TypeTag<uint64_t>{});
    break;
  case DType::Bool:
    if constexpr ((Set & kBool) != 0) return f(TypeTag<Bool>{});
    break;
  default: break;
  }
  return fallback();
}

/// dispatch() for factories: an unsupported type becomes an error naming the
/// node, the tensor and its type.
template <unsigned Set, typename F>
Expected<KernelPtr> dispatchKernel(const OpDesc &d, DType t, const char *what, F &&f) {
  return dispatch<Set>(t, std::forward<F>(f), [&]() -> Expected<KernelPtr> {
    return errorf(d.where(), ": ", what, " type ", dtypeName(t),
                  " is not supported by the CPU kernel");
  });
}

/// Elements per parallel chunk. Chunks are a function of the element count
/// only, so results never depend on how many threads run them.
constexpr int64_t kChunk = 1 << 14;

/// Runs `f(begin, end)` over [0, n) in fixed chunks of `chunk` elements, in
/// parallel when there is more than one chunk. In the parallel case `f`
/// runs inside OpenMP's outlined function, where the variables a
/// by-reference lambda captured are memory that every store in the loop
/// might alias: GCC reloads them per element and does not vectorize, so a
/// kernel of two chunks can take many times as long as one of a chunk
/// (bench/results/log.md). Lambdas copy their pointers into local
/// __restrict variables before the loop.
template <typename F> void parallelChunks(int64_t n, int64_t chunk, F &&f) {
  if (n <= 0)
    return;
  int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks == 1 || !threadsAvailable()) {
    // One thread: one call over everything, the same elements in the same
    // order as the chunks would visit them.
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    f(c * chunk, std::min(n, (c + 1) * chunk));
}

/// Runs `f(i)` for each of `n` independent tasks, in parallel when the
/// tasks together touch at least about `work` >= kChunk elements.
template <typename F> void parallelTasks(int64_t n, int64_t work, F &&f) {
  if (n <= 0)
    return;
  if (n == 1 || work < kChunk || !threadsAvailable()) {
    for (int64_t i = 0; i < n; ++i)
      f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    f(i);
}

/// Largest rank a broadcast kernel handles after collapsing dimensions.
constexpr int kMaxRank = 16;
/// Most inputs of one broadcast (Where has three).
constexpr int kMaxBroadcastInputs = 3;

/// numpy broadcasting of up to three inputs to one output, with adjacent
/// dimensions merged where every input agrees (all present or all
/// broadcast). Inner strides are 0 (broadcast) or 1 (contiguous).
struct BroadcastPlan {
  int numInputs = 0;
  int64_t total = 0; ///< output elements
  /// Every input has the output's element count (a flat loop suffices).
  bool flat = false;
  std::vector<int64_t> dims; ///< collapsed output dims, at least one
  /// Per input, element strides per collapsed dim (0 where broadcast).
  std::array<std::vector<int64_t>, kMaxBroadcastInputs> strides;
  int rank() const { return static_cast<int>(dims.size()); }
  int64_t innerStride(int k) const { return strides[k].back(); }
};

/// The multidirectional broadcast of shapes (numpy rules), or an error.
Expected<Shape> broadcastShapes(const OpDesc &d, const std::vector<Shape> &shapes);

/// Prepares broadcasting `inputs` to `out`; checks every input broadcasts to
/// `out` (numpy rules). Does not check that `out` is the smallest such shape;
/// callers compare with broadcastShapes() where the op requires it.
Expected<BroadcastPlan> makeBroadcastPlan(const OpDesc &d, const Shape &out,
                                          const std::vector<Shape> &inputs);

/// Walks output elements [begin, end) of `p` as segments: calls
/// `seg(outOffset, inOffsets, len)` where input k's elements for the segment
/// start at inOffsets[k] with stride p.innerStride(k).
template <typename Seg>
void forEachSegment(const BroadcastPlan &p, int64_t begin, int64_t end, Seg &&seg) {
  const int r = p.rank(), n = p.numInputs;
  const int64_t inner = p.dims[r - 1];
  std::array<int64_t, kMaxRank> idx{};
  std::array<int64_t, kMaxBroadcastInputs> off{};
  int64_t rem = begin;
  for (int dim = r - 1; dim >= 0; --dim) {
    idx[dim] = rem % p.dims[dim];
    rem /= p.dims[dim];
    for (int k = 0; k < n; ++k)
      off[k] += idx[dim] * p.strides[k][dim];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = std::min(inner - idx[r - 1], end - pos);
    seg(pos, off, len);
    pos += len;
    if (pos >= end)
      break;
    // Carry: the inner index wraps to 0, the next outer index advances.
    for (int k = 0; k < n; ++k)
      off[k] -= idx[r - 1] * p.strides[k][r - 1];
    idx[r - 1] = 0;
    for (int dim = r - 2; dim >= 0; --dim) {
      ++idx[dim];
      for (int k = 0; k < n; ++k)
        off[k] += p.strides[k][dim];
      if (idx[dim] < p.dims[dim])
        break;
      for (int k = 0; k < n; ++k)
        off[k] -= idx[dim] * p.strides[k][dim];
      idx[dim] = 0;
    }
  }
}

/// Converts a float to an integer type as numpy's astype does on x86 for
/// in-range values (truncation toward zero), and well-defined elsewhere:
/// NaN gives 0, values beyond int64 saturate, and narrower targets wrap
/// modulo 2^bits after the int64 conversion (300.0 -> u8 gives 44, -1.0 ->
/// u32 gives 4294967295, as numpy).
template <typename To, typename F> inline To floatToInt(F x) {
  static_assert(std::is_floating_point_v<F> && std::is_integral_v<To>);
  constexpr F kTwo63 = F(9223372036854775808.0);
  if (!(x == x))
    return To(0);
  if constexpr (std::is_same_v<To, uint64_t>) {
    if (x >= F(2) * kTwo63)
      return UINT64_MAX;
    if (x >= kTwo63)
      return static_cast<uint64_t>(x);
  }
  int64_t v = x >= kTwo63 ? INT64_MAX : x < -kTwo63 ? INT64_MIN : static_cast<int64_t>(x);
  return static_cast<To>(v);
}

/// Converts between the numeric C++ element types (not to Bool: that is
/// `x != 0`, see Cast.cpp).
template <typename To, typename From> inline To convertValue(From x) {
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>)
    return floatToInt<To>(x);
  else
    return static_cast<To>(x);
}

/// Checks the desc has at least `minIn` inputs (present) and `minOut`
/// outputs; the first of each are required by every elementwise kernel.
Status checkArity(const OpDesc &d, size_t minIn, size_t maxIn, size_t minOut,
                  size_t maxOut);

/// Checks output `i` has type `t` and shape `s`.
Status checkOutput(const OpDesc &d, size_t i, DType t, const Shape &s);

/// Normalises an axis in [-rank, rank) to [0, rank), or errors.
Expected<int64_t> normalizeAxis(const OpDesc &d, int64_t axis, int64_t rank);

/// Reads a scalar (one-element) host tensor as double; errors otherwise.
Expected<double> scalarValue(const OpDesc &d, const Tensor &t, const char *what);

} // namespace pipec::cpu::ew
