//===- runtime/cuda/Bodies.h - Kernel bodies for host and GPU --*- C++ -*-===//
//
// What one GPU thread of a kernel computes, as PIPEC_HD functions: nvcc
// compiles them into the CUDA kernels (runtime/cuda/Kernels.cu), and the
// host compiler into tests/unit/CudaBodiesTest.cpp, which checks them
// against the CPU kernels on machines without a GPU. Each body follows the
// CPU kernel's formula and order of operations:
//  - the elementwise ops use VecMath.h's float exp, tanh and erf, as the CPU
//    kernels do; where neither the CPU's nor the GPU's compiler contracts a
//    multiply-add differently (Relu, Add, Mul...) the bits are the CPU's;
//  - row reductions (softmax, the loss) add in index order, one thread per
//    row, as the CPU adds: no atomics, so a result does not depend on the
//    launch;
//  - the optimizers' updates are in runtime/cuda/UpdateBodies.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/ElementwiseRandom.h"
#include "runtime/cpu/kernels/VecMath.h"
#include "runtime/cuda/Hd.h"

#include <cmath>
#include <cstdint>

namespace pipec::cuda::body {

// ---- Elementwise, one element per thread.

PIPEC_HD inline float relu(float x) { return x < 0.0f ? 0.0f : x; } // NaN passes
PIPEC_HD inline float reluGrad(float dy, float y) { return y <= 0.0f ? 0.0f : dy; }
PIPEC_HD inline float neg(float x) { return -x; }
PIPEC_HD inline float sigmoid(float x) { return 1.0f / (1.0f + cpu::expOf(-x)); }
PIPEC_HD inline float tanhF(float x) { return cpu::tanhOf(x); }
PIPEC_HD inline float expF(float x) { return cpu::expOf(x); }
PIPEC_HD inline float geluErf(float x) {
  return 0.5f * x * (1.0f + cpu::erfOf(x * 0.70710678118654752440f));
}
PIPEC_HD inline float geluTanh(float x) {
  const float k = 0.79788456080286535588f; // sqrt(2/pi)
  return 0.5f * x * (1.0f + cpu::tanhOf(k * (x + 0.044715f * x * x * x)));
}
/// pipec:GeluGrad: dY * gelu'(X), exact (erf) or tanh form, as the CPU
/// kernel (runtime/cpu/kernels/GradGelu.cpp) computes it.
PIPEC_HD inline float geluGrad(float dy, float x, bool tanhForm) {
  if (tanhForm) {
    const float k = 0.7978845608028654f, c = 0.044715f;
    const float t = cpu::tanhOf(k * (x + c * x * x * x));
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x));
  }
  const float cdf = 0.5f * (1.0f + cpu::erfOf(x * 0.7071067811865476f));
  const float pdf = 0.3989422804014327f * cpu::expOf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}

enum class BinaryOp : int { Add, Sub, Mul, Div };
PIPEC_HD inline float binary(BinaryOp op, float a, float b) {
  switch (op) {
  case BinaryOp::Add: return a + b;
  case BinaryOp::Sub: return a - b;
  case BinaryOp::Mul: return a * b;
  case BinaryOp::Div: return a / b;
  }
  return 0.0f;
}

