//===- runtime/cpu/kernels/LinalgCommon.h - Linalg kernel helpers -*- C++ -*-===//
//
// Helpers shared by the linear algebra, convolution, pooling and
// normalization kernels (the "Linalg" family, table Linalg.def): sums in a
// fixed order, type dispatch, output and workspace plumbing, and the window
// geometry of Conv/ConvTranspose/Pool (auto_pad, pads, ceil_mode) resolved
// once in the factories. The GEMM front end is LinalgGemm.h.
//
// Determinism: every loop written here parallelizes over independent outputs
// only and reduces in a fixed order, so results do not depend on the OpenMP
// thread count.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/VecMath.h"
#include "support/FusedOps.h"
#include "support/Parallel.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace pipec::cpu {

/// Accumulator type of the reductions we write: double for floating point
/// (sums over a window or a row stay accurate), the type itself otherwise.
template <typename T> using LinalgAcc = std::conditional_t<std::is_floating_point_v<T>, double, T>;

/// Sum of f(i) over i in [0, n) in double, in 16 interleaved lanes (lane j
/// takes the i = j mod 16) combined in a fixed order: the order depends on
/// n only, and the compiler can vectorize the lanes, which one serial chain
/// of dependent additions would not allow.
template <typename F> double laneSum(int64_t n, F &&f) {
  double acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += f(i + j);
  for (int j = 0; i < n; ++i, ++j)
    acc[j] += f(i);
  // The lanes pairwise, halving: written out, since GCC 12 kept the loop
  // over the width scalar, through the stack; the order, and so the bits,
  // are the same either way.
  for (int j = 0; j < 8; ++j)
    acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j)
    acc[j] += acc[j + 4];
  for (int j = 0; j < 2; ++j)
    acc[j] += acc[j + 2];
  acc[0] += acc[1];
  return acc[0];
}

/// laneSum of f and of g at once, one pass over i: each sum bitwise
/// laneSum's own (the same lanes, the same tree).
template <typename F, typename G> std::pair<double, double> laneSum2(int64_t n, F &&f, G &&g) {
  double a[16] = {}, b[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      a[j] += f(i + j);
      b[j] += g(i + j);
    }
  for (int j = 0; i < n; ++i, ++j) {
    a[j] += f(i);
    b[j] += g(i);
  }
  for (int j = 0; j < 8; ++j) {
    a[j] += a[j + 8];
    b[j] += b[j + 8];
  }
  for (int j = 0; j < 4; ++j) {
    a[j] += a[j + 4];
    b[j] += b[j + 4];
  }
  for (int j = 0; j < 2; ++j) {
    a[j] += a[j + 2];
    b[j] += b[j + 2];
  }
  return {a[0] + a[1], b[0] + b[1]};
}

/// Sum of x[0..n) in double, in laneSum's fixed lane order.
template <typename T> double linalgSum(const T *x, int64_t n) {
  return laneSum(n, [x](int64_t i) { return static_cast<double>(x[i]); });
}

/// Sum of (x[i] - mean)^2 over x[0..n), in laneSum's fixed lane order.
template <typename T> double linalgSumSqDev(const T *x, int64_t n, double mean) {
  return laneSum(n, [x, mean](int64_t i) {
    double d = static_cast<double>(x[i]) - mean;
    return d * d;
  });
}

/// Whether output slot `i` is requested by the node.
inline bool linalgHasOutput(const OpDesc &d, size_t i) {
  return i < d.outputs.size() && d.outputs[i].dtype != DType::Undefined;
}

/// What BatchNormalization's gradient kernels (pipec:BatchNormalizationStats,
/// Grad, ScaleGrad) share: the [N, C, inner] geometry and the mode.
struct BnGradGeom {
  int64_t N = 0, C = 0, inner = 0;
  double epsilon = 1e-5;
  int trainingAttr = -1; ///< training_mode if given, else -1

