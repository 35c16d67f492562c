//===- passes/PromoteHalf.cpp - Models stored in fp16 or bf16 -------------===//
//
// Pass `promote-half`, first in the default pipeline: a model whose
// weights, inputs or intermediate values are float16 or bfloat16 (as many
// published exports are) computes in fp32. Every 16-bit float constant
// becomes the fp32 value it holds (exact), trainable ones included: the
// fp32 master weights training updates (`piperun --save` rounds them back
// into the model's 16-bit initializers); 16-bit graph inputs and outputs,
// Cast and Constant nodes that make 16-bit values, and the types of
// 16-bit values become fp32. The model then takes and gives fp32
// tensors. `pipec --precision bf16` (passes/MixedPrecision.cpp) is how a
// plan computes its products in a 16-bit type again.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "support/Half.h"

namespace pipec::passes {

namespace {

bool isHalf(DType t) { return t == DType::F16 || t == DType::BF16; }

Tensor toF32(const Tensor &t) {
  Tensor out(DType::F32, t.shape());
  const auto *h = static_cast<const uint16_t *>(t.raw());
  float *f = out.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    f[i] = t.dtype() == DType::BF16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
  return out;
}

class PromoteHalfPass final : public Pass {
public:
  std::string_view name() const override { return "promote-half"; }

  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    auto retype = [&](ir::Value *v) {
      if (v && v->typeKnown() && isHalf(v->dtype())) {
        v->setType(TensorDesc{DType::F32, v->shape()});
        changed = true;
      }
    };
    for (ir::Value *c : g.constants())
      if (isHalf(c->dtype())) {
        g.convertToConstant(c, toF32(c->constant()));
        changed = true;
      }
    for (ir::Value *in : g.inputs())
      retype(in);
    for (ir::Node *n : g.nodes()) {
      if (n->is("Cast") || n->is("EyeLike") || n->is("RandomNormal") || n->is("RandomUniform") ||
          n->is("RandomNormalLike") || n->is("RandomUniformLike")) {
        const char *attr = n->is("Cast") ? "to" : "dtype";
        auto it = n->attrs().find(attr);
        if (it != n->attrs().end() && it->second.kind == Attribute::Kind::Int &&
            isHalf(static_cast<DType>(it->second.i))) {
          it->second = Attribute::ofInt(static_cast<int64_t>(DType::F32));
          changed = true;
        }
      }
      if (n->is("Constant") || n->is("ConstantOfShape")) {
        auto it = n->attrs().find("value");
        if (it != n->attrs().end() && it->second.kind == Attribute::Kind::Tensor && isHalf(it->second.t.dtype())) {
          it->second = Attribute::ofTensor(toF32(it->second.t));
          changed = true;
        }
      }
      for (ir::Value *o : n->outputs())
        retype(o);
    }
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createPromoteHalfPass() { return std::make_unique<PromoteHalfPass>(); }

} // namespace pipec::passes