/// Numpy broadcasting of an input to an output of up to kMaxRank axes: the
/// output's dims and, per axis, the input's stride (0 where the input's
/// axis is 1 or missing), both aligned to the output's last axis.
inline constexpr int kMaxRank = 8;
struct Broadcast {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

/// The input offset of output element `i`.
PIPEC_HD inline int64_t broadcastOffset(int64_t i, const Broadcast &b) {
  int64_t off = 0;
  for (int a = b.rank - 1; a >= 0; --a) {
    const int64_t d = b.dims[a];
    off += (i % d) * b.strides[a];
    i /= d;
  }
  return off;
}

/// The Broadcast of an input of shape `in` (rank `inRank`) to `out` (rank
/// `outRank` >= inRank, at most kMaxRank; every input dim 1 or equal).
inline Broadcast makeBroadcast(const int64_t *out, int outRank, const int64_t *in, int inRank) {
  Broadcast b;
  b.rank = outRank;
  int64_t stride = 1;
  for (int a = outRank - 1; a >= 0; --a) {
    const int ia = a - (outRank - inRank);
    b.dims[a] = out[a];
    const int64_t d = ia >= 0 ? in[ia] : 1;
    b.strides[a] = d == 1 ? 0 : stride;
    stride *= d;
  }
  return b;
}

// ---- Rows, one row per thread, in index order.

/// Softmax (or LogSoftmax) of n elements strided by `stride`: the maximum,
PIPEC_HD inline float treeSum(const float *x, int64_t n, int lanes, float *partial);

/// exp(x - max), their sum, then the scale (or the shift), as the CPU
/// kernel's rows: a contiguous row (stride 1) sums in treeSum's 16 lanes,
/// a strided one in index order.
template <bool Log>
PIPEC_HD inline void softmaxRow(const float *x, float *y, int64_t n, int64_t stride) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i)
    m = x[i * stride] > m ? x[i * stride] : m;
  for (int64_t i = 0; i < n; ++i)
    y[i * stride] = cpu::expOf(x[i * stride] - m);
  float s = 0.0f;
  if (stride == 1) {
    float partial[16];
    s = treeSum(y, n, 16, partial);
  } else {
    for (int64_t i = 0; i < n; ++i)
      s += y[i * stride];
  }
  if constexpr (Log) {
    const float shift = m + logf(s);
    for (int64_t i = 0; i < n; ++i)
      y[i * stride] = x[i * stride] - shift;
  } else {
    const float r = 1.0f / s;
    for (int64_t i = 0; i < n; ++i)
      y[i * stride] *= r;
  }
}

/// pipec:MaskedSoftmax's row `row` of n elements: v = fill where the mask
/// (broadcast to x by `mask`) equals fillWhen, x * scale elsewhere, into
/// y, then softmaxRow in place: the CPU kernel's arithmetic.
PIPEC_HD inline void maskedSoftmaxRow(const float *x, const bool *cond, float *y, int64_t n, int64_t row,
                                      const Broadcast &mask, float scale, float fill, bool fillWhen) {
  const int64_t base = row * n;
  for (int64_t i = 0; i < n; ++i)
    y[base + i] = cond[broadcastOffset(base + i, mask)] == fillWhen ? fill : x[base + i] * scale;
  softmaxRow<false>(y + base, y + base, n, 1);
}

/// One step of a fused elementwise program (support/ElementwiseProgram.h):
/// the unfused kernels' arithmetic, one IEEE operation each.
PIPEC_HD inline float ewApply(int32_t op, float a, float b) {
#if defined(__CUDA_ARCH__)
  // Rounded intrinsics: nvcc would contract a product and a sum of two
  // steps into one FMA, which the CPU paths never do.
  switch (op) {
  case 0: return __fadd_rn(a, b);
  case 1: return __fsub_rn(a, b);
  case 2: return __fmul_rn(a, b);
  case 3: return __fdiv_rn(a, b);
  default: break;
  }
#endif
  switch (op) {
  case 0: return a + b;
  case 1: return a - b;
  case 2: return a * b;
  case 3: return a / b;
  case 4: return -a;
  case 5: return bitsFloat(floatBits(a) & 0x7fffffffu); // fabs
  case 6: return a < 0.0f ? 0.0f : a;
  case 7: return sqrtf(a);
  case 8: return b <= 0.0f ? 0.0f : a;
  default: return a;
  }
}

/// A fused elementwise program as a CUDA kernel takes it by value: at
/// most kEwMaxInputs inputs, each read at (i / div) % mod, and kEwMaxSteps
/// steps of (op, a, b) (support/ElementwiseProgram.h).
inline constexpr int kEwMaxInputs = 16, kEwMaxSteps = 64;
struct EwDeviceProgram {
  int32_t numInputs = 0, numSteps = 0;
  int32_t ops[3 * kEwMaxSteps] = {};
  int64_t div[kEwMaxInputs] = {}, mod[kEwMaxInputs] = {};
};
struct EwInputs {
  const float *p[kEwMaxInputs] = {};
};

