//===- passes/MixedPrecision.cpp - Reduced-precision operands ----------===//
//
// Pass `mixed-precision` (pipec --precision bf16|fp16; docs/precision.md).
// The matrix products and convolutions take their floating-point operands
// in the reduced type and accumulate in fp32; everything else computes in
// fp32. Every fp32 operand V of such a node (forward or backward) is read
// through one reduced copy shared by all of them:
//
//   Vr = Cast(V, to=bf16)           right after V is computed
//   ... MatMul(Vr, ..) {output_dtype = 1}     the GEMMs and convolutions
//   ... Cast(Vr, to=f32) -> Einsum  right before each other reader
//
// (output_dtype: the product takes 16-bit operands and gives f32;
// support/FusedOps.h), so that
//   - the products see bf16-rounded operands (bf16 x bf16 is exact in
//     fp32, and the GEMM accumulates in fp32: the arithmetic of bf16
//     tensor cores and of oneDNN's bf16 matmul, emulated exactly on any
//     CPU);
//   - what the backward keeps of the forward for its products (the
//     activations a matmul's weight gradient reads) is the 2-byte copy:
//     V itself dies after its last fp32 reader, and the arena planner,
//     the memory model and the report count the copy at 2 bytes;
//   - a stage boundary that cuts a product's operand sends the copy.
// Master weights, the gradients (summed over micro-batches in fp32), the
// optimizer's state, normalizations, softmax, losses and reductions stay
// fp32. The weights are parameters: a product under output_dtype reads
// one as it is and rounds it to bf16 itself, once a step (its kernel keeps
// the rounded copy from the step's first micro-batch to its last); other
// readers (Einsum) read it through a copy made right before them (a copy
// shared from the forward to the backward would stay alive for every
// micro-batch in flight). No node's output changes type. Bias inputs (Gemm's C, a
// convolution's B) are not operands of the product and stay fp32.
//
// Nodes named in MixedPrecisionOptions::keepFp32 keep fp32 operands.
//
//===----------------------------------------------------------------------===//
#include "passes/MixedPrecision.h"
#include "support/FusedOps.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace pipec::passes {

