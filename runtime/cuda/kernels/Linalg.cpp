//===- runtime/cuda/kernels/Linalg.cpp - CUDA matrix products and attention -===//
//
// MatMul, Gemm, Einsum (batched matrix products) and pipec:FusedGemm on
// cuBLAS in pedantic math mode; pipec:Attention and its gradient. MatMul,
// Gemm and FusedGemm under output_dtype (support/FusedOps.h) take bf16 or
// f16 operands and give f32 (cublasGemmEx with f32 compute); an f32
// operand among them (a weight) is read rounded: the device's rounding of
// the step (ExecContext::halfWeights, runtime/cuda/Roundings.h) where the
// operand is a weight or constant, else rounded into the workspace at the
// run.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels/CudaCommon.h"
#include "support/FusedOps.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace pipec::cuda {

namespace {

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
  /// The type of A and B: f32, or bf16/f16 under output_dtype
  /// (support/FusedOps.h), whose products cuBLAS accumulates in f32 into
  /// the f32 Y (cublasGemmEx, tensor cores).
  cudaDataType operands = CUDA_R_32F;
  /// Elements of A (B) given in f32 under output_dtype (a weight), which
  /// run() rounds to `operands` in the workspace first (support/Half.h's
  /// rounding: Move.cu); 0 where the operand has type `operands`.
  int64_t roundA = 0, roundB = 0;
  /// Whether that operand keeps its bytes through a step (a weight:
  /// OpDesc::stepInvariant), so that the device's rounding of the step
  /// serves.
  bool keepA = false, keepB = false;

  static size_t padded(int64_t n) { return (static_cast<size_t>(n) * sizeof(uint16_t) + 255) / 256 * 256; }
  size_t workspaceBytes() const { return padded(roundA) + padded(roundB); }