/// Output element i of a fused elementwise program: ewApply step by step.
PIPEC_HD inline float ewEvaluate(const EwDeviceProgram &prog, const EwInputs &in, int64_t i) {
  float v[kEwMaxInputs + kEwMaxSteps];
  for (int32_t k = 0; k < prog.numInputs; ++k)
    v[k] = in.p[k][(i / prog.div[k]) % prog.mod[k]];
  for (int32_t s = 0; s < prog.numSteps; ++s)
    v[prog.numInputs + s] = ewApply(prog.ops[3 * s], v[prog.ops[3 * s + 1]], v[prog.ops[3 * s + 2]]);
  return v[prog.numInputs + prog.numSteps - 1];
}

/// A sum of n values in a fixed tree, the same on host and GPU: `lanes`
/// partial sums (lane l adds elements l, l + lanes, ... in order), then the
/// partials added pairwise (lane l += lane l + h for h = lanes/2, ..., 1;
/// lanes a power of two). A GPU block adds this way with one thread per
/// lane and no atomics; the host version gives its bits.
PIPEC_HD inline float treeSum(const float *x, int64_t n, int lanes, float *partial) {
  for (int l = 0; l < lanes; ++l) {
    float s = 0.0f;
    for (int64_t i = l; i < n; i += lanes)
      s += x[i];
    partial[l] = s;
  }
  for (int h = lanes / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l)
      partial[l] += partial[l + h];
  return partial[0];
}

/// A reduction's index arithmetic: for output element o, the input offset
/// of its first element (the kept axes) and of the j-th element it sums
/// (the reduced axes, row-major).
struct Reduction {
  int keptRank = 0, reducedRank = 0;
  int64_t keptDims[kMaxRank] = {}, keptStrides[kMaxRank] = {};
  int64_t reducedDims[kMaxRank] = {}, reducedStrides[kMaxRank] = {};
  int64_t reducedCount = 1;
};

PIPEC_HD inline int64_t mixedOffset(int64_t i, int rank, const int64_t *dims, const int64_t *strides) {
  int64_t off = 0;
  for (int a = rank - 1; a >= 0; --a) {
    off += (i % dims[a]) * strides[a];
    i /= dims[a];
  }
  return off;
}

/// The geometry of summing a row-major tensor of `rank` (at most
/// kMaxRank) dims over the axes `reduced` marks. Adjacent axes of one kind
/// are merged: the same elements in the same order, with fewer divisions
/// per element (a bias gradient's [B, S, D] over {0, 1} is [B S, D] over
/// {0}). Host code (the kernels' makers and the tests).
inline Reduction reductionOf(const int64_t *dims, int rank, const bool *reduced) {
  Reduction r;
  int64_t strides[kMaxRank] = {};
  int64_t stride = 1;
  for (int a = rank - 1; a >= 0; --a) {
    strides[a] = stride;
    stride *= dims[a];
  }
  for (int a = 0; a < rank; ++a) {
    const bool red = reduced[a];
    int &n = red ? r.reducedRank : r.keptRank;
    int64_t *d = red ? r.reducedDims : r.keptDims, *s = red ? r.reducedStrides : r.keptStrides;
    if (red)
      r.reducedCount *= dims[a];
    if (a > 0 && reduced[a - 1] == red) { // the axis before, of the same kind
      d[n - 1] *= dims[a];
      s[n - 1] = strides[a];
    } else {
      d[n] = dims[a];
      s[n] = strides[a];
      ++n;
    }
  }
  if (r.keptRank == 0) { // one output element
    r.keptDims[0] = 1;
    r.keptStrides[0] = 0;
    r.keptRank = 1;
  }
  return r;
}

/// ReduceSum of output element o over its reduced elements [lo, hi), in
/// index order.
PIPEC_HD inline float reduceSumRange(const float *x, int64_t o, int64_t lo, int64_t hi, const Reduction &r) {
  const int64_t base = mixedOffset(o, r.keptRank, r.keptDims, r.keptStrides);
  float s = 0.0f;
  if (r.reducedRank == 1) {
    const int64_t stride = r.reducedStrides[0];
    for (int64_t j = lo; j < hi; ++j)
      s += x[base + j * stride];
    return s;
  }
  for (int64_t j = lo; j < hi; ++j)
    s += x[base + mixedOffset(j, r.reducedRank, r.reducedDims, r.reducedStrides)];
  return s;
}

