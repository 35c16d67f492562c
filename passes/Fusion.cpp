//===- passes/Fusion.cpp - Pattern fusions of exported subgraphs ----------===//
//
// Passes `fuse-layernorm`, `fuse-gelu`, `fuse-masked-softmax`,
// `fuse-attention` and `fuse-gemm-epilogue` (`fuse-elementwise` is
// passes/FuseElementwise.cpp). One file for the pattern fusions, over 700
// lines: they share their matchers (constants, single readers, the chain
// replacement) and each pattern is a short section.
// torch.onnx.export before opset
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
//                   -> Gelu(h) (approximate "none");
//                   Tanh(sqrt(2/pi) * (h + 0.044715 * h^3)), h^3 as Pow(h, 3)
//                   or h * (h * h), then Add 1 and the same products
//                   -> Gelu(h) (approximate "tanh"; torch's
//                   gelu(approximate='tanh') and GPT-2's written-out form)
//   fuse-attention  MatMul(Q, KT) -> MaskedSoftmax (or Softmax over the last
//                   axis of the scores scaled by a constant (Mul or Div),
//                   plus an f32 mask that is a constant or a graph input)
//                   -> MatMul(P, V), with Q [..., s, d], KT [..., d, t] and
//                   V [..., t, dv] of one batch, every inner value read once
//                   -> pipec:Attention(Q, KT, V[, mask]) {scale, mask "none",
//                   "add" or "bool", fill, fill_when}: the scores live in a
//                   per-thread buffer, never in the arena; its gradient is
//                   one pipec:AttentionGrad that recomputes them
//                   (runtime/cpu/kernels/Attention.cpp; or reads the
//                   probabilities the forward kept: keep-attention-probs,
//                   passes/AttentionProbs.cpp). The heads'
//                   transposes around it (Q, V [n, t, h, d] -> [n, h, t, d],
//                   K -> [n, h, d, t], O back to [n, s, h, dv]), all four
//                   read by it alone, are absorbed (heads_inner 1). Runs
//                   after fuse-masked-softmax, before autodiff.
//   fuse-gemm-epilogue
//                   Gemm(A, B[, c]) (alpha 1; c a bias [N] at beta 1) or
//                   MatMul(A, B) with B 2-D, then Add of a bias [N] (either
//                   order; not after a Gemm with c), then Relu or Gelu
//                   (approximate "none" or "tanh"), at least one of them
//                   -> pipec:FusedGemm(A, B[, bias]) {transA, transB,
//                   activation "Relu", "Gelu" or "GeluTanh"}: the bias and
//                   activation run in the GEMM's epilogue (oneDNN post-ops,
//                   runtime/cpu/kernels/FusedGemm.cpp), Y written once. Like
//                   fuse-elementwise it runs late: on training graphs after
//                   autodiff, where a Relu joins (its gradient reads its
//                   output) but a Gelu does not (GeluGrad reads its input,
//                   the product, which then has two readers); the nodes
//                   absorbed are of one phase and forward node.
//   fuse-elementwise
//                   a tree of f32 elementwise nodes (Add, Sub, Mul, Div, Neg,
//                   Abs, Relu, Sqrt, pipec:ReluGrad) of one phase whose
//                   inner values have one reader each and the root's shape
//                   -> pipec:FusedElementwise(inputs) {program}: one loop,
//                   generated with LLVM when the plan is loaded
//                   (runtime/cpu/ElementwiseJit.h), bitwise the unfused
//                   values (every op is one IEEE operation, no contraction).
//                   Inputs must broadcast the way the loop reads them
//                   (support/ElementwiseProgram.h: ewLoopLayout). It runs
//                   after the other passes: on inference graphs after the
//                   default pipeline, on training graphs after autodiff
//                   (forward and backward alike; the training results'
//                   values are never fused away), so the partitioner places
//                   each fused node as one unit.
//   fuse-masked-softmax
//                   Softmax over the last axis of Where(cond, fill, s) (or
//                   Where(cond, s, fill)) with a constant fill of -1e30 or
//                   below (-inf: torch's masked_fill), s optionally
//                   Mul(scores, c) or Div(scores, c) for a constant c
//                   -> pipec:MaskedSoftmax(scores, cond) {scale, fill,
//                   fill_when}: one pass instead of three (the attention
//                   scores' scale, mask and softmax); its gradient is
//                   scale * SoftmaxGrad (passes/autodiff/Norm.cpp)
//
// Either operand order of Add and Mul matches. Only f32 chains whose inner
// values nothing else reads (and that are not graph outputs) are fused;
// the fused node takes the chain's last value's name. Requires: inferred
// types (run after infer-shapes). The results differ from the chain's by
// rounding (tests/lit/e2e/torch-style.test compares a fused opset-13
// export with numpy at 1e-4).
//
//===----------------------------------------------------------------------===//
#include "passes/FusionUtil.h"
#include "passes/Pass.h"
#include "passes/TrainingPasses.h"
#include "support/ElementwiseProgram.h"

