//===- runtime/cuda/CudaKernels.cpp - Nodes as CUDA kernels ---------------===//
#include "runtime/cuda/CudaKernels.h"
#include "support/ElementwiseProgram.h"

#include "runtime/cuda/Kernels.h"
#include "support/FusedOps.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace pipec::cuda {

namespace {

using kernel::ExecContext;
using kernel::Kernel;
using kernel::KernelPtr;
using kernel::OpDesc;

Status cublasCheck(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return errorf(what, " failed: ", cublasGetStatusString(s));
}

/// One cuBLAS handle per GPU and host thread (a handle is not to be shared
/// by threads at once), in pedantic math mode: no TF32, no reduced-precision
/// reductions, so a GEMM's bits do not change with the library's choices of
/// tensor-core paths.
Expected<cublasHandle_t> cublasFor(void *stream) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return errorf("cudaGetDevice failed");
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasHandle_t h = nullptr;
    PIPEC_TRY(cublasCheck(cublasCreate(&h), "cublasCreate"));
    PIPEC_TRY(cublasCheck(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
    it = handles.emplace(device, h).first;
  }
  PIPEC_TRY(cublasCheck(cublasSetStream(it->second, static_cast<cudaStream_t>(stream)), "cublasSetStream"));
  return it->second;
}

/// Every input float32 but the one at `other`, which must be `otherType`
/// (a loss's int64 targets, ReduceSum's axes, a mask).
Status needF32(const OpDesc &d, int other = -1, DType otherType = DType::I64) {
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (static_cast<int>(i) == other) {
      if (d.inputs[i].dtype != otherType)
        return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype), "; the CUDA kernel takes ",
                      dtypeName(otherType), " there");
      continue;
    }
    if (d.hasInput(i) && d.inputs[i].dtype != DType::F32)
      return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype),
                    "; the CUDA kernels take float32 only");
  }
  for (const TensorDesc &o : d.outputs)
    if (o.dtype != DType::F32)
      return errorf(d.where(), ": output is ", dtypeName(o.dtype), "; the CUDA kernels take float32 only");
  return Status::ok();
}

body::Broadcast broadcastOf(const Shape &in, const Shape &out) {
  return body::makeBroadcast(out.data(), static_cast<int>(out.size()), in.data(), static_cast<int>(in.size()));
}

class UnaryKernel final : public Kernel {
public:
  UnaryKernel(UnaryOp op, int64_t n) : op_(op), n_(n) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchUnary(op_, static_cast<const float *>(in[0]), static_cast<float *>(out[0]), n_, ctx.stream);
  }

private:
  UnaryOp op_;
  int64_t n_;
};

class ReluGradKernel final : public Kernel {
public:
  explicit ReluGradKernel(int64_t n) : n_(n) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchReluGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                          static_cast<float *>(out[0]), n_, ctx.stream);
  }

private:
  int64_t n_;
};

class GeluGradKernel final : public Kernel {
public:
  GeluGradKernel(int64_t n, bool tanhForm) : n_(n), tanh_(tanhForm) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchGeluGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                          static_cast<float *>(out[0]), n_, tanh_, ctx.stream);
  }

private:
  int64_t n_;
  bool tanh_;
};

class BinaryKernel final : public Kernel {
public:
  BinaryKernel(body::BinaryOp op, body::Broadcast a, body::Broadcast b, int64_t n)
      : op_(op), a_(a), b_(b), n_(n) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchBinary(op_, static_cast<const float *>(in[0]), a_, static_cast<const float *>(in[1]), b_,
                        static_cast<float *>(out[0]), n_, ctx.stream);
  }

private:
  body::BinaryOp op_;
  body::Broadcast a_, b_;
  int64_t n_;
};

class MaskedSoftmaxKernel final : public Kernel {
public:
  MaskedSoftmaxKernel(int64_t rows, int64_t n, body::Broadcast mask, float scale, float fill, bool fillWhen)
      : rows_(rows), n_(n), mask_(mask), scale_(scale), fill_(fill), fillWhen_(fillWhen) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchMaskedSoftmax(static_cast<const float *>(in[0]), static_cast<const bool *>(in[1]),
                               static_cast<float *>(out[0]), rows_, n_, mask_, scale_, fill_, fillWhen_,
                               ctx.stream);
  }

private:
  int64_t rows_, n_;
  body::Broadcast mask_;
  float scale_, fill_;
  bool fillWhen_;
};

class FusedElementwiseKernel final : public Kernel {
public:
  FusedElementwiseKernel(body::EwDeviceProgram prog, int64_t n) : prog_(prog), n_(n) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    body::EwInputs inputs;
    for (int32_t k = 0; k < prog_.numInputs; ++k)
      inputs.p[k] = static_cast<const float *>(in[k]);
    return launchFusedElementwise(prog_, inputs, static_cast<float *>(out[0]), n_, ctx.stream);
  }

private:
  body::EwDeviceProgram prog_;
  int64_t n_;
};

class SoftmaxKernel final : public Kernel {
public:
  SoftmaxKernel(bool log, int64_t outer, int64_t len, int64_t inner)
      : log_(log), outer_(outer), len_(len), inner_(inner) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchSoftmax(log_, static_cast<const float *>(in[0]), static_cast<float *>(out[0]), outer_, len_,
                         inner_, ctx.stream);
  }

private:
  bool log_;
  int64_t outer_, len_, inner_;
};

/// Row-major Y[M,N] = alpha op(A)[M,K] op(B)[K,N] (+ beta Y), batched with
/// equal strides: cuBLAS is column-major, so it computes Y^T = op(B)^T
/// op(A)^T, which is Y in row-major.
struct Gemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t strideA = 0, strideB = 0, strideY = 0;
  /// Leading dimensions of the row-major operands; 0: packed rows.
  int64_t ldA = 0, ldB = 0, ldY = 0;
  float alpha = 1.0f;

  Status run(void *stream, const float *a, const float *b, float *y, float beta) const {
    PIPEC_ASSIGN(cublasHandle_t h, cublasFor(stream));
    const int lda = static_cast<int>(ldA ? ldA : ta ? m : k), ldb = static_cast<int>(ldB ? ldB : tb ? k : n);
    const int ldy = static_cast<int>(ldY ? ldY : n);
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
      return cublasCheck(cublasSgemm(h, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                     &alpha, b, ldb, a, lda, &beta, y, ldy),
                         "cublasSgemm");
    return cublasCheck(cublasSgemmStridedBatched(h, opB, opA, static_cast<int>(n), static_cast<int>(m),
                                                 static_cast<int>(k), &alpha, b, ldb, strideB, a, lda, strideA,
                                                 &beta, y, ldy, strideY, static_cast<int>(batch)),
                       "cublasSgemmStridedBatched");
  }
};