/// ReduceSum of output element o: its elements added in index order.
PIPEC_HD inline float reduceSumElement(const float *x, int64_t o, const Reduction &r) {
  return reduceSumRange(x, o, 0, r.reducedCount, r);
}

// ---- Long sums in chunks. A sum of n > 2 kReduceChunk terms per output
// (a bias or scale gradient: thousands of rows for hundreds of columns)
// would leave most of the GPU idle at one thread an output: its terms are
// cut into chunks of kReduceChunk, each chunk summed in index order by a
// thread of its own into the workspace (parts[chunk * outputs + o]), then
// the chunks' sums added in chunk order. The order depends on the shapes
// alone, so results stay deterministic and independent of the launch.

inline constexpr int64_t kReduceChunk = 256;
/// The chunks of a sum of n terms (1: summed whole).
PIPEC_HD inline int64_t reduceChunks(int64_t n) {
  return n > 2 * kReduceChunk ? (n + kReduceChunk - 1) / kReduceChunk : 1;
}
/// The chunks' sums the workspace holds for `outputs` sums of n terms
/// each (0 where they are summed whole).
inline int64_t chunkParts(int64_t n, int64_t outputs) {
  const int64_t chunks = reduceChunks(n);
  return chunks > 1 ? chunks * outputs : 0;
}
/// The end of chunk c of a sum of n terms (its start: c kReduceChunk).
PIPEC_HD inline int64_t chunkEnd(int64_t c, int64_t n) {
  return (c + 1) * kReduceChunk < n ? (c + 1) * kReduceChunk : n;
}
/// ReduceSum's parts in the workspace: floats (0 where summed whole).
inline int64_t reduceSumParts(int64_t outN, const Reduction &r) { return chunkParts(r.reducedCount, outN); }
/// Chunk c's sum for output element o.
PIPEC_HD inline float reduceSumChunk(const float *x, int64_t o, int64_t c, const Reduction &r) {
  return reduceSumRange(x, o, c * kReduceChunk, chunkEnd(c, r.reducedCount), r);
}
/// Output element o from its chunks' sums, in chunk order.
template <typename T> PIPEC_HD inline T sumOfChunks(const T *parts, int64_t o, int64_t outN, int64_t chunks) {
  T s = T(0);
  for (int64_t c = 0; c < chunks; ++c)
    s += parts[c * outN + o];
  return s;
}

/// The other reductions (runtime/cpu/kernels/Reduce.cpp's, on float32):
/// one thread an output, its elements in index order; float accumulators;
/// Max and Min propagate NaN; LogSumExp shifts by the maximum (0 when that
/// is not finite).
enum class ReduceOp : int32_t { Sum, Mean, SumSquare, L1, L2, Prod, Max, Min, LogSumExp };
PIPEC_HD inline float reduceElement(const float *x, int64_t o, const Reduction &r, ReduceOp op) {
  const float *base = x + mixedOffset(o, r.keptRank, r.keptDims, r.keptStrides);
  const int64_t n = r.reducedCount;
  auto at = [&](int64_t j) { return base[mixedOffset(j, r.reducedRank, r.reducedDims, r.reducedStrides)]; };
  switch (op) {
  case ReduceOp::Max:
  case ReduceOp::Min:
  case ReduceOp::LogSumExp: {
    const bool isMin = op == ReduceOp::Min;
    float m = isMin ? INFINITY : -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float v = at(j);
      m = isMin ? ((m < v || m != m) ? m : v) : ((m > v || m != m) ? m : v);
    }
    if (op != ReduceOp::LogSumExp)
      return m;
    const float s = m - m == 0.0f ? m : 0.0f; // finite, else 0
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j)
      acc += expf(at(j) - s);
    return logf(acc) + s;
  }
  case ReduceOp::Prod: {
    float acc = 1.0f;
    for (int64_t j = 0; j < n; ++j)
      acc *= at(j);
    return acc;
  }
  default: {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float v = at(j);
      acc += op == ReduceOp::SumSquare || op == ReduceOp::L2 ? v * v : op == ReduceOp::L1 ? fabsf(v) : v;
    }
    return op == ReduceOp::Mean ? acc / static_cast<float>(n) : op == ReduceOp::L2 ? sqrtf(acc) : acc;
  }
  }
}

