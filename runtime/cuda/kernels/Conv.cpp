//===- runtime/cuda/kernels/Conv.cpp - Convolutions on cuDNN ---------------===//
//
// Conv, ConvTranspose, pipec:ConvGradInput and pipec:ConvGradWeight with 1
// to 3 spatial dimensions, groups (depthwise included), strides,
// dilations, explicit pads or auto_pad, ConvTranspose's output_padding and
// output_shape: the CPU kernels' geometry (runtime/cpu/kernels/
// LinalgCommon.h's linalgResolveWindow; ConvTranspose's pads as
// runtime/cpu/kernels/ConvTranspose.cpp resolves them), computed by cuDNN
// (runtime/cuda/Dnn.h: DnnConv, its algorithms chosen when the kernel is
// made). ConvTranspose is cuDNN's backward data of the convolution that
// maps its Y back to its X.
//
// cuDNN's pads are the same at both ends. Where a node's are not, and
// cuDNN's windows with the node's begin pad at both ends would not be the
// node's (runtime/cuda/DnnBodies.h: convPlan, deconvPlan), the kernel
// copies through its workspace with launchPad: X padded by the
// difference before Conv and ConvGradWeight, cuDNN's result cropped
// after ConvGradInput and ConvTranspose. Bias: cudnnAddTensor after the
// convolution. ConvGradWeight adds into dW (ExecContext::accumulate) with
// cuDNN's beta = 1. Anything else (rank above 5, more than 2^31 elements
// in a tensor) is refused when the kernel is made, naming the node.
//
// Under output_dtype (support/FusedOps.h: the mixed-precision pass's bf16
// or f16 operands, an f32 result) the operands are widened to f32 in the
// workspace first (an f32 weight rounded to 16 bits and back), then the
// f32 kernel runs: the CPU's emulation (runtime/cpu/kernels/
// HalfProduct.cpp), not yet cuDNN's 16-bit convolutions: the legacy API
// takes X, W and Y of one type, so bf16 operands would give a bf16 result
// (docs/precision.md, "Not yet").
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "runtime/cuda/Dnn.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {

using cpu::LinalgWindowDim;

dnn::ConvDim dimOf(const LinalgWindowDim &w) {
  return {w.in, w.out, w.kernel, w.stride, w.dilation, w.padBegin, w.padEnd};
}

/// launchPad's geometry of [N, C, from...] padded by `begin` and `end`
/// (negative: cropped) in its spatial dimensions.
body::PadGeometry copyGeometry(int64_t N, int64_t C, const std::vector<dnn::DimPlan> &plans, bool fromSize,
                               const std::vector<int64_t> &from) {
  body::PadGeometry g;
  g.rank = static_cast<int>(2 + plans.size());
  g.mode = cpu::dm::PadMode::Constant;
  std::vector<int64_t> dims = {N, C}, b = {0, 0}, e = {0, 0};
  for (size_t i = 0; i < plans.size(); ++i) {
    dims.push_back(fromSize ? plans[i].size : from[i]);
    b.push_back(plans[i].begin);
    e.push_back(plans[i].end);
  }
  int64_t stride = 1;
  for (int a = g.rank - 1; a >= 0; --a) {
    const size_t u = static_cast<size_t>(a);
    g.dims[a] = dims[u];
    g.begin[a] = b[u];
    g.end[a] = e[u];
    g.outDims[a] = dims[u] + b[u] + e[u];
    g.inStrides[a] = stride;
    stride *= dims[u];
  }
  return g;
}

/// The negated plans: a crop back of what convPlan padded.
std::vector<dnn::DimPlan> negated(std::vector<dnn::DimPlan> p) {
  for (dnn::DimPlan &d : p) {
    d.begin = -d.begin;
    d.end = -d.end;
  }
  return p;
}

inline size_t roundUp(size_t b) { return (b + 255) & ~size_t(255); }

enum class ConvOp { Conv, Transpose, GradInput, GradWeight };

