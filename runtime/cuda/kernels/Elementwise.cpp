//===- runtime/cuda/kernels/Elementwise.cpp - CUDA elementwise kernels -===//
//
// Unary and binary elementwise ops (numpy broadcasting), their gradient
// ops, and pipec:FusedElementwise: the fused program compiled for the GPU
// (runtime/cpu/ElementwiseJit.h's elementwisePtx: LLVM's NVPTX back end,
// the PTX loaded with cudaLibraryLoadData when the kernel is made), or,
// where that fails or PIPEC_NO_CODEGEN is set, interpreted per element
// (runtime/cuda/Bodies.h). Both are bitwise the CPU's.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels/CudaCommon.h"
#include "runtime/cpu/ElementwiseJit.h"
#include "runtime/cuda/Launch.h"
#include "support/ElementwiseProgram.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <map>
#include <mutex>

namespace pipec::cuda {

namespace {

class UnaryKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
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
  bool replayable() const override { return true; }
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
  bool replayable() const override { return true; }
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
  bool replayable() const override { return true; }
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
  bool replayable() const override { return true; }
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

/// A program compiled for the GPU: its PTX loaded once per process
/// (context-independent: every device gets it when it first launches),
/// kept until exit; programs are cached by their PTX.
class CompiledElementwiseKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  CompiledElementwiseKernel(cudaKernel_t fn, int32_t inputs, int64_t n) : fn_(fn), inputs_(inputs), n_(n) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const LaunchShape l = itemLaunch(n_);
    if (l.grid == 0)
      return Status::ok();
    const void *ptrs[body::kEwMaxInputs + 1];
    void *args[body::kEwMaxInputs + 1];
    for (int32_t k = 0; k < inputs_; ++k)
      ptrs[k] = in[k];
    ptrs[inputs_] = out[0];
    for (int32_t k = 0; k <= inputs_; ++k)
      args[k] = &ptrs[k];
    if (cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void *>(fn_), dim3(l.grid), dim3(l.block), args,
                                         0, static_cast<cudaStream_t>(ctx.stream));
        e != cudaSuccess) {
      (void)cudaGetLastError();
      return errorf("the compiled fused elementwise kernel did not launch: ", cudaGetErrorString(e));
    }
    return Status::ok();
  }

private:
  cudaKernel_t fn_;
  int32_t inputs_;
  int64_t n_;
};

/// The program's kernel loaded from its PTX, or why not.
Expected<cudaKernel_t> loadElementwisePtx(const std::string &ptx, const std::string &name) {
  static std::mutex mu;
  static std::map<std::string, cudaKernel_t> *loaded = new std::map<std::string, cudaKernel_t>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded->find(ptx); it != loaded->end())
    return it->second;
  cudaLibrary_t lib = nullptr;
  if (cudaError_t e = cudaLibraryLoadData(&lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
      e != cudaSuccess) {
    (void)cudaGetLastError();
    return errorf("the driver did not load its PTX: ", cudaGetErrorString(e));
  }
  cudaKernel_t fn = nullptr;
  if (cudaError_t e = cudaLibraryGetKernel(&fn, lib, name.c_str()); e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaLibraryUnload(lib);
    return errorf("its PTX has no kernel '", name, "': ", cudaGetErrorString(e));
  }
  // The driver compiles a library's code at its first use (lazy loading,
  // CUDA 12.2's default): compile it now on the current GPU, so that PTX
  // the driver refuses falls back to the interpreter here instead of
  // failing a step at the first launch.
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(fn)); e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaLibraryUnload(lib);
    return errorf("the driver did not compile its PTX: ", cudaGetErrorString(e));
  }
  loaded->emplace(ptx, fn);
  return fn;
}

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
  const int64_t n = d.outputs[0].numel();
  if (cpu::codegenEnabled() && n > 0) {
    const std::vector<int64_t> div(prog.div, prog.div + prog.numInputs), mod(prog.mod, prog.mod + prog.numInputs);
    const std::string name = "pipec_ew";
    Expected<std::string> ptx = cpu::elementwisePtx(*p, div, mod, n, name);
    Expected<cudaKernel_t> fn = ptx ? loadElementwisePtx(*ptx, name) : Expected<cudaKernel_t>(ptx.status());
    if (fn)
      return KernelPtr(new CompiledElementwiseKernel(*fn, p->numInputs, n));
    // The interpreter below gives the same bits; say once why it runs.
    static std::once_flag told;
    std::call_once(told, [&] {
      std::fprintf(stderr, "piperun: fused elementwise programs are interpreted on the GPU: %s\n",
                   fn.status().message().c_str());
    });
  }
  return KernelPtr(new FusedElementwiseKernel(prog, n));
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
