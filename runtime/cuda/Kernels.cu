//===- runtime/cuda/Kernels.cu - The CUDA kernels -------------------------===//
//
// Thin __global__ wrappers: each thread takes items by a grid-stride loop
// (runtime/cuda/Launch.h) and runs a body of runtime/cuda/Bodies.h on each;
// the row kernels (softmax, the loss, layer normalization) share a row
// among a group of a warp's lanes (runtime/cuda/RowBodies.h). No atomics:
// every output element is written by one thread and every sum has one
// order, so the results do not depend on the launch shape.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/Device.cuh"
#include "runtime/cuda/Launch.h"
#include "runtime/cuda/RowBodies.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {


// ---- Rows shared by groups of L lanes of a warp (runtime/cuda/RowBodies.h).

constexpr unsigned kFull = 0xffffffffu;

/// The shuffles of a group of L lanes: the fold of RowBodies.h's foldSum
/// (lane l adds lane l + h's value), its result broadcast from lane 0.
template <int L> struct Lanes {
  int lane;
  __device__ float sum(float v) const {
    for (int h = L / 2; h >= 1; h /= 2)
      v += __shfl_down_sync(kFull, v, h, L);
    return __shfl_sync(kFull, v, 0, L);
  }
  __device__ double sum(double v) const {
    for (int h = L / 2; h >= 1; h /= 2)
      v += __shfl_down_sync(kFull, v, h, L);
    return __shfl_sync(kFull, v, 0, L);
  }
  __device__ float max(float v) const {
    for (int h = L / 2; h >= 1; h /= 2) {
      const float o = __shfl_down_sync(kFull, v, h, L);
      v = o > v ? o : v;
    }
    return __shfl_sync(kFull, v, 0, L);
  }
};

/// Calls f(row, lanes) for the rows of the group of L lanes this thread is
/// in; every lane of a warp calls it equally often (row -1: past the end,
/// shuffling with the others but reading and writing nothing).
template <int L, typename F> __device__ void forRows(int64_t rows, F f) {
  constexpr int G = 32 / L;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int inWarp = static_cast<int>(threadIdx.x % 32);
  const Lanes<L> lanes{inWarp % L};
  for (int64_t base = warp * G; base < rows; base += warps * G) {
    const int64_t r = base + inWarp / L;
    f(r < rows ? r : -1, lanes);
  }
}

/// The launch of a row kernel: 256 threads a block, a group of L lanes a row.
template <int L> LaunchShape rowLaunch(int64_t rows) {
  return itemLaunch((rows + 32 / L - 1) / (32 / L) * 32, 256);
}

template <bool Log> __global__ void softmaxRowsKernel(const float *x, float *y, int64_t rows, int64_t n) {
  forRows<16>(rows, [&](int64_t r, const Lanes<16> &g) {
    const float *xr = x + (r < 0 ? 0 : r) * n;
    float *yr = y + (r < 0 ? 0 : r) * n;
    const float m = g.max(r >= 0 ? rows::laneMax(xr, n, 1, g.lane, 16) : -INFINITY);
    const float s = g.sum(r >= 0 ? rows::softmaxExpSum(xr, yr, n, m, g.lane, 16) : 0.0f);
    if (r >= 0)
      rows::softmaxWrite<Log>(xr, yr, n, m, s, g.lane, 16);
  });
}

__global__ void maskedSoftmaxRowsKernel(const float *x, const bool *cond, float *y, int64_t rowCount, int64_t n,
                                        body::Broadcast mask, float scale, float fill, bool fillWhen) {
  forRows<16>(rowCount, [&](int64_t r, const Lanes<16> &g) {
    const int64_t base = (r < 0 ? 0 : r) * n;
    float *yr = y + base;
    if (r >= 0)
      for (int64_t i = g.lane; i < n; i += 16)
        yr[i] = cond[body::broadcastOffset(base + i, mask)] == fillWhen ? fill : x[base + i] * scale;
    const float m = g.max(r >= 0 ? rows::laneMax(yr, n, 1, g.lane, 16) : -INFINITY);
    const float s = g.sum(r >= 0 ? rows::softmaxExpSum(yr, yr, n, m, g.lane, 16) : 0.0f);
    if (r >= 0)
      rows::softmaxWrite<false>(yr, yr, n, m, s, g.lane, 16);
  });
}

