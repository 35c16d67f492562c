//===- runtime/cuda/kernels/Math.cpp - The other elementwise CUDA kernels -===//
//
// ONNX's remaining elementwise ops on float32 (bool where the op reads or
// writes bool): the one-input math and activation functions, IsNaN, IsInf
// and Not; Pow, PRelu, the comparisons and the logical ops, broadcasting;
// Where; Max, Min, Sum and Mean of up to eight inputs; Mod (float32/64,
// int32/64: runtime/cuda/Move.cu); and Identity with
// the reshaping ops where they are not views (a copy). The
// arithmetic is runtime/cuda/Bodies.h's body::mathUnary / mathBinary.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels/CudaCommon.h"

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>

namespace pipec::cuda {

namespace {

using body::MathOp;

const std::map<std::string, MathOp> &mathOps() {
  static const std::map<std::string, MathOp> ops = {
      {"Abs", MathOp::Abs}, {"Sign", MathOp::Sign}, {"Ceil", MathOp::Ceil}, {"Floor", MathOp::Floor},
      {"Round", MathOp::Round}, {"Acos", MathOp::Acos}, {"Acosh", MathOp::Acosh}, {"Asin", MathOp::Asin},
      {"Asinh", MathOp::Asinh}, {"Atan", MathOp::Atan}, {"Atanh", MathOp::Atanh}, {"Cos", MathOp::Cos},
      {"Cosh", MathOp::Cosh}, {"Sin", MathOp::Sin}, {"Sinh", MathOp::Sinh}, {"Tan", MathOp::Tan},
      {"Log", MathOp::Log}, {"Sqrt", MathOp::Sqrt}, {"Reciprocal", MathOp::Reciprocal},
      {"Softplus", MathOp::Softplus}, {"Softsign", MathOp::Softsign}, {"Mish", MathOp::Mish},
      {"Celu", MathOp::Celu}, {"Elu", MathOp::Elu}, {"Selu", MathOp::Selu}, {"LeakyRelu", MathOp::LeakyRelu},
      {"ThresholdedRelu", MathOp::ThresholdedRelu}, {"HardSigmoid", MathOp::HardSigmoid},
      {"HardSwish", MathOp::HardSwish}, {"IsNaN", MathOp::IsNaN}, {"IsInf", MathOp::IsInf}, {"Not", MathOp::Not},
      {"Pow", MathOp::Pow}, {"PRelu", MathOp::PRelu}, {"Equal", MathOp::Equal}, {"Greater", MathOp::Greater},
      {"GreaterOrEqual", MathOp::GreaterOrEqual}, {"Less", MathOp::Less}, {"LessOrEqual", MathOp::LessOrEqual},
      {"And", MathOp::And}, {"Or", MathOp::Or}, {"Xor", MathOp::Xor}, {"Max", MathOp::Max}, {"Min", MathOp::Min},
      {"Sum", MathOp::Sum}, {"Mean", MathOp::Sum}};
  return ops;
}

/// Every input (and the output) float32, or bool where the op says.
Status needTypes(const OpDesc &d, MathOp op) {
  const DType in = body::mathReadsBool(op) ? DType::Bool : DType::F32;
  const DType out = body::mathWritesBool(op) ? DType::Bool : DType::F32;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (d.inputs[i].dtype != in)
      return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype), "; the CUDA kernel takes ",
                    dtypeName(in));
  if (d.outputs.size() != 1 || d.outputs[0].dtype != out)
    return errorf(d.where(), ": the CUDA kernel writes one ", dtypeName(out), " output");
  return Status::ok();
}

double attrF(const OpDesc &d, const char *name, double dflt) {
  return attrFloat(d.attrs, name, static_cast<float>(dflt));
}

} // namespace