/// The maximum of C scores x[c * stride] and the sum, in class order, of
/// exp(x - max).
struct MaxExpSum {
  float max, sum;
};
PIPEC_HD inline MaxExpSum maxExpSum(const float *x, int64_t C, int64_t stride) {
  float m = x[0];
  for (int64_t c = 1; c < C; ++c)
    m = x[c * stride] > m ? x[c * stride] : m;
  float s = 0.0f;
  for (int64_t c = 0; c < C; ++c)
    s += cpu::expOf(x[c * stride] - m);
  return {m, s};
}

/// Softmax cross-entropy at one position with target class t:
/// log(sum exp(x - max)) + max - x[t].
PIPEC_HD inline float sceLoss(const float *x, int64_t C, int64_t stride, int64_t t) {
  const MaxExpSum ms = maxExpSum(x, C, stride);
  return logf(ms.sum) + ms.max - x[t * stride];
}

/// Its gradient with respect to the scores, scaled by g:
/// dx[c] = g (softmax(x)[c] - [c == t]).
PIPEC_HD inline void sceGrad(const float *x, float *dx, int64_t C, int64_t stride, int64_t t, float g) {
  const MaxExpSum ms = maxExpSum(x, C, stride);
  const float m = ms.max, r = 1.0f / ms.sum;
  for (int64_t c = 0; c < C; ++c)
    dx[c * stride] = g * (cpu::expOf(x[c * stride] - m) * r - (c == t ? 1.0f : 0.0f));
}

// ---- Layer normalization, one row per thread (statistics in double, in
// index order: the CPU kernels add the same terms in lanes).

struct RowStats {
  double mean, rstd;
};
PIPEC_HD inline RowStats layerNormStats(const float *x, int64_t cols, double eps) {
  double s = 0.0;
  for (int64_t i = 0; i < cols; ++i)
    s += x[i];
  const double mean = cols ? s / static_cast<double>(cols) : 0.0;
  double q = 0.0;
  for (int64_t i = 0; i < cols; ++i) {
    const double d = x[i] - mean;
    q += d * d;
  }
  const double var = cols ? q / static_cast<double>(cols) : 0.0;
  return {mean, 1.0 / sqrt(var + eps)};
}

/// Y = (X - mean) rstd scale + bias over a row (bias may be null).
PIPEC_HD inline void layerNormRow(const float *x, const float *scale, const float *bias, float *y, int64_t cols,
                                  double eps) {
  const RowStats st = layerNormStats(x, cols, eps);
  for (int64_t i = 0; i < cols; ++i) {
    const double v = (x[i] - st.mean) * st.rstd * scale[i] + (bias ? bias[i] : 0.0f);
    y[i] = static_cast<float>(v);
  }
}

/// dX of a row: rstd (g - mean(g) - xhat mean(g xhat)), g = dY scale.
PIPEC_HD inline void layerNormGradRow(const float *dy, const float *x, const float *scale, float *dx,
                                      int64_t cols, double eps) {
  const RowStats st = layerNormStats(x, cols, eps);
  double mg = 0.0, mgx = 0.0;
  for (int64_t i = 0; i < cols; ++i) {
    const double g = static_cast<double>(dy[i]) * scale[i];
    mg += g;
    mgx += g * (x[i] - st.mean) * st.rstd;
  }
  mg /= static_cast<double>(cols);
  mgx /= static_cast<double>(cols);
  for (int64_t i = 0; i < cols; ++i) {
    const double g = static_cast<double>(dy[i]) * scale[i];
    const double xhat = (x[i] - st.mean) * st.rstd;
    dx[i] = static_cast<float>(st.rstd * (g - mg - xhat * mgx));
  }
}