/// Each position's loss (times its weight; 0 where ignored) and weight.
__global__ void lossRowsKernel(rows::LossGeometry lg, const float *x, const void *target, const float *weights,
                               float *loss, float *weightOut, int *bad) {
  forRows<32>(lg.n * lg.d, [&](int64_t pos, const Lanes<32> &g) {
    const int64_t p = pos < 0 ? 0 : pos, i = p / lg.d, j = p % lg.d;
    const float *xr = x + i * lg.c * lg.d + j;
    float m = 0.0f, s = 0.0f;
    if (lg.softmax) { // every lane of the warp takes this branch
      m = g.max(pos >= 0 ? rows::laneMax(xr, lg.c, lg.d, g.lane, 32) : -INFINITY);
      s = g.sum(pos >= 0 ? rows::laneExpSum(xr, lg.c, lg.d, m, g.lane, 32) : 0.0f);
    }
    if (pos < 0 || g.lane != 0)
      return;
    int64_t t;
    float w;
    if (!rows::lossTargetWeight(lg, target, weights, pos, t, w)) {
      *bad = 1;
      loss[pos] = __int_as_float(0x7fc00000);
      return;
    }
    loss[pos] = t < 0 ? 0.0f : (lg.softmax ? rows::sceLossOf(xr, lg.d, t, m, s) : -xr[t * lg.d]) * w;
    if (weightOut)
      weightOut[pos] = w;
  });
}

/// The sum of the p losses in double (mean: over the sum of the weights,
/// or p without them), into *out; one warp (rows::lossLaneSums).
__global__ void lossSumKernel(const float *loss, const float *weight, int64_t p, int reduction, float *out) {
  const Lanes<32> g{static_cast<int>(threadIdx.x % 32)};
  double s, w;
  rows::lossLaneSums(loss, weight, p, g.lane, 32, s, w);
  s = g.sum(s);
  w = g.sum(w);
  if (threadIdx.x == 0)
    *out = static_cast<float>(reduction == 2 ? s / w : s);
}

/// The total weight of the targets (the mean's divisor for the
/// gradient); one warp (rows::lossLaneWeight).
__global__ void lossWeightTotalKernel(rows::LossGeometry lg, const void *target, const float *weights,
                                      double *total) {
  const Lanes<32> g{static_cast<int>(threadIdx.x % 32)};
  const double s = g.sum(rows::lossLaneWeight(lg, target, weights, g.lane, 32));
  if (threadIdx.x == 0)
    *total = s;
}

__global__ void lossGradRowsKernel(rows::LossGeometry lg, const float *dl, const float *x, const void *target,
                                   const float *weights, const double *total, float *dx, int *bad) {
  forRows<32>(lg.n * lg.d, [&](int64_t pos, const Lanes<32> &g) {
    const int64_t p = pos < 0 ? 0 : pos, i = p / lg.d, j = p % lg.d;
    const float *xr = x + i * lg.c * lg.d + j;
    float m = 0.0f, s = 0.0f;
    if (lg.softmax) {
      m = g.max(pos >= 0 ? rows::laneMax(xr, lg.c, lg.d, g.lane, 32) : -INFINITY);
      s = g.sum(pos >= 0 ? rows::laneExpSum(xr, lg.c, lg.d, m, g.lane, 32) : 0.0f);
    }
    if (pos < 0)
      return;
    int64_t t;
    float w;
    if (!rows::lossTargetWeight(lg, target, weights, pos, t, w)) {
      if (g.lane == 0)
        *bad = 1;
      return;
    }
    const float gw = rows::lossScale(lg, dl, pos, total ? *total : 0.0) * w;
    float *dxr = dx + i * lg.c * lg.d + j;
    if (lg.softmax) {
      rows::sceGradWrite(xr, dxr, lg.c, lg.d, t, gw, m, s, g.lane, 32);
    } else {
      for (int64_t c = g.lane; c < lg.c; c += 32)
        dxr[c * lg.d] = rows::nllGradOf(c, t, gw);
    }
  });
}

/// A row's mean and 1 / sqrt(variance + eps) on 32 lanes (`active`: the
/// group has a row; the others shuffle along): momentsLanes' order.
__device__ rows::RowMoments moments(const Lanes<32> &g, bool active, const float *xr, int64_t cols, double eps) {
  const double mean = rows::meanOf(g.sum(active ? rows::laneSum(xr, cols, g.lane, 32) : 0.0), cols);
  return {mean, rows::rstdOf(g.sum(active ? rows::laneSquaredDeviation(xr, cols, mean, g.lane, 32) : 0.0), cols, eps)};
}

__global__ void layerNormRowsKernel(const float *x, const float *scale, const float *bias, float *y, int64_t rowCount,
                                    int64_t cols, double eps) {
  forRows<32>(rowCount, [&](int64_t r, const Lanes<32> &g) {
    const float *xr = x + (r < 0 ? 0 : r) * cols;
    const rows::RowMoments m = moments(g, r >= 0, xr, cols, eps);
    const double mean = m.mean, rstd = m.rstd;
    if (r >= 0)
      rows::layerNormWrite(xr, scale, bias, y + r * cols, cols, mean, rstd, g.lane, 32);
  });
}