Expected<KernelPtr> makeMath(const OpDesc &d) {
  auto it = mathOps().find(d.opType);
  if (it == mathOps().end())
    return errorf(d.where(), ": not an elementwise op of the CUDA math kernels");
  const MathOp op = it->second;
  PIPEC_TRY(needTypes(d, op));
  const int64_t n = d.outputs[0].numel();
  if (op == MathOp::Max || op == MathOp::Min || op == MathOp::Sum) {
    // Max, Min, Sum, Mean: folded in input order.
    if (d.inputs.empty() || d.inputs.size() > static_cast<size_t>(kMaxVariadic))
      return errorf(d.where(), ": ", d.inputs.size(), " inputs (the CUDA kernel folds 1 to ", kMaxVariadic, ")");
    VariadicInputs proto;
    proto.count = static_cast<int>(d.inputs.size());
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      PIPEC_ASSIGN(proto.b[i], broadcastTo(d, i));
    }
    const bool mean = d.opType == "Mean";
    return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
      VariadicInputs v = proto;
      for (int k = 0; k < v.count; ++k)
        v.p[k] = static_cast<const float *>(in[k]);
      return launchVariadic(op, mean, v, static_cast<float *>(out[0]), n, ctx.stream);
    });
  }
  if (op >= MathOp::Pow) {
    if (d.inputs.size() != 2)
      return errorf(d.where(), ": expects two inputs");
    PIPEC_ASSIGN(body::Broadcast ba, broadcastTo(d, 0));
    PIPEC_ASSIGN(body::Broadcast bb, broadcastTo(d, 1));
    return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
      return launchMathBinary(op, in[0], ba, in[1], bb, out[0], n, ctx.stream);
    });
  }
  if (d.inputs.size() != 1 || d.inputs[0].shape != d.outputs[0].shape)
    return errorf(d.where(), ": expects one input of the output's shape");
  body::MathParams p;
  p.op = op;
  switch (op) {
  case MathOp::Celu:
    p.alpha = static_cast<float>(attrF(d, "alpha", 1.0));
    if (p.alpha == 0)
      return errorf(d.where(), ": alpha must not be 0");
    break;
  case MathOp::Elu: p.alpha = static_cast<float>(attrF(d, "alpha", 1.0)); break;
  case MathOp::Selu:
    p.alpha = static_cast<float>(attrF(d, "alpha", 1.67326319217681884765625));
    p.beta = static_cast<float>(attrF(d, "gamma", 1.05070102214813232421875));
    break;
  case MathOp::LeakyRelu: p.alpha = static_cast<float>(attrF(d, "alpha", 0.01)); break;
  case MathOp::ThresholdedRelu: p.alpha = static_cast<float>(attrF(d, "alpha", 1.0)); break;
  case MathOp::HardSigmoid:
    p.alpha = static_cast<float>(attrF(d, "alpha", 0.2));
    p.beta = static_cast<float>(attrF(d, "beta", 0.5));
    break;
  case MathOp::IsInf:
    p.negative = attrInt(d.attrs, "detect_negative", 1) != 0;
    p.positive = attrInt(d.attrs, "detect_positive", 1) != 0;
    break;
  default: break;
  }
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchMathUnary(p, in[0], out[0], n, ctx.stream);
  });
}

Expected<KernelPtr> makeMod(const OpDesc &d) {
  if (d.inputs.size() != 2 || d.outputs.size() != 1)
    return errorf(d.where(), ": expects two inputs and one output");
  const DType t = d.outputs[0].dtype;
  const CastType type = t == DType::F32 ? CastType::F32
                        : t == DType::F64 ? CastType::F64
                        : t == DType::I32 ? CastType::I32
                        : t == DType::I64 ? CastType::I64
                                          : CastType::Bool;
  if (type == CastType::Bool || d.inputs[0].dtype != t || d.inputs[1].dtype != t)
    return errorf(d.where(), ": the CUDA kernel takes float32, float64, int32 or int64 of one type, not ",
                  dtypeName(d.inputs[0].dtype), " and ", dtypeName(d.inputs[1].dtype));
  PIPEC_ASSIGN(body::Broadcast ba, broadcastTo(d, 0));
  PIPEC_ASSIGN(body::Broadcast bb, broadcastTo(d, 1));
  const bool cMod = attrInt(d.attrs, "fmod", 0) != 0;
  const int64_t n = d.outputs[0].numel();
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchMod(type, in[0], ba, in[1], bb, out[0], n, cMod, ctx.stream);
  });
}

Expected<KernelPtr> makeClip(const OpDesc &d) {
  if (d.inputs.empty() || d.inputs[0].dtype != DType::F32 || d.outputs.size() != 1 ||
      d.outputs[0] != d.inputs[0])
    return errorf(d.where(), ": the CUDA kernel clips float32 into an output of the input's shape");
  float lo = -std::numeric_limits<float>::max(), hi = std::numeric_limits<float>::max();
  bool runtime[2] = {false, false};
  if (d.opset < 11) {
    lo = attrFloat(d.attrs, "min", lo);
    hi = attrFloat(d.attrs, "max", hi);
  } else {
    for (size_t k = 1; k <= 2 && k < d.inputs.size(); ++k) {
      if (!d.hasInput(k))
        continue;
      if (d.inputs[k].dtype != DType::F32 || d.inputs[k].numel() != 1)
        return errorf(d.where(), ": bound ", k, " must be a float32 scalar");
      if (const Tensor *c = d.constInput(k))
        (k == 1 ? lo : hi) = c->data<float>()[0];
      else
        runtime[k - 1] = true; // read on the device
    }
  }
  const int64_t n = d.outputs[0].numel();
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchClip(static_cast<const float *>(in[0]), static_cast<float *>(out[0]), n, lo, hi,
                      runtime[0] ? static_cast<const float *>(in[1]) : nullptr,
                      runtime[1] ? static_cast<const float *>(in[2]) : nullptr, ctx.stream);
  });
}

