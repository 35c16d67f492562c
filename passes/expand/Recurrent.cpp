//===- passes/expand/Recurrent.cpp - LSTM, GRU and RNN unrolled -----------===//
//
// ONNX's recurrent ops become straight-line code over their static sequence
// length T (the typed input's shape), one direction after the other:
//
//  - the input projection of every time step and direction at once: one
//    Gemm X[T*B, I] x W[D*G*H, I]^T + (Wb + Rb), before the steps;
//  - per step, its rows of that projection (Splits cut them into steps and
//    directions: a Slice per step would differentiate into a Pad to the
//    whole projection per step), one Gemm H_{t-1} x R^T with those rows as
//    its C (two for GRU with linear_before_reset = 0: the reset gate
//    multiplies H before its GEMM), and the gates' elementwise ops, which
//    the fusion passes later merge;
//  - the outputs concatenated along the time axis (Y), the last states
//    (Y_h, Y_c), in the layout asked for (0: time major, 1: batch major).
//
// Every op emitted has a gradient rule, so training differentiates the
// unrolled steps (backpropagation through time) with no rule of its own.
//
// sequence_lens is data, not shape: each step t computes a mask
// sequence_lens > t ([B, 1], a Greater) and a Where keeps the state of
// sequences already ended (or, in the reverse direction, not yet begun)
// and writes zeros into Y there, which is ONNX's definition. A constant
// sequence_lens folds these to constants; one equal to T everywhere drops
// them. The activations map to ONNX ops (Affine, ScaledTanh and
// ThresholdedRelu to two of them each); clip to Clip on the gates'
// pre-activations, after the peepholes, as ONNX Runtime does; LSTM's
// input_forget sets f = 1 - i.
//
//===----------------------------------------------------------------------===//
#include "passes/expand/Expand.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