__global__ void layerNormGradRowsKernel(const float *dy, const float *x, const float *scale, float *dx,
                                        int64_t rowCount, int64_t cols, double eps) {
  forRows<32>(rowCount, [&](int64_t r, const Lanes<32> &g) {
    const int64_t off = (r < 0 ? 0 : r) * cols;
    const float *xr = x + off, *dyr = dy + off;
    const rows::RowMoments m = moments(g, r >= 0, xr, cols, eps);
    const double mean = m.mean, rstd = m.rstd;
    const rows::GradSums s =
        r >= 0 ? rows::layerNormGradSums(dyr, xr, scale, cols, mean, rstd, g.lane, 32) : rows::GradSums{};
    const double mg = rows::meanOf(g.sum(s.g), cols), mgx = rows::meanOf(g.sum(s.gx), cols);
    if (r >= 0)
      rows::layerNormGradWrite(dyr, xr, scale, dx + off, cols, mean, rstd, mg, mgx, g.lane, 32);
  });
}

template <typename In, typename Out>
__global__ void mathUnaryKernel(body::MathParams p, const In *x, Out *y, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const float v = body::mathUnary(p, static_cast<float>(x[i]));
    y[i] = static_cast<Out>(sizeof(Out) == 1 ? (v != 0.0f) : v);
  }
}

template <typename In, typename Out>
__global__ void mathBinaryKernel(body::MathOp op, const In *a, body::Broadcast ba, const In *b, body::Broadcast bb,
                                 Out *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const float v = body::mathBinary(op, static_cast<float>(a[body::broadcastOffset(i, ba)]),
                                     static_cast<float>(b[body::broadcastOffset(i, bb)]));
    out[i] = static_cast<Out>(sizeof(Out) == 1 ? (v != 0.0f) : v);
  }
}

__global__ void whereKernel(const uint8_t *c, body::Broadcast bc, const float *x, body::Broadcast bx, const float *y,
                            body::Broadcast by, float *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = c[body::broadcastOffset(i, bc)] ? x[body::broadcastOffset(i, bx)] : y[body::broadcastOffset(i, by)];
}

template <typename T>
__global__ void stridedCopyKernel(const T *in, T *out, body::Broadcast v, int64_t offset, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = in[offset + body::broadcastOffset(i, v)];
}

__global__ void clipKernel(const float *x, float *y, int64_t n, float lo, float hi, const float *loAt,
                           const float *hiAt) {
  const float l = loAt ? *loAt : lo, h = hiAt ? *hiAt : hi;
  for (int64_t i = firstItem(); i < n; i += itemStride())
    y[i] = body::clipOf(x[i], l, h);
}

__global__ void argKernel(const float *x, int64_t *y, int64_t outer, int64_t len, int64_t inner, bool max, bool last) {
  for (int64_t o = firstItem(); o < outer * inner; o += itemStride())
    y[o] = body::argIndex(x + (o / inner) * len * inner + o % inner, len, inner, max, last);
}

template <typename From, typename To> __global__ void castKernel(const From *x, To *y, int64_t n, bool toBool) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    y[i] = body::castValue<To>(x[i], toBool);
}

template <typename From>
Status castFrom(const From *x, CastType to, void *y, int64_t n, const LaunchShape &l, cudaStream_t s) {
  switch (to) {
  case CastType::F32: castKernel<<<l.grid, l.block, 0, s>>>(x, static_cast<float *>(y), n, false); break;
  case CastType::F64: castKernel<<<l.grid, l.block, 0, s>>>(x, static_cast<double *>(y), n, false); break;
  case CastType::I32: castKernel<<<l.grid, l.block, 0, s>>>(x, static_cast<int32_t *>(y), n, false); break;
  case CastType::I64: castKernel<<<l.grid, l.block, 0, s>>>(x, static_cast<int64_t *>(y), n, false); break;
  case CastType::U8: castKernel<<<l.grid, l.block, 0, s>>>(x, static_cast<uint8_t *>(y), n, false); break;
  case CastType::Bool: castKernel<<<l.grid, l.block, 0, s>>>(x, static_cast<uint8_t *>(y), n, true); break;
  case CastType::F16:
  case CastType::BF16: return errorf("Cast: 16-bit floats are launchHalfCast's");
  }
  return Status::ok();
}