#include <cmath>
#include <functional>
#include <unordered_map>
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

/// GELU's common tail from the Erf or Tanh node `inner` of input h:
/// Add(inner, 1), then Mul by h and by 0.5 in either order. Returns the
/// chain's last node (its nodes after `inner` go to `dead`, the last one
/// excepted), or null.
ir::Node *geluTail(ir::Node *inner, ir::Value *h, std::vector<ir::Node *> &dead) {
  float one = 0, half = 0;
  ir::Node *add = onlyUser(inner->output(0));
  if (!add || !add->is("Add") || !scalarConst(otherInput(add, inner->output(0)), one) || one != 1.0f)
    return nullptr;
  ir::Value *p = add->output(0);
  ir::Node *m1 = onlyUser(p);
  if (!m1 || !m1->is("Mul"))
    return nullptr;
  ir::Value *q = otherInput(m1, p);
  ir::Node *last = nullptr, *halfNode = nullptr;
  if (q == h) {
    // (h * (1 + inner)) * 0.5
    last = onlyUser(m1->output(0));
    if (!last || !last->is("Mul") || !scalarConst(otherInput(last, m1->output(0)), half))
      return nullptr;
  } else if (q && q->producer() && q->producer()->is("Mul") && onlyUser(q) == m1 &&
             otherInput(q->producer(), h) && scalarConst(otherInput(q->producer(), h), half)) {
    // (h * 0.5) * (1 + inner)
    last = m1;
    halfNode = q->producer();
  } else {
    return nullptr;
  }
  if (half != 0.5f || last->output(0)->type() != h->type())
    return nullptr;
  for (ir::Node *n : {halfNode, last == m1 ? nullptr : m1, add})
    if (n)
      dead.push_back(n);
  return last;
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
  std::vector<ir::Node *> dead;
  ir::Node *last = geluTail(erf, h, dead);
  if (!last)
    return false;
  dead.insert(dead.end(), {erf, scale});
  AttrMap attrs;
  attrs["approximate"] = Attribute::ofString("none");
  PIPEC_TRY(replaceChain(g, last, dead, scopedName(g, erf, "Gelu"), "Gelu", {h}, std::move(attrs),
                         erased));
  return true;
}

/// x * c or c * x for a constant c close to `want`: x, else null.
ir::Value *timesConst(const ir::Node *n, float want, float tol) {
  if (!n || !n->is("Mul") || n->numInputs() != 2)
    return nullptr;
  float c = 0;
  for (int k = 0; k < 2; ++k)
    if (scalarConst(n->input(k), c) && std::abs(c - want) <= tol)
      return n->input(1 - k);
  return nullptr;
}

