//===- passes/Fusion.cpp - Pattern fusions of exported subgraphs ----------===//
//
// Passes `fuse-layernorm` and `fuse-gelu`. torch.onnx.export before opset
// 17 (and many other exporters) writes LayerNorm and GELU as chains of
// elementwise and reduction nodes; each node is a kernel and a pass over
// memory, in the forward and again in the backward. These passes rewrite
// the chains into the one node ONNX has for each, which the runtime runs
// as one kernel (oneDNN's layer normalization; the exact GELU), with one
// gradient rule.
//
//   fuse-layernorm  mu = ReduceMean(x) over the last axis (keepdims),
//                   d = Sub(x, mu), var = ReduceMean(Pow(d, 2)) over the
//                   last axis, y = Div(d, Sqrt(Add(var, eps))), then
//                   optionally Mul(y, gamma) and Add(., beta) with
//                   constant vectors of the last axis' size
//                   -> LayerNormalization(x, gamma, beta, axis -1, eps)
//                   (gamma ones without the Mul)
//   fuse-gelu       Div(h, sqrt 2) (or Mul(h, 1/sqrt 2)), Erf, Add 1, and
//                   Mul by h and by 0.5 in either order
//                   -> Gelu(h) (approximate "none")
//
// Either operand order of Add and Mul matches. Only f32 chains whose inner
// values nothing else reads (and that are not graph outputs) are fused;
// the fused node takes the chain's last value's name. Requires: inferred
// types (run after infer-shapes). The results differ from the chain's by
// rounding (tests/lit/e2e/torch-style.test compares a fused opset-13
// export with numpy at 1e-4).
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"

#include <cmath>
#include <unordered_set>

