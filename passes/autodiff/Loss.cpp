//===- passes/autodiff/Loss.cpp - Loss gradient rules ---------------------===//
//
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: one pipec kernel
// each (pipec:SoftmaxCrossEntropyLossGrad recomputes the softmax from the
// scores, so the forward need not emit log_prob), with the forward's
// reduction, ignore_index and optional class weights. A gradient flowing
// into SCE's log_prob output adds a pipec:LogSoftmaxGrad along axis 1.
// Targets and weights are not differentiated.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

namespace {

Status lossGrad(GradContext &c, const char *gradOp) {
  if (c.needsGrad(2))
    return c.error("the gradient with respect to the class weights is not supported");
  if (!c.needsGrad(0))
    return Status::ok();
  AttrMap a;
  a["reduction"] = Attribute::ofString(attrString(c.attrs(), "reduction", "mean"));
  if (const Attribute *ig = attrFind(c.attrs(), "ignore_index"))
    a["ignore_index"] = *ig;
  ir::Value *g = nullptr;
  if (ir::Value *dl = c.outGrad(0)) {
    std::vector<ir::Value *> in = {dl, c.input(0), c.input(1)};
    if (c.input(2))
      in.push_back(c.input(2));
    PIPEC_ASSIGN(g, c.emitPipec(gradOp, in, a));
  }
  if (ir::Value *dlp = c.outGrad(1)) {
    PIPEC_ASSIGN(ir::Value * h, c.emitPipec("LogSoftmaxGrad", {dlp, c.output(1)},
                                            {{"axis", Attribute::ofInt(1)}}));
    if (g) {
      PIPEC_ASSIGN(g, c.add(g, h));
    } else {
      g = h;
    }
  }
  if (g)
    c.setGrad(0, g);
  return Status::ok();
}

} // namespace

Status softmaxCrossEntropyGrad(GradContext &c) {
  return lossGrad(c, "SoftmaxCrossEntropyLossGrad");
}

Status nllLossGrad(GradContext &c) { return lossGrad(c, "NegativeLogLikelihoodLossGrad"); }

} // namespace pipec::passes::autodiff
