//===- runtime/cpu/kernels/Gemm.cpp - Gemm (Y = alpha A'B' + beta C) ------===//
//
// ONNX Gemm, opsets 7-13: A is [M,K] (or [K,M] with transA), B is [K,N] (or
// [N,K] with transB), and the optional C (required before opset 11) is
// unidirectionally broadcast to [M,N]. Y is first filled with the broadcast
// C, then one sgemm/dgemm call accumulates alpha * A'B' + beta * Y. Integer
// types (opset 9+) use a plain loop. Without C the kernel can also add A'B'
// to what Y holds (ExecContext::accumulate: weight gradients summed over
// micro-batches in place).
//
// The three GEMMs (beta 0, beta for C, beta 1 to accumulate) are prepared
// once: with transB an f32 product may run as a oneDNN matmul primitive
// (runtime/cpu/kernels/DnnlGemm.cpp). Under output_dtype (support/FusedOps.h)
// A and B are bf16 or f16, C and Y f32: LinalgHalfGemm.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/FusedOps.h"

#include <tuple>

namespace pipec::cpu {

namespace {

template <typename T> class GemmKernel final : public Kernel {
public:
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  T alpha = T(1), beta = T(0);
  bool hasC = false;
  int64_t cStrideM = 0, cStrideN = 0;   ///< strides of C broadcast to [M,N]
  /// beta 0; beta for Y = C; beta 1 for Y += A'B' (ExecContext::accumulate)
  LinalgBatchedGemm<T> gemm, gemmWithC, gemmAccumulate;
  /// Under output_dtype (T float): the three products as LinalgHalfGemm
  /// on the fields of the three above (their operand types set by
  /// makeTyped).
  bool half = false;
  LinalgHalfGemm halfGemm, halfWithC, halfAccumulate;

  /// Without C: the GEMM adds into Y itself (beta 1), with no extra pass.
  bool canAccumulate() const override { return !hasC || beta == T(0); }

  size_t heldBytes() const override {
    return half ? halfGemm.heldBytes() + halfWithC.heldBytes() + halfAccumulate.heldBytes() : 0;
  }

  size_t workspaceBytes() const override {
    if (half)
      return std::max({halfGemm.workspaceBytes(), halfWithC.workspaceBytes(), halfAccumulate.workspaceBytes()});
    return std::max({gemm.workspaceBytes(), gemmWithC.workspaceBytes(),
                     gemmAccumulate.workspaceBytes()});
  }

  /// Prepares the products the kernel runs (the half ones under
  /// output_dtype).
  void prepare() {
    const bool withC = hasC && beta != T(0);
    if constexpr (std::is_same_v<T, float>) {
      if (half) {
        for (auto [h, g, use] : {std::tuple{&halfGemm, &gemm, true}, std::tuple{&halfWithC, &gemmWithC, withC},
                                 std::tuple{&halfAccumulate, &gemmAccumulate, canAccumulate()}})
          if (use) {
            h->f32 = *g;
            h->prepare();
          }
        return;
      }
    }
    gemm.prepare();
    if (withC)
      gemmWithC.prepare();
    if (canAccumulate())
      gemmAccumulate.prepare();
  }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const T *C = hasC ? static_cast<const T *>(in[2]) : nullptr;
    T *Y = static_cast<T *>(out[0]);
    if (half) {
      if constexpr (std::is_same_v<T, float>) {
        const uint64_t step = ctx.training ? ctx.step : 0;
        if (ctx.accumulate && canAccumulate())
          return halfAccumulate.run(in[0], in[1], Y, ctx.workspace, nullptr, step, ctx.halfWeights);
        if (hasC && beta != T(0)) {
          PIPEC_TRY(fillC(C, Y));
          return halfWithC.run(in[0], in[1], Y, ctx.workspace, nullptr, step, ctx.halfWeights);
        }
        return halfGemm.run(in[0], in[1], Y, ctx.workspace, nullptr, step, ctx.halfWeights);
      }
    }
    const T *A = static_cast<const T *>(in[0]);
    const T *B = static_cast<const T *>(in[1]);
    if (ctx.accumulate && canAccumulate())
      return gemmAccumulate.runPrepared(A, B, Y, ctx.workspace);
    // A step-invariant B (the layer's weights) runs packed in inference,
    // where it never changes (LinalgBatchedGemm::runPrepared).
    const bool packed = !ctx.training;
    if (hasC && beta != T(0)) {
      PIPEC_TRY(fillC(C, Y));
      return gemmWithC.runPrepared(A, B, Y, ctx.workspace, packed);
    }
    return gemm.runPrepared(A, B, Y, ctx.workspace, packed);
  }

private:
  /// Y = C broadcast to [M, N], for the product to add into.
  Status fillC(const T *C, T *Y) const {
    if (!C)
      return errorf("Gemm: input C is missing at run time");
    for (int64_t m = 0; m < M; ++m) {
      T *row = Y + m * N;
      const T *crow = C + m * cStrideM;
      if (cStrideN == 0)
        std::fill(row, row + N, crow[0]);
      else
        std::copy(crow, crow + N, row);
    }
    return Status::ok();
  }
};

/// `half`: a product under output_dtype (T float: LinalgHalfGemm).
template <typename T> Expected<KernelPtr> makeTyped(const OpDesc &d, bool half = false) {
  auto k = std::make_unique<GemmKernel<T>>();
  k->half = half;
  if (half)
    for (LinalgHalfGemm *h : {&k->halfGemm, &k->halfWithC, &k->halfAccumulate})
      linalgHalfOperandsOf(d, *h);
  const Shape &a = d.inputs[0].shape, &b = d.inputs[1].shape;
  if (a.size() != 2 || b.size() != 2)
    return errorf(d.where(), ": A and B must be matrices, got ", shapeStr(a), " and ", shapeStr(b));
  k->ta = attrInt(d.attrs, "transA", 0) != 0;
  k->tb = attrInt(d.attrs, "transB", 0) != 0;
  k->alpha = static_cast<T>(attrFloat(d.attrs, "alpha", 1.0f));
  k->beta = static_cast<T>(attrFloat(d.attrs, "beta", 1.0f));
  k->M = k->ta ? a[1] : a[0];
  k->K = k->ta ? a[0] : a[1];
  int64_t kb = k->tb ? b[1] : b[0];
  k->N = k->tb ? b[0] : b[1];
  if (kb != k->K)
    return errorf(d.where(), ": inner dimensions differ: A' has ", k->K, ", B' has ", kb);
  if (d.outputs[0].shape != Shape{k->M, k->N})
    return errorf(d.where(), ": output shape ", shapeStr(d.outputs[0].shape), ", expected [", k->M,
                  ",", k->N, "]");
  k->hasC = d.hasInput(2);
  if (k->hasC) {
    const Shape &c = d.inputs[2].shape;
    if (d.inputs[2].dtype != d.outputs[0].dtype)
      return errorf(d.where(), ": C has type ", d.inputs[2].str(), ", Y ", d.outputs[0].str());
    Shape target = {k->M, k->N}, bc;
    if (c.size() > 2 || !linalgBroadcastShapes(c, target, bc) || bc != target)
      return errorf(d.where(), ": C of shape ", shapeStr(c), " does not broadcast to [", k->M, ",",
                    k->N, "]");
    std::vector<int64_t> st = linalgBroadcastStrides(c, target);
    k->cStrideM = st[0];
    k->cStrideN = st[1];
  }
  LinalgBatchedGemm<T> &g = k->gemm;
  g.ta = k->ta;
  g.tb = k->tb;
  g.M = k->M;
  g.N = k->N;
  g.K = k->K;
  g.lda = k->ta ? k->M : k->K;
  g.ldb = k->tb ? k->K : k->N;
  g.ldc = k->N;
  g.alpha = k->alpha;
  g.aOff = g.bOff = g.cOff = {0};
  g.bStepInvariant = d.isStepInvariant(1);
  k->gemmWithC = g;
  k->gemmWithC.beta = k->beta;
  k->gemmAccumulate = g;
  k->gemmAccumulate.beta = T(1);
  k->gemmAccumulate.bStepInvariant = false;
  k->prepare();
  return KernelPtr(std::move(k));
}

} // namespace

Expected<KernelPtr> makeGemmKernel(const OpDesc &d) {
  if (d.inputs.size() < 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 or 3 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  DType t = d.inputs[0].dtype;
  auto result = productResultType(t, d.inputs[1].dtype, d.attrs);
  if (!result || d.outputs[0].dtype != *result)
    return errorf(d.where(), ": element types do not fit: ", d.inputs[0].str(), ", ", d.inputs[1].str(), " -> ",
                  d.outputs[0].str(), result ? "" : ": ", result ? "" : result.status().message());
  if (linalgIsHalfProduct(d)) // 16-bit operands (or an f32 weight), f32 result
    return makeTyped<float>(d, true);
  return linalgDispatchNumeric(d, t, [&](auto tag) { return makeTyped<decltype(tag)>(d); });
}

} // namespace pipec::cpu
