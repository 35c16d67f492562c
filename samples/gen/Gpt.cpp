//===- samples/gen/Gpt.cpp - The GPT-like decoder sample ------------------===//
//
// tokens [batch, seq] int64 -> Gather(token embedding) + learned position
// embedding -> N pre-LN blocks -> LayerNormalization -> MatMul to logits
// [batch, seq, vocab]. A block is
//
//   x + proj(attention(ln1(x)))  then  x + mlp(ln2(x))
//
// with causal multi-head self-attention spelled out in MatMul, Add, Split,
// Reshape, Transpose, Mul, Softmax and an additive causal mask (0 on and
// below the diagonal, -1e9 above), and the MLP's GELU as
// 0.5*x*(1+Erf(x/sqrt(2))) (the Gelu op is opset 20). The Reshapes that
// split and merge heads take a target computed like PyTorch's exporter does
// for a dynamic batch, Shape -> Gather(0) -> Unsqueeze -> Concat, so the
// compiler's constant folding of shape arithmetic is exercised.
//
// With --with-loss, logits are transposed to [batch, vocab, seq] for
// SoftmaxCrossEntropyLoss (mean) against labels [batch, seq].
//
//===----------------------------------------------------------------------===//
#include "samples/gen/Models.h"

#include <cmath>

namespace pipec::samples {

namespace {

/// Near-identity LayerNormalization (see docs/samples.md for why not exact).
std::string layerNorm(ModelBuilder &b, const std::string &name, const std::string &x,
                      int64_t d) {
  std::string w = b.weight(name + ".weight", {d}, Init::range(0.9f, 1.1f));
  std::string bias = b.weight(name + ".bias", {d}, Init::range(-0.1f, 0.1f));
  return b.node("LayerNormalization", name, {x, w, bias},
                {Attr::i("axis", -1), Attr::f("epsilon", 1e-5f)});
}

/// x @ W + bias with W stored [in, out], as GPT-2's Conv1D exports.
std::string linear(ModelBuilder &b, const std::string &name, const std::string &x,
                   int64_t in, int64_t out, double gain = 1.0) {
  std::string w = b.weight(name + ".weight", {in, out}, Init::lecun(in, gain));
  std::string bias = b.weight(name + ".bias", {out}, Init::bias(in));
  std::string y = b.node("MatMul", name, {x, w});
  return b.node("Add", name + "_bias", {y, bias});
}

struct Dims {
  int64_t d, heads, dh, seq, layers;
};

std::string attention(ModelBuilder &b, const std::string &p, const std::string &x,
                      const std::string &mask, const Dims &n) {
  std::string qkv = linear(b, p + "/qkv", x, n.d, 3 * n.d);
  std::string split = b.constantI64(p + "/split_sizes", {3}, {n.d, n.d, n.d});
  b.nodeN("Split", p + "/split", {qkv, split}, {p + "/q", p + "/k", p + "/v"},
          {Attr::i("axis", -1)});
  // [batch, seq, d] -> [batch, seq, heads, dh] -> q, v: [batch, heads, seq, dh],
  // k: [batch, heads, dh, seq] (transposed for q @ k^T).
  auto heads = [&](const std::string &t, const std::vector<int64_t> &perm) {
    std::string target = b.batchShape(p + "/" + t + "_heads", p + "/" + t, {n.seq, n.heads, n.dh});
    std::string r = b.node("Reshape", p + "/" + t + "_heads", {p + "/" + t, target});
    return b.node("Transpose", p + "/" + t + "_t", {r}, {Attr::ints("perm", perm)});
  };
  std::string q = heads("q", {0, 2, 1, 3});
  std::string k = heads("k", {0, 2, 3, 1});
  std::string v = heads("v", {0, 2, 1, 3});

  std::string scores = b.node("MatMul", p + "/scores", {q, k});
  std::string scale = b.scalarF32(p + "/scale/value", float(1.0 / std::sqrt(double(n.dh))));
  scores = b.node("Mul", p + "/scale", {scores, scale});
  scores = b.node("Add", p + "/mask", {scores, mask});
  std::string probs = b.node("Softmax", p + "/softmax", {scores}, {Attr::i("axis", -1)});
  std::string ctx = b.node("MatMul", p + "/context", {probs, v});
  ctx = b.node("Transpose", p + "/context_t", {ctx}, {Attr::ints("perm", {0, 2, 1, 3})});
  std::string target = b.batchShape(p + "/merge_heads", ctx, {n.seq, n.d});
  ctx = b.node("Reshape", p + "/merge_heads", {ctx, target});
  // GPT-2 scales the projections into the residual stream by 1/sqrt(2N).
  return linear(b, p + "/proj", ctx, n.d, n.d, 1.0 / std::sqrt(2.0 * double(n.layers)));
}

std::string mlp(ModelBuilder &b, const std::string &p, const std::string &x, const Dims &n) {
  std::string h = linear(b, p + "/fc", x, n.d, 4 * n.d);
  std::string g = p + "/gelu";
  std::string sqrt2 = b.scalarF32(g + "/sqrt2", float(std::sqrt(2.0)));
  std::string t = b.node("Div", g + "/div", {h, sqrt2});
  t = b.node("Erf", g + "/erf", {t});
  std::string one = b.scalarF32(g + "/one", 1.0f);
  t = b.node("Add", g + "/add", {t, one});
  t = b.node("Mul", g + "/mul", {h, t});
  std::string half = b.scalarF32(g + "/half", 0.5f);
  t = b.node("Mul", g + "/half_mul", {t, half});
  return linear(b, p + "/proj", t, 4 * n.d, n.d, 1.0 / std::sqrt(2.0 * double(n.layers)));
}

} // namespace

Expected<BuiltModel> buildGpt(const GptOptions &o, const CommonOptions &c) {
  PIPEC_TRY(checkSize("--layers", o.layers, 10000));
  PIPEC_TRY(checkSize("--dmodel", o.dmodel, 1 << 20));
  PIPEC_TRY(checkSize("--heads", o.heads, 1 << 20));
  // The causal mask is a seq x seq Constant inside the model.
  PIPEC_TRY(checkSize("--seq", o.seq, 8192));
  PIPEC_TRY(checkSize("--vocab", o.vocab, 1 << 24));
  if (!(o.dropout >= 0 && o.dropout < 1))
    return errorf("--dropout must be in [0, 1) (got ", o.dropout, ")");
  if (o.dmodel % o.heads != 0)
    return errorf("--dmodel (", o.dmodel, ") must be divisible by --heads (", o.heads, ")");
  Dims n{o.dmodel, o.heads, o.dmodel / o.heads, o.seq, o.layers};

  ModelBuilder b("gpt", c.seed, c.batch, c.maxWeightMiB << 20, c.zeroWeights);
  b.addInput("tokens", onnx::TensorProto::INT64, {b.batchDim(), o.seq});
  // Embedding variance 1/dmodel keeps a tied lm_head's logits O(1).
  std::string wte = b.weight("embed/tok.weight", {o.vocab, o.dmodel}, Init::lecun(o.dmodel));
  std::string wpe = b.weight("embed/pos.weight", {o.seq, o.dmodel}, Init::lecun(o.dmodel));
  std::string x = b.node("Gather", "embed/tok", {wte, "tokens"}, {Attr::i("axis", 0)});
  x = b.node("Add", "embed/pos", {x, wpe});

  std::vector<float> maskValues(size_t(o.seq * o.seq), 0.0f);
  for (int64_t i = 0; i < o.seq; ++i)
    for (int64_t j = i + 1; j < o.seq; ++j)
      maskValues[size_t(i * o.seq + j)] = -1e9f;
  std::string mask = b.constantF32("causal_mask", {o.seq, o.seq}, maskValues);

  for (int64_t l = 0; l < o.layers; ++l) {
    std::string p = "block" + std::to_string(l);
    std::string h = layerNorm(b, p + "/ln1", x, o.dmodel);
    // Dropout in the run's mode (no training_mode input): masks when
    // training, none in inference.
    auto dropout = [&](const std::string &name, const std::string &v) {
      if (o.dropout == 0)
        return v;
      return b.node("Dropout", name, {v, b.scalarF32(name + "/ratio", float(o.dropout))});
    };
    h = attention(b, p + "/attn", h, mask, n);
    h = dropout(p + "/attn/dropout", h);
    x = b.node("Add", p + "/attn/residual", {x, h});
    h = layerNorm(b, p + "/ln2", x, o.dmodel);
    h = mlp(b, p + "/mlp", h, n);
    h = dropout(p + "/mlp/dropout", h);
    x = b.node("Add", p + "/mlp/residual", {x, h});
  }
  x = layerNorm(b, "final/ln", x, o.dmodel);
  std::string head;
  if (o.tieEmbeddings)
    head = b.node("Transpose", "lm_head/tied", {wte}, {Attr::ints("perm", {1, 0})});
  else
    head = b.weight("lm_head.weight", {o.dmodel, o.vocab}, Init::lecun(o.dmodel));
  b.node("MatMul", "lm_head", {x, head}, {}, "logits");
  b.addOutput("logits", onnx::TensorProto::FLOAT, {b.batchDim(), o.seq, o.vocab});

  if (c.withLoss) {
    b.addInput("labels", onnx::TensorProto::INT64, {b.batchDim(), o.seq});
    std::string t = b.node("Transpose", "loss/transpose", {"logits"},
                           {Attr::ints("perm", {0, 2, 1})});
    b.node("SoftmaxCrossEntropyLoss", "loss/sce", {t, "labels"},
           {Attr::s("reduction", "mean")}, "loss");
    b.addOutput("loss", onnx::TensorProto::FLOAT, {});
  }
  return b.finish(cat("pipec sample GPT: ", o.layers, " layers, dmodel ", o.dmodel, ", ",
                      o.heads, " heads, seq ", o.seq, ", vocab ", o.vocab,
                      o.tieEmbeddings ? ", tied embeddings" : "",
                      c.withLoss ? ", with loss" : ""),
                  commonMetadata("gpt", c));
}

} // namespace pipec::samples
