//===- runtime/cuda/DnnKernels.cu - Pools and normalizations on the GPU ---===//
//
// The kernels of the CNN ops that do not go through cuDNN (runtime/cuda/
// Dnn.h says why): thin __global__ wrappers over runtime/cuda/DnnBodies.h.
// Pools take a thread per output (their gradients a thread per input
// element) by a grid-stride loop (runtime/cuda/Launch.h); the
// normalizations' per-channel sums a block of dnn::kLanes threads per
// channel, folded in shared memory as the bodies' fixed tree. No atomics:
// every output is written by one thread and every sum has one order.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Dnn.h"
#include "runtime/cuda/Device.cuh"
#include "runtime/cuda/Launch.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {




__global__ void poolKernel(dnn::PoolGeom g, dnn::PoolKind kind, bool firstTakes, bool columnMajor, const float *x,
                           float *y, int64_t *indices, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    y[i] = dnn::poolOutput(g, kind, firstTakes, columnMajor, x, i, indices ? indices + i : nullptr);
}

__global__ void poolArgmaxKernel(dnn::PoolGeom g, const float *x, int32_t *argmax, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    argmax[i] = static_cast<int32_t>(dnn::poolArgmax(g, x, i));
}

__global__ void poolGradKernel(dnn::PoolGeom g, dnn::PoolKind kind, const float *dy, const int32_t *argmax, float *dx,
                               int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    dx[i] = dnn::poolGradInput(g, kind, dy, argmax, i);
}

__global__ void globalPoolKernel(bool max, const float *x, float *y, int64_t planes, int64_t spatial) {
  for (int64_t p = firstItem(); p < planes; p += itemStride())
    y[p] = max ? dnn::globalMax(x + p * spatial, spatial) : dnn::globalAverage(x + p * spatial, spatial);
}

__global__ void lrnKernel(dnn::LrnArgs a, const float *x, float *y, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    y[i] = dnn::lrnOutput(a, x, i);
}

/// The block's sums of two terms of channel c (every thread calls it, the
/// block's threads in step): lanes, then the fold in shared memory.
template <typename F> __device__ void blockSums(const dnn::NormArgs &a, int64_t c, F f, double (&out)[2]) {
  __shared__ double part[2][dnn::kLanes];
  const int t = static_cast<int>(threadIdx.x);
  double s[2];
  dnn::channelLane<2>(a.N, a.C, a.inner, c, t, dnn::kLanes, f, s);
  part[0][t] = s[0];
  part[1][t] = s[1];
  __syncthreads();
  for (int h = dnn::kLanes / 2; h >= 1; h /= 2) {
    dnn::foldLevel(part[0], t, h);
    dnn::foldLevel(part[1], t, h);
    __syncthreads();
  }
  out[0] = part[0][0];
  out[1] = part[1][0];
  __syncthreads(); // the next channel's lanes overwrite the parts
}

__global__ void __launch_bounds__(dnn::kLanes) normChannelsKernel(dnn::NormArgs a) {
  for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
    double s[2] = {0.0, 0.0};
    double shift = 0.0;
    if (a.reduces()) {
      switch (a.pass) {
      case dnn::NormPass::Forward:
      case dnn::NormPass::Stats:
        shift = dnn::momentShift(a, c);
        blockSums(
            a, c, [&](int64_t off, double(&v)[2]) { dnn::momentTerms(a, shift, off, v); }, s);
        break;
      case dnn::NormPass::Grad:
      case dnn::NormPass::ScaleGrad: {
        const double m = a.mu[c], r = a.rstd[c];
        blockSums(
            a, c, [&](int64_t off, double(&v)[2]) { dnn::gradTerms(a, m, r, off, v); }, s);
        break;
      }
      case dnn::NormPass::Instance: {
        // Two passes, as the CPU's: the mean, then the squared deviations.
        double s1[2];
        blockSums(
            a, c,
            [&](int64_t off, double(&v)[2]) {
              v[0] = static_cast<double>(a.x[off]);
              v[1] = 0.0;
            },
            s1);
        const double m = s1[0] / static_cast<double>(a.count());
        blockSums(
            a, c,
            [&](int64_t off, double(&v)[2]) {
              const double d = static_cast<double>(a.x[off]) - m;
              v[0] = 0.0;
              v[1] = d * d;
            },
            s);
        s[0] = s1[0];
        break;
      }
      }
    }
    if (threadIdx.x == 0)
      dnn::normChannel(a, c, s, shift);
  }
}

