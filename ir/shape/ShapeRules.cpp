//===- ir/shape/ShapeRules.cpp - The shape rule table and driver ----------===//
//
// The explicit table from op name to shape rule (one rule may serve a whole
// family, such as the unary elementwise ops), inferNodeTypes, which checks
// arity and input types before calling the rule, and the numpy broadcasting
// and axis helpers every family uses.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

#include <algorithm>
#include <map>

namespace pipec::ir {

using namespace shape;

namespace {

struct RuleEntry {
  const char *opType;
  ShapeRule rule;
};

// Default-domain ops; keep in the order of ir/Ops.def.
const RuleEntry kRules[] = {
    // Elementwise unary.
    {"Abs", unaryRule},
    {"Acos", unaryRule},
    {"Acosh", unaryRule},
    {"Asin", unaryRule},
    {"Asinh", unaryRule},
    {"Atan", unaryRule},
    {"Atanh", unaryRule},
    {"Ceil", unaryRule},
    {"Celu", unaryRule},
    {"Clip", clipRule},
    {"Cos", unaryRule},
    {"Cosh", unaryRule},
    {"Elu", unaryRule},
    {"Erf", unaryRule},
    {"Exp", unaryRule},
    {"Floor", unaryRule},
    {"Gelu", unaryRule},
    {"HardSigmoid", unaryRule},
    {"HardSwish", unaryRule},
    {"Identity", unaryRule},
    {"IsInf", boolUnaryRule},
    {"IsNaN", boolUnaryRule},
    {"LeakyRelu", unaryRule},
    {"Log", unaryRule},
    {"Mish", unaryRule},
    {"Neg", unaryRule},
    {"Not", logicalNotRule},
    {"Reciprocal", unaryRule},
    {"Relu", unaryRule},
    {"Round", unaryRule},
    {"Selu", unaryRule},
    {"Sigmoid", unaryRule},
    {"Sign", unaryRule},
    {"Sin", unaryRule},
    {"Sinh", unaryRule},
    {"Softplus", unaryRule},
    {"Softsign", unaryRule},
    {"Sqrt", unaryRule},
    {"Tan", unaryRule},
    {"Tanh", unaryRule},
    {"ThresholdedRelu", unaryRule},
    {"Cast", castRule},
    {"Dropout", dropoutRule},
    // Elementwise binary and n-ary.
    {"Add", binaryRule},
    {"And", logicalRule},
    {"Div", binaryRule},
    {"Equal", compareRule},
    {"Greater", compareRule},
    {"GreaterOrEqual", compareRule},
    {"Less", compareRule},
    {"LessOrEqual", compareRule},
    {"Mod", binaryRule},
    {"Mul", binaryRule},
    {"Or", logicalRule},
    {"Pow", powRule},
    {"PRelu", preluRule},
    {"Sub", binaryRule},
    {"Xor", logicalRule},
    {"Where", whereRule},
    {"Max", variadicRule},
    {"Mean", variadicRule},
    {"Min", variadicRule},
    {"Sum", variadicRule},
    // Linear algebra.
    {"Einsum", einsumRule},
    {"Gemm", gemmRule},
    {"MatMul", matMulRule},
    // Normalization and activation over an axis.
    {"BatchNormalization", batchNormRule},
    {"InstanceNormalization", instanceNormRule},
    {"LayerNormalization", layerNormRule},
    {"LogSoftmax", softmaxRule},
    {"LRN", lrnRule},
    {"Softmax", softmaxRule},
    // Convolution and pooling.
    {"AveragePool", averagePoolRule},
    {"Conv", convRule},
    {"ConvTranspose", convTransposeRule},
    {"GlobalAveragePool", globalPoolRule},
    {"GlobalMaxPool", globalPoolRule},
    {"MaxPool", poolRule},
    // Reductions.
    {"ArgMax", argReduceRule},
    {"ArgMin", argReduceRule},
    {"ReduceL1", reduceRule},
    {"ReduceL2", reduceRule},
    {"ReduceLogSumExp", reduceRule},
    {"ReduceMax", reduceRule},
    {"ReduceMean", reduceRule},
    {"ReduceMin", reduceRule},
    {"ReduceProd", reduceRule},
    {"ReduceSum", reduceRule},
    {"ReduceSumSquare", reduceRule},
    // Data movement and shape manipulation.
    {"Concat", concatRule},
    {"Constant", constantRule},
    {"ConstantOfShape", constantOfShapeRule},
    {"Expand", expandRule},
    {"Flatten", flattenRule},
    {"Gather", gatherRule},
    {"GatherElements", gatherElementsRule},
    {"Pad", padRule},
    {"Range", rangeRule},
    {"Reshape", reshapeRule},
    {"Resize", resizeRule},
    {"Shape", shapeRule},
    {"Size", sizeRule},
    {"Slice", sliceRule},
    {"Split", splitRule},
    {"Squeeze", squeezeRule},
    {"Tile", tileRule},
    {"Transpose", transposeRule},
    {"Trilu", triluRule},
    {"Unsqueeze", unsqueezeRule},
    {"Upsample", resizeRule},
    // Losses.
    {"NegativeLogLikelihoodLoss", nllLossRule},
    {"SoftmaxCrossEntropyLoss", softmaxCrossEntropyRule},
};

// Gradient ops of the domain "pipec" (ir/shape/Grad.cpp), in the order of
// their section of ir/Ops.def.
const RuleEntry kGradRules[] = {
    {"ReluGrad", elementwiseGradRule},
    {"SoftmaxGrad", axisGradRule},
    {"LogSoftmaxGrad", axisGradRule},
    {"SoftmaxCrossEntropyLossGrad", lossGradRule},
    {"NegativeLogLikelihoodLossGrad", lossGradRule},
    {"LayerNormalizationGrad", layerNormGradRule},
    {"LayerNormalizationScaleGrad", layerNormScaleGradRule},
    {"GatherGrad", gatherGradRule},
    {"GeluGrad", elementwiseGradRule},
    {"ConvGradInput", shapeAttrGradRule},
    {"ConvGradWeight", shapeAttrGradRule},
    {"BatchNormalizationStats", batchNormStatsRule},
    {"BatchNormalizationGrad", batchNormGradRule},
    {"BatchNormalizationScaleGrad", batchNormScaleGradRule},
    {"MaxPoolGrad", maxPoolGradRule},
    {"AveragePoolGrad", shapeAttrGradRule},
    {"ResizeGrad", resizeGradRule},
    // Fused ops (passes/Fusion.cpp).
    {"MaskedSoftmax", maskedSoftmaxRule},
    {"FusedElementwise", fusedElementwiseRule},
    {"FusedGemm", fusedGemmRule},
    {"Attention", attentionRule},
    {"AttentionGrad", attentionGradRule},
    // Layout ops (passes/Layout.cpp).
    {"NhwcConv", nhwcConvRule},
    {"NhwcMaxPool", nhwcPoolRule},
    {"NhwcAveragePool", nhwcPoolRule},
};

ShapeRule findRule(std::string_view domain, std::string_view opType) {
  using Index = std::map<std::string, ShapeRule, std::less<>>;
  auto build = [](const auto &table) {
    Index m;
    for (const RuleEntry &e : table)
      m.emplace(e.opType, e.rule);
    return m;
  };
  static const Index onnx = build(kRules), grad = build(kGradRules);
  const std::string d = canonicalDomain(domain);
  const Index *index = d.empty() ? &onnx : d == "pipec" ? &grad : nullptr;
  if (!index)
    return nullptr;
  auto it = index->find(opType);
  return it == index->end() ? nullptr : it->second;
}

} // namespace

Status ShapeContext::error(const std::string &message) const {
  return errorf("node '", node_.name(), "' (", node_.domain().empty() ? "" : node_.domain() + ":",
                node_.opType(), ", opset ", opset_, "): ", message);
}

bool hasShapeRule(std::string_view domain, std::string_view opType) {
  return findRule(domain, opType) != nullptr;
}

std::vector<std::string> shapeRuleOps() {
  std::vector<std::string> r;
  for (const RuleEntry &e : kRules)
    r.push_back(e.opType);
  for (const RuleEntry &e : kGradRules)
    r.push_back(std::string("pipec:") + e.opType);
  return r;
}

Status inferNodeTypes(const Node &n, int64_t opset, std::vector<TensorDesc> &outputs) {
  ShapeContext ctx(n, opset);
  ShapeRule rule = findRule(n.domain(), n.opType());
  if (!rule)
    return ctx.error("no shape rule for this op");
  if (const OpInfo *info = n.info()) {
    auto count = static_cast<int>(n.numInputs());
    if (count < info->minInputs || (info->maxInputs >= 0 && count > info->maxInputs))
      return ctx.error(cat("has ", count, " inputs, expected ", info->minInputs,
                           info->maxInputs < 0 ? " or more" : cat(" to ", info->maxInputs)));
    auto outs = static_cast<int>(n.numOutputs());
    if (outs < info->minOutputs || (info->maxOutputs >= 0 && outs > info->maxOutputs))
      return ctx.error(cat("has ", outs, " outputs, expected ", info->minOutputs,
                           info->maxOutputs < 0 ? " or more" : cat(" to ", info->maxOutputs)));
    for (int i = 0; i < info->minInputs && i < count; ++i)
      if (!n.input(i))
        return ctx.error(cat("required input ", i, " is missing"));
  }
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (n.input(i) && !n.input(i)->typeKnown())
      return ctx.error(cat(inputLabel(ctx, i), " has no type yet"));
  outputs.assign(n.numOutputs(), TensorDesc{});
  PIPEC_TRY(rule(ctx, outputs));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (auto n = validShape(outputs[i].shape, cat("output ", i)); !n)
      return ctx.error(n.status().message());
  return Status::ok();
}

std::pair<int64_t, int64_t> shapeOpRange(int64_t rank, const AttrMap &attrs, int64_t opset) {
  if (opset < 15)
    return {0, rank};
  auto clampDim = [rank](int64_t d) {
    if (d < 0)
      d += rank;
    return std::clamp<int64_t>(d, 0, rank);
  };
  int64_t start = clampDim(attrInt(attrs, "start", 0));
  int64_t end = attrHas(attrs, "end") ? clampDim(attrInt(attrs, "end", rank)) : rank;
  return {start, std::max(start, end)};
}

Expected<Shape> broadcastShapes(const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right; a missing dimension counts as 1.
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1)
      out[i] = da;
    else if (da == 1)
      out[i] = db;
    else
      return errorf("shapes ", shapeStr(a), " and ", shapeStr(b),
                    " are not broadcastable (output dimension ", i, ": ", da, " vs ", db, ")");
  }
  return out;
}

Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return errorf("axis ", axis, " is out of range for rank ", rank,
                  rank > 0 ? cat(" (expected ", -rank, " to ", rank - 1, ")")
                           : std::string(" (a scalar has no axes)"));
  return axis < 0 ? axis + rank : axis;
}

} // namespace pipec::ir