class ConvKernel final : public Kernel, public DnnChoice {
public:
  bool replayable() const override { return true; }
  ConvOp op = ConvOp::Conv;
  std::string where;
  /// Null where an operand is empty: the result is zero (and the bias).
  std::unique_ptr<DnnConv> conv;
  /// Conv, ConvGradWeight: X padded into the workspace; ConvTranspose,
  /// ConvGradInput: cuDNN's result there, cropped into the output.
  bool copy = false;
  body::PadGeometry copyGeom;
  int64_t copyElems = 0; ///< elements the copy writes
  size_t copyBytes = 0;  ///< its workspace buffer
  bool hasBias = false;
  DnnTensor biasDesc, yDesc;
  size_t outBytes = 0;

  size_t workspaceBytes() const override { return 256 + copyBytes + (conv ? conv->workspaceBytes() : 0); }
  bool canAccumulate() const override { return op == ConvOp::GradWeight; }
  std::string dnnChoice() const override { return conv ? conv->choice() : "none: an operand is empty"; }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    Status s = runIn(ctx, in, out);
    return s ? s : errorf(where, ": ", s.message());
  }

private:
  Status runIn(ExecContext &ctx, const void *const *in, void *const *out) {
    void *stream = ctx.stream;
    auto base = reinterpret_cast<uintptr_t>(ctx.workspace);
    auto *buf = reinterpret_cast<unsigned char *>((base + 255) & ~uintptr_t(255));
    void *dnnWs = buf + copyBytes;
    const bool accumulate = op == ConvOp::GradWeight && ctx.accumulate;
    if (!conv) {
      if (!accumulate && outBytes &&
          cudaMemsetAsync(out[0], 0, outBytes, static_cast<cudaStream_t>(stream)) != cudaSuccess)
        return errorf("cudaMemsetAsync failed: ", cudaGetErrorString(cudaGetLastError()));
      return bias(stream, in, out);
    }
    switch (op) {
    case ConvOp::Conv:
    case ConvOp::GradWeight: {
      const void *x = in[op == ConvOp::Conv ? 0 : 1];
      if (copy) {
        PIPEC_TRY(launchPad(x, buf, copyGeom, copyElems, sizeof(float), 0, nullptr, stream));
        x = buf;
      }
      if (op == ConvOp::Conv)
        PIPEC_TRY(conv->run(stream, x, in[1], nullptr, out[0], dnnWs, 0.0f));
      else
        PIPEC_TRY(conv->run(stream, x, nullptr, in[0], out[0], dnnWs, accumulate ? 1.0f : 0.0f));
      break;
    }
    case ConvOp::Transpose:
    case ConvOp::GradInput: {
      // ConvTranspose (X, W): X is cuDNN's dY; ConvGradInput (dY, W).
      void *dst = copy ? static_cast<void *>(buf) : out[0];
      PIPEC_TRY(conv->run(stream, nullptr, in[1], in[0], dst, dnnWs, 0.0f));
      if (copy)
        PIPEC_TRY(launchPad(buf, out[0], copyGeom, copyElems, sizeof(float), 0, nullptr, stream));
      break;
    }
    }
    return bias(stream, in, out);
  }

  Status bias(void *stream, const void *const *in, void *const *out) const {
    if (!hasBias || !biasDesc)
      return Status::ok();
    if (!in[2])
      return Status::error("the bias is missing at run time");
    PIPEC_ASSIGN(cudnnHandle_t h, dnnFor(stream));
    const float one = 1.0f;
    return dnnCheck(cudnnAddTensor(h, &one, biasDesc.get(), in[2], &one, yDesc.get(), out[0]), "cudnnAddTensor");
  }
};