class GemmKernel final : public Kernel {
public:
  Gemm g;
  bool hasC = false;
  float beta = 0.0f;
  body::Broadcast c;
  int64_t outElems = 0;

  bool canAccumulate() const override { return !hasC || beta == 0.0f; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const auto *a = static_cast<const float *>(in[0]);
    const auto *b = static_cast<const float *>(in[1]);
    auto *y = static_cast<float *>(out[0]);
    if (ctx.accumulate)
      return g.run(ctx.stream, a, b, y, 1.0f);
    if (hasC && beta != 0.0f) {
      // Y = beta C, broadcast; then Y += alpha A'B'.
      PIPEC_TRY(launchBroadcastScale(static_cast<const float *>(in[2]), c, beta, y, outElems, ctx.stream));
      return g.run(ctx.stream, a, b, y, 1.0f);
    }
    return g.run(ctx.stream, a, b, y, 0.0f);
  }
};

/// pipec:FusedGemm: Y = A'B' (cuBLAS), then the epilogue in place: Y +=
/// bias (a broadcast add) and the activation (a unary kernel).
class FusedGemmKernel final : public Kernel {
public:
  Gemm g;
  bool hasBias = false, hasAct = false;
  UnaryOp act = UnaryOp::Relu;
  body::Broadcast y, bias;
  int64_t outElems = 0;

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    auto *dst = static_cast<float *>(out[0]);
    PIPEC_TRY(g.run(ctx.stream, static_cast<const float *>(in[0]), static_cast<const float *>(in[1]), dst, 0.0f));
    if (hasBias)
      PIPEC_TRY(launchBinary(body::BinaryOp::Add, dst, y, static_cast<const float *>(in[2]), bias, dst, outElems,
                             ctx.stream));
    return hasAct ? launchUnary(act, dst, dst, outElems, ctx.stream) : Status::ok();
  }
};

/// pipec:Attention and pipec:AttentionGrad (runtime/cpu/kernels/
/// Attention.cpp has the formulas): the batched products by cuBLAS, the
/// scores and their gradients in the workspace (three [batch, s, t]
/// buffers), the scale, mask and softmax by the element and row kernels.
class AttentionKernel final : public Kernel {
public:
  AttentionDims g; ///< sizes and operand layouts (support/FusedOps.h)
  int mask = 0;    ///< 0 none, 1 add, 2 bool
  float scale = 1.0f, fill = -INFINITY;
  bool fillWhen = true, grad = false;
  bool probs = false; ///< P is the forward's output 1, the gradient's last input
  body::Broadcast same, maskBc;
  using Layout = AttentionDims::Layout;

  size_t workspaceBytes() const override { return 3 * sizeof(float) * static_cast<size_t>(g.batch() * g.s * g.t); }

  /// A row-major operand: its layout, or a [batch, rows, ld] buffer of
  /// the workspace.
  struct Op {
    const float *p;
    Layout l;
  };
  Op scores(const float *w) const { return {w, {g.heads * g.s * g.t, g.s * g.t, g.t, 0}}; }

  /// C[e] = op(A[e]) op(B[e]) for every batch entry, [m, n] from [m, k]
  /// and [k, n] (before the ops): per item, one strided batch over its
  /// heads.
  Status gemm(void *stream, bool ta, bool tb, int64_t m, int64_t n, int64_t kk, Op a, Op b, Op c) const {
    Gemm p;
    p.ta = ta;
    p.tb = tb;
    p.m = m;
    p.n = n;
    p.k = kk;
    p.batch = g.heads;
    p.strideA = a.l.perHead;
    p.strideB = b.l.perHead;
    p.strideY = c.l.perHead;
    p.ldA = a.l.ld;
    p.ldB = b.l.ld;
    p.ldY = c.l.ld;
    for (int64_t i = 0; i < g.items; ++i)
      PIPEC_TRY(p.run(stream, a.p + a.l.base + i * a.l.perItem, b.p + b.l.base + i * b.l.perItem,
                      const_cast<float *>(c.p) + c.l.base + i * c.l.perItem, 0.0f));
    return Status::ok();
  }

  /// The probabilities into one of the buffers `w0`, `w1` (the other is
  /// scratch); returns which.
  Expected<float *> probabilities(void *stream, const float *qp, const float *kp, const void *m, float *w0,
                                  float *w1) const {
    const int64_t n = g.batch() * g.s * g.t;
    PIPEC_TRY(gemm(stream, false, g.headsInner, g.s, g.t, g.d, {qp, g.q}, {kp, g.k}, scores(w0)));
    if (mask == 2) {
      PIPEC_TRY(launchMaskedSoftmax(w0, static_cast<const bool *>(m), w1, g.batch() * g.s, g.t, maskBc, scale, fill,
                                    fillWhen, stream));
      return w1;
    }
    PIPEC_TRY(launchBroadcastScale(w0, same, scale, w1, n, stream));
    if (mask == 1)
      PIPEC_TRY(launchBinary(body::BinaryOp::Add, w1, same, static_cast<const float *>(m), maskBc, w1, n, stream));
    PIPEC_TRY(launchSoftmax(false, w1, w0, g.batch() * g.s, g.t, 1, stream));
    return w0;
  }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const auto *qp = static_cast<const float *>(in[0]), *kp = static_cast<const float *>(in[1]),
               *vp = static_cast<const float *>(in[2]);
    const void *m = mask ? in[3] : nullptr;
    const int64_t n = g.batch() * g.s * g.t;
    float *w0 = static_cast<float *>(ctx.workspace), *w1 = w0 + n, *w2 = w1 + n;
    const float *p = nullptr;
    if (grad && probs) {
      p = static_cast<const float *>(in[mask ? 5 : 4]);
    } else {
      PIPEC_ASSIGN(float *made, probabilities(ctx.stream, qp, kp, m, w0, w1));
      p = made;
    }
    if (!grad) { // O = P V, and P itself where it is kept
      if (probs && cudaMemcpyAsync(out[1], p, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                   static_cast<cudaStream_t>(ctx.stream)) != cudaSuccess)
        return Status::error("cudaMemcpyAsync of the attention probabilities failed");
      return gemm(ctx.stream, false, false, g.s, g.dv, g.t, scores(p), {vp, g.v}, {static_cast<float *>(out[0]), g.o});
    }
    const auto *dO = static_cast<const float *>(in[mask ? 4 : 3]);
    // Packed: dQ, dK and dV are the thirds of dQKV (their layouts' bases).
    float *dQ = static_cast<float *>(out[0]), *dK = static_cast<float *>(out[g.packed ? 0 : 1]),
          *dV = static_cast<float *>(out[g.packed ? 0 : 2]);
    float *dP = p == w0 ? w1 : w0;
    PIPEC_TRY(gemm(ctx.stream, true, false, g.t, g.dv, g.s, scores(p), {dO, g.o}, {dV, g.v})); // dV = P^T dO
    PIPEC_TRY(gemm(ctx.stream, false, true, g.s, g.t, g.dv, {dO, g.o}, {vp, g.v}, scores(dP))); // dP = dO V^T
    PIPEC_TRY(launchSoftmaxGrad(dP, p, w2, g.batch() * g.s, g.t, 1, ctx.stream));
    PIPEC_TRY(launchBroadcastScale(w2, same, scale, w2, n, ctx.stream)); // dS
    // dQ = dS KT^T, dKT = Q^T dS (K as rows: dQ = dS K, dK = dS^T Q).
    PIPEC_TRY(gemm(ctx.stream, false, !g.headsInner, g.s, g.d, g.t, scores(w2), {kp, g.k}, {dQ, g.q}));
    if (g.headsInner)
      return gemm(ctx.stream, true, false, g.t, g.d, g.s, scores(w2), {qp, g.q}, {dK, g.k});
    return gemm(ctx.stream, true, false, g.d, g.t, g.s, {qp, g.q}, scores(w2), {dK, g.k});
  }
};