__global__ void dropoutKernel(cpu::ew::RandomStream stream, const float *x, float *y, uint8_t *mask, int64_t n,
                              uint64_t threshold, float scale) {
  for (int64_t b = firstItem(); 4 * b < n; b += itemStride())
    body::dropoutBlock(stream, b, x, y, mask, n, threshold, scale);
}

__global__ void dropoutAtKernel(uint64_t seed, const uint64_t *step, uint64_t microBatch, uint64_t nodeId,
                                const float *x, float *y, uint8_t *mask, int64_t n, uint64_t threshold,
                                float scale) {
  const cpu::ew::RandomStream stream(seed, *step, microBatch, nodeId);
  for (int64_t b = firstItem(); 4 * b < n; b += itemStride())
    body::dropoutBlock(stream, b, x, y, mask, n, threshold, scale);
}

__global__ void reduceKernel(body::ReduceOp op, const float *x, float *y, int64_t outN, body::Reduction r) {
  for (int64_t o = firstItem(); o < outN; o += itemStride())
    y[o] = body::reduceElement(x, o, r, op);
}

__global__ void variadicKernel(body::MathOp op, bool mean, VariadicInputs in, float *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    float v = in.p[0][body::broadcastOffset(i, in.b[0])];
    for (int k = 1; k < in.count; ++k)
      v = body::mathBinary(op, v, in.p[k][body::broadcastOffset(i, in.b[k])]);
    out[i] = mean ? v / static_cast<float>(in.count) : v;
  }
}

__global__ void unaryKernel(UnaryOp op, const float *x, float *y, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const float v = x[i];
    switch (op) {
    case UnaryOp::Relu: y[i] = body::relu(v); break;
    case UnaryOp::Neg: y[i] = body::neg(v); break;
    case UnaryOp::Sigmoid: y[i] = body::sigmoid(v); break;
    case UnaryOp::Tanh: y[i] = body::tanhF(v); break;
    case UnaryOp::Exp: y[i] = body::expF(v); break;
    case UnaryOp::Erf: y[i] = cpu::erfOf(v); break;
    case UnaryOp::GeluErf: y[i] = body::geluErf(v); break;
    case UnaryOp::GeluTanh: y[i] = body::geluTanh(v); break;
    }
  }
}

__global__ void reluGradKernel(const float *dy, const float *y, float *dx, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    dx[i] = body::reluGrad(dy[i], y[i]);
}

__global__ void geluGradKernel(const float *dy, const float *x, float *dx, int64_t n, bool tanhForm) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    dx[i] = body::geluGrad(dy[i], x[i], tanhForm);
}

__global__ void binaryKernel(body::BinaryOp op, const float *a, body::Broadcast ba, const float *b,
                             body::Broadcast bb, float *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = body::binary(op, a[body::broadcastOffset(i, ba)], b[body::broadcastOffset(i, bb)]);
}

__global__ void broadcastScaleKernel(const float *x, body::Broadcast bx, float scale, float *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = scale * x[body::broadcastOffset(i, bx)];
}

__global__ void softmaxKernel(bool log, const float *x, float *y, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t r = firstItem(); r < outer * inner; r += itemStride()) {
    const int64_t off = (r / inner) * len * inner + r % inner;
    if (log)
      body::softmaxRow<true>(x + off, y + off, len, inner);
    else
      body::softmaxRow<false>(x + off, y + off, len, inner);
  }
}

__global__ void fusedElementwiseKernel(body::EwDeviceProgram prog, body::EwInputs in, float *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = body::ewEvaluate(prog, in, i);
}

__global__ void reduceSumKernel(const float *x, float *y, int64_t outN, body::Reduction r) {
  for (int64_t o = firstItem(); o < outN; o += itemStride())
    y[o] = body::reduceSumElement(x, o, r);
}

// Long sums: a thread a (chunk, output), neighbouring threads on
// neighbouring outputs (for a column sum, neighbouring addresses).
__global__ void reduceSumChunksKernel(const float *x, float *parts, int64_t outN, int64_t chunks,
                                      body::Reduction r) {
  for (int64_t t = firstItem(); t < outN * chunks; t += itemStride())
    parts[t] = body::reduceSumChunk(x, t % outN, t / outN, r);
}

template <typename T>
__global__ void sumOfChunksKernel(const T *parts, float *y, int64_t outN, int64_t chunks) {
  for (int64_t o = firstItem(); o < outN; o += itemStride())
    y[o] = static_cast<float>(body::sumOfChunks(parts, o, outN, chunks));
}

__global__ void sliceCopyKernel(const float *src, float *dst, int64_t n, int64_t partLen, int64_t wholeLen,
                                int64_t offset, int64_t inner, bool toWhole) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const int64_t o = i / (partLen * inner), m = (i / inner) % partLen, k = i % inner;
    const int64_t w = (o * wholeLen + offset + m) * inner + k;
    if (toWhole)
      dst[w] = src[i];
    else
      dst[i] = src[w];
  }
}