/// The bias's descriptors: [1, M, 1...] added to Y's [N, M, out...] (one
/// spatial dimension as two, as DnnConv's).
Status prepareBias(ConvKernel &k, const Shape &y) {
  if (!k.hasBias || numElements(y) == 0)
    return Status::ok();
  std::vector<int64_t> yd(y.begin(), y.end()), bd(y.size(), 1);
  if (y.size() == 3) {
    yd.insert(yd.begin() + 2, 1);
    bd.push_back(1);
  }
  bd[1] = y[1];
  PIPEC_ASSIGN(k.yDesc, dnnTensor(yd));
  PIPEC_ASSIGN(k.biasDesc, dnnTensor(bd));
  return Status::ok();
}

int64_t prod(const std::vector<int64_t> &v) {
  int64_t p = 1;
  for (int64_t x : v)
    p *= x;
  return p;
}

/// The cuDNN pass of `k` (or none where `empty`), errors naming the node.
Status prepare(const OpDesc &d, ConvKernel &k, const DnnConvShape &s, DnnConvPass pass, bool empty) {
  k.where = d.where();
  if (empty)
    return Status::ok();
  auto conv = DnnConv::make(s, pass);
  if (!conv)
    return errorf(d.where(), ": ", conv.status().message());
  k.conv = conv.take();
  return Status::ok();
}

Status checkSpatial(const OpDesc &d, size_t rank) {
  if (rank < 3 || rank > 5)
    return errorf(d.where(), ": the CUDA kernel takes 1 to 3 spatial dimensions (cuDNN), got ", rank - 2);
  return Status::ok();
}


/// The shape cuDNN sees for a convolution of `dims` (X's side of the
/// plans: `plans[i].size`), channels Cin -> Cout.
DnnConvShape shapeOf(int64_t N, int64_t Cin, int64_t Cout, int64_t G, const std::vector<LinalgWindowDim> &dims,
                     const std::vector<dnn::DimPlan> &plans, bool transpose) {
  DnnConvShape s;
  s.N = N;
  s.Cin = Cin;
  s.Cout = Cout;
  s.G = G;
  for (size_t i = 0; i < dims.size(); ++i) {
    // Conv: cuDNN's X is the node's X; ConvTranspose: the node's Y.
    s.in.push_back(plans[i].size);
    s.out.push_back(transpose ? dims[i].in : dims[i].out);
    s.kernel.push_back(dims[i].kernel);
    s.stride.push_back(dims[i].stride);
    s.dilation.push_back(dims[i].dilation);
    s.pad.push_back(plans[i].pad);
  }
  return s;
}

bool anyCopy(const std::vector<dnn::DimPlan> &plans) {
  for (const dnn::DimPlan &p : plans)
    if (p.copy())
      return true;
  return false;
}

std::vector<int64_t> sizesOf(const std::vector<dnn::DimPlan> &plans) {
  std::vector<int64_t> r;
  for (const dnn::DimPlan &p : plans)
    r.push_back(p.size);
  return r;
}

} // namespace

