//===- runtime/cpu/kernels/FusedGemm.cpp - A GEMM with a bias and activation epilogue ===//
//
// pipec:FusedGemm(A, B[, bias]) {transA, transB, activation}, made by
// fuse-gemm-epilogue (passes/Fusion.cpp) from Gemm or MatMul, a bias Add
// and a Relu or Gelu: Y = act(A' B' + bias), f32. A is [..., K] (the
// leading axes folded into M; [K, M] with transA, rank 2 only), B is [K, N]
// ([N, K] with transB), the bias [N].
//
// One LinalgBatchedGemm with an epilogue (LinalgCommon.h): where the
// product runs as a oneDNN matmul (B transposed, or a layer's weights
// packed in inference) the bias and activation are the primitive's bias
// and eltwise post-op; on the sgemm path each tile of Y gets them right
// after its product, while it is in cache. Either way Y is written once
// instead of three times. The primitive's post-ops round as oneDNN's
// eltwise kernels do (its GELU approximations are its own), so a fused
// graph's results differ from the unfused one's by rounding; the path a
// GEMM takes depends on its shape and on training or inference only, not
// on the thread count (a primitive runs on one thread, the tiles are
// fixed by the shape), so results stay independent of it.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgHalfGemm.h"

namespace pipec::cpu {

namespace {

class FusedGemmKernel final : public Kernel {
public:
  explicit FusedGemmKernel(LinalgBatchedGemm<float> g) : g_(std::move(g)) { g_.prepare(); }
  size_t workspaceBytes() const override { return g_.workspaceBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    // A step-invariant B (the layer's weights) runs packed in inference.
    return g_.runPrepared(static_cast<const float *>(in[0]), static_cast<const float *>(in[1]),
                          static_cast<float *>(out[0]), ctx.workspace, !ctx.training,
                          g_.bias ? static_cast<const float *>(in[2]) : nullptr);
  }

private:
  LinalgBatchedGemm<float> g_;
};

} // namespace

Expected<KernelPtr> makeFusedGemmKernel(const OpDesc &d) {
  if (d.inputs.size() < 2 || d.inputs.size() > 3 || !d.hasInput(0) || !d.hasInput(1) ||
      d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 or 3 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  // f32 operands, or 16-bit ones under output_dtype; the bias f32.
  const DType operands = d.inputs[0].dtype;
  const auto result = productResultType(operands, d.inputs[1].dtype, d.attrs);
  if (!result || *result != DType::F32)
    return errorf(d.where(), ": operands ", d.inputs[0].str(), " and ", d.inputs[1].str(),
                  "; FusedGemm takes f32 ones, or bf16 or f16 ones with output_dtype");
  if (d.inputs.size() > 2 && d.hasInput(2) && d.inputs[2].dtype != DType::F32)
    return errorf(d.where(), ": the bias is ", d.inputs[2].str(), "; FusedGemm takes f32");
  auto act = fusedActivationOf(d.attrs);
  auto dims = fusedGemmDims(d.inputs[0].shape, d.inputs[1].shape, d.attrs);
  if (!act || !dims)
    return errorf(d.where(), ": ", (act ? dims.status() : act.status()).message());
  if (d.outputs[0].shape != dims->out || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": output ", d.outputs[0].str(), ", expected f32", shapeStr(dims->out));
  LinalgBatchedGemm<float> g;
  g.ta = dims->ta;
  g.tb = dims->tb;
  g.M = dims->M;
  g.N = dims->N;
  g.K = dims->K;
  g.bias = d.hasInput(2);
  if (g.bias && d.inputs[2].numel() != g.N)
    return errorf(d.where(), ": the bias ", d.inputs[2].str(), " must have N = ", g.N, " values");
  g.act = *act;
  g.lda = g.ta ? g.M : g.K;
  g.ldb = g.tb ? g.K : g.N;
  g.ldc = g.N;
  g.aOff = g.bOff = g.cOff = {0};
  g.bStepInvariant = d.isStepInvariant(1);
  if (linalgIsHalfProduct(d))
    return KernelPtr(new LinalgHalfGemmKernel(std::move(g), d));
  return KernelPtr(new FusedGemmKernel(std::move(g)));
}

} // namespace pipec::cpu
