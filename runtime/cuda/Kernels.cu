//===- runtime/cuda/Kernels.cu - The CUDA kernels -------------------------===//
//
// Thin __global__ wrappers: each thread takes items by a grid-stride loop
// (runtime/cuda/Launch.h) and runs a body of runtime/cuda/Bodies.h on each.
// No atomics: every output element (row) is written by one thread, so the
// results do not depend on the launch shape.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/Launch.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {

__device__ inline int64_t firstItem() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t itemStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

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

__global__ void maskedSoftmaxKernel(const float *x, const bool *cond, float *y, int64_t rows, int64_t n,
                                    body::Broadcast mask, float scale, float fill, bool fillWhen) {
  for (int64_t r = firstItem(); r < rows; r += itemStride())
    body::maskedSoftmaxRow(x, cond, y, n, r, mask, scale, fill, fillWhen);
}

__global__ void fusedElementwiseKernel(body::EwDeviceProgram prog, body::EwInputs in, float *out, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = body::ewEvaluate(prog, in, i);
}

__global__ void reduceSumKernel(const float *x, float *y, int64_t outN, body::Reduction r) {
  for (int64_t o = firstItem(); o < outN; o += itemStride())
    y[o] = body::reduceSumElement(x, o, r);
}

__global__ void sceLossKernel(const float *x, const int64_t *target, int64_t n, int64_t c, int64_t d, float *loss,
                              int *bad) {
  for (int64_t pos = firstItem(); pos < n * d; pos += itemStride()) {
    const int64_t i = pos / d, j = pos % d, t = target[pos];
    if (t < 0 || t >= c) {
      *bad = 1;
      loss[pos] = __int_as_float(0x7fc00000);
      continue;
    }
    loss[pos] = body::sceLoss(x + i * c * d + j, c, d, t);
  }
}

__global__ void sumInOrderKernel(const float *v, int64_t p, bool mean, float *out) {
  if (firstItem() != 0)
    return;
  double s = 0.0;
  for (int64_t i = 0; i < p; ++i)
    s += static_cast<double>(v[i]);
  *out = static_cast<float>(mean ? s / static_cast<double>(p) : s);
}

__global__ void sceGradKernel(const float *dl, const float *x, const int64_t *target, int64_t n, int64_t c,
                              int64_t d, int reduction, float *dx, int *bad) {
  for (int64_t pos = firstItem(); pos < n * d; pos += itemStride()) {
    const int64_t i = pos / d, j = pos % d, t = target[pos];
    if (t < 0 || t >= c) {
      *bad = 1;
      continue;
    }
    // reduction: 0 none, 1 sum, 2 mean (as Kernels.h says).
    const float g = reduction == 0 ? dl[pos]
                    : reduction == 1 ? dl[0]
                                     : static_cast<float>(static_cast<double>(dl[0]) / static_cast<double>(n * d));
    body::sceGrad(x + i * c * d + j, dx + i * c * d + j, c, d, t, g);
  }
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

__global__ void layerNormKernel(const float *x, const float *scale, const float *bias, float *y, int64_t rows,
                                int64_t cols, double eps) {
  for (int64_t r = firstItem(); r < rows; r += itemStride())
    body::layerNormRow(x + r * cols, scale, bias, y + r * cols, cols, eps);
}

__global__ void layerNormGradKernel(const float *dy, const float *x, const float *scale, float *dx, int64_t rows,
                                    int64_t cols, double eps) {
  for (int64_t r = firstItem(); r < rows; r += itemStride())
    body::layerNormGradRow(dy + r * cols, x + r * cols, scale, dx + r * cols, cols, eps);
}

__global__ void rowStatsKernel(const float *x, body::RowStats *stats, int64_t rows, int64_t cols, double eps) {
  for (int64_t r = firstItem(); r < rows; r += itemStride())
    stats[r] = body::layerNormStats(x + r * cols, cols, eps);
}

__global__ void scaleGradKernel(const float *dy, const float *x, const body::RowStats *stats, float *ds,
                                int64_t rows, int64_t cols) {
  for (int64_t c = firstItem(); c < cols; c += itemStride())
    ds[c] = body::layerNormScaleGradColumn(dy, x, stats, rows, cols, c);
}

__global__ void softmaxGradKernel(const float *dy, const float *y, float *dx, int64_t outer, int64_t len,
                                  int64_t inner) {
  for (int64_t r = firstItem(); r < outer * inner; r += itemStride()) {
    const int64_t off = (r / inner) * len * inner + r % inner;
    body::softmaxGradRow(dy + off, y + off, dx + off, len, inner);
  }
}

Status launched(const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return errorf("CUDA kernel ", what, ": ", cudaGetErrorString(e));
  return Status::ok();
}

cudaStream_t asStream(void *s) { return static_cast<cudaStream_t>(s); }

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
  const LaunchShape l = itemLaunch(outer * inner, 128);
  if (l.grid == 0 || len == 0)
    return Status::ok();
  softmaxKernel<<<l.grid, l.block, 0, asStream(stream)>>>(log, x, y, outer, len, inner);
  return launched("softmax");
}

