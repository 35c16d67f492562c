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
// Sequence-first attention (torch.nn.MultiheadAttention's export, as in
// torchvision's ViT and batch-first transformer encoders; inference only):
// the block runs on the sequence-first view of its batch-first input and
// moves the heads to the front one by one,
//
//   P = FusedGemm|MatMul(Transpose(X) {perm 1 0 2}, W[, b])    X [n, s, E], P [s, n, 3 h d]
//   q, k, v = Slice(P) [0, D), [D, 2D), [2D, 3D) of the last axis      D = h d
//   Q = Div(Transpose(Reshape(q) [s, n h, d]) {perm 1 0 2}, c)          (or Mul; or none)
//   KT = Transpose(Reshape(k) [s, n h, d]) {perm 1 2 0}
//   V = Transpose(Reshape(v) [s, n h, d]) {perm 1 0 2}
//   O = pipec:Attention(Q, KT, V) {mask none}                         O [n h, s, d]
//   Y = Transpose(Reshape(G(Reshape(Transpose(O) {perm 1 0 2}) [s n, D])) [s, n, F]) {perm 1 0 2}
//
// with G a FusedGemm, Gemm or MatMul on that 2-D operand. Every row-wise
// product may as well run on the batch-first rows, so this becomes
//
//   P' = FusedGemm|MatMul(X, W[, b])                                  P' [n, s, 3 h d]
//   O' = pipec:Attention(P', P', P') {heads_inner 1, packed_qkv 1, heads h, scale scale / c}
//   Y = Reshape(G(Reshape(O') [n s, D])) [n, s, F]
//
// six Transposes, three Slices and the Div fewer a block. Each head reads
// the same values; the products' rows come in another order and the
// scale multiplies the scores instead of dividing Q, so the results differ
// from the unpacked graph's by rounding. Every value in between must be
// read by the next node alone and none be a graph output.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "passes/PassManager.h"
#include "support/FusedOps.h"

#include <algorithm>
#include <array>
#include <cmath>
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

/// `n` is a Transpose with permutation `perm`.
bool transposes(const ir::Node *n, const std::vector<int64_t> &perm) {
  return n && n->is("Transpose") && attrInts(n->attrs(), "perm", {}) == perm;
}

/// The producer of `v` if it is an `op` node and `user` is `v`'s only
/// reader.
ir::Node *producerFor(const ir::Value *v, const ir::Node *user, const char *op) {
  ir::Node *p = v ? v->producer() : nullptr;
  return p && p->is(op) && soleUser(v) == user ? p : nullptr;
}

/// The one element of a constant i64 tensor input, or `dflt` where the
/// input is absent; false if it is there and not such a constant.
bool constInt(const ir::Node *n, size_t i, int64_t dflt, int64_t &out) {
  if (i >= n->numInputs() || !n->input(i)) {
    out = dflt;
    return true;
  }
  const ir::Value *v = n->input(i);
  if (!v->isConstant() || v->constant().dtype() != DType::I64 || v->constant().numel() != 1)
    return false;
  out = v->constant().data<int64_t>()[0];
  return true;
}

/// A sequence-first attention block (the file comment's second form).
struct SequenceFirst {
  ir::Node *inProj = nullptr, *seqFirst = nullptr, *scaleNode = nullptr;
  std::array<ir::Node *, 3> slices{}, reshapes{}, transposes{};
  ir::Node *outTranspose = nullptr, *outReshape = nullptr, *outProj = nullptr, *outView = nullptr,
           *batchFirst = nullptr;
  int64_t n = 0, s = 0, h = 0, d = 0;
  double scale = 1;
};

/// Whether `slice` takes [lo, lo + width) of its input's last axis (rank 3).
bool slicesLastAxis(const ir::Node *slice, int64_t lo, int64_t width) {
  int64_t start = 0, end = 0, axis = 0, step = 0;
  if (!slice->is("Slice") || slice->numInputs() < 3 || !constInt(slice, 1, 0, start) ||
      !constInt(slice, 2, 0, end) || !constInt(slice, 3, -1, axis) || !constInt(slice, 4, 1, step))
    return false;
  const Shape &in = slice->input(0)->shape();
  return in.size() == 3 && (axis == -1 || axis == 2) && step == 1 && start == lo &&
         std::min(end, in[2]) == lo + width;
}

