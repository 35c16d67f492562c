//===- passes/autodiff/GradRules.cpp - The gradient rule table ------------===//
//
// The explicit table from op to gradient rule (default domain). An op that
// is not listed has no gradient: autodiff fails with a message naming the
// node, its op type and opset if such a node lies on a path from a
// trainable parameter to the loss.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include <map>

namespace pipec::passes::autodiff {

namespace {

struct GradEntry {
  const char *opType;
  GradRule rule;
};

// Grouped as ir/Ops.def.
const GradEntry kGradRules[] = {
    // Elementwise unary.
    {"Exp", expGrad},
    {"Identity", identityGrad},
    {"Dropout", dropoutGrad},
    {"Log", logGrad},
    {"Neg", negGrad},
    {"Relu", reluGrad},
    {"Sigmoid", sigmoidGrad},
    {"Sqrt", sqrtGrad},
    {"Tanh", tanhGrad},
    {"Erf", erfGrad},
    {"Gelu", geluGrad},
    // Elementwise binary.
    {"Add", addGrad},
    {"Div", divGrad},
    {"Mul", mulGrad},
    {"Pow", powGrad},
    {"Sub", subGrad},
    {"Where", whereGrad},
    // Linear algebra.
    {"Gemm", gemmGrad},
    {"MatMul", matMulGrad},
    // Convolution and pooling.
    {"AveragePool", averagePoolGrad},
    {"Conv", convGrad},
    {"GlobalAveragePool", globalAveragePoolGrad},
    {"MaxPool", maxPoolGrad},
    // Normalization and activation over an axis.
    {"BatchNormalization", batchNormGrad},
    {"LayerNormalization", layerNormGrad},
    {"LogSoftmax", logSoftmaxGrad},
    {"Softmax", softmaxGrad},
    // Reductions.
    {"ReduceMean", reduceMeanGrad},
    {"ReduceSum", reduceSumGrad},
    // Data movement and shape manipulation.
    {"Concat", concatGrad},
    {"Expand", expandGrad},
    {"Flatten", reshapeLikeGrad},
    {"Gather", gatherGrad},
    {"Reshape", reshapeLikeGrad},
    {"Slice", sliceGrad},
    {"Split", splitGrad},
    {"Squeeze", reshapeLikeGrad},
    {"Transpose", transposeGrad},
    {"Unsqueeze", reshapeLikeGrad},
    // Losses.
    {"NegativeLogLikelihoodLoss", nllLossGrad},
    {"SoftmaxCrossEntropyLoss", softmaxCrossEntropyGrad},
};

} // namespace

GradRule findGradRule(std::string_view domain, std::string_view opType) {
  static const auto index = [] {
    std::map<std::string, GradRule, std::less<>> m;
    for (const GradEntry &e : kGradRules)
      m.emplace(e.opType, e.rule);
    return m;
  }();
  if (!ir::canonicalDomain(domain).empty())
    return nullptr;
  auto it = index.find(opType);
  return it == index.end() ? nullptr : it->second;
}

std::vector<std::string> gradRuleOps() {
  std::vector<std::string> r;
  for (const GradEntry &e : kGradRules)
    r.push_back(e.opType);
  return r;
}

} // namespace pipec::passes::autodiff