namespace {

/// A convolution under output_dtype: operands 0 and 1 widened to f32 in
/// the workspace (an f32 one rounded to the 16-bit type and back: the
/// values a 16-bit copy holds), then `inner`, the node's f32 kernel.
class WidenedConvKernel final : public Kernel, public DnnChoice {
public:
  bool replayable() const override { return inner_->replayable(); }
  WidenedConvKernel(KernelPtr inner, const OpDesc &d)
      : inner_(std::move(inner)),
        half_(productOperandType(d.inputs[0].dtype, d.inputs[1].dtype) == DType::BF16 ? CastType::BF16
                                                                                        : CastType::F16),
        nIn_(d.inputs.size()) {
    size_t at = 0;
    for (size_t i = 0; i < 2; ++i) {
      f32_[i] = d.inputs[i].dtype == DType::F32;
      n_[i] = d.inputs[i].numel();
      off_[i] = at;
      at += roundUp(static_cast<size_t>(n_[i]) * sizeof(float));
      if (f32_[i])
        tmp_ = std::max(tmp_, roundUp(static_cast<size_t>(n_[i]) * sizeof(uint16_t)));
    }
    tmpOff_ = at;
    innerOff_ = at + tmp_;
  }
  size_t workspaceBytes() const override { return 256 + innerOff_ + inner_->workspaceBytes(); }
  bool canAccumulate() const override { return inner_->canAccumulate(); }
  std::string dnnChoice() const override {
    const auto *c = dynamic_cast<const DnnChoice *>(inner_.get());
    return c ? c->dnnChoice() : std::string();
  }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    auto base = reinterpret_cast<uintptr_t>(ctx.workspace);
    auto *ws = reinterpret_cast<unsigned char *>((base + 255) & ~uintptr_t(255));
    const void *args[4] = {nullptr, nullptr, nullptr, nullptr};
    for (size_t i = 0; i < nIn_ && i < 4; ++i)
      args[i] = in[i];
    for (size_t i = 0; i < 2; ++i) {
      unsigned char *wide = ws + off_[i];
      if (f32_[i]) {
        PIPEC_TRY(launchHalfCast(in[i], CastType::F32, ws + tmpOff_, half_, n_[i], ctx.stream));
        PIPEC_TRY(launchHalfCast(ws + tmpOff_, half_, wide, CastType::F32, n_[i], ctx.stream));
      } else {
        PIPEC_TRY(launchHalfCast(in[i], half_, wide, CastType::F32, n_[i], ctx.stream));
      }
      args[i] = wide;
    }
    ExecContext inner = ctx;
    inner.workspace = ws + innerOff_;
    return inner_->run(inner, args, out);
  }

private:
  KernelPtr inner_;
  CastType half_;
  size_t nIn_;
  bool f32_[2] = {false, false};
  int64_t n_[2] = {0, 0};
  size_t off_[2] = {0, 0}, tmp_ = 0, tmpOff_ = 0, innerOff_ = 0;
};

} // namespace

/// `d` under output_dtype through WidenedConvKernel and `f32`, the op's
/// factory (also pipec:NhwcConv's: runtime/cuda/kernels/Nhwc.cpp).
Expected<KernelPtr> widenedConv(const OpDesc &d, Expected<KernelPtr> (*f32)(const OpDesc &)) {
  PIPEC_ASSIGN(OpDesc w, cpu::linalgWidenedProduct(d));
  if (d.inputs.size() > 4)
    return errorf(d.where(), ": expects at most 4 inputs, got ", d.inputs.size());
  w.stepInvariant.assign(w.inputs.size(), false); // the widened operands live in the workspace
  PIPEC_ASSIGN(KernelPtr inner, f32(w));
  return KernelPtr(new WidenedConvKernel(std::move(inner), d));
}