namespace pipec::passes::expand {

namespace {

enum class Cell { Rnn, Gru, Lstm };

struct CellSpec {
  int gates;                            ///< blocks of H rows in W and R
  std::vector<std::string> activations; ///< defaults, one direction
  std::set<std::string> attributes;     ///< the op's attributes
};

const CellSpec &specOf(Cell c) {
  static const std::set<std::string> common{
      "activation_alpha", "activation_beta", "activations", "clip",
      "direction",        "hidden_size",     "layout"};
  static const CellSpec rnn{1, {"Tanh"}, common};
  static const CellSpec gru{3, {"Sigmoid", "Tanh"}, [] {
                              auto s = common;
                              s.insert("linear_before_reset");
                              return s;
                            }()};
  static const CellSpec lstm{4, {"Sigmoid", "Tanh", "Tanh"}, [] {
                               auto s = common;
                               s.insert("input_forget");
                               return s;
                             }()};
  return c == Cell::Rnn ? rnn : c == Cell::Gru ? gru : lstm;
}

/// One activation function with its alpha and beta.
struct Activation {
  std::string name; ///< lower case
  float alpha = 0.0f, beta = 0.0f;
};

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string joined(const std::vector<std::string> &v) {
  std::string s;
  for (const std::string &e : v)
    s += (s.empty() ? "" : ", ") + e;
  return s;
}

/// The activations ONNX allows in recurrent ops, with the scalars each
/// reads (how many alphas, betas) and their defaults.
struct ActivationKind {
  const char *name;
  int alphas, betas;
  float alpha, beta;
};
constexpr ActivationKind kActivations[] = {
    {"relu", 0, 0, 0, 0},
    {"tanh", 0, 0, 0, 0},
    {"sigmoid", 0, 0, 0, 0},
    {"affine", 1, 1, 1.0f, 0.0f},
    {"leakyrelu", 1, 0, 0.01f, 0},
    {"thresholdedrelu", 1, 0, 1.0f, 0},
    {"scaledtanh", 1, 1, 1.0f, 1.0f},
    {"hardsigmoid", 1, 1, 0.2f, 0.5f},
    {"elu", 1, 0, 1.0f, 0},
    {"softsign", 0, 0, 0, 0},
    {"softplus", 0, 0, 0, 0},
};

/// What one recurrent node computes, read and checked from its inputs and
/// attributes.
struct Recurrence {
  Cell cell;
  int64_t T = 0, B = 0, I = 0, H = 0, G = 0, D = 1;
  bool layout1 = false;
  std::vector<bool> reverse;    ///< per direction
  std::vector<Activation> acts; ///< the activations of each direction in turn
  std::optional<float> clip;
  bool inputForget = false, linearBeforeReset = false;
  DType dtype = DType::F32;
};

Expected<std::vector<Activation>> readActivations(Expansion &x, const CellSpec &spec, int64_t D) {
  const AttrMap &a = x.attrs();
  const size_t per = spec.activations.size();
  std::vector<std::string> names;
  if (const Attribute *at = attrFind(a, "activations")) {
    names = at->strings;
    if (names.size() != per * static_cast<size_t>(D))
      return x.error(cat("has ", names.size(), " activations; it takes ", per, " per direction (",
                         per * static_cast<size_t>(D), " for ", D, " direction", D == 1 ? "" : "s",
                         ")"));
  } else {
    for (int64_t d = 0; d < D; ++d)
      names.insert(names.end(), spec.activations.begin(), spec.activations.end());
  }
  std::vector<float> alphas, betas;
  if (const Attribute *at = attrFind(a, "activation_alpha"))
    alphas = at->floats;
  if (const Attribute *at = attrFind(a, "activation_beta"))
    betas = at->floats;
  // ONNX: the lists are consumed in the order of the activation functions,
  // each taking the scalars it uses (ONNX Runtime reads them so); a
  // function without its scalar in the list takes its op's default.
  size_t ai = 0, bi = 0;
  std::vector<Activation> acts;
  for (const std::string &n : names) {
    const std::string l = lower(n);
    const ActivationKind *k = nullptr;
    for (const ActivationKind &c : kActivations)
      if (l == c.name)
        k = &c;
    if (!k)
      return x.error(cat("activation '", n,
                         "' is not one of ONNX's recurrent activations (Relu, Tanh, Sigmoid, "
                         "Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
                         "Softsign, Softplus)"));
    Activation act{l, k->alpha, k->beta};
    if (k->alphas && ai < alphas.size())
      act.alpha = alphas[ai++];
    if (k->betas && bi < betas.size())
      act.beta = betas[bi++];
    acts.push_back(act);
  }
  if (ai < alphas.size() || bi < betas.size())
    return x.error(cat("activation_alpha has ", alphas.size(), " and activation_beta ",
                       betas.size(), " values, but its activations (", joined(names), ") read ", ai,
                       " and ", bi));
  return acts;
}

Expected<Recurrence> readRecurrence(Expansion &x, Cell cell) {
  const CellSpec &spec = specOf(cell);
  const AttrMap &a = x.attrs();
  Recurrence r;
  r.cell = cell;
  r.G = spec.gates;
  for (const auto &[name, value] : a)
    if (!spec.attributes.count(name))
      return x.error(
          cat("has attribute '", name, "', which ", x.node().opType(), " does not define"));
  ir::Value *X = x.input(0), *W = x.input(1), *R = x.input(2);
  if (!X || !W || !R)
    return x.error("needs its inputs X, W and R");
  r.dtype = X->dtype();
  if (r.dtype != DType::F32 && r.dtype != DType::F64)
    return x.error(
        cat("X is ", dtypeName(r.dtype), "; pipec unrolls recurrences in float and double"));
  const int64_t layout = attrInt(a, "layout", 0);
  if (attrHas(a, "layout") && x.nodeOpset() < 14)
    return x.error(cat("has attribute 'layout' (", layout, "), which was added in opset 14"));
  if (layout != 0 && layout != 1)
    return x.error(cat("layout is ", layout, "; it is 0 (time major) or 1 (batch major)"));
  r.layout1 = layout == 1;
  const std::string dir = attrString(a, "direction", "forward");
  if (dir == "forward" || dir == "reverse") {
    r.reverse = {dir == "reverse"};
  } else if (dir == "bidirectional") {
    r.reverse = {false, true};
  } else {
    return x.error(cat("direction is '", dir, "'; it is forward, reverse or bidirectional"));
  }
  r.D = static_cast<int64_t>(r.reverse.size());

  const Shape &xs = X->shape();
  if (xs.size() != 3)
    return x.error(cat("X is ", X->type().str(), "; it has rank 3 (",
                       r.layout1 ? "batch, sequence, input" : "sequence, batch, input", ")"));
  r.T = r.layout1 ? xs[1] : xs[0];
  r.B = r.layout1 ? xs[0] : xs[1];
  r.I = xs[2];
  if (r.T < 1)
    return x.error(cat("X is ", X->type().str(), ": a sequence of length ", r.T,
                       "; pipec unrolls over the sequence and needs at least one step"));
  const Shape &rs = R->shape();
  if (rs.size() != 3 || rs[0] != r.D || rs[1] != r.G * rs[2])
    return x.error(cat("R is ", R->type().str(), "; with ", r.D, " direction(s) it is [", r.D, ", ",
                       r.G, " x hidden_size, hidden_size]"));
  r.H = rs[2];
  const int64_t hs = attrInt(a, "hidden_size", r.H);
  if (hs != r.H)
    return x.error(
        cat("hidden_size is ", hs, " but R is ", R->type().str(), " (hidden size ", r.H, ")"));
  auto expect = [&](ir::Value *v, const char *what, const Shape &s) -> Status {
    if (!v)
      return Status::ok();
    if (v->shape() != s)
      return x.error(cat(what, " is ", v->type().str(), "; with X ", X->type().str(), " and R ",
                         R->type().str(), " it is ", shapeStr(s)));
    if (v->dtype() != r.dtype)
      return x.error(cat(what, " is ", dtypeName(v->dtype()), ", X is ", dtypeName(r.dtype)));
    return Status::ok();
  };
  const int64_t GH = r.G * r.H;
  PIPEC_TRY(expect(W, "W", {r.D, GH, r.I}));
  PIPEC_TRY(expect(R, "R", {r.D, GH, r.H}));
  PIPEC_TRY(expect(x.input(3), "B", {r.D, 2 * GH}));
  const Shape stateShape = r.layout1 ? Shape{r.B, r.D, r.H} : Shape{r.D, r.B, r.H};
  PIPEC_TRY(expect(x.input(5), "initial_h", stateShape));
  if (cell == Cell::Lstm) {
    PIPEC_TRY(expect(x.input(6), "initial_c", stateShape));
    PIPEC_TRY(expect(x.input(7), "P", {r.D, 3 * r.H}));
  } else if (x.node().numInputs() > 6) {
    return x.error(
        cat("has ", x.node().numInputs(), " inputs; ", x.node().opType(), " takes at most 6"));
  }
  if (ir::Value *sl = x.input(4)) {
    if (sl->shape() != Shape{r.B} || (sl->dtype() != DType::I32 && sl->dtype() != DType::I64))
      return x.error(cat("sequence_lens is ", sl->type().str(), "; it is int32[", r.B, "]"));
  }
  if (const Attribute *c = attrFind(a, "clip")) {
    if (!(c->f > 0.0f))
      return x.error(cat("clip is ", c->f,
                         "; it bounds the gates' inputs to [-clip, clip] "
                         "and must be positive"));
    r.clip = c->f;
  }
  r.inputForget = attrInt(a, "input_forget", 0) != 0;
  r.linearBeforeReset = attrInt(a, "linear_before_reset", 0) != 0;
  PIPEC_ASSIGN(r.acts, readActivations(x, spec, r.D));
  return r;
}

/// Emits the recurrence: the builder and the facts together.
class Unroller {
public:
  Unroller(Expansion &x, const Recurrence &r) : x_(x), r_(r) {}