/// fuse-gelu's tanh form at the Tanh `tanh`; false if the chain is not there.
Expected<bool> fuseGeluTanh(ir::Graph &g, ir::Node *tanh, Erased &erased) {
  // u = sqrt(2/pi) * v, v = h + 0.044715 * h^3.
  ir::Node *outer = tanh->input(0) ? tanh->input(0)->producer() : nullptr;
  if (!outer || onlyUser(outer->output(0)) != tanh)
    return false;
  ir::Value *v = timesConst(outer, 0.7978845608f, 1e-6f);
  ir::Node *sum = v ? v->producer() : nullptr;
  if (!sum || !sum->is("Add") || onlyUser(v) != outer || sum->numInputs() != 2)
    return false;
  for (int k = 0; k < 2; ++k) {
    ir::Value *h = sum->input(k), *w = sum->input(1 - k);
    ir::Node *coef = w ? w->producer() : nullptr;
    if (!isF32(h) || !coef || onlyUser(w) != sum)
      continue;
    ir::Value *cube = timesConst(coef, 0.044715f, 1e-7f);
    ir::Node *c3 = cube ? cube->producer() : nullptr;
    if (!c3 || onlyUser(cube) != coef)
      continue;
    std::vector<ir::Node *> cubeNodes{c3};
    float three = 0;
    if (c3->is("Pow")) {
      if (c3->input(0) != h || !scalarConst(c3->input(1), three) || three != 3.0f)
        continue;
    } else if (c3->is("Mul") && c3->numInputs() == 2) {
      // h * (h * h), either order.
      ir::Value *sq = otherInput(c3, h);
      ir::Node *s2 = sq ? sq->producer() : nullptr;
      if (!s2 || !s2->is("Mul") || s2->input(0) != h || s2->input(1) != h || onlyUser(sq) != c3)
        continue;
      cubeNodes.push_back(s2);
    } else {
      continue;
    }
    std::vector<ir::Node *> dead;
    ir::Node *last = geluTail(tanh, h, dead);
    if (!last)
      return false;
    dead.insert(dead.end(), {tanh, outer, sum, coef});
    dead.insert(dead.end(), cubeNodes.begin(), cubeNodes.end());
    AttrMap attrs;
    attrs["approximate"] = Attribute::ofString("tanh");
    PIPEC_TRY(replaceChain(g, last, dead, scopedName(g, tanh, "Gelu"), "Gelu", {h}, std::move(attrs),
                           erased));
    return true;
  }
  return false;
}

/// fuse-masked-softmax at the Softmax `sm`; false if the chain is not there.
Expected<bool> fuseMaskedSoftmax(ir::Graph &g, ir::Node *sm, Erased &erased) {
  ir::Value *v = sm->input(0);
  ir::Node *where = v ? v->producer() : nullptr;
  if (!isF32(v) || !where || !where->is("Where") || onlyUser(v) != sm)
    return false;
  // Over the last axis (before opset 13, Softmax coerces to 2-D at its
  // axis, default 1: the same when that is the last axis).
  const int64_t rank = static_cast<int64_t>(v->type().shape.size());
  int64_t axis = attrInt(sm->attrs(), "axis", g.opset("") < 13 ? 1 : -1);
  if (axis < 0)
    axis += rank;
  if (rank < 1 || axis != rank - 1)
    return false;
  ir::Value *cond = where->input(0);
  float fill = 0;
  int scoresAt = -1;
  if (scalarConst(where->input(1), fill))
    scoresAt = 2;
  else if (scalarConst(where->input(2), fill))
    scoresAt = 1;
  if (scoresAt < 0 || !(fill <= -1e30f) || !cond || !cond->typeKnown() ||
      cond->type().dtype != DType::Bool)
    return false;
  ir::Value *s = where->input(scoresAt);
  if (!isF32(s) || s->type() != v->type())
    return false; // the scores must not broadcast
  // The scale, when the scores are Mul(x, c) or Div(x, c) read by the Where alone.
  float scale = 1.0f;
  ir::Node *scaler = s->producer();
  ir::Value *x = s;
  if (scaler && onlyUser(s) == where) {
    float c = 0;
    if (scaler->is("Div") && scalarConst(scaler->input(1), c) && c != 0.0f && isF32(scaler->input(0)) &&
        scaler->input(0)->type() == s->type()) {
      x = scaler->input(0);
      scale = 1.0f / c;
    } else if (scaler->is("Mul") && scaler->numInputs() == 2) {
      for (int k = 0; k < 2 && x == s; ++k)
        if (scalarConst(scaler->input(k), c) && isF32(scaler->input(1 - k)) &&
            scaler->input(1 - k)->type() == s->type()) {
          x = scaler->input(1 - k);
          scale = c;
        }
    }
  }
  if (x == s)
    scaler = nullptr;
  AttrMap attrs;
  attrs["scale"] = Attribute::ofFloat(scale);
  attrs["fill"] = Attribute::ofFloat(fill);
  attrs["fill_when"] = Attribute::ofInt(scoresAt == 2 ? 1 : 0);
  std::vector<ir::Node *> dead{where};
  if (scaler)
    dead.push_back(scaler);
  ir::Value *out = sm->output(0);
  erased.insert(sm);
  erased.insert(dead.begin(), dead.end());
  const std::string outName = out->name();
  PIPEC_ASSIGN(ir::Node * n, g.insertNode(sm, scopedName(g, sm, "MaskedSoftmax"), "MaskedSoftmax", "pipec",
                                         {x, cond}, {g.uniqueValueName(outName + "/fused")}, std::move(attrs)));
  n->output(0)->setType(out->type());
  g.replaceAllUsesWith(out, n->output(0));
  g.eraseNode(sm);
  for (ir::Node *d : dead)
    g.eraseNode(d);
  PIPEC_TRY(g.renameValue(n->output(0), outName));
  return true;
}

