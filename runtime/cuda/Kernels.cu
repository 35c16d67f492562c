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
    case UnaryOp::GeluErf: y[i] = body::geluErf(v); break;
    case UnaryOp::GeluTanh: y[i] = body::geluTanh(v); break;
    }
  }
}

__global__ void reluGradKernel(const float *dy, const float *y, float *dx, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    dx[i] = body::reluGrad(dy[i], y[i]);
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

__global__ void sgdKernel(body::SgdScalars s, float *p, const float *g, float *buf, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    body::sgdElement(s, p[i], g[i], buf ? buf + i : nullptr);
}

__global__ void adamKernel(body::AdamScalars s, float *p, const float *g, float *m, float *v, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    body::adamElement(s, p[i], g[i], m[i], v[i]);
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

Status launchSgd(const body::SgdScalars &s, float *p, const float *g, float *buf, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  sgdKernel<<<l.grid, l.block, 0, asStream(stream)>>>(s, p, g, buf, n);
  return launched("sgd");
}

Status launchAdam(const body::AdamScalars &s, float *p, const float *g, float *m, float *v, int64_t n,
                  void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  adamKernel<<<l.grid, l.block, 0, asStream(stream)>>>(s, p, g, m, v, n);
  return launched("adam");
}

} // namespace pipec::cuda