  Status run();

private:
  Expected<ir::Value *> act(const Activation &a, ir::Value *v);
  Expected<ir::Value *> clip(ir::Value *v);
  /// act(clip(v)).
  Expected<ir::Value *> gate(const Activation &a, ir::Value *v) {
    PIPEC_ASSIGN(ir::Value * c, clip(v));
    return act(a, c);
  }
  /// Direction d of a [D, ...] value, as [...] (a view when D = 1).
  Expected<ir::Value *> direction(ir::Value *v, int64_t d);
  /// Rows [lo, hi) of a [D, N, K] value's direction d, as [hi - lo, K].
  Expected<ir::Value *> rows(ir::Value *v, int64_t d, int64_t lo, int64_t hi);
  /// Splits v along `axis` into pieces of `sizes` (Split's `split` is an
  /// attribute before opset 13, an input from 13; equal pieces name
  /// num_outputs from 18).
  Expected<std::vector<ir::Value *>> split(ir::Value *v, int64_t axis,
                                           const std::vector<int64_t> &sizes);
  /// Splits v [B, n * H] into n values [B, H].
  Expected<std::vector<ir::Value *>> splitGates(ir::Value *v, size_t n) {
    return split(v, 1, std::vector<int64_t>(n, r_.H));
  }
  /// Gemm(a, b^T, c) with the C ONNX requires before opset 11.
  Expected<ir::Value *> gemmT(ir::Value *a, ir::Value *b, ir::Value *c);
  /// One minus v.
  Expected<ir::Value *> oneMinus(ir::Value *v) { return x_.sub(x_.scalar(1.0, r_.dtype), v); }
  /// The masks of the steps (null where every sequence runs).
  Status masks();
  /// Stacks per-direction values [B, H] into [D, B, H] (layout 0) or
  /// [B, D, H] (layout 1).
  Expected<ir::Value *> stackDirections(const std::vector<ir::Value *> &v);

