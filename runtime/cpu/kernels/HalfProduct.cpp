//===- runtime/cpu/kernels/HalfProduct.cpp - Products under output_dtype ---===//
//
// The mixed-precision pass (passes/MixedPrecision.cpp) marks the products
// it feeds 16-bit copies with `output_dtype`: operands 0 and 1 bf16 (f16),
// the result f32. MatMul, Gemm and pipec:FusedGemm read them with
// LinalgHalfGemm (DnnlHalfGemm.cpp); the convolutions (Conv, pipec:NhwcConv,
// ConvTranspose and the gradients ConvGradInput, ConvGradWeight) read them
// with oneDNN's 16-bit convolutions where the CPU has the instructions
// (Conv.cpp, GradConv.cpp), and elsewhere through the emulation here: both
// operands widened to f32 in the workspace, then the f32 kernel. That is
// the arithmetic of a Cast to f32 before the f32 product, bit for bit, with
// the f32 copies in the workspace rather than the arena.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgHalfGemm.h"

namespace pipec::cpu {

bool linalgIsHalfProduct(const OpDesc &d) { return d.attrs.count(kProductOutputDType) != 0; }

Expected<OpDesc> linalgWidenedProduct(const OpDesc &d) {
  if (d.inputs.size() < 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.empty())
    return errorf(d.where(), ": a product under ", kProductOutputDType, " needs two operands and a result");
  auto t = productResultType(d.inputs[0].dtype, d.inputs[1].dtype, d.attrs);
  if (!t)
    return errorf(d.where(), ": ", t.status().message());
  if (d.outputs[0].dtype != *t)
    return errorf(d.where(), ": the result must be ", dtypeName(*t), ", it is ", d.outputs[0].str());
  OpDesc w = d;
  w.attrs.erase(kProductOutputDType);
  for (size_t i = 0; i < 2; ++i) {
    w.inputs[i].dtype = DType::F32;
    if (i < w.stepInvariant.size())
      w.stepInvariant[i] = false;
    if (i < w.constInputs.size())
      w.constInputs[i] = Tensor();
  }
  return w;
}

namespace {

class WidenedProductKernel final : public Kernel {
public:
  WidenedProductKernel(KernelPtr inner, DType operands, const OpDesc &d)
      : inner_(std::move(inner)), operands_(operands), nInputs_(d.inputs.size()) {
    for (size_t i = 0; i < 2; ++i) {
      count_[i] = d.inputs[i].numel();
      offset_[i] = i == 0 ? 0 : linalgRoundUp(static_cast<size_t>(count_[0]) * sizeof(float));
    }
    innerOffset_ = offset_[1] + linalgRoundUp(static_cast<size_t>(count_[1]) * sizeof(float));
  }
  size_t workspaceBytes() const override { return innerOffset_ + inner_->workspaceBytes() + 64; }
  size_t heldBytes() const override { return inner_->heldBytes(); }
  bool canAccumulate() const override { return inner_->canAccumulate(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    unsigned char *ws = static_cast<unsigned char *>(linalgAlign(ctx.workspace));
    const void *args[8];
    for (size_t i = 0; i < nInputs_; ++i)
      args[i] = in[i];
    for (size_t i = 0; i < 2; ++i) {
      float *wide = reinterpret_cast<float *>(ws + offset_[i]);
      linalgWidenHalf(static_cast<const uint16_t *>(in[i]), wide, count_[i], operands_);
      args[i] = wide;
    }
    ExecContext inner = ctx;
    inner.workspace = ws + innerOffset_;
    return inner_->run(inner, args, out);
  }

private:
  KernelPtr inner_;
  DType operands_;
  size_t nInputs_;
  int64_t count_[2] = {0, 0};
  size_t offset_[2] = {0, 0}, innerOffset_ = 0;
};

} // namespace

Expected<KernelPtr> makeLinalgWidenedProductKernel(const OpDesc &d, KernelFactory f32) {
  PIPEC_ASSIGN(OpDesc w, linalgWidenedProduct(d));
  if (d.inputs.size() > 8)
    return errorf(d.where(), ": expects at most 8 inputs, got ", d.inputs.size());
  PIPEC_ASSIGN(KernelPtr inner, f32(w));
  return KernelPtr(new WidenedProductKernel(std::move(inner), d.inputs[0].dtype, d));
}

} // namespace pipec::cpu