class ReduceSumKernel final : public Kernel {
public:
  ReduceSumKernel(body::Reduction r, int64_t outN) : r_(r), outN_(outN) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return launchReduceSum(static_cast<const float *>(in[0]), static_cast<float *>(out[0]), outN_, r_, ctx.stream);
  }

private:
  body::Reduction r_;
  int64_t outN_;
};

/// Softmax cross-entropy (reduction 0 none, 1 sum, 2 mean) and its
/// gradient, without class weights or an ignore index. The workspace
/// holds a flag the kernels raise for a target outside [0, C), read back
/// after the launch: an error, not a silent NaN.
class SceKernel final : public Kernel {
public:
  SceKernel(bool grad, int reduction, int64_t n, int64_t c, int64_t d)
      : grad_(grad), reduction_(reduction), n_(n), c_(c), d_(d) {}
  size_t workspaceBytes() const override { return 256 + static_cast<size_t>(n_ * d_) * sizeof(float); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    int *flag = static_cast<int *>(ctx.workspace);
    float *per = reinterpret_cast<float *>(static_cast<char *>(ctx.workspace) + 256);
    if (cudaMemsetAsync(flag, 0, sizeof(int), stream) != cudaSuccess)
      return errorf("SoftmaxCrossEntropyLoss: cudaMemsetAsync failed");
    if (grad_) {
      PIPEC_TRY(launchSceGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                              static_cast<const int64_t *>(in[2]), n_, c_, d_, reduction_,
                              static_cast<float *>(out[0]), flag, ctx.stream));
    } else {
      float *loss = static_cast<float *>(out[0]);
      PIPEC_TRY(launchSceLoss(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]), n_, c_, d_,
                              reduction_ == 0 ? loss : per, flag, ctx.stream));
      if (reduction_ != 0)
        PIPEC_TRY(launchSumInOrder(per, n_ * d_, reduction_ == 2, loss, ctx.stream));
    }
    int bad = 0;
    if (cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      return errorf("SoftmaxCrossEntropyLoss: ", cudaGetErrorString(cudaGetLastError()));
    if (bad)
      return errorf("a target is outside [0, ", c_, ") (SoftmaxCrossEntropyLoss on the GPU)");
    return Status::ok();
  }

private:
  bool grad_;
  int reduction_;
  int64_t n_, c_, d_;
};

/// The geometry of summing a row-major tensor of shape `s` over the axes
/// `reduced` marks (rank at most body::kMaxRank).
body::Reduction reductionOf(const Shape &s, const std::vector<bool> &reduced) {
  body::Reduction r;
  const int rank = static_cast<int>(s.size());
  int64_t stride = 1;
  std::vector<int64_t> strides(static_cast<size_t>(rank));
  for (int a = rank - 1; a >= 0; --a) {
    strides[a] = stride;
    stride *= s[a];
  }
  for (int a = 0; a < rank; ++a) {
    if (reduced[a]) {
      r.reducedDims[r.reducedRank] = s[a];
      r.reducedStrides[r.reducedRank++] = strides[a];
      r.reducedCount *= s[a];
    } else {
      r.keptDims[r.keptRank] = s[a];
      r.keptStrides[r.keptRank++] = strides[a];
    }
  }
  if (r.keptRank == 0) { // one output element
    r.keptDims[0] = 1;
    r.keptStrides[0] = 0;
    r.keptRank = 1;
  }
  return r;
}

Expected<KernelPtr> makeReduceSum(const OpDesc &d) {
  const Shape &s = d.inputs[0].shape;
  const int rank = static_cast<int>(s.size());
  if (rank > body::kMaxRank)
    return errorf(d.where(), ": rank ", rank, " (the CUDA kernel reduces up to rank ", body::kMaxRank, ")");
  std::vector<int64_t> axes;
  if (d.opset >= 13) {
    if (d.hasInput(1)) {
      const Tensor *a = d.constInput(1);
      if (!a || a->dtype() != DType::I64)
        return errorf(d.where(), ": axes must be a constant int64 tensor");
      axes = a->toInts();
    }
  } else {
    axes = attrInts(d.attrs, "axes");
  }
  const bool noop = attrInt(d.attrs, "noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t a : axes) {
    if (a < 0)
      a += rank;
    if (a < 0 || a >= rank)
      return errorf(d.where(), ": axis out of range for ", shapeStr(s));
    reduced[static_cast<size_t>(a)] = true;
  }
  return KernelPtr(new ReduceSumKernel(reductionOf(s, reduced), d.outputs[0].numel()));
}

