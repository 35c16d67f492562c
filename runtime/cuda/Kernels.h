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
#include "runtime/cuda/MoveBodies.h"
#include "runtime/cuda/RowBodies.h"
#include "support/Error.h"

#include <cstdint>

namespace pipec::cuda {

enum class UnaryOp : int { Relu, Neg, Sigmoid, Tanh, Exp, Erf, GeluErf, GeluTanh };

Status launchUnary(UnaryOp op, const float *x, float *y, int64_t n, void *stream);
Status launchReluGrad(const float *dy, const float *y, float *dx, int64_t n, void *stream);
Status launchGeluGrad(const float *dy, const float *x, float *dx, int64_t n, bool tanhForm,
                      void *stream);
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
/// ReduceSum: one thread per output element, or for long sums one a
/// chunk of it (body::reduceChunks) into `parts` (body::reduceSumParts
/// floats of workspace) and then one an output adding its chunks.
Status launchReduceSum(const float *x, float *y, int64_t outN, const body::Reduction &r, float *parts,
                       void *stream);
/// The other reductions (body::reduceElement), one thread per output.
Status launchReduce(body::ReduceOp op, const float *x, float *y, int64_t outN, const body::Reduction &r,
                    void *stream);
/// SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss
/// (rows::LossGeometry) over P = N x D positions: `perPosition` gets each
/// position's weighted loss, `weightPerPosition` (where given) its weight;
/// a target outside [0, C) (and not ignored) sets *bad (and its loss to
/// NaN).
Status launchLoss(const rows::LossGeometry &g, const float *x, const void *target, const float *weights,
                  float *perPosition, float *weightPerPosition, int *bad, void *stream);
/// The sum of the P losses in position order, in double, into *out; the
/// mean (reduction 2) divides by the sum of `weight` (P where null). One
/// thread.
Status launchLossSum(const float *loss, const float *weight, int64_t p, int reduction, float *out, void *stream);
/// The gradient with respect to the scores: SCE's dx = g w (softmax -
/// onehot), NLL's dx = -g w onehot, g = dLoss[position] (none), dLoss[0]
/// (sum) or dLoss[0] / the total weight (mean: summed into *total, device
/// memory, first).
Status launchLossGrad(const rows::LossGeometry &g, const float *dLoss, const float *x, const void *target,
                      const float *weights, double *total, float *dx, int *bad, void *stream);
/// Concat and Split: the n elements of a part [outer, partLen, inner] and
/// their place at `offset` along the axis of the whole [outer, wholeLen,
/// inner]; toWhole copies part -> whole (Concat), else whole -> part.
Status launchSliceCopy(const float *src, float *dst, int64_t n, int64_t partLen, int64_t wholeLen, int64_t offset,
                       int64_t inner, bool toWhole, void *stream);
/// Gather along an axis: data [outer, len, inner], idx (int64, j < count;
/// negative counts from the end) -> out [outer, count, inner]; an index
/// out of range sets *bad.
Status launchGather(const float *data, const int64_t *idx, float *out, int64_t outer, int64_t len, int64_t inner,
                    int64_t count, int *bad, void *stream);
/// GatherGrad: dData [outer, len, inner] = the sum, in index order, of the
/// dY [outer, count, inner] rows gathered from each row, by the indices
/// sorted in `workspace` (gatherGradWorkspace(count, len) bytes;
/// runtime/cuda/GatherGrad.cu).
size_t gatherGradWorkspace(int64_t count, int64_t len);
Status launchGatherGrad(const float *dy, const int64_t *idx, float *dData, int64_t outer, int64_t len,
                        int64_t inner, int64_t count, void *workspace, void *stream);
/// Layer normalization over rows of `cols` (bias may be null), its input
/// gradient, and its scale gradient (`stats`: rows RowStats of workspace).
Status launchLayerNorm(const float *x, const float *scale, const float *bias, float *y, int64_t rows, int64_t cols,
                       double eps, void *stream);
Status launchLayerNormGrad(const float *dy, const float *x, const float *scale, float *dx, int64_t rows,
                           int64_t cols, double eps, void *stream);
/// The scale gradient sums over rows in chunks (body::
/// layerNormScaleGradChunk) where they are long: `parts` holds
/// body::chunkParts(rows, cols) doubles of workspace.
Status launchLayerNormScaleGrad(const float *dy, const float *x, float *ds, int64_t rows, int64_t cols, double eps,
                                body::RowStats *stats, double *parts, void *stream);
/// pipec:MaskedSoftmax over rows of n contiguous elements, the mask bytes
/// broadcast to x by `mask`.
Status launchMaskedSoftmax(const float *x, const bool *cond, float *y, int64_t rows, int64_t n,
                           const body::Broadcast &mask, float scale, float fill, bool fillWhen, void *stream);
/// pipec:FusedElementwise: out[i] = the program at element i, n elements.
Status launchFusedElementwise(const body::EwDeviceProgram &prog, const body::EwInputs &in, float *out, int64_t n,
                              void *stream);
/// SoftmaxGrad (or, with `log`, pipec:LogSoftmaxGrad) over `len` elements
/// strided by `inner`, outer x inner rows.
Status launchSoftmaxGrad(const float *dy, const float *y, float *dx, int64_t outer, int64_t len, int64_t inner,
                         void *stream, bool log = false);

/// The other elementwise ops (body::MathOp): one input, or two broadcast
/// to n outputs; bool tensors (one byte each) where the op reads or writes
/// bool (body::mathReadsBool, mathWritesBool), else float32.
Status launchMathUnary(const body::MathParams &p, const void *x, void *y, int64_t n, void *stream);
Status launchMathBinary(body::MathOp op, const void *a, const body::Broadcast &ba, const void *b,
                        const body::Broadcast &bb, void *out, int64_t n, void *stream);
/// A strided view's copy (support/StridedView.h: Slice, Expand, Tile):
/// out[i] = in[offset + body::broadcastOffset(i, view)], elements of
/// `esize` bytes (1, 2, 4 or 8).
Status launchStridedCopy(const void *in, void *out, const body::Broadcast &view, int64_t offset, int64_t n,
                         size_t esize, void *stream);
/// Clip to [lo, hi]; a bound read from device memory where its pointer is
/// given (a bound computed at run time).
Status launchClip(const float *x, float *y, int64_t n, float lo, float hi, const float *loAt, const float *hiAt,
                  void *stream);
/// ArgMax / ArgMin over [outer, len, inner]: one int64 per (outer, inner).
Status launchArg(const float *x, int64_t *y, int64_t outer, int64_t len, int64_t inner, bool max, bool last,
                 void *stream);
/// Cast between the element types the GPU casts among.
enum class CastType { F32, F64, I32, I64, U8, Bool, F16, BF16 };
Status launchCast(const void *x, CastType from, void *y, CastType to, int64_t n, void *stream);
/// Cast to or from float16 / bfloat16 (the other side F32, F64, F16 or
/// BF16; runtime/cuda/Move.cu): support/Half.h's rounding, the CPU's.
Status launchHalfCast(const void *x, CastType from, void *y, CastType to, int64_t n, void *stream);
/// Dropout in training (body::dropoutBlock over every Philox block), the
/// mask (bool) where given.
Status launchDropout(const cpu::ew::RandomStream &stream, const float *x, float *y, uint8_t *mask, int64_t n,
                     uint64_t threshold, float scale, void *stream_);
/// Dropout whose random stream's step is read on the device from `step`
/// (ExecContext::deviceStep), so that one recorded launch serves every
/// step: RandomStream(seed, *step, microBatch, nodeId), made by each
/// thread, draws the words launchDropout's would.
Status launchDropoutAt(uint64_t seed, const uint64_t *step, uint64_t microBatch, uint64_t nodeId, const float *x,
                       float *y, uint8_t *mask, int64_t n, uint64_t threshold, float scale, void *stream);
/// Where: out = cond ? x : y, each broadcast to n outputs.
Status launchWhere(const uint8_t *cond, const body::Broadcast &bc, const float *x, const body::Broadcast &bx,
                   const float *y, const body::Broadcast &by, float *out, int64_t n, void *stream);
/// Max, Min, Sum, Mean of up to kMaxVariadic broadcast inputs, folded in
/// input order (Mean divides by their count at the end).
inline constexpr int kMaxVariadic = 8;
struct VariadicInputs {
  int count = 0;
  const float *p[kMaxVariadic] = {};
  body::Broadcast b[kMaxVariadic];
};
Status launchVariadic(body::MathOp op, bool mean, const VariadicInputs &in, float *out, int64_t n, void *stream);

// runtime/cuda/Move.cu: elements of `esize` bytes (1, 2, 4 or 8).
/// Pad: n output elements, the constant `value` (its low esize bytes) or,
/// where given, the one at `valueAt` in device memory.
Status launchPad(const void *in, void *out, const body::PadGeometry &g, int64_t n, size_t esize, uint64_t value,
                 const void *valueAt, void *stream);
/// GatherElements with int64 (idx64) or int32 indices; an index out of
/// range sets *bad (and writes 0).
Status launchGatherElements(const void *data, const void *idx, bool idx64, void *out,
                            const body::GatherElementsGeometry &g, int64_t n, size_t esize, int *bad, void *stream);
/// Trilu over n elements of [.., rows, cols] matrices; k read from kAt
/// (device memory) where given.
Status launchTrilu(const void *in, void *out, int64_t n, int64_t rows, int64_t cols, int64_t k, const int64_t *kAt,
                   bool upper, size_t esize, void *stream);
/// One pass of a separable resize (float32; the pass's tables in device
/// memory).
Status launchResizePass(const body::ResizePass &p, const float *in, float *out, void *stream);
/// Writes the low esize bytes of `value` n times.
Status launchFill(void *out, int64_t n, size_t esize, uint64_t value, void *stream);
/// Mod of two broadcast inputs (float32, float64, int32 or int64): C's
/// fmod where cMod, else Python's.
Status launchMod(CastType type, const void *a, const body::Broadcast &ba, const void *b, const body::Broadcast &bb,
                 void *out, int64_t n, bool cMod, void *stream);

} // namespace pipec::cuda