  /// `ws`: workspaceBytes() of device memory (where roundA or roundB);
  /// `shared`, `step`: the device's roundings and the step they are for
  /// (0 in inference, where weights do not change).
  Status run(void *stream, const void *a, const void *b, float *y, float beta, void *ws = nullptr,
             kernel::HalfWeights *shared = nullptr, uint64_t step = 0) const {
    if (roundA || roundB) {
      if (!ws)
        return errorf("a product rounding an f32 operand has no workspace");
      const CastType to = operands == CUDA_R_16BF ? CastType::BF16 : CastType::F16;
      auto *at = static_cast<unsigned char *>(ws);
      auto round = [&](const void *&x, int64_t n, bool keep) -> Status {
        if (keep && shared) {
          x = shared->rounded(static_cast<const float *>(x), n, to == CastType::BF16 ? DType::BF16 : DType::F16,
                              step);
          return x ? Status::ok() : errorf("cannot make the rounding of a weight of ", n, " elements on the GPU");
        }
        PIPEC_TRY(launchHalfCast(x, CastType::F32, at, to, n, stream));
        x = at;
        at += padded(n);
        return Status::ok();
      };
      if (roundA)
        PIPEC_TRY(round(a, roundA, keepA));
      if (roundB)
        PIPEC_TRY(round(b, roundB, keepB));
    }
    PIPEC_ASSIGN(cublasHandle_t h, cublasFor(stream));
    const int lda = static_cast<int>(ldA ? ldA : ta ? m : k), ldb = static_cast<int>(ldB ? ldB : tb ? k : n);
    const int ldy = static_cast<int>(ldY ? ldY : n);
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (operands != CUDA_R_32F) {
      if (batch == 1)
        return cublasCheck(cublasGemmEx(h, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                        &alpha, b, operands, ldb, a, operands, lda, &beta, y, CUDA_R_32F, ldy,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx");
      return cublasCheck(cublasGemmStridedBatchedEx(h, opB, opA, static_cast<int>(n), static_cast<int>(m),
                                                    static_cast<int>(k), &alpha, b, operands, ldb, strideB, a,
                                                    operands, lda, strideA, &beta, y, CUDA_R_32F, ldy, strideY,
                                                    static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "cublasGemmStridedBatchedEx");
    }
    const auto *af = static_cast<const float *>(a), *bf = static_cast<const float *>(b);
    if (batch == 1)
      return cublasCheck(cublasSgemm(h, opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                     &alpha, bf, ldb, af, lda, &beta, y, ldy),
                         "cublasSgemm");
    return cublasCheck(cublasSgemmStridedBatched(h, opB, opA, static_cast<int>(n), static_cast<int>(m),
                                                 static_cast<int>(k), &alpha, bf, ldb, strideB, af, lda, strideA,
                                                 &beta, y, ldy, strideY, static_cast<int>(batch)),
                       "cublasSgemmStridedBatched");
  }
};

class GemmKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  Gemm g;
  bool hasC = false;
  float beta = 0.0f;
  body::Broadcast c;
  int64_t outElems = 0;

  bool canAccumulate() const override { return !hasC || beta == 0.0f; }
  size_t workspaceBytes() const override { return g.workspaceBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const void *a = in[0], *b = in[1]; // f32, or Gemm::operands
    auto *y = static_cast<float *>(out[0]);
    const uint64_t step = ctx.training ? ctx.step : 0;
    if (ctx.accumulate)
      return g.run(ctx.stream, a, b, y, 1.0f, ctx.workspace, ctx.halfWeights, step);
    if (hasC && beta != 0.0f) {
      // Y = beta C, broadcast; then Y += alpha A'B'.
      PIPEC_TRY(launchBroadcastScale(static_cast<const float *>(in[2]), c, beta, y, outElems, ctx.stream));
      return g.run(ctx.stream, a, b, y, 1.0f, ctx.workspace, ctx.halfWeights, step);
    }
    return g.run(ctx.stream, a, b, y, 0.0f, ctx.workspace, ctx.halfWeights, step);
  }
};

/// pipec:FusedGemm: Y = A'B' (cuBLAS), then the epilogue in place: Y +=
/// bias (a broadcast add) and the activation (a unary kernel).
class FusedGemmKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  Gemm g;
  bool hasBias = false, hasAct = false;
  UnaryOp act = UnaryOp::Relu;
  body::Broadcast y, bias;
  int64_t outElems = 0;

  size_t workspaceBytes() const override { return g.workspaceBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    auto *dst = static_cast<float *>(out[0]);
    PIPEC_TRY(g.run(ctx.stream, in[0], in[1], dst, 0.0f, ctx.workspace, ctx.halfWeights,
                    ctx.training ? ctx.step : 0));
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
  bool replayable() const override { return true; }
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

/// The operand type of product `d` for cuBLAS: f32, or bf16/f16 under
/// output_dtype (then an f32 operand is rounded: `g`'s roundA, roundB);
/// refused otherwise.
Expected<cudaDataType> operandsOf(const OpDesc &d, Gemm &g) {
  if (d.inputs.size() < 2 || d.outputs.empty())
    return errorf(d.where(), ": a product needs 2 operands and an output");
  auto result = productResultType(d.inputs[0].dtype, d.inputs[1].dtype, d.attrs);
  if (!result)
    return errorf(d.where(), ": ", result.status().message());
  if (*result != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": the CUDA products give f32 results, not ", d.outputs[0].str());
  const DType t = productOperandType(d.inputs[0].dtype, d.inputs[1].dtype);
  if (t != DType::F32) {
    g.roundA = d.inputs[0].dtype == DType::F32 ? d.inputs[0].numel() : 0;
    g.roundB = d.inputs[1].dtype == DType::F32 ? d.inputs[1].numel() : 0;
    g.keepA = g.roundA && d.isStepInvariant(0);
    g.keepB = g.roundB && d.isStepInvariant(1);
  }
  switch (t) {
  case DType::BF16: return CUDA_R_16BF;
  case DType::F16: return CUDA_R_16F;
  default: return CUDA_R_32F;
  }
}

} // namespace

Expected<KernelPtr> makeMatMul(const OpDesc &d) {
  const Shape &a = d.inputs[0].shape, &b = d.inputs[1].shape;
  if (a.size() < 2 || b.size() < 2)
    return errorf(d.where(), ": the CUDA MatMul takes operands of rank 2 or more, got ", shapeStr(a), " and ",
                  shapeStr(b));
  auto k = std::make_unique<GemmKernel>();
  Gemm &g = k->g;
  PIPEC_ASSIGN(g.operands, operandsOf(d, g));
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
  PIPEC_ASSIGN(g.operands, operandsOf(d, g));
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
  PIPEC_ASSIGN(g.operands, operandsOf(d, g));
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

Expected<KernelPtr> makeAttentionForward(const OpDesc &d) { return makeAttention(d, false); }
Expected<KernelPtr> makeAttentionGrad(const OpDesc &d) { return makeAttention(d, true); }

} // namespace pipec::cuda