Expected<KernelPtr> makeSce(const OpDesc &d) {
  const bool grad = d.domain == "pipec";
  const size_t scores = grad ? 1 : 0;
  PIPEC_TRY(needF32(d, static_cast<int>(scores) + 1));
  if (d.hasInput(scores + 2))
    return errorf(d.where(), ": class weights are not implemented in the CUDA kernel");
  if (attrHas(d.attrs, "ignore_index"))
    return errorf(d.where(), ": ignore_index is not implemented in the CUDA kernel");
  if (!grad && d.outputs.size() > 1)
    return errorf(d.where(), ": the log_prob output is not implemented in the CUDA kernel");
  const std::string red = attrHas(d.attrs, "reduction") ? d.attrs.at("reduction").s : "mean";
  const int reduction = red == "none" ? 0 : red == "sum" ? 1 : red == "mean" ? 2 : -1;
  if (reduction < 0)
    return errorf(d.where(), ": unknown reduction '", red, "'");
  const Shape &x = d.inputs[scores].shape;
  if (x.size() < 2)
    return errorf(d.where(), ": scores must be [N, C, ...], got ", shapeStr(x));
  int64_t dd = 1;
  for (size_t a = 2; a < x.size(); ++a)
    dd *= x[a];
  return KernelPtr(new SceKernel(grad, reduction, x[0], x[1], dd));
}

/// A node whose run is one launch of a lambda (the launchers take device
/// pointers and the stream); `ws` says how much workspace it needs.
template <typename F> class LaunchKernel final : public Kernel {
public:
  LaunchKernel(F f, size_t ws) : f_(std::move(f)), ws_(ws) {}
  size_t workspaceBytes() const override { return ws_; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override { return f_(ctx, in, out); }

private:
  F f_;
  size_t ws_;
};
template <typename F> KernelPtr launchKernel(F f, size_t ws = 0) {
  return KernelPtr(new LaunchKernel<F>(std::move(f), ws));
}

/// Reads back the flag a kernel raises for an index out of range (the
/// first int of the workspace, cleared before the launch).
Status checkFlag(ExecContext &ctx, const std::string &what) {
  int bad = 0;
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (cudaMemcpyAsync(&bad, ctx.workspace, sizeof bad, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    return errorf(what, ": ", cudaGetErrorString(cudaGetLastError()));
  if (bad)
    return errorf(what, ": an index is out of range");
  return Status::ok();
}

int64_t normAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

int64_t prodDims(const Shape &s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t a = from; a < to && a < s.size(); ++a)
    p *= s[a];
  return p;
}

Expected<KernelPtr> makeTranspose(const OpDesc &d) {
  const Shape &in = d.inputs[0].shape;
  const size_t rank = in.size();
  if (rank > static_cast<size_t>(body::kMaxRank))
    return errorf(d.where(), ": rank ", rank, " (the CUDA kernel transposes up to rank ", body::kMaxRank, ")");
  std::vector<int64_t> perm = attrInts(d.attrs, "perm");
  if (perm.empty())
    for (size_t a = 0; a < rank; ++a)
      perm.push_back(static_cast<int64_t>(rank - 1 - a));
  if (perm.size() != rank)
    return errorf(d.where(), ": perm has ", perm.size(), " axes for rank ", rank);
  std::vector<int64_t> strides(rank, 1);
  for (size_t a = rank; a-- > 1;)
    strides[a - 1] = strides[a] * in[a];
  // Output axis a reads input axis perm[a].
  body::Broadcast b;
  b.rank = static_cast<int>(rank);
  for (size_t a = 0; a < rank; ++a) {
    if (perm[a] < 0 || perm[a] >= static_cast<int64_t>(rank))
      return errorf(d.where(), ": perm ", perm[a], " out of range");
    b.dims[a] = in[static_cast<size_t>(perm[a])];
    b.strides[a] = strides[static_cast<size_t>(perm[a])];
  }
  const int64_t n = d.outputs[0].numel();
  return launchKernel([b, n](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchBroadcastScale(static_cast<const float *>(in[0]), b, 1.0f, static_cast<float *>(out[0]), n,
                                ctx.stream);
  });
}

/// Concat (parts = inputs) and Split (parts = outputs) along an axis.
Expected<KernelPtr> makeSlices(const OpDesc &d, bool concat) {
  const TensorDesc &whole = concat ? d.outputs[0] : d.inputs[0];
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", concat ? 0 : 0), whole.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(whole.shape.size()))
    return errorf(d.where(), ": axis out of range for ", whole.str());
  const size_t ax = static_cast<size_t>(axis);
  const int64_t inner = prodDims(whole.shape, ax + 1, whole.shape.size());
  const int64_t wholeLen = whole.shape[ax];
  struct Part {
    int64_t n, len, offset;
  };
  std::vector<Part> parts;
  int64_t offset = 0;
  const std::vector<TensorDesc> &ps = concat ? d.inputs : d.outputs;
  for (const TensorDesc &t : ps) {
    if (t.shape.size() != whole.shape.size())
      return errorf(d.where(), ": part ", t.str(), " does not match ", whole.str());
    parts.push_back({t.numel(), t.shape[ax], offset});
    offset += t.shape[ax];
  }
  if (offset != wholeLen)
    return errorf(d.where(), ": the parts add up to ", offset, " along axis ", axis, ", not ", wholeLen);
  return launchKernel([parts, wholeLen, inner, concat](ExecContext &ctx, const void *const *in,
                                                       void *const *out) -> Status {
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part &pt = parts[i];
      if (concat)
        PIPEC_TRY(launchSliceCopy(static_cast<const float *>(in[i]), static_cast<float *>(out[0]), pt.n, pt.len,
                                  wholeLen, pt.offset, inner, true, ctx.stream));
      else
        PIPEC_TRY(launchSliceCopy(static_cast<const float *>(in[0]), static_cast<float *>(out[i]), pt.n, pt.len,
                                  wholeLen, pt.offset, inner, false, ctx.stream));
    }
    return Status::ok();
  });
}

Expected<KernelPtr> makeGather(const OpDesc &d) {
  const bool grad = d.domain == "pipec";
  const TensorDesc &data = grad ? d.outputs[0] : d.inputs[0];
  const TensorDesc &idx = d.inputs[1];
  if (idx.dtype != DType::I64)
    return errorf(d.where(), ": indices are ", dtypeName(idx.dtype), "; the CUDA kernel takes int64");
  if ((grad ? d.inputs[0].dtype : data.dtype) != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": the CUDA kernel takes float32 data");
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", 0), data.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(data.shape.size()))
    return errorf(d.where(), ": axis out of range for ", data.str());
  const size_t ax = static_cast<size_t>(axis);
  const int64_t outer = prodDims(data.shape, 0, ax), len = data.shape[ax];
  const int64_t inner = prodDims(data.shape, ax + 1, data.shape.size()), count = idx.numel();
  if (grad)
    return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
      return launchGatherGrad(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]),
                              static_cast<float *>(out[0]), outer, len, inner, count, ctx.stream);
    });
  return launchKernel(
      [=, where = d.where()](ExecContext &ctx, const void *const *in, void *const *out) -> Status {
        if (cudaMemsetAsync(ctx.workspace, 0, sizeof(int), static_cast<cudaStream_t>(ctx.stream)) != cudaSuccess)
          return errorf(where, ": cudaMemsetAsync failed");
        PIPEC_TRY(launchGather(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]),
                               static_cast<float *>(out[0]), outer, len, inner, count,
                               static_cast<int *>(ctx.workspace), ctx.stream));
        return checkFlag(ctx, where);
      },
      256);
}