Status launchMaskedSoftmax(const float *x, const bool *cond, float *y, int64_t rows, int64_t n,
                           const body::Broadcast &mask, float scale, float fill, bool fillWhen, void *stream) {
  const LaunchShape l = itemLaunch(rows, 128);
  if (l.grid == 0 || n == 0)
    return Status::ok();
  maskedSoftmaxKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, cond, y, rows, n, mask, scale, fill, fillWhen);
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

Status launchReduceSum(const float *x, float *y, int64_t outN, const body::Reduction &r, void *stream) {
  const LaunchShape l = itemLaunch(outN);
  if (l.grid == 0)
    return Status::ok();
  reduceSumKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, y, outN, r);
  return launched("ReduceSum");
}

Status launchSceLoss(const float *x, const int64_t *target, int64_t n, int64_t c, int64_t d, float *perPosition,
                     int *badTarget, void *stream) {
  const LaunchShape l = itemLaunch(n * d, 128);
  if (l.grid == 0)
    return Status::ok();
  sceLossKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, target, n, c, d, perPosition, badTarget);
  return launched("SoftmaxCrossEntropyLoss");
}

Status launchSumInOrder(const float *v, int64_t p, bool mean, float *out, void *stream) {
  sumInOrderKernel<<<1, 32, 0, asStream(stream)>>>(v, p, mean, out);
  return launched("loss sum");
}

Status launchSceGrad(const float *dLoss, const float *x, const int64_t *target, int64_t n, int64_t c, int64_t d,
                     int reduction, float *dx, int *badTarget, void *stream) {
  const LaunchShape l = itemLaunch(n * d, 128);
  if (l.grid == 0)
    return Status::ok();
  sceGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dLoss, x, target, n, c, d, reduction, dx, badTarget);
  return launched("SoftmaxCrossEntropyLossGrad");
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
  const LaunchShape l = itemLaunch(rows, 64);
  if (l.grid == 0)
    return Status::ok();
  layerNormKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, scale, bias, y, rows, cols, eps);
  return launched("LayerNormalization");
}

Status launchLayerNormGrad(const float *dy, const float *x, const float *scale, float *dx, int64_t rows,
                           int64_t cols, double eps, void *stream) {
  const LaunchShape l = itemLaunch(rows, 64);
  if (l.grid == 0)
    return Status::ok();
  layerNormGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, x, scale, dx, rows, cols, eps);
  return launched("LayerNormalizationGrad");
}

Status launchLayerNormScaleGrad(const float *dy, const float *x, float *ds, int64_t rows, int64_t cols, double eps,
                                body::RowStats *stats, void *stream) {
  const LaunchShape lr = itemLaunch(rows, 64), lc = itemLaunch(cols, 64);
  if (lr.grid == 0 || lc.grid == 0)
    return Status::ok();
  rowStatsKernel<<<lr.grid, lr.block, 0, asStream(stream)>>>(x, stats, rows, cols, eps);
  PIPEC_TRY(launched("LayerNormalizationScaleGrad statistics"));
  scaleGradKernel<<<lc.grid, lc.block, 0, asStream(stream)>>>(dy, x, stats, ds, rows, cols);
  return launched("LayerNormalizationScaleGrad");
}

Status launchSoftmaxGrad(const float *dy, const float *y, float *dx, int64_t outer, int64_t len, int64_t inner,
                         void *stream) {
  const LaunchShape l = itemLaunch(outer * inner, 128);
  if (l.grid == 0 || len == 0)
    return Status::ok();
  softmaxGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, y, dx, outer, len, inner);
  return launched("SoftmaxGrad");
}


} // namespace pipec::cuda