Expected<KernelPtr> makeConv(const OpDesc &d) {
  if (cpu::linalgIsHalfProduct(d))
    return widenedConv(d, makeConv);
  PIPEC_TRY(cpu::linalgCheckConvOperands(d));
  const TensorDesc &x = d.inputs[0], &w = d.inputs[1];
  PIPEC_TRY(checkSpatial(d, x.rank()));
  const int64_t N = x.shape[0], C = x.shape[1], M = w.shape[0], G = attrInt(d.attrs, "group", 1);
  if (G < 1 || C % G != 0 || M % G != 0 || w.shape[1] * G != C)
    return errorf(d.where(), ": group ", G, " does not fit X channels ", C, " and W ", w.str());
  auto k = std::make_unique<ConvKernel>();
  k->op = ConvOp::Conv;
  k->hasBias = d.hasInput(2);
  if (k->hasBias && d.inputs[2].shape != Shape{M})
    return errorf(d.where(), ": bias ", d.inputs[2].str(), " is not [", M, "]");
  const Shape in(x.shape.begin() + 2, x.shape.end());
  const std::vector<int64_t> kw(w.shape.begin() + 2, w.shape.end());
  if (attrInts(d.attrs, "kernel_shape", kw) != kw)
    return errorf(d.where(), ": kernel_shape differs from W ", w.str());
  std::vector<LinalgWindowDim> dims;
  PIPEC_TRY(cpu::linalgResolveWindow(d, in, kw, false, nullptr, dims));
  PIPEC_TRY(cpu::linalgCheckSpatialOut(d, d.outputs[0], N, M, dims));
  std::vector<dnn::DimPlan> plans;
  for (const LinalgWindowDim &dim : dims)
    plans.push_back(dnn::convPlan(dimOf(dim)));
  if ((k->copy = anyCopy(plans))) {
    k->copyGeom = copyGeometry(N, C, plans, false, in);
    k->copyElems = N * C * prod(sizesOf(plans));
    k->copyBytes = roundUp(static_cast<size_t>(k->copyElems) * sizeof(float));
  }
  k->outBytes = d.outputs[0].bytes();
  const bool empty = x.numel() == 0 || w.numel() == 0 || d.outputs[0].numel() == 0;
  PIPEC_TRY(prepare(d, *k, shapeOf(N, C, M, G, dims, plans, false), DnnConvPass::Forward, empty));
  PIPEC_TRY(prepareBias(*k, d.outputs[0].shape));
  return KernelPtr(k.release());
}

Expected<KernelPtr> makeConvTranspose(const OpDesc &d) {
  if (cpu::linalgIsHalfProduct(d))
    return widenedConv(d, makeConvTranspose);
  PIPEC_TRY(cpu::linalgCheckConvOperands(d));
  const TensorDesc &x = d.inputs[0], &w = d.inputs[1];
  PIPEC_TRY(checkSpatial(d, x.rank()));
  const int64_t N = x.shape[0], C = x.shape[1], G = attrInt(d.attrs, "group", 1);
  if (G < 1 || w.shape[0] != C || C % G != 0)
    return errorf(d.where(), ": group ", G, " does not fit X channels ", C, " and W ", w.str());
  const int64_t M = w.shape[1] * G;
  auto k = std::make_unique<ConvKernel>();
  k->op = ConvOp::Transpose;
  k->hasBias = d.hasInput(2);
  if (k->hasBias && d.inputs[2].shape != Shape{M})
    return errorf(d.where(), ": bias ", d.inputs[2].str(), " is not [", M, "]");
  const Shape in(x.shape.begin() + 2, x.shape.end());
  const std::vector<int64_t> kw(w.shape.begin() + 2, w.shape.end());
  if (attrInts(d.attrs, "kernel_shape", kw) != kw)
    return errorf(d.where(), ": kernel_shape differs from W ", w.str());
  std::vector<LinalgWindowDim> dims;
  PIPEC_TRY(cpu::linalgResolveDeconvWindow(d, in, kw, dims));
  PIPEC_TRY(cpu::linalgCheckSpatialOut(d, d.outputs[0], N, M, dims));
  std::vector<dnn::DimPlan> plans;
  for (const LinalgWindowDim &dim : dims)
    plans.push_back(dnn::deconvPlan(dimOf(dim)));
  if ((k->copy = anyCopy(plans))) {
    k->copyGeom = copyGeometry(N, M, plans, true, {});
    k->copyElems = d.outputs[0].numel();
    k->copyBytes = roundUp(static_cast<size_t>(N * M * prod(sizesOf(plans))) * sizeof(float));
  }
  k->outBytes = d.outputs[0].bytes();
  const bool empty = x.numel() == 0 || w.numel() == 0 || d.outputs[0].numel() == 0 || N * M * prod(sizesOf(plans)) == 0;
  // The convolution that maps the node's Y ([N, M, ...]) to its X ([N, C,
  // ...]): W [C, M / G, k...] is its filter as it is.
  PIPEC_TRY(prepare(d, *k, shapeOf(N, M, C, G, dims, plans, true), DnnConvPass::BackwardData, empty));
  PIPEC_TRY(prepareBias(*k, d.outputs[0].shape));
  return KernelPtr(k.release());
}

