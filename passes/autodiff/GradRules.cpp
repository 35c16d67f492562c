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
    {"Abs", absGrad},
    {"Clip", clipGrad},
    {"Cos", cosGrad},
    {"Elu", eluGrad},
    {"HardSigmoid", hardSigmoidGrad},
    {"LeakyRelu", leakyReluGrad},
    {"Reciprocal", reciprocalGrad},
    {"Selu", seluGrad},
    {"Sin", sinGrad},
    {"Softplus", softplusGrad},
    {"Softsign", softsignGrad},
    {"Cast", castGrad},
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
    {"Max", maxGrad},
    {"Mean", meanGrad},
    {"Min", minGrad},
    {"Sum", sumGrad},
    // Linear algebra.
    {"Einsum", einsumGrad},
    {"Gemm", gemmGrad},
    {"MatMul", matMulGrad},
    // Convolution and pooling.
    {"AveragePool", averagePoolGrad},
    {"Conv", convGrad},
    {"ConvTranspose", convTransposeGrad},
    {"GlobalAveragePool", globalAveragePoolGrad},
    {"MaxPool", maxPoolGrad},
    // Normalization and activation over an axis.
    {"BatchNormalization", batchNormGrad},
    {"InstanceNormalization", instanceNormGrad},
    {"LayerNormalization", layerNormGrad},
    {"LogSoftmax", logSoftmaxGrad},
    {"Softmax", softmaxGrad},
    // Reductions.
    {"ReduceL1", reduceL1Grad},
    {"ReduceL2", reduceL2Grad},
    {"ReduceLogSumExp", reduceLogSumExpGrad},
    {"ReduceMax", reduceMaxGrad},
    {"ReduceMean", reduceMeanGrad},
    {"ReduceMin", reduceMinGrad},
    {"ReduceProd", reduceProdGrad},
    {"ReduceSum", reduceSumGrad},
    {"ReduceSumSquare", reduceSumSquareGrad},
    // Data movement and shape manipulation.
    {"Concat", concatGrad},
    {"Expand", expandGrad},
    {"Flatten", reshapeLikeGrad},
    {"Gather", gatherGrad},
    {"Pad", padGrad},
    {"Reshape", reshapeLikeGrad},
    {"Resize", resizeGrad},
    {"Slice", sliceGrad},
    {"Split", splitGrad},
    {"Squeeze", reshapeLikeGrad},
    {"Tile", tileGrad},
    {"Transpose", transposeGrad},
    {"Unsqueeze", reshapeLikeGrad},
    {"Upsample", resizeGrad},
    // Losses.
    {"NegativeLogLikelihoodLoss", nllLossGrad},
    {"SoftmaxCrossEntropyLoss", softmaxCrossEntropyGrad},
};

/// The fused ops of the domain pipec (passes/Fusion.cpp).
const GradEntry kPipecGradRules[] = {
    {"MaskedSoftmax", maskedSoftmaxGrad},
    {"Attention", attentionGrad},
};

} // namespace

GradRule findGradRule(std::string_view domain, std::string_view opType) {
  using Index = std::map<std::string, GradRule, std::less<>>;
  auto build = [](const auto &table) {
    Index m;
    for (const GradEntry &e : table)
      m.emplace(e.opType, e.rule);
    return m;
  };
  static const Index onnx = build(kGradRules), pipec = build(kPipecGradRules);
  const std::string d = ir::canonicalDomain(domain);
  const Index *index = d.empty() ? &onnx : d == "pipec" ? &pipec : nullptr;
  if (!index)
    return nullptr;
  auto it = index->find(opType);
  return it == index->end() ? nullptr : it->second;
}

std::vector<std::string> gradRuleOps() {
  std::vector<std::string> r;
  for (const GradEntry &e : kGradRules)
    r.push_back(e.opType);
  for (const GradEntry &e : kPipecGradRules)
    r.push_back(std::string("pipec:") + e.opType);
  return r;
}

} // namespace pipec::passes::autodiff