__global__ void gatherKernel(const float *data, const int64_t *idx, float *out, int64_t outer, int64_t len,
                             int64_t inner, int64_t count, int *bad) {
  for (int64_t i = firstItem(); i < outer * count * inner; i += itemStride()) {
    const int64_t o = i / (count * inner), j = (i / inner) % count, k = i % inner;
    int64_t r = idx[j];
    r = r < 0 ? r + len : r;
    if (r < 0 || r >= len) {
      *bad = 1;
      out[i] = 0.0f;
      continue;
    }
    out[i] = data[(o * len + r) * inner + k];
  }
}

__global__ void rowStatsKernel(const float *x, body::RowStats *stats, int64_t rowCount, int64_t cols, double eps) {
  forRows<32>(rowCount, [&](int64_t r, const Lanes<32> &g) {
    const float *xr = x + (r < 0 ? 0 : r) * cols;
    const rows::RowMoments m = moments(g, r >= 0, xr, cols, eps);
    const double mean = m.mean, rstd = m.rstd;
    if (r >= 0 && g.lane == 0)
      stats[r] = {mean, rstd};
  });
}

__global__ void scaleGradKernel(const float *dy, const float *x, const body::RowStats *stats, float *ds,
                                int64_t rows, int64_t cols) {
  for (int64_t c = firstItem(); c < cols; c += itemStride())
    ds[c] = body::layerNormScaleGradColumn(dy, x, stats, rows, cols, c);
}

__global__ void scaleGradChunksKernel(const float *dy, const float *x, const body::RowStats *stats, double *parts,
                                      int64_t rows, int64_t cols, int64_t chunks) {
  for (int64_t t = firstItem(); t < cols * chunks; t += itemStride())
    parts[t] = body::layerNormScaleGradChunk(dy, x, stats, rows, cols, t % cols, t / cols);
}

/// Contiguous rows (inner 1: attention's scores, the last axis) on 16
/// lanes a row, neighbouring lanes on neighbouring elements.
__global__ void softmaxGradRowsKernel(const float *dy, const float *y, float *dx, int64_t rows, int64_t n, bool log) {
  forRows<16>(rows, [&](int64_t r, const Lanes<16> &g) {
    const int64_t off = (r < 0 ? 0 : r) * n;
    const float s = g.sum(r >= 0 ? rows::softmaxGradLaneSum(dy + off, y + off, n, log, g.lane, 16) : 0.0f);
    if (r >= 0)
      rows::softmaxGradLaneWrite(dy + off, y + off, dx + off, n, s, log, g.lane, 16);
  });
}

/// Strided rows: a thread a row, neighbouring threads on neighbouring
/// inner positions.
__global__ void softmaxGradKernel(const float *dy, const float *y, float *dx, int64_t outer, int64_t len,
                                  int64_t inner, bool log) {
  for (int64_t r = firstItem(); r < outer * inner; r += itemStride()) {
    const int64_t off = (r / inner) * len * inner + r % inner;
    if (log)
      body::logSoftmaxGradRow(dy + off, y + off, dx + off, len, inner);
    else
      body::softmaxGradRow(dy + off, y + off, dx + off, len, inner);
  }
}



} // namespace

Status launchUnary(UnaryOp op, const float *x, float *y, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  unaryKernel<<<l.grid, l.block, 0, asStream(stream)>>>(op, x, y, n);
  return launched("unary");
}

Status launchReluGrad(const float *dy, const float *y, float *dx, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  reluGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, y, dx, n);
  return launched("ReluGrad");
}

Status launchGeluGrad(const float *dy, const float *x, float *dx, int64_t n, bool tanhForm,
                      void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  geluGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, x, dx, n, tanhForm);
  return launched("GeluGrad");
}

Status launchBinary(body::BinaryOp op, const float *a, const body::Broadcast &ba, const float *b,
                    const body::Broadcast &bb, float *out, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  binaryKernel<<<l.grid, l.block, 0, asStream(stream)>>>(op, a, ba, b, bb, out, n);
  return launched("binary");
}

Status launchBroadcastScale(const float *x, const body::Broadcast &bx, float scale, float *out, int64_t n,
                            void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  broadcastScaleKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, bx, scale, out, n);
  return launched("broadcast");
}

