//===- passes/FoldBatchNorm.cpp - BatchNormalization into the Conv before it -===//
//
// Pass `fold-batchnorm`, on inference graphs (the default inference
// pipeline runs it before channels-last). An inference BatchNormalization
// is a per-channel affine map, y = (x - mean) * s + beta with
// s = scale / sqrt(var + epsilon); after a Conv whose weights and bias are
// constants it folds into them:
//
//   W'[m, ...] = W[m, ...] * s[m],   B'[m] = (B[m] - mean[m]) * s[m] + beta[m]
//
// (computed in double, rounded once to f32), and the Conv alone gives y.
// torch.onnx.export folds BatchNorm itself in eval mode; a model exported
// for training, or written by another tool, keeps it, and each one is a
// pass over the activations (and, under channels-last, a pair of
// transposes around it). Conditions: f32 throughout; the Conv's output read
// by the BatchNormalization alone (and not a graph output); every one of
// W, B (when present), scale, beta, mean and var a constant; the
// BatchNormalization in inference mode (one output, training_mode 0,
// spatial 1 before opset 9). The results differ from the unfolded ones by
// rounding; tests/lit/e2e/fold-batchnorm.test bounds the difference.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include <cmath>

namespace pipec::passes {

namespace {

/// A constant f32 vector of `n` elements.
const float *constVector(const ir::Value *v, int64_t n) {
  if (!v || !v->isConstant() || v->constant().dtype() != DType::F32 || v->constant().numel() != n ||
      v->constant().shape().size() != 1)
    return nullptr;
  return v->constant().data<float>();
}

bool fold(ir::Graph &g, ir::Node *bn) {
  if (!bn->is("BatchNormalization") || bn->numInputs() != 5 || bn->numOutputs() != 1 ||
      attrInt(bn->attrs(), "training_mode", 0) != 0 || attrInt(bn->attrs(), "spatial", 1) != 1)
    return false;
  ir::Value *x = bn->input(0);
  ir::Node *conv = x ? x->producer() : nullptr;
  if (!conv || !conv->is("Conv") || conv->numOutputs() != 1 || x->isGraphOutput() ||
      x->users().size() != 1 || bn->output(0)->isGraphOutput())
    return false;
  const ir::Value *w = conv->input(1);
  const ir::Value *b = conv->numInputs() > 2 ? conv->input(2) : nullptr;
  if (!w || !w->isConstant() || w->constant().dtype() != DType::F32 || w->shape().size() < 3 ||
      !x->typeKnown() || x->dtype() != DType::F32)
    return false;
  const int64_t M = w->shape()[0];
  const float *scale = constVector(bn->input(1), M), *beta = constVector(bn->input(2), M),
              *mean = constVector(bn->input(3), M), *var = constVector(bn->input(4), M);
  const float *bias = b ? constVector(b, M) : nullptr;
  if (!scale || !beta || !mean || !var || (b && !bias))
    return false;
  const double eps = attrFloat(bn->attrs(), "epsilon", 1e-5f);
  const int64_t per = w->constant().numel() / M;
  Tensor w2(DType::F32, w->shape()), b2(DType::F32, {M});
  const float *wd = w->constant().data<float>();
  float *wo = w2.data<float>(), *bo = b2.data<float>();
  for (int64_t m = 0; m < M; ++m) {
    const double s = static_cast<double>(scale[m]) / std::sqrt(static_cast<double>(var[m]) + eps);
    for (int64_t i = 0; i < per; ++i)
      wo[m * per + i] = static_cast<float>(static_cast<double>(wd[m * per + i]) * s);
    const double b0 = bias ? static_cast<double>(bias[m]) : 0.0;
    bo[m] = static_cast<float>((b0 - static_cast<double>(mean[m])) * s + static_cast<double>(beta[m]));
  }
  conv->setInput(1, g.makeConstantValue(w->name() + "/folded", std::move(w2)));
  conv->setInput(2, g.makeConstantValue(bn->name() + "/bias", std::move(b2)));
  g.replaceAllUsesWith(bn->output(0), x);
  g.eraseNode(bn);
  return true;
}

class FoldBatchNormPass final : public Pass {
public:
  std::string_view name() const override { return "fold-batchnorm"; }

  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    for (ir::Node *n : g.nodes())
      changed = fold(g, n) || changed;
    if (changed)
      g.removeDeadConstants();
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createFoldBatchNormPass() { return std::make_unique<FoldBatchNormPass>(); }

} // namespace pipec::passes