namespace pipec::passes {

namespace {

/// The value of a one-element f32 constant.
bool scalarConst(const ir::Value *v, float &out) {
  if (!v || !v->isConstant() || v->constant().dtype() != DType::F32 || v->constant().numel() != 1)
    return false;
  out = v->constant().data<float>()[0];
  return true;
}

/// The one node reading `v`, if `v` is not a graph output.
ir::Node *onlyUser(const ir::Value *v) {
  if (!v || v->isGraphOutput() || v->users().size() != 1)
    return nullptr;
  return v->users()[0];
}

/// For a binary node reading `v`: its other input.
ir::Value *otherInput(const ir::Node *n, const ir::Value *v) {
  if (n->numInputs() != 2)
    return nullptr;
  return n->input(0) == v ? n->input(1) : n->input(1) == v ? n->input(0) : nullptr;
}

bool isF32(const ir::Value *v) { return v && v->typeKnown() && v->type().dtype == DType::F32; }

/// ReduceMean over the last axis of `in`, keeping it.
bool reducesLastAxis(const ir::Node *n, const ir::Value *in) {
  if (!n || !n->is("ReduceMean") || n->input(0) != in || !in->typeKnown())
    return false;
  if (attrInt(n->attrs(), "keepdims", 1) != 1)
    return false;
  std::vector<int64_t> axes = attrInts(n->attrs(), "axes", {});
  if (n->numInputs() > 1 && n->input(1)) { // opset 18: axes as an input
    if (!n->input(1)->isConstant() || n->input(1)->constant().dtype() != DType::I64)
      return false;
    const Tensor &t = n->input(1)->constant();
    axes.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  }
  const int64_t rank = static_cast<int64_t>(in->type().shape.size());
  return rank > 0 && axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

/// A constant f32 vector of `d` elements (LayerNormalization's Scale and
/// B have the normalized axis' shape).
bool vectorConst(const ir::Value *v, int64_t d) {
  return v && v->isConstant() && v->constant().dtype() == DType::F32 &&
         v->constant().shape() == Shape{d};
}

/// The name of a node made for `from`'s scope: "/ln_1/ReduceMean" ->
/// "/ln_1/LayerNormalization".
std::string scopedName(ir::Graph &g, const ir::Node *from, const std::string &op) {
  const std::string &n = from->name();
  const size_t slash = n.rfind('/');
  return g.uniqueNodeName(slash == std::string::npos ? op : n.substr(0, slash + 1) + op);
}

/// Nodes a pass erased (their pointers must not be read again).
using Erased = std::unordered_set<const ir::Node *>;

/// Replaces the chain ending in `last` (erased with `dead`, in order,
/// after `last`) by the node `op` of `inputs`: the new node takes the
/// chain's last value's name.
Status replaceChain(ir::Graph &g, ir::Node *last, const std::vector<ir::Node *> &dead,
                    const std::string &name, const std::string &op,
                    const std::vector<ir::Value *> &inputs, AttrMap attrs, Erased &erased) {
  erased.insert(last);
  erased.insert(dead.begin(), dead.end());
  ir::Value *out = last->output(0);
  const std::string outName = out->name();
  PIPEC_ASSIGN(ir::Node * n, g.insertNode(last, name, op, "", inputs,
                                         {g.uniqueValueName(outName + "/fused")}, std::move(attrs)));
  n->output(0)->setType(out->type());
  g.replaceAllUsesWith(out, n->output(0));
  g.eraseNode(last);
  for (ir::Node *d : dead)
    g.eraseNode(d);
  return g.renameValue(n->output(0), outName);
}

/// fuse-layernorm at the ReduceMean `mu`; false if the chain is not there.
Expected<bool> fuseLayerNorm(ir::Graph &g, ir::Node *mu, Erased &erased) {
  ir::Value *x = mu->input(0);
  if (!isF32(x) || !reducesLastAxis(mu, x))
    return false;
  const int64_t D = x->type().shape.back();
  ir::Node *sub = onlyUser(mu->output(0));
  if (!sub || !sub->is("Sub") || sub->input(0) != x || sub->input(1) != mu->output(0))
    return false;
  ir::Value *d = sub->output(0);
  if (d->isGraphOutput() || d->users().size() != 2)
    return false;
  ir::Node *pow = d->users()[0]->is("Pow") ? d->users()[0] : d->users()[1];
  ir::Node *div = pow == d->users()[0] ? d->users()[1] : d->users()[0];
  float two = 0, eps = 0;
  if (!pow->is("Pow") || pow->input(0) != d || !scalarConst(pow->input(1), two) || two != 2.0f)
    return false;
  ir::Node *var = onlyUser(pow->output(0));
  if (!reducesLastAxis(var, pow->output(0)))
    return false;
  ir::Node *add = onlyUser(var->output(0));
  if (!add || !add->is("Add") || !scalarConst(otherInput(add, var->output(0)), eps) || !(eps >= 0))
    return false;
  ir::Node *sqrt = onlyUser(add->output(0));
  if (!sqrt || !sqrt->is("Sqrt") || onlyUser(sqrt->output(0)) != div)
    return false;
  if (!div->is("Div") || div->input(0) != d || div->input(1) != sqrt->output(0))
    return false;
  // The affine part, when there is one.
  ir::Node *last = div, *mul = nullptr, *bias = nullptr;
  ir::Value *gamma = nullptr, *beta = nullptr;
  if (ir::Node *m = onlyUser(div->output(0)); m && m->is("Mul") &&
                                             vectorConst(otherInput(m, div->output(0)), D)) {
    mul = last = m;
    gamma = otherInput(m, div->output(0));
    if (ir::Node *b = onlyUser(m->output(0));
        b && b->is("Add") && vectorConst(otherInput(b, m->output(0)), D)) {
      bias = last = b;
      beta = otherInput(b, m->output(0));
    }
  }
  if (last->output(0)->type() != x->type())
    return false; // a broadcast the fused node would not do
  if (!gamma) {
    Tensor ones(DType::F32, {D});
    for (int64_t i = 0; i < D; ++i)
      ones.data<float>()[i] = 1.0f;
    PIPEC_ASSIGN(gamma, g.addConstant(g.uniqueValueName(mu->name() + "/ones"), ones));
  }
  std::vector<ir::Value *> inputs{x, gamma};
  if (beta)
    inputs.push_back(beta);
  AttrMap attrs;
  attrs["axis"] = Attribute::ofInt(-1);
  attrs["epsilon"] = Attribute::ofFloat(eps);
  std::vector<ir::Node *> dead;
  for (ir::Node *n : {bias, mul, div, sqrt, add, var, pow, sub, mu})
    if (n && n != last)
      dead.push_back(n);
  PIPEC_TRY(replaceChain(g, last, dead, scopedName(g, mu, "LayerNormalization"),
                         "LayerNormalization", inputs, std::move(attrs), erased));
  return true;
}

/// fuse-gelu at the Erf `erf`; false if the chain is not there.
Expected<bool> fuseGelu(ir::Graph &g, ir::Node *erf, Erased &erased) {
  // The scaled input: Div(h, sqrt 2) or Mul(h, 1/sqrt 2).
  ir::Node *scale = erf->input(0) ? erf->input(0)->producer() : nullptr;
  if (!scale || onlyUser(scale->output(0)) != erf || scale->numInputs() != 2)
    return false;
  float c = 0;
  const bool byDiv = scale->is("Div") && scalarConst(scale->input(1), c) &&
                     std::abs(c - 1.41421356f) < 1e-5f;
  const int constAt = scalarConst(scale->input(1), c) ? 1 : scalarConst(scale->input(0), c) ? 0 : -1;
  const bool byMul = scale->is("Mul") && constAt >= 0 && std::abs(c - 0.70710678f) < 1e-6f;
  if (!byDiv && !byMul)
    return false;
  ir::Value *h = byDiv ? scale->input(0) : scale->input(1 - constAt);
  if (!isF32(h))
    return false;
  float one = 0, half = 0;
  ir::Node *add = onlyUser(erf->output(0));
  if (!add || !add->is("Add") || !scalarConst(otherInput(add, erf->output(0)), one) || one != 1.0f)
    return false;
  ir::Value *p = add->output(0);
  ir::Node *m1 = onlyUser(p);
  if (!m1 || !m1->is("Mul"))
    return false;
  ir::Value *q = otherInput(m1, p);
  ir::Node *last = nullptr, *halfNode = nullptr;
  if (q == h) {
    // (h * (1 + erf)) * 0.5
    last = onlyUser(m1->output(0));
    if (!last || !last->is("Mul") || !scalarConst(otherInput(last, m1->output(0)), half))
      return false;
  } else if (q && q->producer() && q->producer()->is("Mul") && onlyUser(q) == m1 &&
             otherInput(q->producer(), h) && scalarConst(otherInput(q->producer(), h), half)) {
    // (h * 0.5) * (1 + erf)
    last = m1;
    halfNode = q->producer();
  } else {
    return false;
  }
  if (half != 0.5f || last->output(0)->type() != h->type())
    return false;
  AttrMap attrs;
  attrs["approximate"] = Attribute::ofString("none");
  std::vector<ir::Node *> dead;
  for (ir::Node *n : {halfNode, last == m1 ? nullptr : m1, add, erf, scale})
    if (n)
      dead.push_back(n);
  PIPEC_TRY(replaceChain(g, last, dead, scopedName(g, erf, "Gelu"), "Gelu", {h}, std::move(attrs),
                         erased));
  return true;
}

/// A pattern fusion: tries `fuse` at every node of op `anchor`, in graph
/// order, skipping nodes an earlier rewrite erased.
class PatternFusion final : public Pass {
public:
  using Fuse = Expected<bool> (*)(ir::Graph &, ir::Node *, Erased &);
  PatternFusion(std::string_view flag, const char *anchor, Fuse fuse)
      : flag_(flag), anchor_(anchor), fuse_(fuse) {}
  std::string_view name() const override { return flag_; }
  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    Erased erased;
    for (ir::Node *n : g.nodes())
      if (!erased.count(n) && n->is(anchor_)) {
        PIPEC_ASSIGN(bool fused, fuse_(g, n, erased));
        changed = changed || fused;
      }
    return changed;
  }

private:
  std::string_view flag_;
  const char *anchor_;
  Fuse fuse_;
};

} // namespace

std::unique_ptr<Pass> createFuseLayerNormPass() {
  return std::make_unique<PatternFusion>("fuse-layernorm", "ReduceMean", &fuseLayerNorm);
}
std::unique_ptr<Pass> createFuseGeluPass() {
  return std::make_unique<PatternFusion>("fuse-gelu", "Erf", &fuseGelu);
}

} // namespace pipec::passes