  bool training(const ExecContext &ctx) const { return trainingAttr >= 0 ? trainingAttr == 1 : ctx.training; }
  bool parallel() const { return N * C * inner > 16384; }
};

/// Checks that input `xIdx` is X of rank >= 2, inputs `perChannel` and
/// outputs `perChannelOut` are [C] of X's dtype, and (if dyIdx >= 0) input
/// dyIdx is typed as X; fills the geometry (runtime/cpu/kernels/
/// GradBatchNorm.cpp; the CUDA kernels check their nodes with it too).
Status linalgCheckBnGrad(const OpDesc &d, size_t numIn, size_t numOut, int dyIdx, size_t xIdx,
                         const std::vector<size_t> &perChannel, const std::vector<size_t> &perChannelOut,
                         BnGradGeom &g);

/// Rounds a workspace pointer up to 64 bytes (evaluate() and the executor
/// hand out workspaceBytes() + 64 bytes with no alignment promise).
inline unsigned char *linalgAlign(void *p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<unsigned char *>((v + 63) & ~uintptr_t(63));
}
inline size_t linalgRoundUp(size_t bytes) { return (bytes + 63) & ~size_t(63); }

/// Runs `f(T{})` for a floating-point dtype; an error otherwise.
template <typename F> Expected<KernelPtr> linalgDispatchFloat(const OpDesc &d, DType t, F &&f) {
  switch (t) {
  case DType::F32:
    return f(float{});
  case DType::F64:
    return f(double{});
  default:
    return errorf(d.where(), ": element type ", dtypeName(t), " is not supported (f32, f64)");
  }
}

/// Runs `f(T{})` for any numeric dtype pipec computes with.
template <typename F> Expected<KernelPtr> linalgDispatchNumeric(const OpDesc &d, DType t, F &&f) {
  switch (t) {
  case DType::F32:
    return f(float{});
  case DType::F64:
    return f(double{});
  case DType::I32:
    return f(int32_t{});
  case DType::I64:
    return f(int64_t{});
  case DType::U32:
    return f(uint32_t{});
  case DType::U64:
    return f(uint64_t{});
  default:
    return errorf(d.where(), ": element type ", dtypeName(t),
                  " is not supported (f32, f64, i32, i64, u32, u64)");
  }
}

/// Naive row-major C = alpha * op(A) * op(B) + beta * C, for integer types
/// and tiny products where a BLAS call costs more than the work. Each
/// output element sums over k in ascending order.
template <typename T>
void linalgGemmLoop(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A,
                    int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k)
        acc += (ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
      T &c = C[m * ldc + n];
      c = beta == T(0) ? T(alpha * acc) : T(alpha * acc + beta * c);
    }
}

