//===- passes/Layout.cpp - Channels-last convolutions ---------------------===//
//
// Pass `channels-last`, on inference graphs (the default inference pipeline
// runs it before fuse-gemm-epilogue and fuse-elementwise). ONNX
// convolutions read and write NCHW; oneDNN's fast convolutions on AVX-512
// work on channels-last data, and reordering every activation into that
// layout and back around every convolution cost more than the convolution
// itself on MobileNetV2's depthwise layers (docs/passes.md has the
// figures). The pass:
//
//   1. rewrites each f32 2-D Conv into Transpose(perm 0,2,3,1) ->
//      pipec:NhwcConv -> Transpose(perm 0,3,1,2), the NCHW value keeping
//      its name (a graph output stays one);
//   2. walks the graph in order, moving transposes toward the outputs and
//      cancelling inverse pairs:
//        - Transpose(q) of Transpose(p) where q undoes p: the readers read
//          the first one's input;
//        - an elementwise node (unary, binary, variadic, Clip, PRelu, ...)
//          whose computed inputs are all Transpose(p) that nothing but
//          elementwise nodes read (each moves in its turn),
//          and whose other inputs are constants with one element or whose
//          non-unit axes Transpose(p) keeps in order (a per-channel
//          [C, 1, 1] scale), runs on the untransposed values with one
//          Transpose(p) after it;
//        - Concat and Split with an axis, and a constant-mode Pad (opset 11
//          on, constant pads): the same, the axis or pads mapped;
//        - GlobalAveragePool and GlobalMaxPool of Transpose(0,3,1,2):
//          ReduceMean or ReduceMax over the spatial axes 1, 2 of the NHWC
//          value, then the transpose;
//        - MaxPool (without Indices) and AveragePool of Transpose(0,3,1,2):
//          pipec:NhwcMaxPool and NhwcAveragePool, then the transpose;
//        - an inference BatchNormalization of Transpose(0,3,1,2) with
//          constant parameters (one fold-batchnorm could not fold: after a
//          Concat, say): x * s + t per channel on the NHWC value, a Mul
//          and an Add that move on like the others;
//        - two Transposes of one value with one perm: the later one's
//          readers read the earlier one;
//   3. folds the Relus, Clips with constant bounds and LeakyRelus that
//      alone read a pipec:NhwcConv into it (oneDNN's eltwise post-op; a
//      chain of clamps clamps to the intersection of its ranges);
//   4. turns a Transpose that keeps the order of its non-unit axes
//      ([N, 1, 1, C] -> [N, C, 1, 1]) into a Reshape, which the plan runs
//      as a view.
//
// Every rewrite keeps the values the graph computes; only the layout of
// the inner ones changes. What remains are transposes at the edges of the
// convolutional regions: the image going in, the features going out to a
// Reshape or Flatten of more than unit axes (ShuffleNet's channel
// shuffle), an Add of a convolution's output and a value computed in
// NCHW.
//
//===----------------------------------------------------------------------===//
#include "passes/Pass.h"
#include "support/FusedOps.h"

#include <cmath>
#include <limits>
#include <unordered_set>