Expected<KernelPtr> makeArgMinMax(const OpDesc &d) {
  if (d.inputs.size() != 1 || d.inputs[0].dtype != DType::F32 || d.outputs.size() != 1 ||
      d.outputs[0].dtype != DType::I64)
    return errorf(d.where(), ": the CUDA kernel takes float32 and gives int64");
  const Shape &s = d.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t axis = attrInt(d.attrs, "axis", 0);
  if (axis < -rank || axis >= rank || rank == 0)
    return errorf(d.where(), ": axis ", axis, " is out of range for rank ", rank);
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < rank; ++a)
    (a < axis ? outer : inner) *= a == axis ? 1 : s[static_cast<size_t>(a)];
  const int64_t len = s[static_cast<size_t>(axis)];
  if (outer * inner != d.outputs[0].numel())
    return errorf(d.where(), ": the output has ", d.outputs[0].numel(), " elements, not ", outer * inner);
  const bool max = d.opType == "ArgMax", last = attrInt(d.attrs, "select_last_index", 0) != 0;
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchArg(static_cast<const float *>(in[0]), static_cast<int64_t *>(out[0]), outer, len, inner, max, last,
                     ctx.stream);
  });
}

Expected<KernelPtr> makeCast(const OpDesc &d) {
  auto typeOf = [](DType t) -> std::optional<CastType> {
    switch (t) {
    case DType::F32: return CastType::F32;
    case DType::F64: return CastType::F64;
    case DType::I32: return CastType::I32;
    case DType::I64: return CastType::I64;
    case DType::U8: return CastType::U8;
    case DType::Bool: return CastType::Bool;
    case DType::F16: return CastType::F16;
    case DType::BF16: return CastType::BF16;
    default: return std::nullopt;
    }
  };
  if (d.inputs.size() != 1 || d.outputs.size() != 1 || d.inputs[0].shape != d.outputs[0].shape)
    return errorf(d.where(), ": expects one input and an output of its shape");
  const auto from = typeOf(d.inputs[0].dtype), to = typeOf(d.outputs[0].dtype);
  auto half = [](CastType c) { return c == CastType::F16 || c == CastType::BF16; };
  auto floating = [&](CastType c) { return half(c) || c == CastType::F32 || c == CastType::F64; };
  if (!from || !to || ((half(*from) || half(*to)) && (!floating(*from) || !floating(*to))))
    return errorf(d.where(), ": the CUDA kernel casts among float32, float64, int32, int64, uint8 and bool, and "
                  "float16 and bfloat16 to and from the floating types, not ",
                  dtypeName(d.inputs[0].dtype), " to ", dtypeName(d.outputs[0].dtype));
  const int64_t n = d.outputs[0].numel();
  const CastType f = *from, t = *to;
  if (half(f) || half(t))
    return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
      return launchHalfCast(in[0], f, out[0], t, n, ctx.stream);
    });
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchCast(in[0], f, out[0], t, n, ctx.stream);
  });
}

/// Dropout (opset 10+: a bool mask) with a constant ratio and the run's
/// training mode or a constant one: the CPU kernel's Philox stream, so the
/// masks are the CPU's bit for bit.
class DropoutKernel final : public Kernel {
public:
  /// Its mask comes from the step's random stream: a launch recorded
  /// once reads the step from ExecContext::deviceStep (the executor
  /// always gives it one); without it a recording would draw one mask
  /// for every step.
  bool replayable() const override { return true; }
  DropoutKernel(int64_t n, double ratio, int mode, bool mask) : n_(n), ratio_(ratio), mode_(mode), mask_(mask) {}
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const bool training = mode_ < 0 ? ctx.training : mode_ != 0;
    auto *y = static_cast<float *>(out[0]);
    auto *mask = mask_ ? static_cast<uint8_t *>(out[1]) : nullptr;
    auto s = static_cast<cudaStream_t>(ctx.stream);
    if (!training || ratio_ == 0.0) {
      if (n_ && in[0] != y &&
          cudaMemcpyAsync(y, in[0], static_cast<size_t>(n_) * sizeof(float), cudaMemcpyDeviceToDevice, s) !=
              cudaSuccess)
        return errorf("Dropout: copy failed");
      if (mask && n_ && cudaMemsetAsync(mask, 1, static_cast<size_t>(n_), s) != cudaSuccess)
        return errorf("Dropout: cudaMemsetAsync failed");
      return Status::ok();
    }
    const uint64_t threshold = static_cast<uint64_t>(std::ldexp(ratio_, 32));
    const float scale = ratio_ < 1.0 ? static_cast<float>(1.0 / (1.0 - ratio_)) : 0.0f;
    if (ctx.deviceStep)
      return launchDropoutAt(ctx.seed, ctx.deviceStep, ctx.microBatch, nodeId, static_cast<const float *>(in[0]), y,
                             mask, n_, threshold, scale, ctx.stream);
    const cpu::ew::RandomStream stream(ctx.seed, ctx.step, ctx.microBatch, nodeId);
    return launchDropout(stream, static_cast<const float *>(in[0]), y, mask, n_, threshold, scale, ctx.stream);
  }

