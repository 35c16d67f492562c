//===- runtime/cpu/kernels/Dropout.cpp - Dropout --------------------------===//
//
// Inference: y = x and the optional mask is all true. Training: element e is
// kept when word e of the node's Philox stream (ElementwiseRandom.h), keyed
// by (ExecContext seed, step, micro-batch, Kernel::nodeId), is at least
// ratio * 2^32; kept elements are scaled by 1 / (1 - ratio). The mask thus
// depends on nothing but those identifiers and the element index, so
// recomputation, any partition and any thread count reproduce it bitwise.
//
// Mode: ExecContext::training, overridden from opset 12 by the
// training_mode input when it is given (constant, or read at run time).
// Ratio: the `ratio` attribute before opset 12, input 1 (constant or run
// time, default 0.5) from 12; it must lie in [0, 1]. The node's `seed`
// attribute is ignored: pipec's streams are keyed by the run's seed. The
// mask is bool from opset 10 and of the data type before.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/ElementwiseRandom.h"

#include <cmath>
#include <cstring>

namespace pipec::cpu {

namespace {
using namespace ew;

/// How the kernel learns a setting: fixed in the factory or read at run time.
enum class Source { Fixed, Runtime, Context };

struct DropoutConfig {
  int64_t n = 0;
  bool hasMask = false;
  Source ratioSource = Source::Fixed;
  DType ratioType = DType::F32; ///< of a run-time ratio
  double ratio = 0.5;
  Source modeSource = Source::Context;
  bool training = false; ///< a fixed mode
  std::string where;     ///< for run-time errors
};

template <typename T, typename Mask> class DropoutKernel final : public Kernel {
public:
  explicit DropoutKernel(DropoutConfig c) : c_(std::move(c)) {}

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    bool training = c_.training;
    if (c_.modeSource == Source::Context)
      training = ctx.training;
    else if (c_.modeSource == Source::Runtime)
      training = in[2] ? *static_cast<const Bool *>(in[2]) != 0 : ctx.training;
    double ratio = c_.ratio;
    if (c_.ratioSource == Source::Runtime && in[1])
      ratio = c_.ratioType == DType::F64 ? *static_cast<const double *>(in[1])
                                         : *static_cast<const float *>(in[1]);
    if (!(ratio >= 0.0 && ratio <= 1.0))
      return errorf(c_.where, ": ratio ", ratio, " is outside [0, 1]");

    const T *__restrict x = static_cast<const T *>(in[0]);
    T *__restrict y = static_cast<T *>(out[0]);
    Mask *__restrict m = c_.hasMask ? static_cast<Mask *>(out[1]) : nullptr;
    if (!training || ratio == 0.0) {
      if (x != y && c_.n)
        std::memcpy(y, x, static_cast<size_t>(c_.n) * sizeof(T));
      if (m)
        std::fill(m, m + c_.n, Mask(1));
      return Status::ok();
    }
    // Drop when the 32-bit word < ratio * 2^32 (ratio 1 drops everything).
    const uint64_t threshold = static_cast<uint64_t>(std::ldexp(ratio, 32));
    const T scale = ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
    const RandomStream stream(ctx.seed, ctx.step, ctx.microBatch, nodeId);
    static_assert(kChunk % 4 == 0, "chunks must hold whole Philox blocks");
    parallelChunks(c_.n, kChunk, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; b += 4) {
        const std::array<uint32_t, 4> r = stream.block(static_cast<uint64_t>(b) / 4);
        const int64_t len = std::min<int64_t>(4, hi - b);
        for (int64_t j = 0; j < len; ++j) {
          const bool keep = r[j] >= threshold;
          y[b + j] = keep ? x[b + j] * scale : T(0);
          if (m)
            m[b + j] = keep ? Mask(1) : Mask(0);
        }
      }
    });
    return Status::ok();
  }

private:
  DropoutConfig c_;
};
} // namespace

Expected<KernelPtr> makeDropoutKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 1, d.opset < 12 ? 1 : 3, 1, 2));
  const TensorDesc &x = d.inputs[0];
  PIPEC_TRY(checkOutput(d, 0, x.dtype, x.shape));
  const bool hasMask = d.outputs.size() > 1 && d.outputs[1].dtype != DType::Undefined;
  const DType maskType = d.opset < 10 ? x.dtype : DType::Bool;
  if (hasMask)
    PIPEC_TRY(checkOutput(d, 1, maskType, x.shape));

  auto make = [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    DropoutConfig c;
    c.n = x.numel();
    c.hasMask = hasMask;
    c.where = d.where();
    if (d.opset < 12) {
      c.ratio = attrFloat(d.attrs, "ratio", 0.5f);
    } else if (d.hasInput(1)) {
      const TensorDesc &r = d.inputs[1];
      if (!isFloat(r.dtype) || r.numel() != 1)
        return errorf(d.where(), ": ratio must be a float scalar, it is ", r.str());
      if (const Tensor *t = d.constInput(1)) {
        PIPEC_ASSIGN(c.ratio, scalarValue(d, *t, "ratio"));
      } else {
        c.ratioSource = Source::Runtime;
        c.ratioType = r.dtype;
      }
    }
    if (c.ratioSource == Source::Fixed && !(c.ratio >= 0.0 && c.ratio <= 1.0))
      return errorf(d.where(), ": ratio ", c.ratio, " is outside [0, 1]");
    if (d.opset >= 12 && d.hasInput(2)) {
      const TensorDesc &t = d.inputs[2];
      if (t.dtype != DType::Bool || t.numel() != 1)
        return errorf(d.where(), ": training_mode must be a bool scalar, it is ", t.str());
      if (const Tensor *v = d.constInput(2)) {
        if (v->dtype() != DType::Bool || v->numel() != 1)
          return errorf(d.where(), ": constant training_mode is ", v->desc().str());
        c.modeSource = Source::Fixed;
        c.training = *v->data<Bool>() != 0;
      } else {
        c.modeSource = Source::Runtime;
      }
    }
    if (maskType == DType::Bool)
      return KernelPtr(new DropoutKernel<T, Bool>(std::move(c)));
    return KernelPtr(new DropoutKernel<T, T>(std::move(c)));
  };
  return dispatchKernel<kFloats>(d, x.dtype, "input", make);
}

} // namespace pipec::cpu