/// The scaled scores `v` read by `reader`: `v` itself when a MatMul makes
/// it (scale 1), or Mul(s, c) / Div(s, c) of such an s by a constant;
/// the scaling node, if any, goes to `dead`. Null if `v` is neither.
ir::Node *scoresProduct(ir::Value *v, ir::Node *reader, float &scale, std::vector<ir::Node *> &dead) {
  ir::Node *p = v ? v->producer() : nullptr;
  if (!p || onlyUser(v) != reader)
    return nullptr;
  if (p->is("MatMul")) {
    scale = 1.0f;
    return p;
  }
  float c = 0;
  ir::Value *s = nullptr;
  if (p->is("Div") && scalarConst(p->input(1), c) && c != 0.0f) {
    s = p->input(0);
    c = 1.0f / c;
  } else if (p->is("Mul") && p->numInputs() == 2) {
    for (int k = 0; k < 2 && !s; ++k)
      if (scalarConst(p->input(k), c))
        s = p->input(1 - k);
  }
  ir::Node *mm = s ? s->producer() : nullptr;
  if (!mm || !mm->is("MatMul") || onlyUser(s) != p || s->type() != v->type())
    return nullptr;
  scale = c;
  dead.push_back(p);
  return mm;
}

/// Whether `m` may be an additive attention mask of `scores`: f32, no
/// gradient wanted (a constant or a graph input), broadcasting to them.
bool additiveMask(const ir::Value *m, const ir::Value *scores) {
  if (!isF32(m) || m->isTrainable() || (!m->isConstant() && !m->isGraphInput()))
    return false;
  const Shape &ms = m->type().shape, &ss = scores->type().shape;
  if (ms.size() > ss.size())
    return false;
  for (size_t a = 0; a < ms.size(); ++a)
    if (ms[a] != 1 && ms[a] != ss[a + ss.size() - ms.size()])
      return false;
  return true;
}