/// dScale of column `c` over rows [r0, r1): the sum of dY xhat in row
/// order, with each row's statistics (stats[r]).
PIPEC_HD inline double layerNormScaleGradRows(const float *dy, const float *x, const RowStats *stats, int64_t r0,
                                              int64_t r1, int64_t cols, int64_t c) {
  double acc = 0.0;
  for (int64_t r = r0; r < r1; ++r)
    acc += static_cast<double>(dy[r * cols + c]) * (x[r * cols + c] - stats[r].mean) * stats[r].rstd;
  return acc;
}
/// dScale of column `c`: over every row.
PIPEC_HD inline float layerNormScaleGradColumn(const float *dy, const float *x, const RowStats *stats,
                                               int64_t rows, int64_t cols, int64_t c) {
  return static_cast<float>(layerNormScaleGradRows(dy, x, stats, 0, rows, cols, c));
}
/// Chunk `k` of column `c`'s sum (rows in chunks of kReduceChunk; the
/// chunks' sums then added in order: sumOfChunks over doubles).
PIPEC_HD inline double layerNormScaleGradChunk(const float *dy, const float *x, const RowStats *stats, int64_t rows,
                                               int64_t cols, int64_t c, int64_t k) {
  return layerNormScaleGradRows(dy, x, stats, k * kReduceChunk, chunkEnd(k, rows), cols, c);
}

/// pipec:LogSoftmaxGrad of a row strided by `stride`: dX = dY - exp(Y)
/// sum(dY), the sum in index order (the CPU kernel's).
PIPEC_HD inline void logSoftmaxGradRow(const float *dy, const float *y, float *dx, int64_t n, int64_t stride) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    s += dy[i * stride];
  for (int64_t i = 0; i < n; ++i)
    dx[i * stride] = dy[i * stride] - cpu::expOf(y[i * stride]) * s;
}

/// SoftmaxGrad of a row strided by `stride`: dX = Y (dY - sum(dY Y)).
PIPEC_HD inline void softmaxGradRow(const float *dy, const float *y, float *dx, int64_t n, int64_t stride) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    s += dy[i * stride] * y[i * stride];
  for (int64_t i = 0; i < n; ++i)
    dx[i * stride] = y[i * stride] * (dy[i * stride] - s);
}

// ---- The other elementwise ops of ONNX on float32: one switch each for
// one input and two, the CPU functors' formulas (runtime/cpu/kernels/
// Unary.cpp, Binary.cpp, Variadic.cpp) with their std::max/min and NaN
// conventions, in float (the f-suffixed C functions, the host's and
// CUDA's libm: within a few ulp of each other).

enum class MathOp : int32_t {
  // One input, float out.
  Abs, Sign, Ceil, Floor, Round, Acos, Acosh, Asin, Asinh, Atan, Atanh, Cos, Cosh, Sin, Sinh, Tan, Log, Sqrt,
  Reciprocal, Softplus, Softsign, Mish, Celu, Elu, Selu, LeakyRelu, ThresholdedRelu, HardSigmoid, HardSwish,
  // One input, bool out (Not takes bool).
  IsNaN, IsInf, Not,
  // Two inputs, float out.
  Pow, PRelu, Max, Min, Sum,
  // Two inputs, bool out (And, Or, Xor take bool).
  Equal, Greater, GreaterOrEqual, Less, LessOrEqual, And, Or, Xor
};
struct MathParams {
  MathOp op = MathOp::Abs;
  float alpha = 0, beta = 0;
  bool negative = true, positive = true; ///< IsInf
};