/// One row-major GEMM call: cpu::sgemm (oneDNN or OpenBLAS, runtime/cpu/Gemm.h)
/// for f32, cblas_dgemm for f64, the loop above otherwise. Kernels use
/// LinalgBatchedGemm, which makes sure the call runs on the calling thread
/// only.
template <typename T>
void linalgGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
                const T *B, int64_t ldb, T beta, T *C, int64_t ldc, bool oneDnn = true) {
  if (M == 0 || N == 0)
    return;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (K == 0) { // Some BLAS builds reject K = 0; the result is beta * C.
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          C[m * ldc + n] = beta == T(0) ? T(0) : T(beta * C[m * ldc + n]);
      return;
    }
    auto TA = ta ? CblasTrans : CblasNoTrans;
    auto TB = tb ? CblasTrans : CblasNoTrans;
    // BLAS requires leading dimensions >= 1 even for empty or 1-wide operands.
    lda = std::max<int64_t>(lda, 1);
    ldb = std::max<int64_t>(ldb, 1);
    ldc = std::max<int64_t>(ldc, 1);
    if constexpr (std::is_same_v<T, float>)
      sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, oneDnn);
    else
      cblas_dgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    linalgGemmLoop(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

/// While alive, the calling thread's OpenMP budget is one thread (BLAS and
/// oneDNN calls then run on it alone); the previous budget comes back after.
class LinalgOneThread {
public:
  LinalgOneThread() : previous_(omp_get_max_threads()) {
    if (previous_ != 1)
      omp_set_num_threads(1);
  }
  ~LinalgOneThread() {
    if (previous_ != 1)
      omp_set_num_threads(previous_);
  }
  LinalgOneThread(const LinalgOneThread &) = delete;
  LinalgOneThread &operator=(const LinalgOneThread &) = delete;

private:
  int previous_;
};

/// What a GEMM applies to C after its product, block by block while the
/// block is in cache (pipec:FusedGemm's epilogue): on a rows x cols block
/// of C (rows ldc apart), `bias` (the block's cols values, or null) added
/// to every row, then `act`, each one IEEE
/// operation per element as the unfused Add and activation kernels do.
template <typename T>
void linalgEpilogue(T *c, int64_t rows, int64_t cols, int64_t ldc, const T *bias, FusedActivation act) {
  auto apply = [&](auto f) {
    for (int64_t i = 0; i < rows; ++i) {
      T *row = c + i * ldc;
      if (bias)
        for (int64_t j = 0; j < cols; ++j)
          row[j] = f(row[j] + bias[j]);
      else
        for (int64_t j = 0; j < cols; ++j)
          row[j] = f(row[j]);
    }
  };
  switch (act) {
  case FusedActivation::None:
    if (bias)
      apply([](T x) { return x; });
    return;
  case FusedActivation::Relu: return apply([](T x) { return reluOf(x); });
  case FusedActivation::GeluErf: return apply([](T x) { return geluErfOf(x); });
  case FusedActivation::GeluTanh: return apply([](T x) { return geluTanhOf(x); });
  }
}

/// Broadcasts batch shapes `a` and `b` (numpy rules, right-aligned) into
/// `out`; false if they are incompatible.
inline bool linalgBroadcastShapes(const Shape &a, const Shape &b, Shape &out) {
  size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

/// Element strides of `s` when broadcast to `target` (right-aligned; 0 on
/// broadcast dimensions). `s` must be broadcastable to `target`.
inline std::vector<int64_t> linalgBroadcastStrides(const Shape &s, const Shape &target) {
  std::vector<int64_t> st(target.size(), 0);
  std::vector<int64_t> own = rowMajorStrides(s);
  size_t off = target.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    st[off + i] = s[i] == 1 ? 0 : own[i];
  return st;
}

/// Window geometry of one spatial dimension of Conv, ConvTranspose or a pool.
struct LinalgWindowDim {
  int64_t in = 0, out = 0, kernel = 1, stride = 1, dilation = 1;
  int64_t padBegin = 0, padEnd = 0;
  int64_t extent() const { return (kernel - 1) * dilation + 1; }
};

/// ConvTranspose's pads and output sizes, from strides, dilations, pads,
/// output_padding, output_shape and auto_pad, for X's spatial sizes `in`
/// and the kernel's `kernel` (`in` is X's, `out` Y's: the windows of the
/// convolution that maps Y back to X). runtime/cpu/kernels/
/// ConvTranspose.cpp; the CUDA kernel reads it too.
Status linalgResolveDeconvWindow(const OpDesc &d, const Shape &in, const std::vector<int64_t> &kernel,
                                 std::vector<LinalgWindowDim> &dims);

/// Reads kernel_shape (or `kernelFromWeights`), strides, dilations, pads and
/// auto_pad for a Conv or pool node whose input spatial sizes are `in`, and
/// computes pads and output sizes. `ceilMode` rounds output sizes up (pools).
/// With ceil_mode, an output window that would start in the end padding is
/// dropped if `expectedOut` (the output shape the graph declares) says so,
/// as PyTorch and later ONNX references do.
inline Status linalgResolveWindow(const OpDesc &d, const Shape &in,
                                  const std::vector<int64_t> &kernelFromWeights, bool ceilMode,
                                  const Shape *expectedOut, std::vector<LinalgWindowDim> &dims) {
  size_t n = in.size();
  std::vector<int64_t> kernel = attrInts(d.attrs, "kernel_shape", kernelFromWeights);
  std::vector<int64_t> strides = attrInts(d.attrs, "strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> dil = attrInts(d.attrs, "dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = attrInts(d.attrs, "pads", std::vector<int64_t>(2 * n, 0));
  std::string autoPad = attrString(d.attrs, "auto_pad", "NOTSET");
  if (kernel.size() != n || strides.size() != n || dil.size() != n || pads.size() != 2 * n)
    return errorf(d.where(), ": kernel_shape/strides/dilations/pads have ", kernel.size(), "/",
                  strides.size(), "/", dil.size(), "/", pads.size(), " values for ", n,
                  " spatial dimensions");
  dims.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    LinalgWindowDim &w = dims[i];
    w.in = in[i];
    w.kernel = kernel[i];
    w.stride = strides[i];
    w.dilation = dil[i];
    if (w.kernel < 1 || w.stride < 1 || w.dilation < 1)
      return errorf(d.where(), ": dimension ", i, " has kernel ", w.kernel, ", stride ", w.stride,
                    ", dilation ", w.dilation, " (all must be >= 1)");
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      w.out = (w.in + w.stride - 1) / w.stride;
      int64_t total = std::max<int64_t>(0, (w.out - 1) * w.stride + w.extent() - w.in);
      w.padBegin = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.padEnd = total - w.padBegin;
      continue;
    }
    if (autoPad == "VALID") {
      w.padBegin = w.padEnd = 0;
    } else if (autoPad == "NOTSET" || autoPad.empty()) {
      w.padBegin = pads[i];
      w.padEnd = pads[i + n];
      if (w.padBegin < 0 || w.padEnd < 0)
        return errorf(d.where(), ": negative pads ", w.padBegin, ", ", w.padEnd);
    } else {
      return errorf(d.where(), ": unknown auto_pad '", autoPad, "'");
    }
    int64_t span = w.in + w.padBegin + w.padEnd - w.extent();
    if (span < 0)
      return errorf(d.where(), ": window of extent ", w.extent(), " exceeds padded input ",
                    w.in + w.padBegin + w.padEnd, " in dimension ", i);
    w.out = (ceilMode ? (span + w.stride - 1) / w.stride : span / w.stride) + 1;
    if (ceilMode && expectedOut && i + 2 < expectedOut->size() &&
        (*expectedOut)[i + 2] == w.out - 1 && (w.out - 1) * w.stride >= w.in + w.padBegin)
      --w.out;
  }
  return Status::ok();
}

/// Checks that `desc` is (N, C, spatial per `dims`'s out).
inline Status linalgCheckSpatialOut(const OpDesc &d, const TensorDesc &desc, int64_t N, int64_t C,
                                    const std::vector<LinalgWindowDim> &dims) {
  Shape want = {N, C};
  for (const LinalgWindowDim &w : dims)
    want.push_back(w.out);
  if (desc.shape != want)
    return errorf(d.where(), ": output shape ", shapeStr(desc.shape), " differs from the ",
                  shapeStr(want), " the attributes give");
  return Status::ok();
}

/// K sums over `segments` runs of `len` elements, f(segment, i, v) giving
/// the K terms of element i: element i of every segment adds to lane i % 16,
/// the lanes persist from segment to segment and are added pairwise at the
/// end (laneSum's order), so the order depends on the shape only. Where the
/// runs are short (a channel of a 4x4 or 2x2 feature map) the lanes still
/// give independent chains, where one running double sum per run would be
/// a chain of dependent additions (BatchNormalization's per-channel sums on
/// ResNet-50's layers: docs/cpu-linalg-kernels.md).
template <int K, typename F>
void linalgSegmentLaneSums(int64_t segments, int64_t len, F &&f, double (&sums)[K]) {
  double acc[K][16] = {};
  for (int64_t sgm = 0; sgm < segments; ++sgm) {
    int64_t i = 0;
    for (; i + 16 <= len; i += 16)
      for (int j = 0; j < 16; ++j) {
        double v[K];
        f(sgm, i + j, v);
        for (int k = 0; k < K; ++k)
          acc[k][j] += v[k];
      }
    for (int j = 0; i < len; ++i, ++j) {
      double v[K];
      f(sgm, i, v);
      for (int k = 0; k < K; ++k)
        acc[k][j] += v[k];
    }
  }
  for (int k = 0; k < K; ++k) {
    double *a = acc[k];
    for (int j = 0; j < 8; ++j)
      a[j] += a[j + 8];
    for (int j = 0; j < 4; ++j)
      a[j] += a[j + 4];
    for (int j = 0; j < 2; ++j)
      a[j] += a[j + 2];
    sums[k] = a[0] + a[1];
  }
}

/// Batch statistics of channel c of an [N, C, inner] tensor: the mean and
/// the biased variance, in double, in a fixed order. BatchNormalization's
/// forward and its gradient both call this, so they see the same numbers.
/// One pass over the data, shifted by the channel's first element: the sums
/// of d = x - x0 and d^2 lose nothing to a mean far from zero (the shifted
/// algorithm; in double on float data).
template <typename T>
void linalgChannelStats(const T *x, int64_t N, int64_t C, int64_t inner, int64_t c, double &mean,
                        double &var) {
  const int64_t count = N * inner;
  if (count == 0) {
    mean = var = 0.0;
    return;
  }
  const T *xc = x + c * inner;
  const double shift = static_cast<double>(xc[0]);
  double s[2];
  linalgSegmentLaneSums<2>(
      N, inner,
      [&](int64_t n, int64_t i, double (&v)[2]) {
        const double d = static_cast<double>(xc[n * C * inner + i]) - shift;
        v[0] = d;
        v[1] = d * d;
      },
      s);
  const double n = static_cast<double>(count), m = s[0] / n;
  mean = shift + m;
  var = std::max(0.0, s[1] / n - m * m);
}

/// What Conv and ConvTranspose check alike: X, W and an optional bias of
/// one element type, one output of that type, X and W of one rank, 3 to 10.
inline Status linalgCheckConvOperands(const OpDesc &d) {
  if (d.inputs.size() < 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 or 3 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &x = d.inputs[0], &w = d.inputs[1];
  DType t = x.dtype;
  if (w.dtype != t || d.outputs[0].dtype != t || (d.hasInput(2) && d.inputs[2].dtype != t))
    return errorf(d.where(), ": element types differ: X ", x.str(), ", W ", w.str(), ", Y ",
                  d.outputs[0].str());
  if (x.rank() < 3 || w.rank() != x.rank() || x.rank() > 10)
    return errorf(d.where(), ": X ", x.str(), " and W ", w.str(),
                  " must have the same rank, 3 to 10");
  return Status::ok();
}

/// [N, A, B] -> [N, B, A] per image: NHWC <-> NCHW, with A and B the
/// spatial size and the channels (or the channels and the spatial size).
/// The NHWC kernels' fallbacks without oneDNN run the NCHW loops on such
/// copies.
inline void linalgTransposeImages(const float *src, float *dst, int64_t N, int64_t A, int64_t B) {
  parallelFor(N * A, N * A * B > 32768, [&](int64_t r) {
    const int64_t n = r / A, a = r % A;
    const float *s = src + r * B;
    float *d = dst + n * A * B + a;
    for (int64_t b = 0; b < B; ++b)
      d[b * A] = s[b];
  });
}

} // namespace pipec::cpu