Expected<KernelPtr> makeLayerNorm(const OpDesc &d) {
  const bool grad = d.opType == "LayerNormalizationGrad", scaleGrad = d.opType == "LayerNormalizationScaleGrad";
  const TensorDesc &x = grad || scaleGrad ? d.inputs[1] : d.inputs[0];
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", -1), x.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.shape.size()))
    return errorf(d.where(), ": axis out of range for ", x.str());
  const double eps = attrFloat(d.attrs, "epsilon", 1e-5f);
  const int64_t rows = prodDims(x.shape, 0, static_cast<size_t>(axis));
  const int64_t cols = prodDims(x.shape, static_cast<size_t>(axis), x.shape.size());
  if (scaleGrad)
    return launchKernel(
        [=](ExecContext &ctx, const void *const *in, void *const *out) {
          return launchLayerNormScaleGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                                          static_cast<float *>(out[0]), rows, cols, eps,
                                          static_cast<body::RowStats *>(ctx.workspace), ctx.stream);
        },
        static_cast<size_t>(rows) * sizeof(body::RowStats));
  if (grad && d.outputs.size() == 3) {
    // dX, dScale and dBias (autodiff's form when all three train): the dX
    // and scale-gradient kernels, then dY's column sums.
    const body::Reduction columns = reductionOf({rows, cols}, {true, false});
    return launchKernel(
        [=](ExecContext &ctx, const void *const *in, void *const *out) {
          const auto *dy = static_cast<const float *>(in[0]), *xp = static_cast<const float *>(in[1]);
          PIPEC_TRY(launchLayerNormGrad(dy, xp, static_cast<const float *>(in[2]), static_cast<float *>(out[0]), rows,
                                        cols, eps, ctx.stream));
          PIPEC_TRY(launchLayerNormScaleGrad(dy, xp, static_cast<float *>(out[1]), rows, cols, eps,
                                             static_cast<body::RowStats *>(ctx.workspace), ctx.stream));
          return launchReduceSum(dy, static_cast<float *>(out[2]), cols, columns, ctx.stream);
        },
        static_cast<size_t>(rows) * sizeof(body::RowStats));
  }
  if (grad && d.outputs.size() == 1)
    return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
      return launchLayerNormGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                                 static_cast<const float *>(in[2]), static_cast<float *>(out[0]), rows, cols, eps,
                                 ctx.stream);
    });
  if (grad)
    return errorf(d.where(), ": expects dX, or dX, dScale and dBias");
  if (d.outputs.size() > 1)
    return errorf(d.where(), ": the Mean and InvStdDev outputs are not implemented in the CUDA kernel");
  if (d.inputs[1].numel() != cols || (d.hasInput(2) && d.inputs[2].numel() != cols))
    return errorf(d.where(), ": scale and bias must hold ", cols, " elements (the CUDA kernel does not broadcast them)");
  const bool bias = d.hasInput(2);
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchLayerNorm(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                           bias ? static_cast<const float *>(in[2]) : nullptr, static_cast<float *>(out[0]), rows,
                           cols, eps, ctx.stream);
  });
}

Expected<KernelPtr> makeSoftmaxGrad(const OpDesc &d) {
  if (attrInt(d.attrs, "coerce2d", 0) != 0)
    return errorf(d.where(), ": the opset < 13 form (coerce2d) is not implemented in the CUDA kernel");
  const Shape &s = d.inputs[1].shape;
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", -1), s.size());
  if (axis < 0 || axis >= static_cast<int64_t>(s.size()))
    return errorf(d.where(), ": axis out of range for ", shapeStr(s));
  const int64_t outer = prodDims(s, 0, static_cast<size_t>(axis)), len = s[static_cast<size_t>(axis)];
  const int64_t inner = prodDims(s, static_cast<size_t>(axis) + 1, s.size());
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchSoftmaxGrad(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                             static_cast<float *>(out[0]), outer, len, inner, ctx.stream);
  });
}

Expected<KernelPtr> makeUnary(const OpDesc &d, UnaryOp op) {
  if (d.inputs.size() != 1 || d.outputs.size() != 1 || d.inputs[0].shape != d.outputs[0].shape)
    return errorf(d.where(), ": expects one input and one output of its shape");
  return KernelPtr(new UnaryKernel(op, d.outputs[0].numel()));
}

Expected<KernelPtr> makeGelu(const OpDesc &d) {
  const std::string approx = attrHas(d.attrs, "approximate") ? d.attrs.at("approximate").s : "none";
  if (approx != "none" && approx != "tanh")
    return errorf(d.where(), ": approximate must be 'none' or 'tanh', got '", approx, "'");
  return makeUnary(d, approx == "tanh" ? UnaryOp::GeluTanh : UnaryOp::GeluErf);
}

Expected<KernelPtr> makeReluGrad(const OpDesc &d) {
  if (d.inputs.size() != 2 || d.outputs.size() != 1 || d.inputs[0] != d.inputs[1] ||
      d.outputs[0] != d.inputs[0])
    return errorf(d.where(), ": expects dY and Y of one shape and dX of it");
  return KernelPtr(new ReluGradKernel(d.outputs[0].numel()));
}

