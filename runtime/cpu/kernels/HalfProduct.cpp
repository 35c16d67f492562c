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
// the f32 copies in the workspace rather than the arena. An f32 operand
// (a weight the product rounds itself) is rounded to 16 bits and back,
// once a step where it changes only between steps.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/Half.h"
#include "support/Parallel.h"

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
    // A 16-bit operand is widened in the workspace for every run; an f32
    // one that changes only between steps is rounded into memory the
    // kernel keeps for the step, at the same address (so it stays
    // step-invariant for the f32 kernel).
    const bool kept = d.inputs[i].dtype == DType::F32 && d.isStepInvariant(i);
    w.inputs[i].dtype = DType::F32;
    if (i < w.stepInvariant.size())
      w.stepInvariant[i] = kept;
    if (i < w.constInputs.size())
      w.constInputs[i] = Tensor();
  }
  return w;
}

namespace {

class WidenedProductKernel final : public Kernel {
public:
  WidenedProductKernel(KernelPtr inner, const OpDesc &d)
      : inner_(std::move(inner)), type_(productOperandType(d.inputs[0].dtype, d.inputs[1].dtype)),
        nInputs_(d.inputs.size()) {
    size_t at = 0;
    for (size_t i = 0; i < 2; ++i) {
      f32_[i] = d.inputs[i].dtype == DType::F32;
      keep_[i] = f32_[i] && d.isStepInvariant(i);
      count_[i] = d.inputs[i].numel();
      offset_[i] = at;
      if (!keep_[i])
        at += linalgRoundUp(static_cast<size_t>(count_[i]) * sizeof(float));
    }
    innerOffset_ = at;
  }
  size_t workspaceBytes() const override { return innerOffset_ + inner_->workspaceBytes() + 64; }
  size_t heldBytes() const override {
    return inner_->heldBytes() + (keep_[0] ? static_cast<size_t>(count_[0]) * sizeof(float) : 0) +
           (keep_[1] ? static_cast<size_t>(count_[1]) * sizeof(float) : 0);
  }
  bool canAccumulate() const override { return inner_->canAccumulate(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    unsigned char *ws = static_cast<unsigned char *>(linalgAlign(ctx.workspace));
    const uint64_t step = ctx.training ? ctx.step : 0;
    const void *args[8];
    for (size_t i = 0; i < nInputs_; ++i)
      args[i] = in[i];
    for (size_t i = 0; i < 2; ++i) {
      float *wide = keep_[i] ? held_[i].data.data() : reinterpret_cast<float *>(ws + offset_[i]);
      if (!f32_[i]) {
        linalgWidenHalf(static_cast<const uint16_t *>(in[i]), wide, count_[i], type_);
      } else if (!keep_[i] || held_[i].from != in[i] || held_[i].step != step ||
                 held_[i].data.size() != static_cast<size_t>(count_[i])) {
        if (keep_[i]) {
          held_[i].data.resize(static_cast<size_t>(count_[i]));
          wide = held_[i].data.data();
          held_[i].from = nullptr; // until made
        }
        roundTrip(static_cast<const float *>(in[i]), wide, count_[i]);
        if (keep_[i]) {
          held_[i].from = in[i];
          held_[i].step = step;
        }
      }
      args[i] = wide;
    }
    ExecContext inner = ctx;
    inner.workspace = ws + innerOffset_;
    return inner_->run(inner, args, out);
  }

private:
  /// dst = src rounded to type_ and back: the f32 values of its 16-bit
  /// rounding.
  void roundTrip(const float *src, float *dst, int64_t n) const {
    const bool bf16 = type_ == DType::BF16;
    parallelFor(n, n >= (int64_t(1) << 16), [&](int64_t i) {
      dst[i] = bf16 ? roundToBf16(src[i]) : halfToFloat(floatToHalf(src[i]));
    });
  }

  struct Held {
    std::vector<float> data;
    const void *from = nullptr;
    uint64_t step = 0;
  };
  KernelPtr inner_;
  DType type_;
  size_t nInputs_;
  bool f32_[2] = {false, false}, keep_[2] = {false, false};
  int64_t count_[2] = {0, 0};
  size_t offset_[2] = {0, 0}, innerOffset_ = 0;
  Held held_[2];
};

} // namespace

Expected<KernelPtr> makeLinalgWidenedProductKernel(const OpDesc &d, KernelFactory f32) {
  PIPEC_ASSIGN(OpDesc w, linalgWidenedProduct(d));
  if (d.inputs.size() > 8)
    return errorf(d.where(), ": expects at most 8 inputs, got ", d.inputs.size());
  PIPEC_ASSIGN(KernelPtr inner, f32(w));
  return KernelPtr(new WidenedProductKernel(std::move(inner), d));
}

} // namespace pipec::cpu