/// fuse-attention at the MatMul `pv` (P times V); false if the chain is
/// not there.
Expected<bool> fuseAttention(ir::Graph &g, ir::Node *pv, Erased &erased) {
  if (pv->numInputs() != 2)
    return false;
  ir::Value *p = pv->input(0), *v = pv->input(1);
  ir::Node *sm = p ? p->producer() : nullptr;
  if (!sm || onlyUser(p) != pv || !isF32(p) || !isF32(v))
    return false;
  std::vector<ir::Node *> dead{sm};
  AttrMap attrs;
  ir::Node *qk = nullptr;
  ir::Value *mask = nullptr;
  float scale = 1.0f;
  if (sm->domain() == "pipec" && sm->opType() == "MaskedSoftmax") {
    qk = sm->input(0) ? sm->input(0)->producer() : nullptr;
    if (!qk || !qk->is("MatMul") || onlyUser(sm->input(0)) != sm)
      return false;
    mask = sm->input(1);
    scale = attrFloat(sm->attrs(), "scale", 1.0f);
    attrs["mask"] = Attribute::ofString("bool");
    attrs["fill"] = Attribute::ofFloat(attrFloat(sm->attrs(), "fill", -INFINITY));
    attrs["fill_when"] = Attribute::ofInt(attrInt(sm->attrs(), "fill_when", 1));
  } else if (sm->is("Softmax")) {
    ir::Value *x = sm->input(0);
    const int64_t rank = x && x->typeKnown() ? static_cast<int64_t>(x->type().shape.size()) : 0;
    int64_t axis = attrInt(sm->attrs(), "axis", g.opset("") < 13 ? 1 : -1);
    if (axis < 0)
      axis += rank;
    if (rank < 2 || axis != rank - 1)
      return false;
    qk = scoresProduct(x, sm, scale, dead);
    ir::Node *add = x->producer();
    if (!qk && add && add->is("Add") && add->numInputs() == 2 && onlyUser(x) == sm) {
      // Add(scaled scores, mask), either order.
      for (int k = 0; k < 2 && !qk; ++k) {
        std::vector<ir::Node *> d2;
        float c = 1.0f;
        ir::Node *mm = scoresProduct(add->input(k), add, c, d2);
        if (mm && add->input(k)->type() == x->type() && additiveMask(add->input(1 - k), x)) {
          qk = mm;
          scale = c;
          mask = add->input(1 - k);
          dead.push_back(add);
          dead.insert(dead.end(), d2.begin(), d2.end());
        }
      }
    }
    if (!qk)
      return false;
    attrs["mask"] = Attribute::ofString(mask ? "add" : "none");
  } else {
    return false;
  }
  // Q [..., s, d], KT [..., d, t], V [..., t, dv], one batch.
  ir::Value *q = qk->input(0), *kT = qk->input(1);
  if (!isF32(q) || !isF32(kT) || qk->numInputs() != 2)
    return false;
  const Shape &qs = q->type().shape, &ks = kT->type().shape, &vs = v->type().shape;
  const size_t r = qs.size();
  if (r < 2 || ks.size() != r || vs.size() != r || !std::equal(qs.begin(), qs.end() - 2, ks.begin()) ||
      !std::equal(qs.begin(), qs.end() - 2, vs.begin()) || ks[r - 2] != qs[r - 1] || vs[r - 2] != ks[r - 1])
    return false;
  attrs["scale"] = Attribute::ofFloat(scale);
  dead.push_back(qk);
  // The heads' transposes around it, when all four are there and read by
  // it alone: Q, K and V [n, t, h, d] made [n, h, t, d] (K [n, h, d, t]),
  // and O made [n, s, h, dv] again; the kernel then reads and writes each
  // head in place (heads_inner).
  auto transposeOf = [](ir::Value *x, const ir::Node *reader, const std::vector<int64_t> &perm) -> ir::Node * {
    ir::Node *t = x->producer();
    if (!t || !t->is("Transpose") || onlyUser(x) != reader || attrInts(t->attrs(), "perm", {}) != perm ||
        !isF32(t->input(0)))
      return nullptr;
    return t;
  };
  const std::vector<int64_t> swap12{0, 2, 1, 3}, toKT{0, 2, 3, 1};
  ir::Node *root = pv;
  if (r == 4) {
    ir::Node *tq = transposeOf(q, qk, swap12), *tk = transposeOf(kT, qk, toKT), *tv = transposeOf(v, pv, swap12);
    ir::Node *to = onlyUser(pv->output(0));
    if (tq && tk && tv && to && to->is("Transpose") && attrInts(to->attrs(), "perm", {}) == swap12 &&
        isF32(to->output(0))) {
      q = tq->input(0);
      kT = tk->input(0);
      v = tv->input(0);
      attrs["heads_inner"] = Attribute::ofInt(1);
      dead.insert(dead.begin(), pv); // the output's Transpose is the root now
      dead.insert(dead.end(), {tq, tk, tv});
      root = to;
    }
  }
  std::vector<ir::Value *> inputs{q, kT, v};
  if (mask)
    inputs.push_back(mask);
  erased.insert(root);
  erased.insert(dead.begin(), dead.end());
  PIPEC_TRY(g.replaceNode(root, scopedName(g, pv, "Attention"), "Attention", "pipec", inputs, std::move(attrs))
                .status());
  for (ir::Node *d : dead) // readers before producers
    g.eraseNode(d);
  return true;
}