Expected<KernelPtr> makeGeluGrad(const OpDesc &d) {
  if (d.inputs.size() != 2 || d.outputs.size() != 1 || d.inputs[0] != d.inputs[1] ||
      d.outputs[0] != d.inputs[0])
    return errorf(d.where(), ": expects dY and X of one shape and dX of it");
  const std::string approx = attrHas(d.attrs, "approximate") ? d.attrs.at("approximate").s : "none";
  if (approx != "none" && approx != "tanh")
    return errorf(d.where(), ": approximate must be 'none' or 'tanh', got '", approx, "'");
  return KernelPtr(new GeluGradKernel(d.outputs[0].numel(), approx == "tanh"));
}

Expected<KernelPtr> makeBinary(const OpDesc &d, body::BinaryOp op) {
  if (d.inputs.size() != 2 || d.outputs.size() != 1)
    return errorf(d.where(), ": expects two inputs and one output");
  const Shape &out = d.outputs[0].shape;
  if (out.size() > static_cast<size_t>(body::kMaxRank))
    return errorf(d.where(), ": rank ", out.size(), " (the CUDA kernels broadcast up to rank ", body::kMaxRank, ")");
  for (size_t i = 0; i < 2; ++i) {
    const Shape &s = d.inputs[i].shape;
    if (s.size() > out.size())
      return errorf(d.where(), ": input ", i, " ", shapeStr(s), " does not broadcast to ", shapeStr(out));
    for (size_t a = 0; a < s.size(); ++a) {
      const int64_t o = out[out.size() - s.size() + a];
      if (s[a] != 1 && s[a] != o)
        return errorf(d.where(), ": input ", i, " ", shapeStr(s), " does not broadcast to ", shapeStr(out));
    }
  }
  return KernelPtr(new BinaryKernel(op, broadcastOf(d.inputs[0].shape, out), broadcastOf(d.inputs[1].shape, out),
                                    d.outputs[0].numel()));
}

Expected<KernelPtr> makeFusedElementwise(const OpDesc &d) {
  auto p = ewProgramOf(d.attrs, d.inputs.size());
  if (!p)
    return errorf(d.where(), ": ", p.status().message());
  if (p->numInputs > body::kEwMaxInputs || p->steps.size() > static_cast<size_t>(body::kEwMaxSteps))
    return errorf(d.where(), ": the CUDA kernel takes programs of at most ", body::kEwMaxInputs, " inputs and ",
                  body::kEwMaxSteps, " steps (this one: ", p->numInputs, " and ", p->steps.size(), ")");
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorDesc &x : d.inputs)
    shapes.emplace_back(x.shape.begin(), x.shape.end());
  const Shape &y = d.outputs[0].shape;
  auto layout = ewLoopLayout(shapes, std::vector<int64_t>(y.begin(), y.end()));
  if (!layout)
    return errorf(d.where(), ": ", layout.status().message());
  body::EwDeviceProgram prog;
  prog.numInputs = p->numInputs;
  prog.numSteps = static_cast<int32_t>(p->steps.size());
  for (size_t s = 0; s < p->steps.size(); ++s) {
    prog.ops[3 * s] = static_cast<int32_t>(p->steps[s].op);
    prog.ops[3 * s + 1] = p->steps[s].a;
    prog.ops[3 * s + 2] = p->steps[s].b;
  }
  for (int32_t k = 0; k < p->numInputs; ++k) {
    prog.div[k] = layout->inputs[static_cast<size_t>(k)].div;
    prog.mod[k] = layout->inputs[static_cast<size_t>(k)].mod;
  }
  return KernelPtr(new FusedElementwiseKernel(prog, d.outputs[0].numel()));
}

Expected<KernelPtr> makeMaskedSoftmax(const OpDesc &d) {
  const Shape &x = d.inputs[0].shape, &c = d.inputs[1].shape;
  if (x.empty() || c.size() > x.size() || x.size() > static_cast<size_t>(body::kMaxRank) ||
      d.inputs[1].dtype != DType::Bool)
    return errorf(d.where(), ": the mask ", d.inputs[1].str(), " does not broadcast to ", d.inputs[0].str());
  for (size_t a = 0; a < c.size(); ++a)
    if (c[a] != 1 && c[a] != x[a + x.size() - c.size()])
      return errorf(d.where(), ": the mask ", d.inputs[1].str(), " does not broadcast to ", d.inputs[0].str());
  const int64_t n = x.back(), rows = n ? d.inputs[0].numel() / n : 0;
  return KernelPtr(new MaskedSoftmaxKernel(rows, n, broadcastOf(c, x), attrFloat(d.attrs, "scale", 1.0f),
                                           attrFloat(d.attrs, "fill", -INFINITY),
                                           attrInt(d.attrs, "fill_when", 1) != 0));
}

Expected<KernelPtr> makeSoftmax(const OpDesc &d) {
  const Shape &s = d.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t axis = attrInt(d.attrs, "axis", d.opset >= 13 ? -1 : 1);
  if (axis < 0)
    axis += rank;
  if (rank == 0 || axis < 0 || axis >= rank)
    return errorf(d.where(), ": axis out of range for ", shapeStr(s));
  if (d.opset < 13)
    return errorf(d.where(), ": opset ", d.opset, " Softmax flattens to 2-D; the CUDA kernel implements opset 13 and later");
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a)
    outer *= s[a];
  for (int64_t a = axis + 1; a < rank; ++a)
    inner *= s[a];
  return KernelPtr(new SoftmaxKernel(d.opType == "LogSoftmax", outer, s[axis], inner));
}

Expected<KernelPtr> makeMatMul(const OpDesc &d) {
  const Shape &a = d.inputs[0].shape, &b = d.inputs[1].shape;
  if (a.size() < 2 || b.size() < 2)
    return errorf(d.where(), ": the CUDA MatMul takes operands of rank 2 or more, got ", shapeStr(a), " and ",
                  shapeStr(b));
  auto k = std::make_unique<GemmKernel>();
  Gemm &g = k->g;
  g.m = a[a.size() - 2];
  g.k = a.back();
  g.n = b.back();
  if (b[b.size() - 2] != g.k)
    return errorf(d.where(), ": inner dimensions differ: ", shapeStr(a), " x ", shapeStr(b));
  // Batch axes: equal on both, or on one operand only (the other 2-D).
  const Shape batchAxesA(a.begin(), a.end() - 2), batchAxesB(b.begin(), b.end() - 2);
  if (!batchAxesA.empty() && !batchAxesB.empty() && batchAxesA != batchAxesB)
    return errorf(d.where(), ": the CUDA MatMul takes equal batch axes or one 2-D operand, got ", shapeStr(a),
                  " x ", shapeStr(b));
  int64_t batchA = 1, batchB = 1;
  for (int64_t v : batchAxesA)
    batchA *= v;
  for (int64_t v : batchAxesB)
    batchB *= v;
  g.batch = std::max(batchA, batchB);
  g.strideA = batchAxesA.empty() ? 0 : g.m * g.k;
  g.strideB = batchAxesB.empty() ? 0 : g.k * g.n;
  g.strideY = g.m * g.n;
  k->outElems = d.outputs[0].numel();
  return KernelPtr(k.release());
}