namespace {

/// The inputs of `n` that are operands of its product, or empty for a node
/// that is no product.
std::vector<size_t> productOperands(const ir::Node &n) {
  const std::string &op = n.opType();
  if (n.domain().empty()) {
    if (op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose")
      return {0, 1};
    if (op == "Einsum") {
      std::vector<size_t> all;
      for (size_t i = 0; i < n.numInputs(); ++i)
        all.push_back(i);
      return all;
    }
    return {};
  }
  if (n.domain() == "pipec" &&
      (op == "FusedGemm" || op == "NhwcConv" || op == "ConvGradInput" || op == "ConvGradWeight"))
    return {0, 1};
  return {};
}

/// A matrix product or convolution (MatMul, Gemm, Conv, ConvTranspose,
/// pipec:FusedGemm, NhwcConv, ConvGradInput, ConvGradWeight) with f32
/// operands 0 and 1: the products whose kernels read 16-bit operands
/// themselves (support/FusedOps.h).
bool takesHalfOperands(const ir::Node &n) {
  const std::string &op = n.opType();
  const bool product = n.domain().empty() ? op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose"
                                          : n.domain() == "pipec" && (op == "FusedGemm" || op == "NhwcConv" ||
                                                                      op == "ConvGradInput" || op == "ConvGradWeight");
  return product && n.numInputs() >= 2 && n.input(0) && n.input(1) && n.input(0)->type().dtype == DType::F32 &&
         n.input(1)->type().dtype == DType::F32;
}

class MixedPrecisionPass final : public Pass {
public:
  explicit MixedPrecisionPass(MixedPrecisionOptions o) : o_(std::move(o)) {}
  std::string_view name() const override { return "mixed-precision"; }

  Expected<bool> run(ir::Graph &g) override {
    if (o_.precision == Precision::Fp32)
      return false;
    const DType reduced = o_.precision == Precision::Bf16 ? DType::BF16 : DType::F16;
    for (const std::string &k : o_.keepFp32)
      if (!g.findNode(k))
        return errorf("--keep-fp32: the graph has no node '", k, "' (after the passes; --emit=ir lists them)");
    const std::set<std::string> keep(o_.keepFp32.begin(), o_.keepFp32.end());
    std::map<ir::Value *, ir::Value *> copies; // V -> its reduced copy
    // The f32 view of a copy, shared by the readers of one backward group
    // (the same forward node and phase, which run one after the other):
    // a BatchNormalization's statistics and gradient, Attention's Q, K
    // and V read from one packed tensor.
    std::map<std::tuple<ir::Value *, std::string, ir::Phase>, ir::Node *> views;
    bool changed = false;
    for (ir::Node *n : g.nodes()) {
      if (keep.count(n->name()))
        continue;
      // What n reads through a copy: a product's operands, and what a
      // backward node keeps of the forward.
      std::vector<size_t> routed = productOperands(*n);
      if (n->phase() == ir::Phase::Backward || n->phase() == ir::Phase::WeightGrad)
        for (size_t i = 0; i < n->numInputs(); ++i)
          if (ir::Value *v = n->input(i); v && keptForBackward(v, keep))
            routed.push_back(i);
      std::sort(routed.begin(), routed.end());
      routed.erase(std::unique(routed.begin(), routed.end()), routed.end());
      // A matrix product on two f32 operands reads both copies as they are
      // and gives f32 (output_dtype): its kernels take bf16 (f16) operands
      // and accumulate in f32 (bf16 tensor cores, oneDNN's bf16 matmul),
      // with no f32 view of either in the arena.
      const bool direct = takesHalfOperands(*n);
      if (direct) {
        n->attrs()[kProductOutputDType] = Attribute::ofInt(static_cast<int64_t>(DType::F32));
        changed = true;
      }
      for (size_t i : routed) {
        ir::Value *v = n->input(i);
        if (!v || v->type().dtype != DType::F32)
          continue;
        // A parameter or constant is copied for each reader (it lives
        // anyway; a shared copy would live from the forward to the
        // backward of every micro-batch in flight), a computed value once.
        const bool perReader = isWeightLike(v);
        // A product under output_dtype reads such an operand as it is and
        // rounds it itself, once a step (support/FusedOps.h), unless its
        // other operand is one too (then operand 0 is copied).
        if (direct && i < 2 && perReader && !(i == 0 && isWeightLike(n->input(1))))
          continue;
        ir::Value *&shared = copies[v];
        ir::Value *r = perReader ? nullptr : shared;
        if (!r) {
          PIPEC_ASSIGN(r, reducedCopy(g, v, n, reduced));
          if (!perReader)
            shared = r;
        }
        changed = true;
        if (direct && i < 2) {
          n->setInput(i, r);
          continue;
        }
        // The fp32 view of the copy, right before the (group's first) reader.
        ir::Node *&view = views[{r, n->forwardOf(), n->phase()}];
        if (view && !n->forwardOf().empty() && view->guards() == n->guards()) {
          n->setInput(i, view->output(0));
          continue;
        }
        const std::string base = v->name() + (reduced == DType::BF16 ? "/bf16" : "/f16");
        PIPEC_ASSIGN(ir::Node * back, g.insertNode(n, g.uniqueNodeName(base + "/to_f32"), "Cast", "", {r},
                                                  {g.uniqueValueName(base + "/f32")},
                                                  {{"to", Attribute::ofInt(static_cast<int64_t>(DType::F32))}}));
        back->output(0)->setType(v->type());
        back->setPhase(n->phase());
        back->setForwardOf(n->forwardOf());
        back->setGuards(n->guards());
        n->setInput(i, back->output(0));
        view = back;
        changed = true;
      }
    }
    if (changed)
      foldRoundTrips(g, reduced);
    return changed;
  }

private:
  /// A parameter or constant: no producer, not a graph input.
  static bool isWeightLike(const ir::Value *v) { return v && !v->producer() && !v->isGraphInput(); }

  /// A float32 activation of the forward (or a graph input) that the
  /// backward reads: kept as the reduced copy. Not the statistics a
  /// normalization gives its gradient (its outputs past the first), nor
  /// what a node of keepFp32 computes.
  static bool keptForBackward(const ir::Value *v, const std::set<std::string> &keep) {
    if (v->type().dtype != DType::F32)
      return false;
    const ir::Node *p = v->producer();
    if (!p)
      return v->isGraphInput();
    if (p->phase() != ir::Phase::Forward || keep.count(p->name()))
      return false;
    const ir::OpInfo *info = p->info();
    const bool normalization = info && info->has(ir::op::CostNormalization);
    return !(normalization && v->producerIndex() > 0);
  }

  /// Reshape, Flatten, Squeeze or Unsqueeze: a node that renames the
  /// shape of its input 0 and keeps its elements' order and type.
  static bool renamesShape(const ir::Node &n) {
    return n.is("Reshape") || n.is("Flatten") || n.is("Squeeze") || n.is("Unsqueeze");
  }

  /// Copies made of the f32 view of a copy, through nodes that only rename
  /// a shape: Cast(Reshape(Cast(Xr, to=f32)), to=reduced), as a weight
  /// gradient's GEMM reads the activation the forward kept (Reshape to
  /// rows). Widening is exact and rounding an exact value returns it, so
  /// this is Reshape(Xr): the shape nodes read Xr itself, and both Casts
  /// go when nothing else reads them.
  static void foldRoundTrips(ir::Graph &g, DType reduced) {
    std::vector<ir::Node *> casts;
    for (ir::Node *n : g.nodes())
      if (n->is("Cast") && n->output(0)->type().dtype == reduced)
        casts.push_back(n);
    for (ir::Node *c : casts) {
      ir::Value *out = c->output(0);
      if (out->isGraphOutput())
        continue;
      // Up through the shape nodes, each read by the next alone.
      std::vector<ir::Node *> chain;
      ir::Value *v = c->input(0);
      while (v && v->producer() && renamesShape(*v->producer()) && v->users().size() == 1 &&
             !v->isGraphOutput()) {
        chain.push_back(v->producer());
        v = v->producer()->input(0);
      }
      ir::Node *widen = v ? v->producer() : nullptr;
      if (!widen || !widen->is("Cast") || widen->input(0)->type().dtype != reduced ||
          v->type().dtype != DType::F32)
        continue;
      ir::Value *x = widen->input(0);
      if (!chain.empty()) {
        chain.back()->setInput(0, x);
        for (ir::Node *s : chain) {
          TensorDesc t = s->output(0)->type();
          t.dtype = reduced;
          s->output(0)->setType(t);
        }
        x = chain.front()->output(0);
      }
      g.replaceAllUsesWith(out, x);
      g.eraseNode(c);
      if (widen->output(0)->users().empty() && !widen->output(0)->isGraphOutput())
        g.eraseNode(widen);
    }
  }

  /// Cast(v, to=reduced), right after v's producer (before `firstReader`
  /// for a graph input, a parameter or a constant).
  Expected<ir::Value *> reducedCopy(ir::Graph &g, ir::Value *v, ir::Node *firstReader, DType reduced) {
    ir::Node *producer = v->producer();
    ir::Node *pos = producer ? g.nextNode(producer) : firstReader;
    const std::string base = v->name() + (reduced == DType::BF16 ? "/bf16" : "/f16");
    PIPEC_ASSIGN(ir::Node * c, g.insertNode(pos, g.uniqueNodeName(base), "Cast", "", {v}, {g.uniqueValueName(base)},
                                            {{"to", Attribute::ofInt(static_cast<int64_t>(reduced))}}));
    c->output(0)->setType(TensorDesc{reduced, v->type().shape});
    const ir::Node *from = producer ? producer : firstReader;
    c->setPhase(from->phase());
    c->setForwardOf(from->forwardOf());
    c->setGuards(from->guards());
    return c->output(0);
  }

  MixedPrecisionOptions o_;
};

} // namespace

Expected<Precision> parsePrecision(const std::string &s) {
  if (s == "fp32")
    return Precision::Fp32;
  if (s == "bf16")
    return Precision::Bf16;
  if (s == "fp16")
    return Precision::Fp16;
  return errorf("--precision must be fp32, bf16 or fp16 (got '", s, "')");
}

std::unique_ptr<Pass> createMixedPrecisionPass(MixedPrecisionOptions o) {
  return std::make_unique<MixedPrecisionPass>(std::move(o));
}

} // namespace pipec::passes
