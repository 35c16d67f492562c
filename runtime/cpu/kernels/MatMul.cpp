//===- runtime/cpu/kernels/MatMul.cpp - MatMul (numpy matmul) -------------===//
//
// ONNX MatMul, opsets 1-13: numpy matmul semantics, with 1-D operands
// promoted (A to [1,K], B to [K,1]) and the promoted axis removed from the
// result, and batch dimensions broadcast. Floating point goes through
// LinalgBatchedGemm (cpu::sgemm, cblas_dgemm); integer types use a plain
// loop.
//
// When B has no batch (the common activation x weight case) the batch of A
// is folded into M and the whole node is one GEMM. Otherwise the per-batch
// offsets are computed in the factory and LinalgBatchedGemm runs them; an
// f32 batch of small products (attention's per-head ones) runs as one
// oneDNN matmul primitive (runtime/cpu/kernels/DnnlGemm.cpp).
//
// Under output_dtype (support/FusedOps.h) the operands are bf16 or f16 and
// the result f32: LinalgHalfGemm.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/FusedOps.h"

namespace pipec::cpu {

namespace {

template <typename T> class MatMulKernel final : public Kernel {
public:
  explicit MatMulKernel(LinalgBatchedGemm<T> g) : g_(std::move(g)) { g_.prepare(); }
  size_t workspaceBytes() const override { return g_.workspaceBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return g_.runPrepared(static_cast<const T *>(in[0]), static_cast<const T *>(in[1]),
                          static_cast<T *>(out[0]), ctx.workspace);
  }

private:
  LinalgBatchedGemm<T> g_;
};

/// The batch of GEMMs of MatMul `d` on T.
template <typename T> Expected<LinalgBatchedGemm<T>> geometry(const OpDesc &d) {
  Shape a = d.inputs[0].shape, b = d.inputs[1].shape;
  if (a.empty() || b.empty())
    return errorf(d.where(), ": operands must have rank >= 1, got ", shapeStr(a), " and ",
                  shapeStr(b));
  bool aVec = a.size() == 1, bVec = b.size() == 1;
  if (aVec)
    a.insert(a.begin(), 1);
  if (bVec)
    b.push_back(1);
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  if (b[b.size() - 2] != K)
    return errorf(d.where(), ": inner dimensions differ: ", shapeStr(d.inputs[0].shape), " x ",
                  shapeStr(d.inputs[1].shape));
  Shape aBatch(a.begin(), a.end() - 2), bBatch(b.begin(), b.end() - 2), batch;
  if (!linalgBroadcastShapes(aBatch, bBatch, batch))
    return errorf(d.where(), ": batch dimensions ", shapeStr(aBatch), " and ", shapeStr(bBatch),
                  " do not broadcast");
  Shape want = batch;
  if (!aVec)
    want.push_back(M);
  if (!bVec)
    want.push_back(N);
  if (d.outputs[0].shape != want)
    return errorf(d.where(), ": output shape ", shapeStr(d.outputs[0].shape), ", expected ",
                  shapeStr(want));

  LinalgBatchedGemm<T> g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.lda = K;
  g.ldb = N;
  g.ldc = N;
  int64_t nb = numElements(batch);
  if (numElements(bBatch) == 1 && numElements(aBatch) == nb) {
    // B is shared by the whole batch: one [batch*M, K] x [K, N] product.
    g.M = M * nb;
    g.aOff = g.bOff = g.cOff = {0};
    return g;
  }
  std::vector<int64_t> as = linalgBroadcastStrides(aBatch, batch);
  std::vector<int64_t> bs = linalgBroadcastStrides(bBatch, batch);
  std::vector<int64_t> idx(batch.size(), 0);
  g.aOff.resize(nb);
  g.bOff.resize(nb);
  g.cOff.resize(nb);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t k = 0; k < batch.size(); ++k) {
      ao += idx[k] * as[k];
      bo += idx[k] * bs[k];
    }
    g.aOff[i] = ao * M * K;
    g.bOff[i] = bo * K * N;
    g.cOff[i] = i * M * N;
    for (size_t k = batch.size(); k-- > 0;) {
      if (++idx[k] < batch[k])
        break;
      idx[k] = 0;
    }
  }
  return g;
}

template <typename T> Expected<KernelPtr> makeTyped(const OpDesc &d) {
  PIPEC_ASSIGN(LinalgBatchedGemm<T> g, geometry<T>(d));
  return KernelPtr(new MatMulKernel<T>(std::move(g)));
}

} // namespace

Expected<KernelPtr> makeMatMulKernel(const OpDesc &d) {
  if (d.inputs.size() != 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  DType t = d.inputs[0].dtype;
  auto result = productResultType(t, d.inputs[1].dtype, d.attrs);
  if (!result || d.outputs[0].dtype != *result)
    return errorf(d.where(), ": element types do not fit: ", d.inputs[0].str(), ", ", d.inputs[1].str(), " -> ",
                  d.outputs[0].str(), result ? "" : ": ", result ? "" : result.status().message());
  if (linalgIsHalfProduct(d)) { // 16-bit operands (or an f32 weight), f32 result
    PIPEC_ASSIGN(LinalgBatchedGemm<float> g, geometry<float>(d));
    return KernelPtr(new LinalgHalfGemmKernel(std::move(g), d));
  }
  return linalgDispatchNumeric(d, t, [&](auto tag) { return makeTyped<decltype(tag)>(d); });
}

} // namespace pipec::cpu