Status launchSoftmax(bool log, const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                     void *stream) {
  if (inner == 1 && len > 0) { // contiguous rows: 16 lanes a row
    if (const LaunchShape l = rowLaunch<16>(outer); l.grid) {
      if (log)
        softmaxRowsKernel<true><<<l.grid, l.block, 0, asStream(stream)>>>(x, y, outer, len);
      else
        softmaxRowsKernel<false><<<l.grid, l.block, 0, asStream(stream)>>>(x, y, outer, len);
    }
    return launched("softmax");
  }
  const LaunchShape l = itemLaunch(outer * inner, 128);
  if (l.grid == 0 || len == 0)
    return Status::ok();
  softmaxKernel<<<l.grid, l.block, 0, asStream(stream)>>>(log, x, y, outer, len, inner);
  return launched("softmax");
}

Status launchMaskedSoftmax(const float *x, const bool *cond, float *y, int64_t rows, int64_t n,
                           const body::Broadcast &mask, float scale, float fill, bool fillWhen, void *stream) {
  const LaunchShape l = rowLaunch<16>(rows);
  if (l.grid == 0 || n == 0)
    return Status::ok();
  maskedSoftmaxRowsKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, cond, y, rows, n, mask, scale, fill,
                                                                     fillWhen);
  return launched("masked softmax");
}

Status launchFusedElementwise(const body::EwDeviceProgram &prog, const body::EwInputs &in, float *out, int64_t n,
                              void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  fusedElementwiseKernel<<<l.grid, l.block, 0, asStream(stream)>>>(prog, in, out, n);
  return launched("fused elementwise");
}

Status launchReduceSum(const float *x, float *y, int64_t outN, const body::Reduction &r, float *parts,
                       void *stream) {
  const LaunchShape l = itemLaunch(outN);
  if (l.grid == 0)
    return Status::ok();
  const int64_t chunks = body::reduceChunks(r.reducedCount);
  if (chunks == 1) {
    reduceSumKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, y, outN, r);
    return launched("ReduceSum");
  }
  if (!parts)
    return errorf("ReduceSum: no workspace for the chunks of its sums");
  const LaunchShape lp = itemLaunch(outN * chunks);
  reduceSumChunksKernel<<<lp.grid, lp.block, 0, asStream(stream)>>>(x, parts, outN, chunks, r);
  PIPEC_TRY(launched("ReduceSum chunks"));
  sumOfChunksKernel<float><<<l.grid, l.block, 0, asStream(stream)>>>(parts, y, outN, chunks);
  return launched("ReduceSum");
}

Status launchLoss(const rows::LossGeometry &g, const float *x, const void *target, const float *weights,
                  float *perPosition, float *weightPerPosition, int *bad, void *stream) {
  const LaunchShape l = rowLaunch<32>(g.n * g.d);
  if (l.grid == 0 || g.c == 0)
    return Status::ok();
  lossRowsKernel<<<l.grid, l.block, 0, asStream(stream)>>>(g, x, target, weights, perPosition, weightPerPosition, bad);
  return launched(g.softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss");
}

Status launchLossSum(const float *loss, const float *weight, int64_t p, int reduction, float *out, void *stream) {
  lossSumKernel<<<1, 32, 0, asStream(stream)>>>(loss, weight, p, reduction, out);
  return launched("loss sum");
}

Status launchLossGrad(const rows::LossGeometry &g, const float *dLoss, const float *x, const void *target,
                      const float *weights, double *total, float *dx, int *bad, void *stream) {
  const LaunchShape l = rowLaunch<32>(g.n * g.d);
  if (l.grid == 0 || g.c == 0)
    return Status::ok();
  if (g.reduction == 2) {
    lossWeightTotalKernel<<<1, 32, 0, asStream(stream)>>>(g, target, weights, total);
    PIPEC_TRY(launched("loss weight total"));
  }
  lossGradRowsKernel<<<l.grid, l.block, 0, asStream(stream)>>>(g, dLoss, x, target, weights,
                                                                g.reduction == 2 ? total : nullptr, dx, bad);
  return launched(g.softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad");
}

Status launchSliceCopy(const float *src, float *dst, int64_t n, int64_t partLen, int64_t wholeLen, int64_t offset,
                       int64_t inner, bool toWhole, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  sliceCopyKernel<<<l.grid, l.block, 0, asStream(stream)>>>(src, dst, n, partLen, wholeLen, offset, inner, toWhole);
  return launched(toWhole ? "Concat" : "Split");
}

Status launchGather(const float *data, const int64_t *idx, float *out, int64_t outer, int64_t len, int64_t inner,
                    int64_t count, int *bad, void *stream) {
  const LaunchShape l = itemLaunch(outer * count * inner);
  if (l.grid == 0)
    return Status::ok();
  gatherKernel<<<l.grid, l.block, 0, asStream(stream)>>>(data, idx, out, outer, len, inner, count, bad);
  return launched("Gather");
}

Status launchLayerNorm(const float *x, const float *scale, const float *bias, float *y, int64_t rows, int64_t cols,
                       double eps, void *stream) {
  const LaunchShape l = rowLaunch<32>(rows);
  if (l.grid == 0)
    return Status::ok();
  layerNormRowsKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, scale, bias, y, rows, cols, eps);
  return launched("LayerNormalization");
}

Status launchLayerNormGrad(const float *dy, const float *x, const float *scale, float *dx, int64_t rows,
                           int64_t cols, double eps, void *stream) {
  const LaunchShape l = rowLaunch<32>(rows);
  if (l.grid == 0)
    return Status::ok();
  layerNormGradRowsKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, x, scale, dx, rows, cols, eps);
  return launched("LayerNormalizationGrad");
}