bool sequenceFirst(ir::Node *attn, SequenceFirst &f) {
  if (attn->numInputs() != 3 || attn->numOutputs() != 1 || attrString(attn->attrs(), "mask", "none") != "none")
    return false;
  const Shape &q = attn->input(0)->shape(), &kt = attn->input(1)->shape(), &o = attn->output(0)->shape();
  if (q.size() != 3 || kt.size() != 3 || attn->input(2)->shape() != q || o != q || kt != Shape{q[0], q[2], q[1]})
    return false;
  // Q, possibly scaled by a constant.
  ir::Value *qv = attn->input(0);
  f.scale = attrFloat(attn->attrs(), "scale", 1.0f);
  if (ir::Node *sc = qv->producer(); sc && (sc->is("Div") || sc->is("Mul")) && soleUser(qv) == attn) {
    const ir::Value *c = sc->input(1);
    if (!c || !c->isConstant() || c->constant().dtype() != DType::F32 || c->constant().numel() != 1)
      return false;
    const double cv = c->constant().data<float>()[0];
    if (!(cv != 0) || !std::isfinite(cv))
      return false;
    f.scale = sc->is("Div") ? f.scale / cv : f.scale * cv;
    f.scaleNode = sc;
    qv = sc->input(0);
  }
  const std::array<ir::Value *, 3> heads{qv, attn->input(1), attn->input(2)};
  const std::array<std::vector<int64_t>, 3> perms{std::vector<int64_t>{1, 0, 2}, {1, 2, 0}, {1, 0, 2}};
  ir::Value *P = nullptr;
  for (size_t i = 0; i < 3; ++i) {
    const ir::Node *reader = i == 0 && f.scaleNode ? f.scaleNode : attn;
    ir::Node *t = producerFor(heads[i], reader, "Transpose");
    if (!transposes(t, perms[i]))
      return false;
    ir::Node *r = producerFor(t->input(0), t, "Reshape");
    ir::Node *sl = r ? producerFor(r->input(0), r, "Slice") : nullptr;
    if (!sl || (P && sl->input(0) != P))
      return false;
    P = sl->input(0);
    f.transposes[i] = t;
    f.reshapes[i] = r;
    f.slices[i] = sl;
  }
  // P [s, n, 3 h d] read by the three Slices alone; heads [s, n h, d].
  const Shape &p = P->shape(), &hv = f.reshapes[0]->output(0)->shape();
  if (p.size() != 3 || hv.size() != 3 || P->isGraphOutput() || P->users().size() != 3 || hv[0] != p[0] ||
      p[1] == 0 || hv[1] % p[1] != 0 || 3 * (hv[1] / p[1]) * hv[2] != p[2] || q != Shape{hv[1], hv[0], hv[2]})
    return false;
  f.s = p[0];
  f.n = p[1];
  f.h = hv[1] / p[1];
  f.d = hv[2];
  const int64_t D = f.h * f.d;
  for (size_t i = 0; i < 3; ++i)
    if (f.reshapes[i]->output(0)->shape() != hv || !slicesLastAxis(f.slices[i], static_cast<int64_t>(i) * D, D))
      return false;
  // The projection, on the sequence-first view of X [n, s, E].
  f.inProj = P->producer();
  if (!f.inProj || f.inProj->numOutputs() != 1 || f.inProj->numInputs() < 2 || f.inProj->input(1)->shape().size() != 2 ||
      !((f.inProj->domain() == "pipec" && f.inProj->opType() == "FusedGemm" &&
         attrInt(f.inProj->attrs(), "transA", 0) == 0) ||
        f.inProj->is("MatMul")))
    return false;
  f.seqFirst = producerFor(f.inProj->input(0), f.inProj, "Transpose");
  if (!transposes(f.seqFirst, {1, 0, 2}) || f.seqFirst->input(0)->shape().size() != 3)
    return false;
  // The output: back to [s, n h, d], rows of D, the product G, its rows as
  // [s, n, F], batch first.
  f.outTranspose = soleUser(attn->output(0));
  if (!transposes(f.outTranspose, {1, 0, 2}))
    return false;
  f.outReshape = soleUser(f.outTranspose->output(0));
  if (!f.outReshape || !f.outReshape->is("Reshape") || f.outReshape->input(0) != f.outTranspose->output(0) ||
      f.outReshape->output(0)->shape() != Shape{f.s * f.n, D})
    return false;
  f.outProj = soleUser(f.outReshape->output(0));
  if (!f.outProj || f.outProj->numOutputs() != 1 || f.outProj->input(0) != f.outReshape->output(0) ||
      f.outProj->numInputs() < 2 ||
      !((f.outProj->domain() == "pipec" && f.outProj->opType() == "FusedGemm") || f.outProj->is("Gemm") ||
        f.outProj->is("MatMul")) ||
      attrInt(f.outProj->attrs(), "transA", 0) != 0)
    return false;
  const Shape &y = f.outProj->output(0)->shape();
  if (y.size() != 2 || y[0] != f.s * f.n)
    return false;
  f.outView = soleUser(f.outProj->output(0));
  if (!f.outView || !f.outView->is("Reshape") || f.outView->input(0) != f.outProj->output(0) ||
      f.outView->output(0)->shape() != Shape{f.s, f.n, y[1]})
    return false;
  f.batchFirst = soleUser(f.outView->output(0));
  return transposes(f.batchFirst, {1, 0, 2});
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
    std::vector<ir::Node *> headsOuter;
    for (ir::Node *n : g.nodes())
      if (n->domain() == "pipec" && n->opType() == "Attention" && attrInt(n->attrs(), "heads_inner", 0) == 0)
        headsOuter.push_back(n);
    bool changed = false;
    for (ir::Node *attn : headsOuter) {
      SequenceFirst f;
      if (!sequenceFirst(attn, f))
        continue;
      PIPEC_TRY(packSequenceFirst(g, attn, f));
      changed = true;
    }
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
  static Status packSequenceFirst(ir::Graph &g, ir::Node *attn, const SequenceFirst &f) {
    const int64_t D = f.h * f.d, F = f.outProj->output(0)->shape()[1];
    ir::Value *X = f.seqFirst->input(0);
    // Each new value has the dtype of the one it stands for.
    auto typed = [&](ir::Node *n, const ir::Node *was, Shape shape) {
      n->output(0)->setType(TensorDesc{was->output(0)->type().dtype, std::move(shape)});
    };
    auto rename = [&](ir::Node *n) { return g.renameNode(n, g.uniqueNodeName(n->name() + ".seqfirst")); };
    // The projection on X's rows: P' [n, s, 3D].
    ir::Node *proj = f.inProj;
    const std::string projName = proj->name();
    PIPEC_TRY(rename(proj));
    std::vector<ir::Value *> in(proj->inputs().begin(), proj->inputs().end());
    in[0] = X;
    PIPEC_ASSIGN(ir::Node * packedProj,
                 g.insertNode(proj, projName, proj->opType(), proj->domain(), in,
                              {g.uniqueValueName(proj->output(0)->name() + ".packed")}, proj->attrs()));
    packedProj->setPhase(proj->phase());
    typed(packedProj, proj, {f.n, f.s, 3 * D});
    // The attention on it: O' [n, s, h, d].
    AttrMap attrs = attn->attrs();
    attrs["heads_inner"] = Attribute::ofInt(1);
    attrs["packed_qkv"] = Attribute::ofInt(1);
    attrs["heads"] = Attribute::ofInt(f.h);
    attrs["scale"] = Attribute::ofFloat(static_cast<float>(f.scale));
    ir::Value *Pp = packedProj->output(0);
    const std::string attnName = attn->name();
    PIPEC_TRY(rename(attn));
    PIPEC_ASSIGN(ir::Node * packed, g.insertNode(f.outTranspose, attnName, "Attention", "pipec", {Pp, Pp, Pp},
                                                 {g.uniqueValueName(attn->output(0)->name() + ".packed")}, attrs));
    packed->setPhase(attn->phase());
    typed(packed, attn, {f.n, f.s, f.h, f.d});
    // Its rows [n s, D] into the output projection, back as [n, s, F]
    // (where the projection was: its other operands may be computed late).
    ir::Node *op = f.outProj;
    auto shapeConst = [&](const std::string &base, const Shape &shape) {
      return g.addConstant(g.uniqueValueName(base), Tensor::fromInts(shape));
    };
    PIPEC_ASSIGN(ir::Value * rowsShape, shapeConst(f.outReshape->name() + "/rows", {f.n * f.s, D}));
    PIPEC_ASSIGN(ir::Node * rows, g.insertNode(op, g.uniqueNodeName(f.outReshape->name() + ".packed"),
                                               "Reshape", "", {packed->output(0), rowsShape},
                                               {g.uniqueValueName(f.outReshape->output(0)->name() + ".packed")}));
    rows->setPhase(f.outReshape->phase());
    typed(rows, f.outReshape, {f.n * f.s, D});
    const std::string opName = op->name();
    PIPEC_TRY(rename(op));
    std::vector<ir::Value *> oin(op->inputs().begin(), op->inputs().end());
    oin[0] = rows->output(0);
    PIPEC_ASSIGN(ir::Node * outProj, g.insertNode(op, opName, op->opType(), op->domain(), oin,
                                                  {g.uniqueValueName(op->output(0)->name() + ".packed")},
                                                  op->attrs()));
    outProj->setPhase(op->phase());
    typed(outProj, op, {f.n * f.s, F});
    PIPEC_ASSIGN(ir::Value * viewShape, shapeConst(f.outView->name() + "/batch_first", {f.n, f.s, F}));
    ir::Value *Y = f.batchFirst->output(0);
    const std::string yName = Y->name();
    PIPEC_TRY(g.renameValue(Y, g.uniqueValueName(yName + ".seqfirst")));
    PIPEC_ASSIGN(ir::Node * view, g.insertNode(op, g.uniqueNodeName(f.outView->name() + ".packed"), "Reshape", "",
                                               {outProj->output(0), viewShape}, {yName}));
    view->setPhase(f.batchFirst->phase());
    view->output(0)->setType(Y->type());
    g.replaceAllUsesWith(Y, view->output(0));
    // The sequence-first nodes, each once its readers are gone.
    for (ir::Node *n : {f.batchFirst, f.outView, f.outProj, f.outReshape, f.outTranspose, attn})
      g.eraseNode(n);
    if (f.scaleNode)
      g.eraseNode(f.scaleNode);
    for (size_t i = 0; i < 3; ++i) {
      g.eraseNode(f.transposes[i]);
      g.eraseNode(f.reshapes[i]);
    }
    for (ir::Node *n : f.slices)
      g.eraseNode(n);
    g.eraseNode(proj);
    g.eraseNode(f.seqFirst);
    return Status::ok();
  }

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