  Expansion &x_;
  const Recurrence &r_;
  std::vector<ir::Value *> mask_; ///< per time step, [B, 1] bool, or null
};

Expected<ir::Value *> Unroller::act(const Activation &a, ir::Value *v) {
  const std::string &n = a.name;
  if (n == "relu")
    return x_.emit("Relu", {v});
  if (n == "tanh")
    return x_.emit("Tanh", {v});
  if (n == "sigmoid")
    return x_.emit("Sigmoid", {v});
  if (n == "softsign")
    return x_.emit("Softsign", {v});
  if (n == "softplus")
    return x_.emit("Softplus", {v});
  if (n == "leakyrelu")
    return x_.emit("LeakyRelu", {v}, {{"alpha", Attribute::ofFloat(a.alpha)}});
  if (n == "elu")
    return x_.emit("Elu", {v}, {{"alpha", Attribute::ofFloat(a.alpha)}});
  if (n == "hardsigmoid")
    return x_.emit("HardSigmoid", {v},
                   {{"alpha", Attribute::ofFloat(a.alpha)}, {"beta", Attribute::ofFloat(a.beta)}});
  if (n == "affine") {
    PIPEC_ASSIGN(ir::Value * s, x_.scale(v, a.alpha));
    if (a.beta == 0.0f)
      return s;
    return x_.add(s, x_.scalar(a.beta, r_.dtype));
  }
  if (n == "scaledtanh") {
    PIPEC_ASSIGN(ir::Value * s, x_.scale(v, a.beta));
    PIPEC_ASSIGN(ir::Value * t, x_.emit("Tanh", {s}));
    return x_.scale(t, a.alpha);
  }
  if (n == "thresholdedrelu") {
    // x where x > alpha, else 0: Where's gradient reaches x where it is
    // taken (the op ThresholdedRelu has no gradient rule).
    PIPEC_ASSIGN(ir::Value * above, x_.emit("Greater", {v, x_.scalar(a.alpha, r_.dtype)}));
    return x_.emit("Where", {above, v, x_.scalar(0.0, r_.dtype)});
  }
  return x_.error(cat("internal error: activation '", n, "' has no lowering"));
}

Expected<ir::Value *> Unroller::clip(ir::Value *v) {
  if (!r_.clip)
    return v;
  const float c = *r_.clip;
  if (x_.opset() < 11)
    return x_.emit("Clip", {v}, {{"min", Attribute::ofFloat(-c)}, {"max", Attribute::ofFloat(c)}});
  return x_.emit("Clip", {v, x_.scalar(-c, r_.dtype), x_.scalar(c, r_.dtype)});
}

Expected<ir::Value *> Unroller::direction(ir::Value *v, int64_t d) {
  Shape rest(v->shape().begin() + 1, v->shape().end());
  ir::Value *s = v;
  if (r_.D > 1) {
    PIPEC_ASSIGN(s, x_.slice(v, {d}, {d + 1}, {0}));
  }
  return x_.reshape(s, rest);
}

Expected<ir::Value *> Unroller::rows(ir::Value *v, int64_t d, int64_t lo, int64_t hi) {
  PIPEC_ASSIGN(ir::Value * s, x_.slice(v, {d, lo}, {d + 1, hi}, {0, 1}));
  return x_.reshape(s, {hi - lo, v->shape()[2]});
}

Expected<std::vector<ir::Value *>> Unroller::split(ir::Value *v, int64_t axis,
                                                   const std::vector<int64_t> &sizes) {
  AttrMap attrs{{"axis", Attribute::ofInt(axis)}};
  std::vector<ir::Value *> in{v};
  const size_t n = sizes.size();
  if (std::count(sizes.begin(), sizes.end(), sizes[0]) != static_cast<long>(n)) {
    if (x_.opset() < 13)
      attrs["split"] = Attribute::ofInts(sizes);
    else
      in.push_back(x_.ints(sizes));
  } else if (x_.opset() >= 18) {
    attrs["num_outputs"] = Attribute::ofInt(static_cast<int64_t>(n));
  }
  return x_.emitN("Split", in, n, std::move(attrs));
}

Expected<ir::Value *> Unroller::gemmT(ir::Value *a, ir::Value *b, ir::Value *c) {
  if (!c && x_.opset() < 11)
    c = x_.scalar(0.0, r_.dtype);
  std::vector<ir::Value *> in{a, b};
  if (c)
    in.push_back(c);
  return x_.emit("Gemm", in, {{"transB", Attribute::ofInt(1)}});
}

Status Unroller::masks() {
  mask_.assign(static_cast<size_t>(r_.T), nullptr);
  ir::Value *sl = x_.input(4);
  if (!sl)
    return Status::ok();
  if (sl->isConstant()) {
    const Tensor &t = sl->constant();
    bool full = true;
    for (int64_t b = 0; b < r_.B; ++b) {
      const int64_t len = t.dtype() == DType::I32 ? t.data<int32_t>()[b] : t.data<int64_t>()[b];
      if (len < 0 || len > r_.T)
        return x_.error(
            cat("sequence_lens[", b, "] is ", len, "; the sequence has ", r_.T, " steps"));
      full = full && len == r_.T;
    }
    if (full)
      return Status::ok();
  }
  PIPEC_ASSIGN(ir::Value * lens, x_.reshape(sl, {r_.B, 1}));
  for (int64_t t = 0; t < r_.T; ++t) {
    Tensor step(sl->dtype(), {});
    if (sl->dtype() == DType::I32)
      *step.data<int32_t>() = static_cast<int32_t>(t);
    else
      *step.data<int64_t>() = t;
    PIPEC_ASSIGN(mask_[static_cast<size_t>(t)],
                 x_.emit("Greater", {lens, x_.constant(std::move(step))}));
  }
  return Status::ok();
}

Expected<ir::Value *> Unroller::stackDirections(const std::vector<ir::Value *> &v) {
  // [B, H] pieces: along axis 0 then [D, B, H]; along axis 1 then [B, D, H].
  PIPEC_ASSIGN(ir::Value * c, x_.concat(v, r_.layout1 ? 1 : 0));
  return x_.reshape(c, r_.layout1 ? Shape{r_.B, r_.D, r_.H} : Shape{r_.D, r_.B, r_.H});
}

Status Unroller::run() {
  const Recurrence &r = r_;
  const int64_t T = r.T, B = r.B, H = r.H, GH = r.G * r.H, D = r.D;
  ir::Value *X = x_.input(0), *W = x_.input(1), *R = x_.input(2), *Bias = x_.input(3);
  ir::Value *h0 = x_.input(5);
  ir::Value *c0 = r.cell == Cell::Lstm ? x_.input(6) : nullptr;
  ir::Value *P = r.cell == Cell::Lstm ? x_.input(7) : nullptr;
  const bool gruLbr = r.cell == Cell::Gru && r.linearBeforeReset;

  // Time major input and states.
  if (r.layout1) {
    PIPEC_ASSIGN(X, x_.transpose(X, {1, 0, 2}));
    if (h0) {
      PIPEC_ASSIGN(h0, x_.transpose(h0, {1, 0, 2}));
    }
    if (c0) {
      PIPEC_ASSIGN(c0, x_.transpose(c0, {1, 0, 2}));
    }
  }

  // The biases: Wb + Rb go into the input projection; GRU with
  // linear_before_reset keeps Rb's h block for the recurrent GEMM, whose
  // product the reset gate multiplies.
  ir::Value *biasX = nullptr, *biasR = nullptr; // [D * GH], [D, GH]
  if (Bias) {
    PIPEC_ASSIGN(ir::Value * wb, x_.slice(Bias, {0}, {GH}, {1}));
    PIPEC_ASSIGN(ir::Value * rb, x_.slice(Bias, {GH}, {2 * GH}, {1}));
    ir::Value *rbX = rb;
    if (gruLbr) {
      Tensor keep(r.dtype, {GH}), moved(r.dtype, {GH});
      for (int64_t i = 0; i < GH; ++i) {
        const double k = i < 2 * H ? 1.0 : 0.0;
        if (r.dtype == DType::F64) {
          keep.data<double>()[i] = k;
          moved.data<double>()[i] = 1.0 - k;
        } else {
          keep.data<float>()[i] = static_cast<float>(k);
          moved.data<float>()[i] = static_cast<float>(1.0 - k);
        }
      }
      PIPEC_ASSIGN(rbX, x_.mul(rb, x_.constant(std::move(keep))));
      PIPEC_ASSIGN(biasR, x_.mul(rb, x_.constant(std::move(moved))));
    }
    PIPEC_ASSIGN(ir::Value * sum, x_.add(wb, rbX));
    PIPEC_ASSIGN(biasX, x_.reshape(sum, {D * GH}));
  }

  // The input projection of every step and direction: [T * B, D * GH].
  PIPEC_ASSIGN(ir::Value * x2, x_.reshape(X, {T * B, r.I}));
  PIPEC_ASSIGN(ir::Value * w2, x_.reshape(W, {D * GH, r.I}));
  PIPEC_ASSIGN(ir::Value * xw, gemmT(x2, w2, biasX));
  // Cut into the steps' [B, D * GH] by one Split, and each into its
  // directions by another, not by Slices: a Slice's gradient is a Pad to
  // the whole input, and T of them summed made the backward pass quadratic
  // in T (2-layer LSTM, T = 64, B = 16, H = 256: Pad and Add took 223 of
  // 441 ms a step); a Split's gradient is one Concat.
  std::vector<ir::Value *> steps{xw};
  if (T > 1) {
    PIPEC_ASSIGN(steps, split(xw, 0, std::vector<int64_t>(static_cast<size_t>(T), B)));
  }
  std::vector<std::vector<ir::Value *>> stepDirs(static_cast<size_t>(T));
  auto stepRows = [&](int64_t t, int64_t d) -> Expected<ir::Value *> {
    std::vector<ir::Value *> &v = stepDirs[static_cast<size_t>(t)];
    if (D == 1)
      return steps[static_cast<size_t>(t)];
    if (v.empty()) {
      PIPEC_ASSIGN(v, split(steps[static_cast<size_t>(t)], 1,
                            std::vector<int64_t>(static_cast<size_t>(D), GH)));
    }
    return v[static_cast<size_t>(d)];
  };

  PIPEC_TRY(masks());
  // Where's zero for ended sequences (it broadcasts to [B, H]).
  ir::Value *zeroScalar = nullptr;
  auto zero = [&] {
    if (!zeroScalar)
      zeroScalar = x_.scalar(0.0, r.dtype);
    return zeroScalar;
  };

  const size_t perDir = specOf(r.cell).activations.size();
  std::vector<std::vector<ir::Value *>> ys(static_cast<size_t>(D));
  std::vector<ir::Value *> lastH, lastC;
  for (int64_t d = 0; d < D; ++d) {
    const Activation *a = &r.acts[static_cast<size_t>(d) * perDir];
    // The recurrent weights of this direction, [rows, H]: all gates, or
    // for GRU without linear_before_reset z and r apart from h.
    ir::Value *rAll = nullptr, *rZr = nullptr, *rH = nullptr;
    if (r.cell == Cell::Gru && !gruLbr) {
      PIPEC_ASSIGN(rZr, rows(R, d, 0, 2 * H));
      PIPEC_ASSIGN(rH, rows(R, d, 2 * H, 3 * H));
    } else {
      PIPEC_ASSIGN(rAll, direction(R, d));
    }
    ir::Value *rbD = nullptr;
    if (biasR) {
      PIPEC_ASSIGN(rbD, direction(biasR, d));
    }
    ir::Value *pi = nullptr, *po = nullptr, *pf = nullptr;
    if (P) {
      PIPEC_ASSIGN(ir::Value * pd, direction(P, d));
      PIPEC_ASSIGN(std::vector<ir::Value *> ps, split(pd, 0, {H, H, H}));
      pi = ps[0], po = ps[1], pf = ps[2];
    }
    // States; null is a state of zeros (no initial state, before the first
    // step): its GEMM and products are left out.
    ir::Value *h = nullptr, *c = nullptr;
    if (h0) {
      PIPEC_ASSIGN(h, direction(h0, d));
    }
    if (c0) {
      PIPEC_ASSIGN(c, direction(c0, d));
    }
    std::vector<ir::Value *> &y = ys[static_cast<size_t>(d)];
    y.assign(static_cast<size_t>(T), nullptr);
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = r.reverse[static_cast<size_t>(d)] ? T - 1 - s : s;
      PIPEC_ASSIGN(ir::Value * xt, stepRows(t, d)); // [B, GH]
      ir::Value *hNew = nullptr, *cNew = nullptr;
      if (r.cell == Cell::Rnn) {
        ir::Value *pre = xt;
        if (h) {
          PIPEC_ASSIGN(pre, gemmT(h, rAll, pre));
        }
        PIPEC_ASSIGN(hNew, gate(a[0], pre));
      } else if (r.cell == Cell::Lstm) {
        ir::Value *pre = xt;
        if (h) {
          PIPEC_ASSIGN(pre, gemmT(h, rAll, pre));
        }
        PIPEC_ASSIGN(std::vector<ir::Value *> g, splitGates(pre, 4)); // i, o, f, c
        ir::Value *gi = g[0], *go = g[1], *gf = g[2], *gc = g[3];
        if (P && c) {
          PIPEC_ASSIGN(ir::Value * pc, x_.mul(pi, c));
          PIPEC_ASSIGN(gi, x_.add(gi, pc));
          PIPEC_ASSIGN(ir::Value * fc, x_.mul(pf, c));
          PIPEC_ASSIGN(gf, x_.add(gf, fc));
        }
        PIPEC_ASSIGN(ir::Value * i, gate(a[0], gi));
        ir::Value *f = nullptr;
        if (r.inputForget) {
          PIPEC_ASSIGN(f, oneMinus(i));
        } else {
          PIPEC_ASSIGN(f, gate(a[0], gf));
        }
        PIPEC_ASSIGN(ir::Value * cand, gate(a[1], gc));
        PIPEC_ASSIGN(cNew, x_.mul(i, cand));
        if (c) {
          PIPEC_ASSIGN(ir::Value * kept, x_.mul(f, c));
          PIPEC_ASSIGN(cNew, x_.add(kept, cNew));
        }
        if (P) {
          PIPEC_ASSIGN(ir::Value * oc, x_.mul(po, cNew));
          PIPEC_ASSIGN(go, x_.add(go, oc));
        }
        PIPEC_ASSIGN(ir::Value * o, gate(a[0], go));
        PIPEC_ASSIGN(ir::Value * hc, act(a[2], cNew));
        PIPEC_ASSIGN(hNew, x_.mul(o, hc));
      } else {
        ir::Value *z = nullptr, *rg = nullptr, *hPre = nullptr;
        if (gruLbr) {
          PIPEC_ASSIGN(std::vector<ir::Value *> xg, splitGates(xt, 3));
          ir::Value *hz = nullptr, *hr = nullptr, *hh = rbD;
          if (h) {
            PIPEC_ASSIGN(ir::Value * rec, gemmT(h, rAll, rbD));
            PIPEC_ASSIGN(std::vector<ir::Value *> hg, splitGates(rec, 3));
            hz = hg[0], hr = hg[1], hh = hg[2];
          } else if (rbD) {
            PIPEC_ASSIGN(hh, x_.slice(rbD, {2 * H}, {3 * H}, {0}));
          }
          z = xg[0], rg = xg[1], hPre = xg[2];
          if (hz) {
            PIPEC_ASSIGN(z, x_.add(z, hz));
            PIPEC_ASSIGN(rg, x_.add(rg, hr));
          }
          PIPEC_ASSIGN(z, gate(a[0], z));
          PIPEC_ASSIGN(rg, gate(a[0], rg));
          if (hh) {
            PIPEC_ASSIGN(ir::Value * rh, x_.mul(rg, hh));
            PIPEC_ASSIGN(hPre, x_.add(hPre, rh));
          }
        } else {
          PIPEC_ASSIGN(std::vector<ir::Value *> parts, split(xt, 1, {2 * H, H}));
          ir::Value *zr = parts[0];
          hPre = parts[1];
          if (h) {
            PIPEC_ASSIGN(zr, gemmT(h, rZr, zr));
          }
          PIPEC_ASSIGN(std::vector<ir::Value *> zg, splitGates(zr, 2));
          PIPEC_ASSIGN(z, gate(a[0], zg[0]));
          PIPEC_ASSIGN(rg, gate(a[0], zg[1]));
          if (h) {
            PIPEC_ASSIGN(ir::Value * rh, x_.mul(rg, h));
            PIPEC_ASSIGN(hPre, gemmT(rh, rH, hPre));
          }
        }
        PIPEC_ASSIGN(ir::Value * cand, gate(a[1], hPre));
        // H = (1 - z) * cand + z * h.
        PIPEC_ASSIGN(ir::Value * keep, oneMinus(z));
        PIPEC_ASSIGN(hNew, x_.mul(keep, cand));
        if (h) {
          PIPEC_ASSIGN(ir::Value * zh, x_.mul(z, h));
          PIPEC_ASSIGN(hNew, x_.add(hNew, zh));
        }
      }
      ir::Value *out = hNew;
      if (ir::Value *m = mask_[static_cast<size_t>(t)]) {
        // A state of zeros before (null) keeps Y's zeros.
        PIPEC_ASSIGN(out, x_.emit("Where", {m, hNew, zero()}));
        ir::Value *hKept = out;
        if (h) {
          PIPEC_ASSIGN(hKept, x_.emit("Where", {m, hNew, h}));
        }
        hNew = hKept;
        if (cNew) {
          PIPEC_ASSIGN(cNew, x_.emit("Where", {m, cNew, c ? c : zero()}));
        }
      }
      y[static_cast<size_t>(t)] = out;
      h = hNew;
      c = cNew;
    }
    lastH.push_back(h);
    lastC.push_back(c);
  }