/// A pattern fusion: tries `fuse` at every node of op `anchor`, in graph
/// order, skipping nodes an earlier rewrite erased.
class PatternFusion final : public Pass {
public:
  using Fuse = Expected<bool> (*)(ir::Graph &, ir::Node *, Erased &);
  /// Each rewrite tried at every node of its anchor op, in graph order.
  PatternFusion(std::string_view flag, std::vector<std::pair<const char *, Fuse>> rewrites)
      : flag_(flag), rewrites_(std::move(rewrites)) {}
  std::string_view name() const override { return flag_; }
  Expected<bool> run(ir::Graph &g) override {
    bool changed = false;
    Erased erased;
    for (ir::Node *n : g.nodes())
      for (const auto &[anchor, fuse] : rewrites_)
        if (!erased.count(n) && n->is(anchor)) {
          PIPEC_ASSIGN(bool fused, fuse(g, n, erased));
          changed = changed || fused;
        }
    return changed;
  }

private:
  std::string_view flag_;
  std::vector<std::pair<const char *, Fuse>> rewrites_;
};

/// fuse-gemm-epilogue (see the top of the file).
class GemmEpilogueFusion final : public Pass {
public:
  explicit GemmEpilogueFusion(const TrainingResults *protect) : protect_(protect) {}
  std::string_view name() const override { return "fuse-gemm-epilogue"; }

  Expected<bool> run(ir::Graph &g) override {
    const std::unordered_set<const ir::Value *> keep = protectedValues(protect_);
    std::unordered_map<std::string, std::string> renamed;
    bool changed = false;
    const std::vector<ir::Node *> order = g.nodes();
    Erased erased;
    for (ir::Node *n : order) {
      if (erased.count(n))
        continue;
      PIPEC_ASSIGN(bool fused, fuse(g, n, keep, renamed, erased));
      changed = changed || fused;
    }
    renameForwardOf(g, renamed);
    return changed;
  }

private:
  /// The node reading `v` alone, if it may join `n`'s fused node: of n's
  /// phase (and forward node), `v` not a result the plan returns.
  static ir::Node *joins(const ir::Node *n, const ir::Value *v,
                         const std::unordered_set<const ir::Value *> &keep) {
    ir::Node *u = onlyUser(v);
    if (!u || keep.count(v) || u->phase() != n->phase() || u->numOutputs() != 1 ||
        (n->phase() != ir::Phase::Forward && u->forwardOf() != n->forwardOf()) || !isF32(u->output(0)) ||
        u->output(0)->type() != v->type())
      return nullptr;
    return u;
  }

