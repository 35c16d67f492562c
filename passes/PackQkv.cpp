//===- passes/PackQkv.cpp - Attention reads Q, K and V from their projection ===//
//
// Pass `pack-qkv` (the default pipelines run it: on inference graphs after
// the fusions, on training graphs after autodiff). A transformer's
// attention usually projects Q, K and V in one GEMM and splits its output
// in three; each part is then viewed as heads. fuse-attention absorbs the
// heads' transposes (heads_inner), but the Split still copies the
// projection, and in training the gradient's Concat copies dQ, dK and dV
// back together:
//
//   q, k, v = Split(X)                          X [n, s, 3 h d], last axis, equal parts
//   Q = Reshape(q) [n, s, h, d]; K, V alike
//   O[, P] = pipec:Attention(Q, K, V[, mask]) {heads_inner 1}
//   dQ, dK, dV = pipec:AttentionGrad(Q, K, V[, mask], dO[, P])      (training)
//   dX = Concat(Reshape(dQ), Reshape(dK), Reshape(dV)) [n, s, 3 h d], last axis
//
// becomes
//
//   O[, P] = pipec:Attention(X, X, X[, mask]) {heads_inner 1, packed_qkv 1, heads h}
//   dX = pipec:AttentionGrad(X, X, X[, mask], dO[, P]) {the same}
//
// The kernels read each head's rows of Q, K and V where they lie in X
// (3 h d apart; support/FusedOps.h, AttentionDims) and the gradient writes
// dQ, dK and dV into the thirds of dX. The products are the same calls on
// the same values with other leading dimensions, so the results are
// bitwise those of the unpacked nodes. The values the Split and Concat
// copied are gone: for a GPT-like block of d 256 over 1024 tokens, 3 MB
// written and read again in the forward and as much in the backward.
//
// Everything in between must be as above: each part read by its Reshape
// alone, Q, K and V by the Attention and its gradient alone (same
// operands, same attributes), each of dQ, dK, dV by one Reshape into the
// one Concat, in order, and none of it a graph output. Otherwise the graph
// is left as it is.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassManager.h"
#include "support/FusedOps.h"

#include <array>
#include <vector>

namespace pipec::passes {

namespace {

/// The node reading `v` alone (once), or null.
ir::Node *soleUser(const ir::Value *v) {
  return v && !v->isGraphOutput() && v->users().size() == 1 ? v->users()[0] : nullptr;
}

bool lastAxis(const ir::Node *n, int64_t rank) {
  const int64_t axis = attrInt(n->attrs(), "axis", 0);
  return axis == -1 || axis == rank - 1;
}

/// The Split and the three Reshapes Q, K and V come from, if Q, K and V
/// are the heads of the three equal parts of one tensor's last axis.
struct Unpacked {
  ir::Node *split = nullptr;
  std::array<ir::Node *, 3> heads{};
  int64_t h = 0;
};

bool unpacked(const ir::Node *attn, Unpacked &u) {
  for (size_t i = 0; i < 3; ++i) {
    ir::Value *x = attn->input(i);
    ir::Node *r = x ? x->producer() : nullptr;
    if (!r || !r->is("Reshape") || x->isGraphOutput())
      return false;
    ir::Value *part = r->input(0);
    ir::Node *sp = part ? part->producer() : nullptr;
    if (!sp || !sp->is("Split") || sp->numOutputs() != 3 || part->producerIndex() != static_cast<int>(i) ||
        (u.split && sp != u.split) || soleUser(part) != r)
      return false;
    u.split = sp;
    u.heads[i] = r;
  }
  const ir::Value *X = u.split->input(0);
  const Shape &q = attn->input(0)->shape(), &x = X->shape();
  if (x.size() != 3 || q.size() != 4 || !lastAxis(u.split, 3) || attn->input(1)->shape() != q ||
      attn->input(2)->shape() != q || q[0] != x[0] || q[1] != x[1] || 3 * q[2] * q[3] != x[2])
    return false;
  for (size_t i = 0; i < 3; ++i)
    if (u.split->output(i)->shape() != Shape{x[0], x[1], q[2] * q[3]})
      return false;
  u.h = q[2];
  return true;
}

/// The gradient of `attn` (same operands and attributes) when it and the
/// Attention are Q, K and V's only readers; `ok` false when Q, K or V has
/// another reader.
ir::Node *gradientOf(const ir::Node *attn, bool &ok) {
  ir::Node *grad = nullptr;
  ok = true;
  for (size_t i = 0; i < 3 && ok; ++i)
    for (ir::Node *u : attn->input(i)->users()) {
      if (u == attn)
        continue;
      const bool isGrad = u->domain() == "pipec" && u->opType() == "AttentionGrad" && u->attrs() == attn->attrs() &&
                          u->numOutputs() == 3;
      bool same = isGrad;
      for (size_t j = 0; j < 3 && same; ++j)
        same = u->input(j) == attn->input(j);
      if (!same || (grad && grad != u)) {
        ok = false;
        break;
      }
      grad = u;
    }
  // Each operand read once by each (a Q equal to K would be read twice).
  for (size_t i = 0; i < 3 && ok; ++i)
    ok = attn->input(i)->users().size() == (grad ? 2u : 1u);
  return ok ? grad : nullptr;
}

/// The Concat(Reshape(dQ), Reshape(dK), Reshape(dV)) of `grad`'s outputs
/// along the last axis, and the three Reshapes; null if it is not there.
ir::Node *concatOf(const ir::Node *grad, const Shape &x, std::array<ir::Node *, 3> &reshapes) {
  ir::Node *concat = nullptr;
  for (size_t i = 0; i < 3; ++i) {
    ir::Node *r = soleUser(grad->output(i));
    if (!r || !r->is("Reshape") || r->input(0) != grad->output(i))
      return nullptr;
    ir::Node *c = soleUser(r->output(0));
    if (!c || !c->is("Concat") || c->numInputs() != 3 || c->input(i) != r->output(0) ||
        (concat && c != concat) || r->output(0)->shape() != Shape{x[0], x[1], x[2] / 3})
      return nullptr;
    concat = c;
    reshapes[i] = r;
  }
  if (!lastAxis(concat, 3) || concat->output(0)->shape() != x || concat->output(0)->isGraphOutput())
    return nullptr;
  return concat;
}

class PackQkvPass final : public Pass {
public:
  std::string_view name() const override { return "pack-qkv"; }