namespace {

/// pipec:ConvGradInput (dY, W) -> dX and pipec:ConvGradWeight (dY, X) ->
/// dW, with the forward's attributes and `shape`, the result's shape
/// (runtime/cpu/kernels/GradConv.cpp).
Expected<KernelPtr> makeConvGrad(const OpDesc &d, bool weight) {
  if (d.inputs.size() != 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 inputs and 1 output, got ", d.inputs.size(), " and ", d.outputs.size());
  if (!attrHas(d.attrs, "shape"))
    return errorf(d.where(), ": attribute 'shape' is missing");
  const Shape result = attrInts(d.attrs, "shape");
  if (d.outputs[0].shape != result)
    return errorf(d.where(), ": output ", d.outputs[0].str(), " is not ", shapeStr(result));
  const Shape &ys = d.inputs[0].shape;
  const Shape &xs = weight ? d.inputs[1].shape : result, &ws = weight ? result : d.inputs[1].shape;
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size() || ys.size() != xs.size())
    return errorf(d.where(), ": X ", shapeStr(xs), ", W ", shapeStr(ws), " and dY ", shapeStr(ys),
                  " must all be 1-D, 2-D or 3-D convolution shapes");
  const int64_t N = xs[0], C = xs[1], M = ws[0], G = attrInt(d.attrs, "group", 1);
  if (G < 1 || C % G != 0 || M % G != 0 || ws[1] * G != C)
    return errorf(d.where(), ": group ", G, " does not fit X channels ", C, " and W ", shapeStr(ws));
  const Shape in(xs.begin() + 2, xs.end());
  const std::vector<int64_t> kw(ws.begin() + 2, ws.end());
  std::vector<LinalgWindowDim> dims;
  PIPEC_TRY(cpu::linalgResolveWindow(d, in, kw, false, nullptr, dims));
  Shape want = {N, M};
  for (const LinalgWindowDim &w : dims)
    want.push_back(w.out);
  if (ys != want)
    return errorf(d.where(), ": dY ", shapeStr(ys), " is not the convolution output ", shapeStr(want));
  std::vector<dnn::DimPlan> plans;
  for (const LinalgWindowDim &dim : dims)
    plans.push_back(dnn::convPlan(dimOf(dim)));
  auto k = std::make_unique<ConvKernel>();
  k->op = weight ? ConvOp::GradWeight : ConvOp::GradInput;
  if ((k->copy = anyCopy(plans))) {
    // ConvGradWeight pads X as Conv does; ConvGradInput crops cuDNN's dX
    // of the padded X back to X.
    k->copyGeom = weight ? copyGeometry(N, C, plans, false, in) : copyGeometry(N, C, negated(plans), true, {});
    const int64_t padded = N * C * prod(sizesOf(plans));
    k->copyElems = weight ? padded : numElements(xs);
    k->copyBytes = roundUp(static_cast<size_t>(padded) * sizeof(float));
  }
  k->outBytes = d.outputs[0].bytes();
  const bool empty = numElements(xs) == 0 || numElements(ws) == 0 || numElements(ys) == 0;
  PIPEC_TRY(prepare(d, *k, shapeOf(N, C, M, G, dims, plans, false),
                    weight ? DnnConvPass::BackwardFilter : DnnConvPass::BackwardData, empty));
  return KernelPtr(k.release());
}

} // namespace

Expected<KernelPtr> makeConvGradInput(const OpDesc &d) {
  return cpu::linalgIsHalfProduct(d) ? widenedConv(d, makeConvGradInput) : makeConvGrad(d, false);
}
Expected<KernelPtr> makeConvGradWeight(const OpDesc &d) {
  return cpu::linalgIsHalfProduct(d) ? widenedConv(d, makeConvGradWeight) : makeConvGrad(d, true);
}

} // namespace pipec::cuda