/// Einsum of a batched matrix product: "<batch>ij,<batch>jk-><batch>ik" in
/// any of the four transpositions (and with the operands' roles swapped),
/// the batch letters leading and equal in all three terms.
Expected<KernelPtr> makeEinsum(const OpDesc &d) {
  std::string eq = attrHas(d.attrs, "equation") ? d.attrs.at("equation").s : "";
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t comma = eq.find(','), arrow = eq.find("->");
  auto refuse = [&] {
    return errorf(d.where(), ": equation '", eq,
                  "' is not a batched matrix product; the CUDA kernel takes '<batch>ij,<batch>jk-><batch>ik' "
                  "and its transpositions");
  };
  if (d.inputs.size() != 2 || comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    return refuse();
  std::string a = eq.substr(0, comma), b = eq.substr(comma + 1, arrow - comma - 1), o = eq.substr(arrow + 2);
  if (a.size() < 2 || a.size() != b.size() || a.size() != o.size() ||
      a.size() != d.inputs[0].shape.size() || b.size() != d.inputs[1].shape.size())
    return refuse();
  const size_t r = a.size();
  if (a.substr(0, r - 2) != b.substr(0, r - 2) || a.substr(0, r - 2) != o.substr(0, r - 2))
    return refuse();
  const std::string ma = a.substr(r - 2), mb = b.substr(r - 2), mo = o.substr(r - 2);
  bool swap = false;
  if (ma.find(mo[0]) == std::string::npos) { // the output's rows come from B
    swap = true;
  }
  const std::string A = swap ? mb : ma, B = swap ? ma : mb;
  const char u = mo[0], v = mo[1];
  // The contracted letter: in both, not in the output.
  char c = 0;
  for (char x : A)
    if (B.find(x) != std::string::npos && mo.find(x) == std::string::npos)
      c = x;
  if (!c || A.find(u) == std::string::npos || B.find(v) == std::string::npos || A.find(v) != std::string::npos ||
      B.find(u) != std::string::npos)
    return refuse();
  auto k = std::make_unique<GemmKernel>();
  Gemm &g = k->g;
  const Shape &sa = d.inputs[swap ? 1 : 0].shape, &sb = d.inputs[swap ? 0 : 1].shape;
  g.ta = A[0] == c; // A stored [.., c, u]
  g.tb = B[1] == c; // B stored [.., v, c]
  g.m = sa[r - 2 + (g.ta ? 1 : 0)];
  g.k = sa[r - 2 + (g.ta ? 0 : 1)];
  g.n = sb[r - 2 + (g.tb ? 0 : 1)];
  if (sb[r - 2 + (g.tb ? 1 : 0)] != g.k)
    return errorf(d.where(), ": the contracted axes differ in size");
  g.batch = prodDims(sa, 0, r - 2);
  g.strideA = g.m * g.k;
  g.strideB = g.k * g.n;
  g.strideY = g.m * g.n;
  k->outElems = d.outputs[0].numel();
  if (!swap)
    return KernelPtr(k.release());
  // The operands' roles swapped: run with the inputs exchanged.
  return launchKernel([kk = std::shared_ptr<GemmKernel>(k.release())](ExecContext &ctx, const void *const *in,
                                                                     void *const *out) {
    const void *swapped[3] = {in[1], in[0], nullptr}; // GemmKernel reads no C here
    return kk->run(ctx, swapped, out);
  });
}

Expected<KernelPtr> makeGemm(const OpDesc &d) {
  if (d.inputs.size() < 2 || d.inputs[0].shape.size() != 2 || d.inputs[1].shape.size() != 2)
    return errorf(d.where(), ": Gemm takes 2-D A and B");
  auto k = std::make_unique<GemmKernel>();
  Gemm &g = k->g;
  g.ta = attrInt(d.attrs, "transA", 0) != 0;
  g.tb = attrInt(d.attrs, "transB", 0) != 0;
  g.alpha = attrFloat(d.attrs, "alpha", 1.0f);
  k->beta = attrFloat(d.attrs, "beta", 1.0f);
  const Shape &a = d.inputs[0].shape, &b = d.inputs[1].shape;
  g.m = g.ta ? a[1] : a[0];
  g.k = g.ta ? a[0] : a[1];
  g.n = g.tb ? b[0] : b[1];
  if ((g.tb ? b[1] : b[0]) != g.k)
    return errorf(d.where(), ": inner dimensions differ: ", shapeStr(a), " x ", shapeStr(b));
  k->hasC = d.hasInput(2);
  if (k->hasC)
    k->c = broadcastOf(d.inputs[2].shape, d.outputs[0].shape);
  k->outElems = d.outputs[0].numel();
  return KernelPtr(k.release());
}

Expected<KernelPtr> makeFusedGemm(const OpDesc &d) {
  auto act = fusedActivationOf(d.attrs);
  auto dims = fusedGemmDims(d.inputs[0].shape, d.inputs[1].shape, d.attrs);
  if (!act || !dims)
    return errorf(d.where(), ": ", (act ? dims.status() : act.status()).message());
  auto k = std::make_unique<FusedGemmKernel>();
  Gemm &g = k->g;
  g.ta = dims->ta;
  g.tb = dims->tb;
  g.m = dims->M;
  g.n = dims->N;
  g.k = dims->K;
  const Shape &out = d.outputs[0].shape;
  k->outElems = d.outputs[0].numel();
  k->y = broadcastOf(out, out);
  k->hasBias = d.hasInput(2);
  if (k->hasBias)
    k->bias = broadcastOf(d.inputs[2].shape, out);
  k->hasAct = *act != FusedActivation::None;
  k->act = *act == FusedActivation::GeluErf    ? UnaryOp::GeluErf
           : *act == FusedActivation::GeluTanh ? UnaryOp::GeluTanh
                                               : UnaryOp::Relu;
  return KernelPtr(k.release());
}

Expected<KernelPtr> makeAttention(const OpDesc &d, bool grad) {
  auto k = std::make_unique<AttentionKernel>();
  k->grad = grad;
  auto kind = attentionMaskOf(d.attrs);
  if (!kind)
    return errorf(d.where(), ": ", kind.status().message());
  k->mask = *kind == AttentionMask::Add ? 1 : *kind == AttentionMask::Bool ? 2 : 0;
  // The probabilities: the forward's second output, the gradient's input
  // after dO (keep-attention-probs), where they are there.
  const size_t want = attentionOperands(*kind) + (grad ? 1u : 0u);
  k->probs = grad ? d.inputs.size() == want + 1 : d.outputs.size() == 2;
  const bool packed = attrInt(d.attrs, "packed_qkv", 0) != 0;
  if (d.inputs.size() != want + (grad && k->probs ? 1u : 0u) ||
      d.outputs.size() != (grad ? (packed ? 1u : 3u) : k->probs ? 2u : 1u))
    return errorf(d.where(), ": expects ", want, grad ? " or " + std::to_string(want + 1) : std::string(),
                  " inputs with mask '", attrString(d.attrs, "mask", "none"), "' and ",
                  grad ? (packed ? "1" : "3") : "1 or 2", " outputs");
  auto dims = attentionDims(d.inputs[0].shape, d.inputs[1].shape, d.inputs[2].shape, d.attrs);
  if (!dims)
    return errorf(d.where(), ": ", dims.status().message());
  k->g = *dims;
  k->scale = attrFloat(d.attrs, "scale", 1.0f);
  k->fill = attrFloat(d.attrs, "fill", -INFINITY);
  k->fillWhen = attrInt(d.attrs, "fill_when", 1) != 0;
  k->same = broadcastOf(dims->scores, dims->scores);
  if (k->mask)
    k->maskBc = broadcastOf(d.inputs[3].shape, dims->scores);
  return KernelPtr(k.release());
}

using Factory = Expected<KernelPtr> (*)(const OpDesc &);
const std::map<std::string, Factory> &table() {
  static const std::map<std::string, Factory> t = {
      {"Relu", [](const OpDesc &d) { return makeUnary(d, UnaryOp::Relu); }},
      {"Neg", [](const OpDesc &d) { return makeUnary(d, UnaryOp::Neg); }},
      {"Sigmoid", [](const OpDesc &d) { return makeUnary(d, UnaryOp::Sigmoid); }},
      {"Tanh", [](const OpDesc &d) { return makeUnary(d, UnaryOp::Tanh); }},
      {"Exp", [](const OpDesc &d) { return makeUnary(d, UnaryOp::Exp); }},
      {"Gelu", makeGelu},
      {"pipec:ReluGrad", makeReluGrad},
      {"pipec:GeluGrad", makeGeluGrad},
      {"Add", [](const OpDesc &d) { return makeBinary(d, body::BinaryOp::Add); }},
      {"Sub", [](const OpDesc &d) { return makeBinary(d, body::BinaryOp::Sub); }},
      {"Mul", [](const OpDesc &d) { return makeBinary(d, body::BinaryOp::Mul); }},
      {"Div", [](const OpDesc &d) { return makeBinary(d, body::BinaryOp::Div); }},
      {"Softmax", makeSoftmax},
      {"LogSoftmax", makeSoftmax},
      {"MatMul", makeMatMul},
      {"Gemm", makeGemm},
      {"ReduceSum", makeReduceSum},
      {"Erf", [](const OpDesc &d) { return makeUnary(d, UnaryOp::Erf); }},
      {"Transpose", makeTranspose},
      {"Concat", [](const OpDesc &d) { return makeSlices(d, true); }},
      {"Split", [](const OpDesc &d) { return makeSlices(d, false); }},
      {"Gather", makeGather},
      {"pipec:GatherGrad", makeGather},
      {"LayerNormalization", makeLayerNorm},
      {"pipec:LayerNormalizationGrad", makeLayerNorm},
      {"pipec:LayerNormalizationScaleGrad", makeLayerNorm},
      {"pipec:SoftmaxGrad", makeSoftmaxGrad},
      {"pipec:MaskedSoftmax", makeMaskedSoftmax},
      {"pipec:FusedElementwise", makeFusedElementwise},
      {"pipec:FusedGemm", makeFusedGemm},
      {"pipec:Attention", [](const OpDesc &d) { return makeAttention(d, false); }},
      {"pipec:AttentionGrad", [](const OpDesc &d) { return makeAttention(d, true); }},
      {"Einsum", makeEinsum},
      {"SoftmaxCrossEntropyLoss", makeSce},
      {"pipec:SoftmaxCrossEntropyLossGrad", makeSce},
  };
  return t;
}

std::string key(const std::string &domain, const std::string &opType) {
  return domain.empty() || domain == "ai.onnx" ? opType : domain + ":" + opType;
}

} // namespace

