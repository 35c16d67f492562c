//===- passes/ShapeInference.cpp - Static types for every value -----------===//
//
// See ShapeInference.h. Folding records, for each node it keeps, why (an
// input that is not constant, no kernel, too large), so that an error about
// a shape that needs a value can explain the chain that left it unknown.
//
//===----------------------------------------------------------------------===//
#include "passes/ShapeInference.h"

#include "ir/shape/ShapeRules.h"
#include "passes/NodeEval.h"
#include "passes/expand/Expand.h"

#include <algorithm>
#include <unordered_map>

namespace pipec::passes {

namespace {

/// Ops of exported shape subgraphs: folded at any size when their outputs
/// are integers.
bool isShapeLikeOp(const ir::Node &n) {
  for (const char *op : {"Shape", "Size", "ConstantOfShape", "Range", "Gather", "Concat",
                         "Unsqueeze", "Squeeze", "Slice", "Cast", "Reshape"})
    if (n.is(op))
      return true;
  return false;
}

/// The value of a Constant node's attribute.
Tensor constantNodeValue(const ir::Node &n) {
  const auto &[name, a] = *n.attrs().begin();
  if (name == "value")
    return a.t;
  if (name == "value_float")
    return Tensor::scalarF32(a.f);
  if (name == "value_floats")
    return Tensor::fromFloats(a.floats, {static_cast<int64_t>(a.floats.size())});
  if (name == "value_ints")
    return Tensor::fromInts(a.ints);
  Tensor t(DType::I64, {});
  *t.data<int64_t>() = a.i;
  return t;
}

/// Why a node was kept; `blame` is the non-constant input, if that was it.
struct KeptReason {
  std::string text;
  const ir::Value *blame = nullptr;
};

class ShapeInference final : public Pass {
public:
  std::string_view name() const override { return "infer-shapes"; }

  Expected<bool> run(ir::Graph &g) override {
    kept_.clear();
    bool changed = false, folded = false;
    expand::ExpandState expansions;
    const expand::SameTypeChecks &checks = expansions.checks;
    for (ir::Node *n = g.firstNode(), *next = nullptr; n; n = next) {
      // pipec's own domains need no import; ONNX's rules depend on it.
      int64_t opset = g.opset(n->domain());
      if (opset == 0 && n->domain().empty())
        return errorf("node '", n->name(), "' (", n->opType(),
                      "): the graph imports no opset for domain 'ai.onnx'");
      opset = std::max<int64_t>(opset, 1);
      if (n->info()->has(ir::op::Expanded)) {
        // Its replacement goes where it was; go on from its first node.
        ir::Node *prev = g.prevNode(n);
        PIPEC_TRY(expand::expandNode(g, n, expansions));
        next = prev ? g.nextNode(prev) : g.firstNode();
        changed = true;
        continue;
      }
      next = g.nextNode(n);
      std::vector<TensorDesc> types;
      Status s = ir::inferNodeTypes(*n, opset, types);
      if (!s)
        return Status::error(s.message() + explainMissingValues(*n));
      if (auto c = checks.find(n); c != checks.end() && n->input(1)->type() != n->input(2)->type())
        return errorf(c->second, ": ", n->input(1)->type().str(), " and ", n->input(2)->type().str());
      for (size_t i = 0; i < types.size(); ++i) {
        ir::Value *out = n->output(i);
        if (!out->typeKnown() || out->type() != types[i]) {
          out->setType(types[i]);
          changed = true;
        }
      }
      if (fold(g, n, opset))
        changed = folded = true;
    }
    if (folded)
      g.removeDeadConstants();
    return changed;
  }

private:
  /// Folds `n` into constants if it can; otherwise records why not.
  bool fold(ir::Graph &g, ir::Node *n, int64_t opset) {
    if (n->is("Constant")) {
      replaceWithConstants(g, n, {constantNodeValue(*n)});
      return true;
    }
    // Shape and Size need only the input's type.
    if (n->is("Shape") || n->is("Size")) {
      const Shape &in = n->input(0)->shape();
      Tensor t;
      if (n->is("Size")) {
        t = Tensor(DType::I64, {});
        *t.data<int64_t>() = numElements(in);
      } else {
        auto [begin, end] = ir::shapeOpRange(static_cast<int64_t>(in.size()), n->attrs(), opset);
        t = Tensor::fromInts(Shape(in.begin() + begin, in.begin() + end));
      }
      replaceWithConstants(g, n, {t});
      return true;
    }
    for (const ir::Value *v : n->inputs()) {
      if (v && !v->isConstant())
        return keep(n, {cat("its input '", v->name(), "' is not a compile-time constant"), v});
      if (v && v->isTrainable())
        return keep(n, {cat("its input '", v->name(), "' is a trainable parameter")});
    }
    if (n->inputs().empty())
      return keep(n, {"it has no inputs"});
    if (n->is("Dropout"))
      return keep(n, {"Dropout is never folded"});
    int64_t elements = 0;
    bool allInts = true;
    for (const ir::Value *v : n->outputs()) {
      elements += v->type().numel();
      allInts = allInts && isInteger(v->type().dtype);
    }
    if (elements > kMaxFoldElements && !(allInts && isShapeLikeOp(*n)))
      return keep(n, {cat("its outputs have ", elements, " elements (the folding limit is ",
                          kMaxFoldElements, ")")});
    if (!cpu::hasKernel(n->domain(), n->opType()))
      return keep(n, {cat("pipec has no CPU kernel for ", n->opType(), " to evaluate it")});
    auto values = evaluateNode(*n, opset);
    if (!values)
      return keep(n, {cat("evaluating it failed: ", values.status().message())});
    replaceWithConstants(g, n, values.take());
    return true;
  }

  bool keep(const ir::Node *n, KeptReason r) {
    for (const ir::Value *v : n->outputs())
      kept_[v] = {cat("node '", n->name(), "' (", n->opType(), "), which was not folded: ", r.text),
                  r.blame};
    return false;
  }

  /// For a node whose rule failed, the chain of unfolded producers behind
  /// each value input that is not constant ("" if none).
  std::string explainMissingValues(const ir::Node &n) const {
    std::string out;
    const ir::OpInfo *info = n.info();
    for (size_t i = 0; info && i < n.numInputs() && i < 32; ++i) {
      const ir::Value *v = n.input(i);
      if (!v || v->isConstant() || !((info->shapeValueInputs >> i) & 1u))
        continue;
      for (int depth = 0; v && depth < 8; ++depth) {
        auto it = kept_.find(v);
        if (it == kept_.end()) {
          if (v->isGraphInput())
            out += cat("; '", v->name(), "' is a graph input (freeze it to a constant)");
          break;
        }
        out += cat("; '", v->name(), "' is computed by ", it->second.text);
        v = it->second.blame;
      }
    }
    return out;
  }

  std::unordered_map<const ir::Value *, KeptReason> kept_;
};

} // namespace

std::unique_ptr<Pass> createShapeInferencePass() { return std::make_unique<ShapeInference>(); }

Status inferShapes(ir::Graph &g) { return ShapeInference().run(g).status(); }

} // namespace pipec::passes