namespace pipec::passes {

namespace {

using Perm = std::vector<int64_t>;
using Erased = std::unordered_set<const ir::Node *>;

bool isF32Rank4(const ir::Value *v) {
  return v && v->typeKnown() && v->dtype() == DType::F32 && v->shape().size() == 4;
}

/// The permutation of a Transpose node with an explicit 4-axis perm.
const Perm *permOf(const ir::Node *n) {
  if (!n || !n->is("Transpose") || n->numInputs() != 1 || n->numOutputs() != 1)
    return nullptr;
  auto it = n->attrs().find("perm");
  if (it == n->attrs().end() || it->second.ints.size() != 4)
    return nullptr;
  return &it->second.ints;
}

Perm inverse(const Perm &p) {
  Perm q(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    q[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return q;
}

bool isLayoutFree(const ir::Node *n);

/// Whether only `n` reads `v` (and `v` is not a graph output).
bool readOnlyBy(const ir::Value *v, const ir::Node *n) {
  if (v->isGraphOutput() || v->users().empty())
    return false;
  for (const ir::Node *u : v->users())
    if (u != n)
      return false;
  return true;
}

AttrMap permAttr(const Perm &p) { return {{"perm", Attribute::ofInts(p)}}; }

/// The node after `n` in the graph's order (null at the end).
ir::Node *nodeAfter(const ir::Graph &g, const ir::Node *n) {
  return g.nextNode(n);
}

/// Puts a Transpose(perm) node `name` right after `v`'s producer: it takes
/// over v's name, its readers and its graph-output role, and keeps v's
/// current type; v is renamed. The caller gives v its new type.
Status transposeAfter(ir::Graph &g, ir::Value *v, const Perm &perm, const std::string &name) {
  const std::string valueName = v->name();
  const TensorDesc type = v->type();
  PIPEC_TRY(g.renameValue(v, g.uniqueValueName(valueName + "/nhwc")));
  PIPEC_ASSIGN(ir::Node * t, g.insertNode(nodeAfter(g, v->producer()), g.uniqueNodeName(name),
                                          "Transpose", "", {v}, {valueName}, permAttr(perm)));
  ir::Value *out = t->output(0);
  out->setType(type);
  g.replaceAllUsesWith(v, out);
  t->setInput(0, v);
  return Status::ok();
}

/// Replaces node `n` by a node of `opType` with the same name and outputs.
Expected<ir::Node *> replaceKeepingName(ir::Graph &g, ir::Node *n, const std::string &opType,
                                        const std::string &domain, const std::vector<ir::Value *> &inputs,
                                        AttrMap attrs) {
  const std::string name = n->name();
  PIPEC_ASSIGN(ir::Node * r, g.replaceNode(n, g.uniqueNodeName(name + "/" + opType), opType, domain,
                                           inputs, std::move(attrs)));
  PIPEC_TRY(g.renameNode(r, name));
  return r;
}

/// Step 1: Conv -> Transpose, pipec:NhwcConv, Transpose.
Expected<bool> convertConvs(ir::Graph &g) {
  bool changed = false;
  for (ir::Node *n : g.nodes()) {
    if (!n->is("Conv") || n->numOutputs() != 1 || n->numInputs() < 2)
      continue;
    ir::Value *x = n->input(0), *w = n->input(1), *y = n->output(0);
    ir::Value *b = n->numInputs() > 2 ? n->input(2) : nullptr;
    if (!isF32Rank4(x) || !isF32Rank4(w) || !isF32Rank4(y) ||
        (b && (!b->typeKnown() || b->dtype() != DType::F32)))
      continue;
    PIPEC_ASSIGN(ir::Node * in, g.insertNode(n, g.uniqueNodeName(n->name() + "/to_nhwc"), "Transpose", "",
                                             {x}, {g.uniqueValueName(x->name() + "/nhwc")},
                                             permAttr(toNhwcPerm())));
    in->output(0)->setType({DType::F32, permuteShape(x->shape(), toNhwcPerm())});
    std::vector<ir::Value *> inputs = {in->output(0), w};
    if (b)
      inputs.push_back(b);
    const std::string name = n->name();
    PIPEC_TRY(replaceKeepingName(g, n, "NhwcConv", "pipec", inputs, AttrMap(n->attrs())).status());
    const TensorDesc nhwc{DType::F32, permuteShape(y->shape(), toNhwcPerm())};
    PIPEC_TRY(transposeAfter(g, y, toNchwPerm(), name + "/to_nchw"));
    y->setType(nhwc);
    changed = true;
  }
  return changed;
}

/// Ops that compute each output element from the elements at the same
/// index of their (broadcast) inputs, in any layout.
bool isLayoutFree(const ir::Node *n) {
  static const std::unordered_set<std::string> ops = {
      "Abs",  "Add",   "Ceil",    "Celu",       "Clip",      "Div",      "Elu",     "Erf",
      "Exp",  "Floor", "Gelu",    "HardSigmoid", "HardSwish", "LeakyRelu", "Log",     "Max",
      "Mean", "Min",   "Mish",    "Mul",        "Neg",       "Pow",      "PRelu",   "Reciprocal",
      "Relu", "Round", "Selu",    "Sigmoid",    "Sign",      "Softplus", "Softsign", "Sqrt",
      "Sub",  "Sum",   "Tanh",    "ThresholdedRelu"};
  return n->domain().empty() && ops.count(n->opType());
}

/// Whether step 2 moves Transpose(p) past `u` too, or cancels it there.
bool movesLater(const ir::Node *u, const Perm &p) {
  if (isLayoutFree(u) || u->is("Concat") || u->is("Split") || u->is("Pad"))
    return true;
  if (p == toNchwPerm() && (u->is("BatchNormalization") || u->is("MaxPool") || u->is("AveragePool") ||
                            u->is("GlobalAveragePool") || u->is("GlobalMaxPool")))
    return true;
  const Perm *q = permOf(u);
  return q && inverse(p) == *q;
}

/// A constant read by a node moved before Transpose(p): itself when it has
/// one element, or the same data under the shape that Transpose(p) maps to
/// its (broadcast, rank-4) shape when that keeps its non-unit axes in
/// order; null otherwise.
ir::Value *untransposedConstant(ir::Graph &g, ir::Value *c, const Perm &p) {
  const Tensor &t = c->constant();
  if (t.numel() == 1)
    return c;
  const Shape &s = t.shape();
  if (s.size() > 4)
    return nullptr;
  Shape s4(4 - s.size(), 1);
  s4.insert(s4.end(), s.begin(), s.end());
  // Axis i of the transposed value is axis p[i] before it.
  int64_t last = -1;
  for (size_t i = 0; i < 4; ++i)
    if (s4[i] != 1) {
      if (p[i] < last)
        return nullptr;
      last = p[i];
    }
  return g.makeConstantValue(c->name() + "/nhwc", t.clone().reshaped(permuteShape(s4, inverse(p))));
}

/// Erases the Transpose producing `v` when nothing reads `v` any more.
void eraseIfDead(ir::Graph &g, ir::Value *v, Erased &erased) {
  ir::Node *p = v->producer();
  if (p && v->users().empty() && !v->isGraphOutput()) {
    erased.insert(p);
    g.eraseNode(p);
  }
}

/// Step 2, an elementwise node (or Concat, Split with `axis`): see the top
/// of the file.
Expected<bool> sinkThrough(ir::Graph &g, ir::Node *n, Erased &erased) {
  const bool hasAxis = n->is("Concat") || n->is("Split");
  const bool pad = n->is("Pad");
  if (n->numOutputs() < 1 || (!hasAxis && n->numOutputs() != 1))
    return false;
  for (const ir::Value *o : n->outputs())
    if (!o->typeKnown() || o->shape().size() != 4)
      return false;
  const Perm *perm = nullptr;
  for (const ir::Value *v : n->inputs())
    if (const Perm *p = v ? permOf(v->producer()) : nullptr) {
      if (perm && *perm != *p)
        return false;
      perm = p;
    }
  if (!perm)
    return false;
  const Perm p = *perm; // the producers may be erased below
  // Each input: a Transpose(p) only n reads, moved; a constant, mapped
  // (elementwise) or kept (Split's sizes); nothing else.
  std::vector<ir::Value *> inputs(n->numInputs(), nullptr);
  std::vector<ir::Value *> moved;
  for (size_t i = 0; i < n->numInputs(); ++i) {
    ir::Value *v = n->input(i);
    if (!v)
      continue;
    if (const Perm *q = permOf(v->producer()); q && *q == p && v->shape().size() == 4) {
      // Other readers that move too will in their turn (HardSwish as
      // HardSigmoid and Mul reads its input twice; each of DenseNet's
      // Concats reads every earlier feature map of its block).
      if (v->isGraphOutput())
        return false;
      for (const ir::Node *u : v->users())
        if (u != n && !movesLater(u, p))
          return false;
      inputs[i] = v->producer()->input(0);
      moved.push_back(v);
    } else if (pad) {
      // pads (8 begins and ends, constant), then a scalar value; no axes.
      if (i > 2 || !v->isConstant())
        return false;
      if (i == 1) {
        const Tensor &t = v->constant();
        if (t.dtype() != DType::I64 || t.numel() != 8)
          return false;
        // Axis i of the transposed value is axis p[i] before it.
        Tensor q(DType::I64, {8});
        for (size_t a = 0; a < 4; ++a) {
          q.data<int64_t>()[p[a]] = t.data<int64_t>()[a];
          q.data<int64_t>()[p[a] + 4] = t.data<int64_t>()[a + 4];
        }
        inputs[i] = g.makeConstantValue(v->name() + "/nhwc", std::move(q));
      } else {
        inputs[i] = v;
      }
    } else if (v->isConstant() && !hasAxis) {
      if (!(inputs[i] = untransposedConstant(g, v, p)))
        return false;
    } else if (v->isConstant() && n->is("Split") && i == 1) {
      inputs[i] = v;
    } else {
      return false;
    }
  }
  AttrMap &attrs = n->attrs();
  if (hasAxis) {
    int64_t axis = attrInt(attrs, "axis", n->is("Concat") ? -1 : 0);
    if (axis < 0)
      axis += 4;
    if (axis < 0 || axis >= 4)
      return false;
    attrs["axis"] = Attribute::ofInt(p[static_cast<size_t>(axis)]);
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] != n->input(i))
      n->setInput(i, inputs[i]);
  for (ir::Value *v : moved)
    eraseIfDead(g, v, erased);
  const Perm q = inverse(p);
  for (ir::Value *o : n->outputs()) {
    const TensorDesc before{o->dtype(), permuteShape(o->shape(), q)};
    PIPEC_TRY(transposeAfter(g, o, p, n->name() + "/to_nchw"));
    o->setType(before);
  }
  return true;
}

/// Step 2, Transpose(q) of Transpose(p) with q undoing p.
bool cancelPair(ir::Graph &g, ir::Node *n, Erased &erased) {
  const Perm *q = permOf(n);
  ir::Node *first = q ? n->input(0)->producer() : nullptr;
  const Perm *p = permOf(first);
  if (!p || n->output(0)->isGraphOutput())
    return false;
  for (size_t i = 0; i < 4; ++i)
    if ((*p)[static_cast<size_t>((*q)[i])] != static_cast<int64_t>(i))
      return false;
  ir::Value *mid = n->input(0);
  g.replaceAllUsesWith(n->output(0), first->input(0));
  erased.insert(n);
  g.eraseNode(n);
  eraseIfDead(g, mid, erased);
  return true;
}

/// Step 2's operand: the NHWC value x when `n`'s input 0 is
/// Transpose(x, 0,3,1,2) that `n` alone reads, else null.
ir::Value *nhwcOperand(const ir::Node *n) {
  ir::Value *v = n->input(0);
  const Perm *p = v ? permOf(v->producer()) : nullptr;
  return p && *p == toNchwPerm() && readOnlyBy(v, n) ? v->producer()->input(0) : nullptr;
}

/// Step 2's result: y, now computed from NHWC data, takes the NHWC type and
/// its readers read a Transpose back to NCHW.
Status retypeAsNhwc(ir::Graph &g, ir::Value *y, const std::string &name) {
  const TensorDesc nhwc{DType::F32, permuteShape(y->shape(), toNhwcPerm())};
  PIPEC_TRY(transposeAfter(g, y, toNchwPerm(), name + "/to_nchw"));
  y->setType(nhwc);
  return Status::ok();
}

/// Step 2, GlobalAveragePool / GlobalMaxPool of Transpose(0,3,1,2).
Expected<bool> globalPoolOfNhwc(ir::Graph &g, ir::Node *n, Erased &erased) {
  const bool avg = n->is("GlobalAveragePool");
  if ((!avg && !n->is("GlobalMaxPool")) || n->numInputs() != 1 || !isF32Rank4(n->output(0)))
    return false;
  ir::Value *x = nhwcOperand(n);
  if (!x)
    return false;
  ir::Value *v = n->input(0), *y = n->output(0);
  std::vector<ir::Value *> inputs = {x};
  AttrMap attrs = {{"keepdims", Attribute::ofInt(1)}};
  // Axes are an input of ReduceMean and ReduceMax from opset 18.
  if (g.opset("") >= 18) {
    Tensor axes(DType::I64, {2});
    axes.data<int64_t>()[0] = 1;
    axes.data<int64_t>()[1] = 2;
    inputs.push_back(g.makeConstantValue(n->name() + "/axes", std::move(axes)));
  } else {
    attrs["axes"] = Attribute::ofInts({1, 2});
  }
  const std::string name = n->name();
  erased.insert(n);
  PIPEC_TRY(replaceKeepingName(g, n, avg ? "ReduceMean" : "ReduceMax", "", inputs, std::move(attrs))
                .status());
  eraseIfDead(g, v, erased);
  PIPEC_TRY(retypeAsNhwc(g, y, name));
  return true;
}

/// Step 2, MaxPool (Y alone) or AveragePool of Transpose(0,3,1,2):
/// pipec:NhwcMaxPool or NhwcAveragePool of the NHWC value, then the
/// transpose.
Expected<bool> windowPoolOfNhwc(ir::Graph &g, ir::Node *n) {
  const bool avg = n->is("AveragePool");
  if ((!avg && !n->is("MaxPool")) || n->numInputs() != 1 || n->numOutputs() != 1 ||
      !isF32Rank4(n->output(0)))
    return false;
  ir::Value *x = nhwcOperand(n);
  if (!x)
    return false;
  ir::Value *v = n->input(0), *y = n->output(0);
  AttrMap attrs = n->attrs();
  attrs.erase("storage_order"); // the order of Indices, which it has not
  const std::string name = n->name();
  PIPEC_TRY(replaceKeepingName(g, n, avg ? "NhwcAveragePool" : "NhwcMaxPool", "pipec", {x},
                               std::move(attrs))
                .status());
  g.eraseNode(v->producer());
  PIPEC_TRY(retypeAsNhwc(g, y, name));
  return true;
}

/// Step 2, an inference BatchNormalization of Transpose(0,3,1,2) with
/// constant parameters: y = x * s + t on the NHWC value, s = scale /
/// sqrt(var + epsilon) and t = beta - mean * s per channel ([1, 1, 1, C],
/// computed in double), then the transpose. The Mul and Add move on like
/// any elementwise node and fuse-elementwise makes them one loop with what
/// follows (DenseNet's BatchNorm, ReLU before each convolution).
Expected<bool> batchNormOfNhwc(ir::Graph &g, ir::Node *n) {
  if (!n->is("BatchNormalization") || n->numInputs() != 5 || n->numOutputs() != 1 ||
      attrInt(n->attrs(), "training_mode", 0) != 0 || attrInt(n->attrs(), "spatial", 1) != 1 ||
      !isF32Rank4(n->output(0)))
    return false;
  ir::Value *x = nhwcOperand(n);
  if (!x)
    return false;
  ir::Value *v = n->input(0);
  const int64_t C = v->shape()[1];
  const float *par[4];
  for (size_t i = 0; i < 4; ++i) {
    const ir::Value *c = n->input(i + 1);
    if (!c || !c->isConstant() || c->constant().dtype() != DType::F32 || c->constant().numel() != C)
      return false;
    par[i] = c->constant().data<float>();
  }
  const double eps = attrFloat(n->attrs(), "epsilon", 1e-5f);
  Tensor st(DType::F32, {1, 1, 1, C}), tt(DType::F32, {1, 1, 1, C});
  for (int64_t c = 0; c < C; ++c) {
    const double sc = static_cast<double>(par[0][c]) / std::sqrt(static_cast<double>(par[3][c]) + eps);
    st.data<float>()[c] = static_cast<float>(sc);
    tt.data<float>()[c] = static_cast<float>(static_cast<double>(par[1][c]) - static_cast<double>(par[2][c]) * sc);
  }
  ir::Value *y = n->output(0);
  const std::string name = n->name();
  ir::Value *sv = g.makeConstantValue(name + "/scale", std::move(st));
  ir::Value *tv = g.makeConstantValue(name + "/shift", std::move(tt));
  PIPEC_ASSIGN(ir::Node * mul, g.insertNode(n, g.uniqueNodeName(name + "/Mul"), "Mul", "", {x, sv},
                                            {g.uniqueValueName(name + "/scaled")}));
  mul->output(0)->setType(x->type());
  PIPEC_TRY(replaceKeepingName(g, n, "Add", "", {mul->output(0), tv}, {}).status());
  g.eraseNode(v->producer());
  PIPEC_TRY(retypeAsNhwc(g, y, name));
  return true;
}

/// Step 2, a Transpose of a value an earlier Transpose with the same perm
/// reads: its readers read that one's output.
bool mergeDuplicate(ir::Graph &g, ir::Node *n, Erased &erased) {
  const Perm *p = permOf(n);
  if (!p || n->output(0)->isGraphOutput())
    return false;
  const size_t at = g.indexOf(n);
  for (ir::Node *u : n->input(0)->users()) {
    const Perm *q = u != n ? permOf(u) : nullptr;
    if (q && *q == *p && g.indexOf(u) < at) {
      g.replaceAllUsesWith(n->output(0), u->output(0));
      erased.insert(n);
      g.eraseNode(n);
      return true;
    }
  }
  return false;
}

/// The range a clamp-like node `u` (Relu, or Clip with constant bounds)
/// clamps to; false for other nodes.
bool clampRange(const ir::Node *u, float &lo, float &hi) {
  lo = std::numeric_limits<float>::lowest();
  hi = std::numeric_limits<float>::max();
  if (u->is("Relu") && u->numInputs() == 1) {
    lo = 0.0f;
    return true;
  }
  if (!u->is("Clip"))
    return false;
  if (attrHas(u->attrs(), "min") || attrHas(u->attrs(), "max")) { // before opset 11
    lo = attrFloat(u->attrs(), "min", lo);
    hi = attrFloat(u->attrs(), "max", hi);
  }
  for (size_t i = 1; i < u->numInputs() && i < 3; ++i) {
    const ir::Value *b = u->input(i);
    if (!b)
      continue;
    if (!b->isConstant() || b->constant().dtype() != DType::F32 || b->constant().numel() != 1)
      return false;
    (i == 1 ? lo : hi) = b->constant().data<float>()[0];
  }
  return lo <= hi;
}

/// Step 3: Relus and Clips with constant bounds, and a LeakyRelu, that
/// alone read a pipec:NhwcConv, into its epilogue. Clamping to [a, b] and then to an
/// overlapping [c, d] is clamping to [max(a, c), min(b, d)], so a chain
/// (torch's relu6 exports as Relu, then Clip) folds whole.
bool foldActivation(ir::Graph &g, ir::Node *c) {
  bool folded = false;
  for (;;) {
    ir::Value *y = c->output(0);
    if (y->isGraphOutput() || y->users().size() != 1)
      return folded;
    ir::Node *u = y->users()[0];
    if (u->numOutputs() != 1 || u->input(0) != y || u->output(0)->isGraphOutput() ||
        u->output(0)->type() != y->type())
      return folded;
    AttrMap &a = c->attrs();
    // A LeakyRelu folds into a convolution with no activation yet (after
    // Relu or Clip it would need an epilogue of two steps).
    if (u->is("LeakyRelu")) {
      if (a.count("activation"))
        return folded;
      a["activation"] = Attribute::ofString("LeakyRelu");
      a["leaky_alpha"] = Attribute::ofFloat(attrFloat(u->attrs(), "alpha", 0.01f));
      g.replaceAllUsesWith(u->output(0), y);
      g.eraseNode(u);
      return true;
    }
    float lo, hi;
    if (!clampRange(u, lo, hi))
      return folded;
    if (a.count("activation")) {
      auto e = convEpilogueOf(a);
      if (!e)
        return folded;
      float lo0 = e->kind == ConvEpilogue::Clip ? e->lo : 0.0f;
      float hi0 = e->kind == ConvEpilogue::Clip ? e->hi : std::numeric_limits<float>::max();
      if (std::max(lo0, lo) > std::min(hi0, hi))
        return folded; // disjoint: a constant output, left as it is
      lo = std::max(lo0, lo);
      hi = std::min(hi0, hi);
    }
    if (lo == 0.0f && hi == std::numeric_limits<float>::max()) {
      a["activation"] = Attribute::ofString("Relu");
      a.erase("clip_min");
      a.erase("clip_max");
    } else {
      a["activation"] = Attribute::ofString("Clip");
      a["clip_min"] = Attribute::ofFloat(lo);
      a["clip_max"] = Attribute::ofFloat(hi);
    }
    g.replaceAllUsesWith(u->output(0), y);
    g.eraseNode(u);
    folded = true;
  }
}

/// Step 4: a Transpose that keeps its non-unit axes in order is a Reshape.
Expected<bool> transposeToReshape(ir::Graph &g, ir::Node *t) {
  const Perm *p = permOf(t);
  if (!p || !t->input(0)->typeKnown() || !t->output(0)->typeKnown())
    return false;
  const Shape &s = t->input(0)->shape();
  int64_t last = -1;
  for (size_t i = 0; i < 4; ++i)
    if (s[static_cast<size_t>((*p)[i])] != 1) {
      if ((*p)[i] < last)
        return false;
      last = (*p)[i];
    }
  const Shape &to = t->output(0)->shape();
  Tensor shape(DType::I64, {4});
  for (size_t i = 0; i < 4; ++i)
    shape.data<int64_t>()[i] = to[i];
  ir::Value *sv = g.makeConstantValue(t->name() + "/shape", std::move(shape));
  PIPEC_TRY(replaceKeepingName(g, t, "Reshape", "", {t->input(0), sv}, {}).status());
  return true;
}

class ChannelsLastPass final : public Pass {
public:
  std::string_view name() const override { return "channels-last"; }

  Expected<bool> run(ir::Graph &g) override {
    PIPEC_ASSIGN(bool changed, convertConvs(g));
    if (!changed)
      return false;
    Erased erased;
    const std::vector<ir::Node *> order = g.nodes();
    for (ir::Node *n : order) {
      if (erased.count(n))
        continue;
      if (cancelPair(g, n, erased) || mergeDuplicate(g, n, erased))
        continue;
      if (isLayoutFree(n) || n->is("Concat") || n->is("Split") ||
          (n->is("Pad") && attrString(n->attrs(), "mode", "constant") == "constant" &&
           g.opset("") >= 11)) {
        PIPEC_TRY(sinkThrough(g, n, erased).status());
        continue;
      }
      PIPEC_ASSIGN(bool pooled, globalPoolOfNhwc(g, n, erased));
      if (!pooled && n->is("BatchNormalization")) {
        erased.insert(n); // replaced when rewritten
        PIPEC_ASSIGN(bool rewritten, batchNormOfNhwc(g, n));
        if (!rewritten)
          erased.erase(n);
      } else if (!pooled) {
        erased.insert(n); // replaced when converted
        PIPEC_ASSIGN(bool converted, windowPoolOfNhwc(g, n));
        if (!converted)
          erased.erase(n);
      }
    }
    // (The folds erase nodes after the convolutions: collect these first.)
    std::vector<ir::Node *> convs;
    for (ir::Node *n : g.nodes())
      if (n->domain() == "pipec" && n->opType() == "NhwcConv")
        convs.push_back(n);
    for (ir::Node *n : convs)
      foldActivation(g, n);
    for (ir::Node *n : g.nodes())
      PIPEC_TRY(transposeToReshape(g, n).status());
    g.removeDeadConstants();
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createChannelsLastPass() { return std::make_unique<ChannelsLastPass>(); }

} // namespace pipec::passes