Expected<KernelPtr> createKernel(const OpDesc &d) {
  auto it = table().find(key(d.domain, d.opType));
  if (it == table().end())
    return errorf("node '", d.name, "' (op type '", d.opType, "', domain ",
                  d.domain.empty() ? "ai.onnx" : d.domain, ", opset ", d.opset, ") has no CUDA kernel");
  // The losses and gathers check their own types (int64 targets and
  // indices); ReduceSum's axes and Split's sizes are int64; the masks of
  // pipec:MaskedSoftmax and of a bool-masked pipec:Attention are bool.
  if (d.opType == "ReduceSum" || d.opType == "Split")
    PIPEC_TRY(needF32(d, d.hasInput(1) ? 1 : -1));
  else if (d.opType == "MaskedSoftmax")
    PIPEC_TRY(needF32(d, 1, DType::Bool));
  else if ((d.opType == "Attention" || d.opType == "AttentionGrad") && attrString(d.attrs, "mask", "none") == "bool")
    PIPEC_TRY(needF32(d, 3, DType::Bool));
  else if (d.opType != "SoftmaxCrossEntropyLoss" && d.opType != "SoftmaxCrossEntropyLossGrad" &&
           d.opType != "Gather" && d.opType != "GatherGrad")
    PIPEC_TRY(needF32(d));
  return it->second(d);
}

bool hasKernel(const std::string &domain, const std::string &opType) {
  return table().count(key(domain, opType)) > 0;
}

std::vector<std::string> kernelOpNames() {
  std::vector<std::string> names;
  for (const auto &[k, f] : table())
    names.push_back(k);
  return names;
}

} // namespace pipec::cuda