Status launchLayerNormScaleGrad(const float *dy, const float *x, float *ds, int64_t rows, int64_t cols, double eps,
                                body::RowStats *stats, double *parts, void *stream) {
  const LaunchShape lr = rowLaunch<32>(rows), lc = itemLaunch(cols, 64);
  if (lr.grid == 0 || lc.grid == 0)
    return Status::ok();
  rowStatsKernel<<<lr.grid, lr.block, 0, asStream(stream)>>>(x, stats, rows, cols, eps);
  PIPEC_TRY(launched("LayerNormalizationScaleGrad statistics"));
  const int64_t chunks = body::reduceChunks(rows);
  if (chunks == 1) {
    scaleGradKernel<<<lc.grid, lc.block, 0, asStream(stream)>>>(dy, x, stats, ds, rows, cols);
    return launched("LayerNormalizationScaleGrad");
  }
  if (!parts)
    return errorf("LayerNormalizationScaleGrad: no workspace for the chunks of its sums");
  const LaunchShape lp = itemLaunch(cols * chunks);
  scaleGradChunksKernel<<<lp.grid, lp.block, 0, asStream(stream)>>>(dy, x, stats, parts, rows, cols, chunks);
  PIPEC_TRY(launched("LayerNormalizationScaleGrad chunks"));
  sumOfChunksKernel<double><<<lc.grid, lc.block, 0, asStream(stream)>>>(parts, ds, cols, chunks);
  return launched("LayerNormalizationScaleGrad");
}

Status launchSoftmaxGrad(const float *dy, const float *y, float *dx, int64_t outer, int64_t len, int64_t inner,
                         void *stream, bool log) {
  const LaunchShape l = itemLaunch(outer * inner, 128);
  if (l.grid == 0 || len == 0)
    return Status::ok();
  if (inner == 1) {
    const LaunchShape lr = rowLaunch<16>(outer);
    softmaxGradRowsKernel<<<lr.grid, lr.block, 0, asStream(stream)>>>(dy, y, dx, outer, len, log);
  } else {
    softmaxGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, y, dx, outer, len, inner, log);
  }
  return launched("SoftmaxGrad");
}


Status launchMathUnary(const body::MathParams &p, const void *x, void *y, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  const bool in = body::mathReadsBool(p.op), out = body::mathWritesBool(p.op);
  auto s = asStream(stream);
  if (in)
    mathUnaryKernel<<<l.grid, l.block, 0, s>>>(p, static_cast<const uint8_t *>(x), static_cast<uint8_t *>(y), n);
  else if (out)
    mathUnaryKernel<<<l.grid, l.block, 0, s>>>(p, static_cast<const float *>(x), static_cast<uint8_t *>(y), n);
  else
    mathUnaryKernel<<<l.grid, l.block, 0, s>>>(p, static_cast<const float *>(x), static_cast<float *>(y), n);
  return launched("elementwise");
}

Status launchMathBinary(body::MathOp op, const void *a, const body::Broadcast &ba, const void *b,
                        const body::Broadcast &bb, void *out, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  auto s = asStream(stream);
  if (body::mathReadsBool(op))
    mathBinaryKernel<<<l.grid, l.block, 0, s>>>(op, static_cast<const uint8_t *>(a), ba,
                                                 static_cast<const uint8_t *>(b), bb, static_cast<uint8_t *>(out), n);
  else if (body::mathWritesBool(op))
    mathBinaryKernel<<<l.grid, l.block, 0, s>>>(op, static_cast<const float *>(a), ba, static_cast<const float *>(b),
                                                 bb, static_cast<uint8_t *>(out), n);
  else
    mathBinaryKernel<<<l.grid, l.block, 0, s>>>(op, static_cast<const float *>(a), ba, static_cast<const float *>(b),
                                                 bb, static_cast<float *>(out), n);
  return launched("elementwise");
}

