//===- runtime/cuda/kernels/Nhwc.cpp - The channels-last nodes on the GPU -===//
//
// pipec:NhwcConv, pipec:NhwcMaxPool and pipec:NhwcAveragePool, which the
// channels-last pass (passes/Layout.cpp) makes for inference plans: X
// [N, H, W, C] is transposed to NCHW in the workspace, the NCHW kernel of
// the ONNX op runs there (Conv.cpp's cuDNN convolution, Pool.cpp's pools),
// NhwcConv's folded activation (Relu, Clip, LeakyRelu: support/FusedOps.h's
// ConvEpilogue) is applied, and the result is transposed back to [N, OH,
// OW, M]. The same results as the NCHW plan's nodes, so an inference plan
// runs on the GPU whatever the layout pass did (a NhwcConv under
// output_dtype: its operands widened to f32 first, as Conv.cpp's are); the transposes cost two
// passes over the activations, which cuDNN's own NHWC convolutions would
// save (not yet: docs/cuda.md).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "runtime/cuda/kernels/CudaCommon.h"
#include "support/FusedOps.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

Expected<KernelPtr> makeConv(const OpDesc &d);
Expected<KernelPtr> widenedConv(const OpDesc &d, Expected<KernelPtr> (*f32)(const OpDesc &));
Expected<KernelPtr> makeMaxPool(const OpDesc &d);
Expected<KernelPtr> makeAveragePool(const OpDesc &d);

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

const std::vector<int64_t> kToNchw = {0, 3, 1, 2}, kToNhwc = {0, 2, 3, 1};

class NhwcKernel final : public Kernel {
public:
  bool replayable() const override { return inner_->replayable(); }
  NhwcKernel(KernelPtr inner, Shape x, Shape y, ConvEpilogue e)
      : inner_(std::move(inner)), xNhwc_(std::move(x)), yNchw_(std::move(y)), e_(e),
        toNchw_(transposeView(xNhwc_, kToNchw)), toNhwc_(transposeView(yNchw_, kToNhwc)) {
    xBytes_ = aligned(static_cast<size_t>(numElements(xNhwc_)) * sizeof(float));
    yBytes_ = aligned(static_cast<size_t>(numElements(yNchw_)) * sizeof(float));
  }
  size_t workspaceBytes() const override { return xBytes_ + yBytes_ + inner_->workspaceBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    char *ws = static_cast<char *>(ctx.workspace);
    auto *xn = reinterpret_cast<float *>(ws);
    auto *yn = reinterpret_cast<float *>(ws + xBytes_);
    const int64_t nx = numElements(xNhwc_), ny = numElements(yNchw_);
    PIPEC_TRY(launchBroadcastScale(static_cast<const float *>(in[0]), toNchw_, 1.0f, xn, nx,
                                   ctx.stream));
    ExecContext inner = ctx;
    inner.workspace = ws + xBytes_ + yBytes_;
    inner.accumulate = false;
    const void *innerIn[3] = {xn, in[1], in[2]};
    void *innerOut[1] = {yn};
    PIPEC_TRY(inner_->run(inner, innerIn, innerOut));
    switch (e_.kind) {
    case ConvEpilogue::None: break;
    case ConvEpilogue::Relu: PIPEC_TRY(launchUnary(UnaryOp::Relu, yn, yn, ny, ctx.stream)); break;
    case ConvEpilogue::Clip: PIPEC_TRY(launchClip(yn, yn, ny, e_.lo, e_.hi, nullptr, nullptr, ctx.stream)); break;
    case ConvEpilogue::LeakyRelu: {
      body::MathParams p;
      p.op = body::MathOp::LeakyRelu;
      p.alpha = e_.alpha;
      PIPEC_TRY(launchMathUnary(p, yn, yn, ny, ctx.stream));
      break;
    }
    }
    return launchBroadcastScale(yn, toNhwc_, 1.0f, static_cast<float *>(out[0]), ny, ctx.stream);
  }

private:
  KernelPtr inner_;
  Shape xNhwc_, yNchw_;
  ConvEpilogue e_;
  body::Broadcast toNchw_, toNhwc_; ///< the two transposes' views
  size_t xBytes_ = 0, yBytes_ = 0;
};

/// The ONNX op `op` on the NCHW views of a channels-last node's X and Y.
Expected<KernelPtr> channelsLast(const OpDesc &d, const char *op,
                                 Expected<KernelPtr> (*make)(const OpDesc &), bool conv) {
  if (d.inputs.empty() || d.outputs.size() != 1 || d.inputs[0].shape.size() != 4 ||
      d.outputs[0].shape.size() != 4 || d.inputs[0].dtype != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": X and Y must be float32 [N, H, W, C]");
  ConvEpilogue e;
  OpDesc nchw = d;
  nchw.opType = op;
  nchw.domain = "";
  // The pools' and Conv's attributes are those of the ONNX ops; the
  // newest opset reads every one of them (AveragePool's dilations).
  nchw.opset = conv ? 17 : 19;
  if (conv) {
    PIPEC_ASSIGN(e, convEpilogueOf(d.attrs));
    for (const char *a : {"activation", "clip_min", "clip_max", "leaky_alpha"})
      nchw.attrs.erase(a);
  }
  const Shape x = d.inputs[0].shape, y = d.outputs[0].shape;
  nchw.inputs[0].shape = {x[0], x[3], x[1], x[2]};
  nchw.outputs[0].shape = {y[0], y[3], y[1], y[2]};
  PIPEC_ASSIGN(KernelPtr inner, make(nchw));
  return KernelPtr(new NhwcKernel(std::move(inner), x, nchw.outputs[0].shape, e));
}

} // namespace

Expected<KernelPtr> makeNhwcConv(const OpDesc &d) {
  // Under output_dtype (a bf16 or f16 inference plan) the operands are
  // widened to f32 first, elementwise, so in either layout.
  if (cpu::linalgIsHalfProduct(d))
    return widenedConv(d, makeNhwcConv);
  return channelsLast(d, "Conv", &makeConv, true);
}
Expected<KernelPtr> makeNhwcMaxPool(const OpDesc &d) { return channelsLast(d, "MaxPool", &makeMaxPool, false); }
Expected<KernelPtr> makeNhwcAveragePool(const OpDesc &d) {
  return channelsLast(d, "AveragePool", &makeAveragePool, false);
}

} // namespace pipec::cuda