  Expected<bool> run(ir::Graph &g) override {
    // The candidates first: a rewrite erases nodes later in the order
    // (the Split and Reshapes, the gradient, the Concat), never another
    // Attention.
    std::vector<ir::Node *> candidates;
    for (ir::Node *n : g.nodes())
      if (n->domain() == "pipec" && n->opType() == "Attention" && attrInt(n->attrs(), "heads_inner", 0) != 0 &&
          attrInt(n->attrs(), "packed_qkv", 0) == 0)
        candidates.push_back(n);
    bool changed = false;
    for (ir::Node *attn : candidates) {
      Unpacked u;
      if (!unpacked(attn, u))
        continue;
      bool ok = false;
      ir::Node *grad = gradientOf(attn, ok);
      if (!ok)
        continue;
      ir::Value *X = u.split->input(0);
      std::array<ir::Node *, 3> gradReshapes{};
      ir::Node *concat = grad ? concatOf(grad, X->shape(), gradReshapes) : nullptr;
      if (grad && !concat)
        continue;
      PIPEC_TRY(pack(g, attn, u, X, grad, concat, gradReshapes));
      changed = true;
    }
    return changed;
  }

private:
  static Status pack(ir::Graph &g, ir::Node *attn, const Unpacked &u, ir::Value *X, ir::Node *grad,
                     ir::Node *concat, const std::array<ir::Node *, 3> &gradReshapes) {
    AttrMap attrs = attn->attrs();
    attrs["packed_qkv"] = Attribute::ofInt(1);
    attrs["heads"] = Attribute::ofInt(u.h);
    // The packed nodes keep the names the backward's forwardOf refers to.
    if (grad) {
      const std::string name = grad->name(), dxName = concat->output(0)->name();
      std::vector<ir::Value *> inputs{X, X, X};
      for (size_t i = 3; i < grad->numInputs(); ++i)
        inputs.push_back(grad->input(i));
      PIPEC_TRY(g.renameNode(grad, g.uniqueNodeName(name + ".unpacked")));
      PIPEC_ASSIGN(ir::Node * packed, g.insertNode(grad, name, "AttentionGrad", "pipec", inputs,
                                                   {g.uniqueValueName(dxName + ".packed")}, attrs));
      packed->setPhase(grad->phase());
      packed->setForwardOf(grad->forwardOf());
      packed->output(0)->setType(X->type());
      g.replaceAllUsesWith(concat->output(0), packed->output(0));
      g.eraseNode(concat);
      for (ir::Node *r : gradReshapes)
        g.eraseNode(r);
      g.eraseNode(grad);
      PIPEC_TRY(g.renameValue(packed->output(0), dxName));
    }
    std::vector<ir::Value *> inputs{X, X, X};
    for (size_t i = 3; i < attn->numInputs(); ++i)
      inputs.push_back(attn->input(i));
    const std::string name = attn->name();
    PIPEC_TRY(g.renameNode(attn, g.uniqueNodeName(name + ".unpacked")));
    PIPEC_TRY(g.replaceNode(attn, name, "Attention", "pipec", inputs, std::move(attrs)).status());
    for (ir::Node *r : u.heads)
      g.eraseNode(r);
    g.eraseNode(u.split);
    return Status::ok();
  }
};

} // namespace

std::unique_ptr<Pass> createPackQkvPass() { return std::make_unique<PackQkvPass>(); }

} // namespace pipec::passes