  static Expected<bool> fuse(ir::Graph &g, ir::Node *n, const std::unordered_set<const ir::Value *> &keep,
                             std::unordered_map<std::string, std::string> &renamed, Erased &erased) {
    const bool gemm = n->is("Gemm");
    if ((!gemm && !n->is("MatMul")) || n->numOutputs() != 1 || !isF32(n->output(0)) ||
        n->numInputs() < 2 || !isF32(n->input(0)) || !isF32(n->input(1)))
      return false;
    const Shape &a = n->input(0)->type().shape, &b = n->input(1)->type().shape;
    if (a.size() < 2 || b.size() != 2)
      return false;
    AttrMap attrs;
    ir::Value *bias = nullptr;
    const int64_t N = n->output(0)->type().shape.back();
    if (gemm) {
      if (attrFloat(n->attrs(), "alpha", 1.0f) != 1.0f)
        return false;
      attrs["transA"] = Attribute::ofInt(attrInt(n->attrs(), "transA", 0));
      attrs["transB"] = Attribute::ofInt(attrInt(n->attrs(), "transB", 0));
      if (n->numInputs() > 2 && n->input(2)) {
        // C must be a bias row, added once.
        if (!isF32(n->input(2)) || n->input(2)->type().shape != Shape{N} ||
            attrFloat(n->attrs(), "beta", 1.0f) != 1.0f)
          return false;
        bias = n->input(2);
      }
    }
    std::vector<ir::Node *> absorbed{n};
    ir::Value *cur = n->output(0);
    ir::Node *next = joins(n, cur, keep);
    if (!bias && next && next->is("Add") && next->numInputs() == 2) {
      ir::Value *other = otherInput(next, cur);
      if (other && other != cur && isF32(other) && other->type().shape == Shape{N}) {
        bias = other;
        absorbed.push_back(next);
        cur = next->output(0);
        next = joins(n, cur, keep);
      }
    }
    std::string act;
    if (next && next->numInputs() == 1 && next->is("Relu")) {
      act = "Relu";
    } else if (next && next->numInputs() == 1 && next->is("Gelu")) {
      const std::string approx = attrString(next->attrs(), "approximate", "none");
      act = approx == "tanh" ? "GeluTanh" : approx == "none" ? "Gelu" : "";
    }
    if (!act.empty()) {
      absorbed.push_back(next);
      attrs["activation"] = Attribute::ofString(act);
    }
    if (!bias && act.empty())
      return false;
    std::vector<ir::Value *> inputs{n->input(0), n->input(1)};
    if (bias)
      inputs.push_back(bias);
    ir::Node *root = absorbed.back();
    const std::string name = scopedName(g, n, "FusedGemm");
    // What the fused node keeps of n, read before replaceNode (which frees
    // the root: n itself when nothing joined it).
    const ir::Phase phase = n->phase();
    const std::string forwardOf = n->forwardOf();
    if (phase == ir::Phase::Forward)
      for (const ir::Node *x : absorbed)
        renamed[x->name()] = name;
    erased.insert(absorbed.begin(), absorbed.end());
    PIPEC_ASSIGN(ir::Node * fused, g.replaceNode(root, name, "FusedGemm", "pipec", inputs, std::move(attrs)));
    if (phase != ir::Phase::Forward)
      fused->setForwardOf(forwardOf);
    // The absorbed nodes before the root, readers before producers.
    for (auto it = absorbed.rbegin() + 1; it != absorbed.rend(); ++it)
      g.eraseNode(*it);
    return true;
  }

  const TrainingResults *protect_;
};

/// fuse-elementwise (see the top of the file).
} // namespace

std::unique_ptr<Pass> createFuseGemmEpiloguePass(const TrainingResults *protect) {
  return std::make_unique<GemmEpilogueFusion>(protect);
}
std::unique_ptr<Pass> createFuseGemmEpiloguePass() { return createFuseGemmEpiloguePass(nullptr); }

std::unique_ptr<Pass> createFuseLayerNormPass() {
  return std::make_unique<PatternFusion>("fuse-layernorm",
                                         std::vector<std::pair<const char *, PatternFusion::Fuse>>{
                                             {"ReduceMean", &fuseLayerNorm}});
}
std::unique_ptr<Pass> createFuseGeluPass() {
  return std::make_unique<PatternFusion>(
      "fuse-gelu", std::vector<std::pair<const char *, PatternFusion::Fuse>>{{"Erf", &fuseGelu},
                                                                             {"Tanh", &fuseGeluTanh}});
}
std::unique_ptr<Pass> createFuseAttentionPass() {
  return std::make_unique<PatternFusion>("fuse-attention",
                                         std::vector<std::pair<const char *, PatternFusion::Fuse>>{
                                             {"MatMul", &fuseAttention}});
}
std::unique_ptr<Pass> createFuseMaskedSoftmaxPass() {
  return std::make_unique<PatternFusion>("fuse-masked-softmax",
                                         std::vector<std::pair<const char *, PatternFusion::Fuse>>{
                                             {"Softmax", &fuseMaskedSoftmax}});
}

} // namespace pipec::passes
