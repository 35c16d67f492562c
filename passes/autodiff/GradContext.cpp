//===- passes/autodiff/GradContext.cpp - Emitting backward nodes ----------===//
//
// GradContext: a NodeBuilder (passes/NodeBuilder.h) for one forward node.
// Names derive from the forward node ("fc1/grad/MatMul", made unique by
// the graph), so printed IR reads as the forward graph does.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

GradContext::GradContext(ir::Graph &g, ir::Node &fwd, std::vector<ir::Value *> outGrads,
                         std::vector<bool> needsGrad)
    : NodeBuilder(g, nullptr, fwd.name() + "/grad/", ir::Phase::Backward, fwd.name(),
                  "its gradient"),
      fwd_(fwd), outGrads_(std::move(outGrads)),
      needs_(std::move(needsGrad)), inGrads_(fwd.numInputs(), nullptr) {}

void GradContext::setGrad(size_t i, ir::Value *grad) {
  if (i < inGrads_.size())
    inGrads_[i] = grad;
}

Status GradContext::error(const std::string &message) const {
  return errorf("node '", fwd_.name(), "' (", fwd_.domain().empty() ? "" : fwd_.domain() + ":",
                fwd_.opType(), ", opset ", g_.opset(fwd_.domain()), "): ", message);
}

} // namespace pipec::passes::autodiff