__global__ void normApplyKernel(const float *x, const float *ta, const float *tb, float *y, int64_t C, int64_t inner,
                                int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    y[i] = dnn::normApply(x, ta, tb, C, inner, i);
}

__global__ void bnGradApplyKernel(const float *dy, const float *x, const double *coef, float *dx, int64_t C,
                                  int64_t inner, bool training, int64_t n) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    dx[i] = dnn::bnGradApply(dy, x, coef, C, inner, training, i);
}

} // namespace

Status launchPool(const dnn::PoolGeom &g, dnn::PoolKind kind, bool firstTakes, bool columnMajor, const float *x,
                  float *y, int64_t *indices, void *stream) {
  const int64_t n = g.planes * g.outSp;
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  poolKernel<<<l.grid, l.block, 0, asStream(stream)>>>(g, kind, firstTakes, columnMajor, x, y, indices, n);
  return launched("pool");
}

Status launchPoolArgmax(const dnn::PoolGeom &g, const float *x, int32_t *argmax, void *stream) {
  const int64_t n = g.planes * g.outSp;
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  poolArgmaxKernel<<<l.grid, l.block, 0, asStream(stream)>>>(g, x, argmax, n);
  return launched("MaxPoolGrad argmax");
}

Status launchPoolGrad(const dnn::PoolGeom &g, dnn::PoolKind kind, const float *dy, const int32_t *argmax, float *dx,
                      void *stream) {
  const int64_t n = g.planes * g.inSp;
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  poolGradKernel<<<l.grid, l.block, 0, asStream(stream)>>>(g, kind, dy, argmax, dx, n);
  return launched("pool gradient");
}

Status launchGlobalPool(bool max, const float *x, float *y, int64_t planes, int64_t spatial, void *stream) {
  const LaunchShape l = itemLaunch(planes, 128);
  if (l.grid == 0)
    return Status::ok();
  globalPoolKernel<<<l.grid, l.block, 0, asStream(stream)>>>(max, x, y, planes, spatial);
  return launched("global pool");
}

Status launchLrn(const dnn::LrnArgs &a, const float *x, float *y, void *stream) {
  const LaunchShape l = itemLaunch(a.N * a.C * a.spatial);
  if (l.grid == 0)
    return Status::ok();
  lrnKernel<<<l.grid, l.block, 0, asStream(stream)>>>(a, x, y, a.N * a.C * a.spatial);
  return launched("LRN");
}

Status launchNormChannels(const dnn::NormArgs &a, void *stream) {
  if (a.C <= 0)
    return Status::ok();
  const uint32_t grid = static_cast<uint32_t>(a.C < kMaxGrid ? a.C : kMaxGrid);
  normChannelsKernel<<<grid, dnn::kLanes, 0, asStream(stream)>>>(a);
  return launched("normalization statistics");
}

Status launchNormApply(const float *x, const float *ta, const float *tb, float *y, int64_t N, int64_t C, int64_t inner,
                       void *stream) {
  const int64_t n = N * C * inner;
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  normApplyKernel<<<l.grid, l.block, 0, asStream(stream)>>>(x, ta, tb, y, C, inner, n);
  return launched("normalization");
}

Status launchBnGradApply(const float *dy, const float *x, const double *coef, float *dx, int64_t N, int64_t C,
                         int64_t inner, bool training, void *stream) {
  const int64_t n = N * C * inner;
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  bnGradApplyKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dy, x, coef, dx, C, inner, training, n);
  return launched("BatchNormalizationGrad");
}

} // namespace pipec::cuda
