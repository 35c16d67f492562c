//===- runtime/cuda/Kernels.h - Launchers of the CUDA kernels --*- C++ -*-===//
//
// Host functions that launch the CUDA kernels of runtime/cuda/Kernels.cu on
// a stream; each thread runs a body of runtime/cuda/Bodies.h. Pointers are
// device pointers. A launcher returns the launch's error (cudaGetLastError)
// as a Status; it does not wait for the kernel.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/Bodies.h"
#include "support/Error.h"

#include <cstdint>

namespace pipec::cuda {

enum class UnaryOp : int { Relu, Neg, Sigmoid, Tanh, Exp, GeluErf, GeluTanh };

Status launchUnary(UnaryOp op, const float *x, float *y, int64_t n, void *stream);
Status launchReluGrad(const float *dy, const float *y, float *dx, int64_t n, void *stream);
/// out[i] = a[broadcast(i)] op b[broadcast(i)] for i < n.
Status launchBinary(body::BinaryOp op, const float *a, const body::Broadcast &ba, const float *b,
                    const body::Broadcast &bb, float *out, int64_t n, void *stream);
/// out[i] = scale * x[broadcast(i)] (Gemm's C term).
Status launchBroadcastScale(const float *x, const body::Broadcast &bx, float scale, float *out, int64_t n,
                            void *stream);
/// Softmax or LogSoftmax over `len` elements strided by `inner`, for
/// outer x inner rows (one thread a row).
Status launchSoftmax(bool log, const float *x, float *y, int64_t outer, int64_t len, int64_t inner,
                     void *stream);
/// ReduceSum: one thread per output element.
Status launchReduceSum(const float *x, float *y, int64_t outN, const body::Reduction &r, void *stream);
/// SoftmaxCrossEntropyLoss over P = N x D positions (scores [N, C, D],
/// targets [N, D] of int64): `perPosition` gets each position's loss; a
/// target outside [0, C) sets *badTarget to 1 (and its loss to NaN).
Status launchSceLoss(const float *x, const int64_t *target, int64_t n, int64_t c, int64_t d, float *perPosition,
                     int *badTarget, void *stream);
/// The sum (or mean) of the P losses in position order, in double, into
/// *out; one thread.
Status launchSumInOrder(const float *v, int64_t p, bool mean, float *out, void *stream);
/// Its gradient: dx = g (softmax - onehot), g = dLoss[0] / P (mean),
/// dLoss[0] (sum) or dLoss[position] (none).
Status launchSceGrad(const float *dLoss, const float *x, const int64_t *target, int64_t n, int64_t c, int64_t d,
                     int reduction, float *dx, int *badTarget, void *stream);
/// One optimizer update of n elements (the bodies' formulas).
Status launchSgd(const body::SgdScalars &s, float *p, const float *g, float *buf, int64_t n, void *stream);
Status launchAdam(const body::AdamScalars &s, float *p, const float *g, float *m, float *v, int64_t n,
                  void *stream);

} // namespace pipec::cuda
