//===- runtime/cuda/kernels/Elementwise.cpp - CUDA elementwise kernels -===//
//
// Unary and binary elementwise ops (numpy broadcasting), their gradient
// ops, and pipec:FusedElementwise (the fused program interpreted per
// element: runtime/cuda/Bodies.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels/CudaCommon.h"
#include "support/ElementwiseProgram.h"

namespace pipec::cuda {

namespace {

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

} // namespace

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
  PIPEC_ASSIGN(body::Broadcast a, broadcastTo(d, 0));
  PIPEC_ASSIGN(body::Broadcast b, broadcastTo(d, 1));
  return KernelPtr(new BinaryKernel(op, a, b, d.outputs[0].numel()));
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

Expected<KernelPtr> makeRelu(const OpDesc &d) { return makeUnary(d, UnaryOp::Relu); }
Expected<KernelPtr> makeNeg(const OpDesc &d) { return makeUnary(d, UnaryOp::Neg); }
Expected<KernelPtr> makeSigmoid(const OpDesc &d) { return makeUnary(d, UnaryOp::Sigmoid); }
Expected<KernelPtr> makeTanh(const OpDesc &d) { return makeUnary(d, UnaryOp::Tanh); }
Expected<KernelPtr> makeExp(const OpDesc &d) { return makeUnary(d, UnaryOp::Exp); }
Expected<KernelPtr> makeErf(const OpDesc &d) { return makeUnary(d, UnaryOp::Erf); }
Expected<KernelPtr> makeAdd(const OpDesc &d) { return makeBinary(d, body::BinaryOp::Add); }
Expected<KernelPtr> makeSub(const OpDesc &d) { return makeBinary(d, body::BinaryOp::Sub); }
Expected<KernelPtr> makeMul(const OpDesc &d) { return makeBinary(d, body::BinaryOp::Mul); }
Expected<KernelPtr> makeDiv(const OpDesc &d) { return makeBinary(d, body::BinaryOp::Div); }

} // namespace pipec::cuda