  // Y: [T, D, B, H] (layout 0) or [B, T, D, H] (layout 1), from the steps'
  // [B, H] concatenated along one axis and reshaped, which needs no copy
  // but the Concat.
  std::vector<ir::Value *> perDirY;
  for (int64_t d = 0; d < D; ++d) {
    PIPEC_ASSIGN(ir::Value * cat, x_.concat(ys[static_cast<size_t>(d)], r.layout1 ? 1 : 0));
    PIPEC_ASSIGN(ir::Value * y4,
                 x_.reshape(cat, r.layout1 ? Shape{B, T, 1, H} : Shape{T, 1, B, H}));
    perDirY.push_back(y4);
  }
  PIPEC_ASSIGN(ir::Value * Y, x_.concat(perDirY, r.layout1 ? 2 : 1));
  std::vector<ir::Value *> outs{Y};
  if (x_.numOutputs() > 1) {
    PIPEC_ASSIGN(ir::Value * yh, stackDirections(lastH));
    outs.push_back(yh);
  }
  if (x_.numOutputs() > 2) {
    PIPEC_ASSIGN(ir::Value * yc, stackDirections(lastC));
    outs.push_back(yc);
  }
  x_.setOutputs(std::move(outs));
  return Status::ok();
}

Status expandRecurrent(Expansion &x, Cell cell) {
  if (cell != Cell::Lstm && x.numOutputs() > 2)
    return x.error(cat("has ", x.numOutputs(), " outputs; ", x.node().opType(), " has Y and Y_h"));
  PIPEC_ASSIGN(Recurrence r, readRecurrence(x, cell));
  Unroller u(x, r);
  return u.run();
}

} // namespace

Status expandRnn(Expansion &x) { return expandRecurrent(x, Cell::Rnn); }
Status expandGru(Expansion &x) { return expandRecurrent(x, Cell::Gru); }
Status expandLstm(Expansion &x) { return expandRecurrent(x, Cell::Lstm); }

} // namespace pipec::passes::expand