PIPEC_HD inline float fmax0(float v) { return 0.0f < v ? v : 0.0f; } // std::max(0, v)
PIPEC_HD inline float fmin0(float v) { return v < 0.0f ? v : 0.0f; } // std::min(0, v)
PIPEC_HD inline float fmin1(float v) { return v < 1.0f ? v : 1.0f; } // std::min(1, v)
PIPEC_HD inline float softplusOf(float x) {
  return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

/// A one-input op on x (bool results as 0 or 1).
PIPEC_HD inline float mathUnary(const MathParams &p, float x) {
  switch (p.op) {
  case MathOp::Abs: return fabsf(x);
  case MathOp::Sign: return x > 0 ? 1.0f : x < 0 ? -1.0f : x == 0 ? 0.0f : x;
  case MathOp::Ceil: return ceilf(x);
  case MathOp::Floor: return floorf(x);
  case MathOp::Round: return nearbyintf(x);
  case MathOp::Acos: return acosf(x);
  case MathOp::Acosh: return acoshf(x);
  case MathOp::Asin: return asinf(x);
  case MathOp::Asinh: return asinhf(x);
  case MathOp::Atan: return atanf(x);
  case MathOp::Atanh: return atanhf(x);
  case MathOp::Cos: return cosf(x);
  case MathOp::Cosh: return coshf(x);
  case MathOp::Sin: return sinf(x);
  case MathOp::Sinh: return sinhf(x);
  case MathOp::Tan: return tanf(x);
  case MathOp::Log: return logf(x);
  case MathOp::Sqrt: return sqrtf(x);
  case MathOp::Reciprocal: return 1.0f / x;
  case MathOp::Softplus: return softplusOf(x);
  case MathOp::Softsign: return x / (1.0f + fabsf(x));
  case MathOp::Mish: return x * cpu::tanhOf(softplusOf(x));
  case MathOp::Celu: return fmax0(x) + fmin0(p.alpha * (cpu::expOf(x / p.alpha) - 1.0f));
  case MathOp::Elu: return x >= 0.0f ? x : p.alpha * (cpu::expOf(x) - 1.0f);
  case MathOp::Selu: return x > 0.0f ? p.beta * x : p.beta * (p.alpha * cpu::expOf(x) - p.alpha);
  case MathOp::LeakyRelu: return x >= 0.0f ? x : p.alpha * x;
  case MathOp::ThresholdedRelu: return x > p.alpha ? x : 0.0f;
  case MathOp::HardSigmoid: return fmax0(fmin1(p.alpha * x + p.beta));
  case MathOp::HardSwish: return x * fmax0(fmin1(x / 6.0f + 0.5f));
  case MathOp::IsNaN: return x != x ? 1.0f : 0.0f;
  case MathOp::IsInf: return (p.positive && x == INFINITY) || (p.negative && x == -INFINITY) ? 1.0f : 0.0f;
  case MathOp::Not: return x != 0.0f ? 0.0f : 1.0f;
  default: return 0.0f;
  }
}

/// A two-input op (bool inputs and results as 0 or 1).
PIPEC_HD inline float mathBinary(MathOp op, float a, float b) {
  switch (op) {
  case MathOp::Pow: return powf(a, b);
  case MathOp::PRelu: return a < 0.0f ? b * a : a;
  case MathOp::Max: return (a > b || a != a) ? a : b;
  case MathOp::Min: return (a < b || a != a) ? a : b;
  case MathOp::Sum: return a + b;
  case MathOp::Equal: return a == b ? 1.0f : 0.0f;
  case MathOp::Greater: return a > b ? 1.0f : 0.0f;
  case MathOp::GreaterOrEqual: return a >= b ? 1.0f : 0.0f;
  case MathOp::Less: return a < b ? 1.0f : 0.0f;
  case MathOp::LessOrEqual: return a <= b ? 1.0f : 0.0f;
  case MathOp::And: return (a != 0.0f) && (b != 0.0f) ? 1.0f : 0.0f;
  case MathOp::Or: return (a != 0.0f) || (b != 0.0f) ? 1.0f : 0.0f;
  case MathOp::Xor: return (a != 0.0f) != (b != 0.0f) ? 1.0f : 0.0f;
  default: return 0.0f;
  }
}
/// Whether an op reads (Not, And, Or, Xor) or writes (the predicates and
/// comparisons) bool.
PIPEC_HD inline bool mathReadsBool(MathOp op) {
  return op == MathOp::Not || op == MathOp::And || op == MathOp::Or || op == MathOp::Xor;
}
PIPEC_HD inline bool mathWritesBool(MathOp op) {
  return op == MathOp::IsNaN || op == MathOp::IsInf || op == MathOp::Not || op >= MathOp::Equal;
}

/// Clip: min(max(x, lo), hi) as the CPU kernel orders it (NaN passes).
PIPEC_HD inline float clipOf(float x, float lo, float hi) {
  const float v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

/// ArgMax / ArgMin's comparison (runtime/cpu/kernels/ArgMinMax.cpp):
/// whether x replaces the best b; NaN beats any number, ties go to the
/// first (or, with `last`, the last) index.
PIPEC_HD inline bool argBetter(float x, float b, bool max, bool last) {
  if (b != b)
    return last && x != x;
  if (x != x)
    return true;
  return max ? (last ? x >= b : x > b) : (last ? x <= b : x < b);
}
/// The index along an axis of len elements strided by `inner`.
PIPEC_HD inline int64_t argIndex(const float *x, int64_t len, int64_t inner, bool max, bool last) {
  int64_t best = 0;
  for (int64_t k = 1; k < len; ++k)
    if (argBetter(x[k * inner], x[best * inner], max, last))
      best = k;
  return best;
}

/// Cast of one value (runtime/cpu/kernels/Cast.cpp): to bool x != 0 (NaN
/// is true); float to integer truncates toward zero, NaN gives 0 and values
/// out of int64's range saturate there before the narrowing (the CPU's
/// ew::floatToInt, for the signed and 8-bit types the GPU casts among).
template <typename To, typename From> PIPEC_HD inline To castValue(From x, bool toBool) {
  if (toBool)
    return static_cast<To>(x != From(0) ? 1 : 0);
  if constexpr (From(0.5) != From(0) && To(0.5) == To(0)) { // float to integer
    constexpr From kTwo63 = From(9223372036854775808.0);
    if (!(x == x))
      return To(0);
    const int64_t v = x >= kTwo63 ? INT64_MAX : x < -kTwo63 ? INT64_MIN : static_cast<int64_t>(x);
    return static_cast<To>(v);
  } else {
    return static_cast<To>(x);
  }
}

/// Dropout in training on the 4 elements of Philox block `b` (n in all):
/// element e kept when word e % 4 >= threshold, then scaled; the mask 1
/// where kept (runtime/cpu/kernels/Dropout.cpp's rule and stream).
PIPEC_HD inline void dropoutBlock(const cpu::ew::RandomStream &stream, int64_t b, const float *x, float *y,
                                  uint8_t *mask, int64_t n, uint64_t threshold, float scale) {
  const auto r = stream.block(static_cast<uint64_t>(b));
  for (int64_t j = 0; j < 4 && 4 * b + j < n; ++j) {
    const int64_t e = 4 * b + j;
    const bool keep = r[static_cast<size_t>(j)] >= threshold;
    y[e] = keep ? x[e] * scale : 0.0f;
    if (mask)
      mask[e] = keep ? 1 : 0;
  }
}

// ---- GatherGrad from the indices sorted by row.

/// The row index j gathers: idx < 0 counts from the end; an index outside
/// [0, len) (which Gather refused) sorts last and is read by no row.
PIPEC_HD inline int32_t gatherRow(int64_t idx, int64_t len) {
  const int64_t r = idx < 0 ? idx + len : idx;
  return r < 0 || r >= len ? static_cast<int32_t>(len) : static_cast<int32_t>(r);
}

/// The first position p of `keys` (ascending, n of them) with keys[p] >= r.
PIPEC_HD inline int64_t lowerBound(const int32_t *keys, int64_t n, int32_t r) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < r)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// pipec:GatherGrad's element (o, r, k): the dY rows gathered from row r,
/// summed in index order. `keys` are the rows of the `count` indices in
/// ascending order and `pos` their positions, ascending within a row (a
/// stable sort), so the sum takes the order the CPU kernel's does.
PIPEC_HD inline float gatherGradSorted(const float *dy, const int32_t *keys, const int32_t *pos, int64_t count,
                                       int64_t inner, int64_t o, int32_t r, int64_t k) {
  float s = 0.0f;
  for (int64_t p = lowerBound(keys, count, r); p < count && keys[p] == r; ++p)
    s += dy[(o * count + pos[p]) * inner + k];
  return s;
}

} // namespace pipec::cuda::body