Status launchStridedCopy(const void *in, void *out, const body::Broadcast &v, int64_t offset, int64_t n,
                         size_t esize, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  auto s = asStream(stream);
  switch (esize) {
  case 1: stridedCopyKernel<<<l.grid, l.block, 0, s>>>(static_cast<const uint8_t *>(in), static_cast<uint8_t *>(out), v, offset, n); break;
  case 2: stridedCopyKernel<<<l.grid, l.block, 0, s>>>(static_cast<const uint16_t *>(in), static_cast<uint16_t *>(out), v, offset, n); break;
  case 4: stridedCopyKernel<<<l.grid, l.block, 0, s>>>(static_cast<const uint32_t *>(in), static_cast<uint32_t *>(out), v, offset, n); break;
  case 8: stridedCopyKernel<<<l.grid, l.block, 0, s>>>(static_cast<const uint64_t *>(in), static_cast<uint64_t *>(out), v, offset, n); break;
  default: return errorf("strided copy: elements of ", esize, " bytes");
  }
  return launched("strided copy");
}

Status launchClip(const float *x, float *y, int64_t n, float lo, float hi, const float *loAt, const float *hiAt,
                  void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  clipKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, y, n, lo, hi, loAt, hiAt);
  return launched("Clip");
}

Status launchArg(const float *x, int64_t *y, int64_t outer, int64_t len, int64_t inner, bool max, bool last,
                 void *stream) {
  const LaunchShape l = itemLaunch(outer * inner);
  if (l.grid == 0 || len == 0)
    return Status::ok();
  argKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, y, outer, len, inner, max, last);
  return launched(max ? "ArgMax" : "ArgMin");
}

Status launchCast(const void *x, CastType from, void *y, CastType to, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  auto s = asStream(stream);
  switch (from) {
  case CastType::F32: PIPEC_TRY(castFrom(static_cast<const float *>(x), to, y, n, l, s)); break;
  case CastType::F64: PIPEC_TRY(castFrom(static_cast<const double *>(x), to, y, n, l, s)); break;
  case CastType::I32: PIPEC_TRY(castFrom(static_cast<const int32_t *>(x), to, y, n, l, s)); break;
  case CastType::I64: PIPEC_TRY(castFrom(static_cast<const int64_t *>(x), to, y, n, l, s)); break;
  case CastType::U8:
  case CastType::Bool: PIPEC_TRY(castFrom(static_cast<const uint8_t *>(x), to, y, n, l, s)); break;
  case CastType::F16:
  case CastType::BF16: return errorf("Cast: 16-bit floats are launchHalfCast's");
  }
  return launched("Cast");
}

Status launchDropout(const cpu::ew::RandomStream &stream, const float *x, float *y, uint8_t *mask, int64_t n,
                     uint64_t threshold, float scale, void *stream_) {
  const LaunchShape l = itemLaunch((n + 3) / 4);
  if (l.grid == 0)
    return Status::ok();
  dropoutKernel<<<l.grid, l.block, 0, asStream(stream_)>>>(stream, x, y, mask, n, threshold, scale);
  return launched("Dropout");
}

Status launchDropoutAt(uint64_t seed, const uint64_t *step, uint64_t microBatch, uint64_t nodeId, const float *x,
                       float *y, uint8_t *mask, int64_t n, uint64_t threshold, float scale, void *stream) {
  const LaunchShape l = itemLaunch((n + 3) / 4);
  if (l.grid == 0)
    return Status::ok();
  dropoutAtKernel<<<l.grid, l.block, 0, asStream(stream)>>>(seed, step, microBatch, nodeId, x, y, mask, n, threshold,
                                                             scale);
  return launched("Dropout");
}

Status launchReduce(body::ReduceOp op, const float *x, float *y, int64_t outN, const body::Reduction &r,
                    void *stream) {
  const LaunchShape l = itemLaunch(outN);
  if (l.grid == 0)
    return Status::ok();
  reduceKernel<<<l.grid, l.block, 0, asStream(stream)>>>(op, x, y, outN, r);
  return launched("reduction");
}

Status launchWhere(const uint8_t *cond, const body::Broadcast &bc, const float *x, const body::Broadcast &bx,
                   const float *y, const body::Broadcast &by, float *out, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  whereKernel<<<l.grid, l.block, 0, asStream(stream)>>>(cond, bc, x, bx, y, by, out, n);
  return launched("Where");
}

Status launchVariadic(body::MathOp op, bool mean, const VariadicInputs &in, float *out, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  variadicKernel<<<l.grid, l.block, 0, asStream(stream)>>>(op, mean, in, out, n);
  return launched("variadic");
}

} // namespace pipec::cuda