private:
  int64_t n_;
  double ratio_;
  int mode_; ///< -1: the run's (ExecContext::training), else 0 or 1
  bool mask_;
};

Expected<KernelPtr> makeDropout(const OpDesc &d) {
  if (d.opset < 10)
    return errorf(d.where(), ": the CUDA kernel takes Dropout from opset 10 (a bool mask)");
  if (d.inputs.empty() || d.inputs[0].dtype != DType::F32 || d.outputs.empty() || d.outputs[0] != d.inputs[0])
    return errorf(d.where(), ": the CUDA kernel takes float32 data and an output of its shape");
  const bool mask = d.outputs.size() > 1 && d.outputs[1].dtype != DType::Undefined;
  if (mask && (d.outputs[1].dtype != DType::Bool || d.outputs[1].shape != d.inputs[0].shape))
    return errorf(d.where(), ": the mask must be bool of the data's shape");
  double ratio = 0.5;
  if (d.opset < 12) {
    ratio = attrFloat(d.attrs, "ratio", 0.5f);
  } else if (d.hasInput(1)) {
    const Tensor *r = d.constInput(1);
    if (!r || r->numel() != 1 || (r->dtype() != DType::F32 && r->dtype() != DType::F64))
      return errorf(d.where(), ": the CUDA kernel takes a constant float ratio (not one computed at run time)");
    ratio = r->dtype() == DType::F64 ? r->data<double>()[0] : r->data<float>()[0];
  }
  if (!(ratio >= 0.0 && ratio <= 1.0))
    return errorf(d.where(), ": ratio ", ratio, " is outside [0, 1]");
  int mode = -1;
  if (d.opset >= 12 && d.hasInput(2)) {
    const Tensor *t = d.constInput(2);
    if (!t || t->dtype() != DType::Bool || t->numel() != 1)
      return errorf(d.where(), ": the CUDA kernel takes a constant training_mode (not one computed at run time)");
    mode = t->data<uint8_t>()[0] != 0;
  }
  return KernelPtr(new DropoutKernel(d.inputs[0].numel(), ratio, mode, mask));
}

Expected<KernelPtr> makeWhere(const OpDesc &d) {
  if (d.inputs.size() != 3 || d.outputs.size() != 1 || d.inputs[0].dtype != DType::Bool ||
      d.inputs[1].dtype != DType::F32 || d.inputs[2].dtype != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": the CUDA kernel takes a bool condition and two float32 inputs");
  PIPEC_ASSIGN(body::Broadcast bc, broadcastTo(d, 0));
  PIPEC_ASSIGN(body::Broadcast bx, broadcastTo(d, 1));
  PIPEC_ASSIGN(body::Broadcast by, broadcastTo(d, 2));
  const int64_t n = d.outputs[0].numel();
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchWhere(static_cast<const uint8_t *>(in[0]), bc, static_cast<const float *>(in[1]), bx,
                       static_cast<const float *>(in[2]), by, static_cast<float *>(out[0]), n, ctx.stream);
  });
}

Expected<KernelPtr> makeIdentity(const OpDesc &d) {
  // Identity, and Reshape, Flatten, Squeeze, Unsqueeze where the plan did
  // not make them views: the input's bytes (the shape or axes input aside).
  if (d.inputs.empty() || d.outputs.size() != 1 || d.inputs[0].dtype != d.outputs[0].dtype ||
      d.inputs[0].numel() != d.outputs[0].numel())
    return errorf(d.where(), ": expects an output of the input's type and element count");
  const uint64_t bytes = d.outputs[0].bytes();
  const std::string where = d.where();
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) -> Status {
    if (bytes && in[0] != out[0] &&
        cudaMemcpyAsync(out[0], in[0], bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.stream)) !=
            cudaSuccess)
      return errorf(where, ": copy failed: ", cudaGetErrorString(cudaGetLastError()));
    return Status::ok();
  });
}

} // namespace pipec::cuda
