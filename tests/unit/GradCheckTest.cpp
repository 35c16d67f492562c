//===- tests/unit/GradCheckTest.cpp - Gradients against finite differences -===//
//
// One harness for every op with a gradient rule: each case builds a small
// float64 graph (the op on random trainable inputs), adds the scalar loss
// ReduceSum(Y * R) with a fixed random R, runs infer-shapes and
// differentiate(), evaluates the whole graph with the CPU kernels, and
// compares every parameter's gradient with central finite differences of
// the loss. Evaluation runs with ExecContext::training = true, so
// BatchNormalization without training_mode uses batch statistics, as in
// training. Per-case maximum errors are printed. Also: an MLP end to end,
// names and phases of the emitted nodes (BatchNormalization's dScale/dBias
// node is W), and the error for an op without a gradient rule.
// Over 700 lines: one case per op with a gradient rule, all on the one
// harness above.
//
//===----------------------------------------------------------------------===//
#include "ir/Text.h"
#include "passes/Autodiff.h"
#include "passes/Loss.h"
#include "passes/NodeEval.h"
#include "passes/ShapeInference.h"
#include "passes/TrainingPasses.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

using namespace pipec;

namespace {

/// Builds a test graph in float64.
class Builder {
public:
  explicit Builder(uint64_t seed, int64_t opset = 17) : rng_(seed) {
    g.setName("gradcheck");
    g.setOpset("", opset);
  }

  /// A trainable f64 parameter, values of magnitude in [lo, hi] with a
  /// random sign (away from 0, so kinks such as Relu's are not hit), or
  /// positive only.
  ir::Value *param(const std::string &name, const Shape &s, bool positive = false,
                   double lo = 0.2, double hi = 1.0) {
    Tensor t(DType::F64, s);
    std::uniform_real_distribution<double> mag(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = mag(rng_);
      t.data<double>()[i] = positive || (rng_() & 1) ? v : -v;
    }
    ir::Value *v = *g.addConstant(name, t);
    v->setTrainable(true);
    return v;
  }
  /// A non-trainable f64 constant with values in [-1, 1].
  ir::Value *data(const std::string &name, const Shape &s) {
    Tensor t(DType::F64, s);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<double>()[i] = u(rng_);
    return *g.addConstant(name, t);
  }
  ir::Value *f64s(const std::string &name, const std::vector<double> &v, const Shape &s) {
    Tensor t(DType::F64, s);
    for (size_t i = 0; i < v.size(); ++i)
      t.data<double>()[i] = v[i];
    return *g.addConstant(name, t);
  }
  ir::Value *ints(const std::string &name, const std::vector<int64_t> &v, const Shape &s) {
    Tensor t = Tensor::fromInts(v).reshaped(s);
    return *g.addConstant(name, t);
  }
  ir::Value *bools(const std::string &name, const std::vector<int> &v, const Shape &s) {
    Tensor t(DType::Bool, s);
    for (size_t i = 0; i < v.size(); ++i)
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
    return *g.addConstant(name, t);
  }
  /// Appends a node; returns its outputs.
  std::vector<ir::Value *> node(const std::string &op, const std::vector<ir::Value *> &in,
                                AttrMap attrs = {}, size_t outs = 1, const std::string &domain = "") {
    std::string name = g.uniqueNodeName(op);
    std::vector<std::string> names;
    for (size_t i = 0; i < outs; ++i)
      names.push_back(g.uniqueValueName(name + "_out"));
    auto n = g.addNode(name, op, domain, in, names, std::move(attrs));
    EXPECT_TRUE(n.isOk()) << n.status().message();
    return (*n)->outputs();
  }
  ir::Value *op(const std::string &op, const std::vector<ir::Value *> &in, AttrMap attrs = {}) {
    return node(op, in, std::move(attrs))[0];
  }

  ir::Graph g;
  std::mt19937_64 rng_;
};

/// Evaluates every node in order on the graph's constants.
Expected<std::map<const ir::Value *, Tensor>> evaluateGraph(const ir::Graph &g,
                                                            bool forwardOnly) {
  std::map<const ir::Value *, Tensor> env;
  for (ir::Value *c : g.constants())
    env[c] = c->constant();
  cpu::ExecContext ctx;
  ctx.training = true;
  for (ir::Node *n : g.nodes()) {
    if (forwardOnly && n->phase() != ir::Phase::Forward)
      continue;
    std::vector<Tensor> in;
    for (ir::Value *v : n->inputs())
      in.push_back(v ? env.at(v) : Tensor());
    auto out = cpu::evaluate(passes::opDescForNode(*n, g.opset(n->domain())), in, ctx);
    if (!out.isOk())
      return out.status();
    for (size_t i = 0; i < n->numOutputs(); ++i)
      env[n->output(i)] = (*out)[i];
  }
  return env;
}

struct CheckResult {
  double maxAbsErr = 0, maxRelErr = 0;
  int64_t checked = 0;
};

/// Adds loss = ReduceSum(Y * R), differentiates and compares with central
/// differences. Returns the largest errors.
/// With `keepAttentionProbs`, keep-attention-probs runs after autodiff
/// (and must rewrite something): the gradient then reads the forward's P.
CheckResult gradCheck(const std::string &label, Builder &b, ir::Value *y, double rtol = 1e-5,
                      bool keepAttentionProbs = false) {
  CheckResult res;
  ir::Graph &g = b.g;
  ir::Value *loss = y;
  if (y->producer() && (y->producer()->is("SoftmaxCrossEntropyLoss") ||
                        y->producer()->is("NegativeLogLikelihoodLoss")) &&
      attrString(y->producer()->attrs(), "reduction", "mean") != "none") {
    // Already scalar; use as is.
  } else {
    Status st = passes::inferShapes(g);
    EXPECT_TRUE(st.isOk()) << label << ": " << st.message();
    if (!st.isOk())
      return res;
    ir::Value *r = b.data("R", y->shape());
    ir::Value *m = b.op("Mul", {y, r});
    loss = b.op("ReduceSum", {m}, {{"keepdims", Attribute::ofInt(0)}});
  }
  Status st = passes::inferShapes(g);
  EXPECT_TRUE(st.isOk()) << label << ": " << st.message();
  if (!st.isOk())
    return res;
  auto grads = passes::differentiate(g, {loss->name()});
  EXPECT_TRUE(grads.isOk()) << label << ": " << grads.status().message();
  if (!grads.isOk())
    return res;
  auto env = evaluateGraph(g, false);
  EXPECT_TRUE(env.isOk()) << label << ": " << env.status().message() << "\n"
                          << ir::printGraph(g);
  if (!env.isOk())
    return res;
  EXPECT_FALSE(grads->empty()) << label;
  if (keepAttentionProbs) {
    auto changed = passes::createKeepAttentionProbsPass()->run(g);
    EXPECT_TRUE(changed.isOk() && *changed) << label << ": keep-attention-probs changed nothing";
    st = passes::inferShapes(g);
    EXPECT_TRUE(st.isOk()) << label << ": " << st.message();
  }
  auto lossAt = [&]() {
    auto e = evaluateGraph(g, true);
    EXPECT_TRUE(e.isOk()) << e.status().message();
    return e.isOk() ? e->at(loss).getDouble(0) : 0.0;
  };
  const double eps = 1e-6;
  for (const passes::GradientPair &p : *grads) {
    EXPECT_EQ(p.grad->name(), "grad/" + p.param->name());
    EXPECT_EQ(p.grad->type(), p.param->type());
    const Tensor &analytic = env->at(p.grad);
    Tensor data = p.param->constant(); // shares storage: perturbs in place
    double *x = data.data<double>();
    for (int64_t i = 0; i < data.numel(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + eps;
      const double up = lossAt();
      x[i] = x0 - eps;
      const double down = lossAt();
      x[i] = x0;
      const double numeric = (up - down) / (2 * eps);
      const double a = analytic.getDouble(i);
      const double err = std::abs(a - numeric);
      const double rel = err / std::max(1.0, std::max(std::abs(a), std::abs(numeric)));
      res.maxAbsErr = std::max(res.maxAbsErr, err);
      res.maxRelErr = std::max(res.maxRelErr, rel);
      ++res.checked;
      EXPECT_LE(rel, rtol) << label << ": d loss / d " << p.param->name() << "[" << i
                           << "]: autodiff " << a << ", finite differences " << numeric;
    }
  }
  std::printf("[gradcheck] %-40s %5lld elements  max abs err %.2e  max rel err %.2e\n",
              label.c_str(), static_cast<long long>(res.checked), res.maxAbsErr,
              res.maxRelErr);
  return res;
}

AttrMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> l) { return l; }
Attribute I(int64_t v) { return Attribute::ofInt(v); }
Attribute Is(std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); }
Attribute F(float v) { return Attribute::ofFloat(v); }
Attribute S(std::string v) { return Attribute::ofString(std::move(v)); }

//===--- (a) MLP ops ------------------------------------------------------===//

TEST(GradCheck, Gemm) {
  int seed = 1;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Shape &cs : {Shape{}, Shape{5}, Shape{1, 5}, Shape{3, 5}, Shape{3, 1}}) {
        Builder b(seed++);
        ir::Value *A = b.param("A", ta ? Shape{4, 3} : Shape{3, 4});
        ir::Value *B = b.param("B", tb ? Shape{5, 4} : Shape{4, 5});
        ir::Value *C = b.param("C", cs);
        ir::Value *y = b.op("Gemm", {A, B, C},
                            attrs({{"transA", I(ta)}, {"transB", I(tb)}, {"alpha", F(0.75f)},
                                   {"beta", F(1.25f)}}));
        gradCheck(cat("Gemm transA=", ta, " transB=", tb, " C", shapeStr(cs)), b, y);
      }
  Builder b(99);
  ir::Value *y = b.op("Gemm", {b.param("A", {2, 3}), b.param("B", {3, 4})});
  gradCheck("Gemm without C", b, y);
  Builder old(98, 9);
  ir::Value *y9 = old.op("Gemm", {old.param("A", {2, 3}), old.param("B", {3, 4}),
                                  old.param("C", {4})});
  gradCheck("Gemm opset 9", old, y9);
}

TEST(GradCheck, MatMul) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},       {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
      {{4}, {4, 5}},          {{3, 4}, {4}},       {{4}, {4}},
      {{2, 3, 4}, {4}},       {{4}, {2, 4, 3}},    {{2, 3, 4}, {2, 4, 5}}};
  int seed = 10;
  for (const auto &[as, bs] : cases) {
    Builder b(seed++);
    ir::Value *y = b.op("MatMul", {b.param("A", as), b.param("B", bs)});
    gradCheck(cat("MatMul ", shapeStr(as), " x ", shapeStr(bs)), b, y);
  }
}

TEST(GradCheck, Binary) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 3}, {4, 1}}, {{3}, {2, 3}}, {{2, 3}, {}}};
  int seed = 30;
  for (const char *op : {"Add", "Sub", "Mul", "Div"})
    for (const auto &[as, bs] : shapes) {
      Builder b(seed++);
      bool div = std::string(op) == "Div";
      ir::Value *y = b.op(op, {b.param("A", as), b.param("B", bs, div, 0.5, 1.5)});
      gradCheck(cat(op, " ", shapeStr(as), " ", shapeStr(bs)), b, y);
    }
  // One operand not trainable: only the other gets a gradient.
  Builder b(40);
  ir::Value *y = b.op("Mul", {b.param("A", {2, 3}), b.data("X", {3})});
  gradCheck("Mul with a constant", b, y);
}

TEST(GradCheck, Unary) {
  int seed = 50;
  for (const char *op : {"Relu", "Identity", "Neg", "Sqrt", "Exp", "Log", "Tanh", "Sigmoid",
                         "Erf"}) {
    Builder b(seed++);
    std::string o = op;
    bool positive = o == "Sqrt" || o == "Log";
    ir::Value *y = b.op(op, {b.param("X", {3, 4}, positive)});
    gradCheck(op, b, y);
  }
}

TEST(GradCheck, Activations) {
  struct Case {
    const char *op;
    AttrMap a;
    bool positive;
  };
  const Case cases[] = {
      {"Abs", {}, false},
      {"Reciprocal", {}, false},
      {"Sin", {}, false},
      {"Cos", {}, false},
      {"Softplus", {}, false},
      {"Softsign", {}, false},
      {"LeakyRelu", {}, false},
      {"LeakyRelu", attrs({{"alpha", F(0.25f)}}), false},
      {"Elu", {}, false},
      {"Elu", attrs({{"alpha", F(0.5f)}}), false},
      {"Selu", {}, false},
      {"Selu", attrs({{"alpha", F(1.5f)}, {"gamma", F(0.75f)}}), false},
      {"HardSigmoid", {}, false},
      // alpha 2: the elements with |x| > 0.25 are clamped.
      {"HardSigmoid", attrs({{"alpha", F(2.0f)}, {"beta", F(0.5f)}}), false},
  };
  int seed = 400;
  for (const Case &cs : cases) {
    Builder b(seed++);
    ir::Value *y = b.op(cs.op, {b.param("X", {3, 4}, cs.positive)}, cs.a);
    std::string label = cs.op;
    for (const auto &[k, v] : cs.a)
      label += cat(" ", k, "=", v.f);
    gradCheck(label, b, y);
  }
}

TEST(GradCheck, Clip) {
  // Bounds -0.5 and 0.6 cut some of the |x| in [0.2, 1] elements.
  {
    Builder b(420, 13);
    ir::Value *y = b.op("Clip", {b.param("X", {3, 4}), b.f64s("lo", {-0.5}, {}),
                                 b.f64s("hi", {0.6}, {})});
    gradCheck("Clip opset 13 min and max inputs", b, y);
  }
  {
    Builder b(421, 13);
    ir::Value *y = b.op("Clip", {b.param("X", {3, 4}), nullptr, b.f64s("hi", {0.6}, {})});
    gradCheck("Clip opset 13 max only", b, y);
  }
  {
    Builder b(422, 11);
    ir::Value *y = b.op("Clip", {b.param("X", {3, 4}), b.f64s("lo", {-0.5}, {})});
    gradCheck("Clip opset 11 min only", b, y);
  }
  {
    Builder b(423, 13);
    ir::Value *y = b.op("Clip", {b.param("X", {3, 4})});
    gradCheck("Clip opset 13 no bounds", b, y);
  }
  {
    Builder b(424, 10);
    ir::Value *y =
        b.op("Clip", {b.param("X", {3, 4})}, attrs({{"min", F(-0.5f)}, {"max", F(0.6f)}}));
    gradCheck("Clip opset 10 min and max attributes", b, y);
  }
  {
    Builder b(425, 10);
    ir::Value *y = b.op("Clip", {b.param("X", {3, 4})}, attrs({{"max", F(0.6f)}}));
    gradCheck("Clip opset 10 max attribute", b, y);
  }
  {
    // Trainable bounds: each one's gradient is dy summed where it clips.
    Builder b(426, 13);
    ir::Value *y = b.op("Clip", {b.param("X", {3, 4}), b.param("lo", {}), b.param("hi", {})});
    gradCheck("Clip opset 13 trainable bounds", b, y);
  }
  {
    // A bound computed from the input (the gradient reaches x both ways).
    Builder b(427, 13);
    ir::Value *x = b.param("X", {3, 4});
    ir::Value *lo = b.op("Mul", {b.op("ReduceMean", {x}, {{"keepdims", I(0)}}), b.f64s("half", {0.5}, {})});
    ir::Value *y = b.op("Clip", {x, lo, b.f64s("hi", {0.6}, {})});
    gradCheck("Clip opset 13 min computed from the input", b, y);
  }
}

TEST(GradCheck, Cast) {
  {
    Builder b(430);
    ir::Value *y = b.op("Cast", {b.param("X", {3, 4})}, attrs({{"to", I(11)}}));
    gradCheck("Cast f64->f64", b, y);
  }
  // f64 -> f32 -> f64: finite differences through float rounding are too
  // coarse, so compare with the exact gradient, R rounded to float.
  Builder b(431);
  ir::Value *x = b.param("X", {3, 4});
  ir::Value *y = b.op("Cast", {b.op("Cast", {x}, attrs({{"to", I(1)}}))}, attrs({{"to", I(11)}}));
  ir::Value *r = b.data("R", {3, 4});
  ir::Value *l = b.op("ReduceSum", {b.op("Mul", {y, r})}, {{"keepdims", I(0)}});
  ASSERT_TRUE(passes::inferShapes(b.g).isOk());
  auto grads = passes::differentiate(b.g, {l->name()});
  ASSERT_TRUE(grads.isOk()) << grads.status().message();
  auto env = evaluateGraph(b.g, false);
  ASSERT_TRUE(env.isOk()) << env.status().message();
  const Tensor &gx = env->at((*grads)[0].grad);
  double maxErr = 0;
  for (int64_t i = 0; i < gx.numel(); ++i) {
    const double want = static_cast<float>(r->constant().getDouble(i));
    maxErr = std::max(maxErr, std::abs(gx.getDouble(i) - want));
  }
  EXPECT_EQ(maxErr, 0.0);
  std::printf("[gradcheck] %-40s %5d elements  max abs err %.2e (exact check)\n",
              "Cast f64->f32->f64", 12, maxErr);
}

TEST(GradCheck, Pow) {
  int seed = 60;
  for (double e : {2.0, 3.0, 0.5, -1.5}) {
    Builder b(seed++);
    ir::Value *y = b.op("Pow", {b.param("X", {3, 4}, true, 0.5, 1.5), b.f64s("E", {e}, {})});
    gradCheck(cat("Pow exponent ", e), b, y);
  }
  Builder b(65);
  ir::Value *y = b.op("Pow", {b.param("X", {2, 3}, true, 0.5, 1.5), b.f64s("E", {1, 2, 3}, {3})});
  gradCheck("Pow exponent [1,2,3]", b, y);
  // A trained exponent (a learned power, a computed bound): its gradient
  // y log x, summed over the broadcast.
  Builder t(66);
  ir::Value *yt = t.op("Pow", {t.param("X", {2, 3}, true, 0.5, 1.5), t.param("E", {3}, true, -1.0, 2.0)});
  gradCheck("Pow trained exponent [3]", t, yt);
  Builder s(67);
  ir::Value *ys = s.op("Pow", {s.param("X", {4}, true, 0.5, 2.0), s.param("E", {}, true, 0.5, 2.5)});
  gradCheck("Pow trained scalar exponent", s, ys);
}

TEST(GradCheck, Reduce) {
  int seed = 70;
  for (const char *op : {"ReduceSum", "ReduceMean"})
    for (int64_t opset : {11, 13, 18})
      for (int keep = 0; keep < 2; ++keep)
        for (const std::vector<int64_t> &axes : {std::vector<int64_t>{1},
                                                 std::vector<int64_t>{0, -1},
                                                 std::vector<int64_t>{}}) {
          Builder b(seed++, opset);
          ir::Value *x = b.param("X", {2, 3, 4});
          AttrMap a = {{"keepdims", I(keep)}};
          std::vector<ir::Value *> in = {x};
          bool axesInput = opset >= (std::string(op) == "ReduceSum" ? 13 : 18);
          if (!axes.empty()) {
            if (axesInput)
              in.push_back(b.ints("axes", axes, {static_cast<int64_t>(axes.size())}));
            else
              a["axes"] = Is(axes);
          }
          ir::Value *y = b.op(op, in, a);
          gradCheck(cat(op, " opset ", opset, " keepdims=", keep, " axes=", axes.size()), b, y);
        }
}

TEST(GradCheck, Variadic) {
  // Broadcast shapes; the third operand (when present) is a constant.
  const std::vector<std::vector<Shape>> shapes = {
      {{2, 3}}, {{2, 3}, {2, 3}}, {{2, 3}, {3}, {2, 1}}, {{3}, {2, 1, 3}}, {{2, 3}, {}, {1, 3}}};
  int seed = 440;
  for (const char *op : {"Max", "Min", "Sum", "Mean"})
    for (const std::vector<Shape> &ss : shapes) {
      Builder b(seed++);
      std::vector<ir::Value *> in;
      std::string label = op;
      for (size_t i = 0; i < ss.size(); ++i) {
        in.push_back(i == 2 ? b.data(cat("K", i), ss[i]) : b.param(cat("X", i), ss[i]));
        label += ' ';
        label += shapeStr(ss[i]);
      }
      gradCheck(label, b, b.op(op, in));
    }
  // Ties: Max(X, X) and Min(X, X, X) route all of dY to the first input.
  for (const char *op : {"Max", "Min"}) {
    Builder b(seed++);
    ir::Value *x = b.param("X", {2, 3});
    ir::Value *y = b.op(op, {x, x, x});
    gradCheck(cat(op, " ties (same input thrice)"), b, y);
  }
}

TEST(GradCheck, ReduceOthers) {
  int seed = 470;
  for (const char *op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSumExp", "ReduceSumSquare"})
    for (int64_t opset : {13, 18})
      for (int keep = 0; keep < 2; ++keep)
        for (const std::vector<int64_t> &axes :
             {std::vector<int64_t>{1}, std::vector<int64_t>{0, -1}, std::vector<int64_t>{}}) {
          Builder b(seed++, opset);
          ir::Value *x = b.param("X", {2, 3, 4});
          AttrMap a = {{"keepdims", I(keep)}};
          std::vector<ir::Value *> in = {x};
          if (!axes.empty()) {
            if (opset >= 18)
              in.push_back(b.ints("axes", axes, {static_cast<int64_t>(axes.size())}));
            else
              a["axes"] = Is(axes);
          }
          ir::Value *y = b.op(op, in, a);
          gradCheck(cat(op, " opset ", opset, " keepdims=", keep, " axes=",
                        axes.empty() ? std::string("all") : shapeStr(axes)),
                    b, y);
        }
  // noop_with_empty_axes: elementwise (identity, |x| or x^2).
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"}) {
    Builder b(seed++, 18);
    ir::Value *y = b.op(op, {b.param("X", {2, 3})},
                        attrs({{"noop_with_empty_axes", I(1)}, {"keepdims", I(0)}}));
    gradCheck(cat(op, " noop_with_empty_axes"), b, y);
  }
  // Ties share dY: the maximum of [X, X] along the doubled axis.
  for (const char *op : {"ReduceMax", "ReduceMin"}) {
    Builder b(seed++, 13);
    ir::Value *x = b.param("X", {2, 3});
    ir::Value *xx = b.op("Concat", {x, x}, attrs({{"axis", I(1)}}));
    ir::Value *y = b.op(op, {xx}, attrs({{"axes", Is({1})}, {"keepdims", I(0)}}));
    gradCheck(cat(op, " ties"), b, y);
  }
  // ReduceProd over slices holding zero, one and two zeros.
  {
    Builder b(seed++, 18);
    ir::Value *x = b.param("X", {3, 4});
    ir::Value *z = b.f64s("Z", {1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 1}, {3, 4});
    ir::Value *y = b.op("ReduceProd", {b.op("Mul", {x, z}), b.ints("axes", {1}, {1})},
                        attrs({{"keepdims", I(1)}}));
    gradCheck("ReduceProd with zeros", b, y);
  }
  // ReduceL2 of an all-zero slice: gradient 0, not NaN.
  {
    Builder b(seed++, 11);
    ir::Value *x = b.param("X", {2, 3});
    ir::Value *z = b.f64s("Z", {0, 0, 0, 1, 1, 1}, {2, 3});
    ir::Value *xz = b.op("Mul", {x, z});
    ir::Value *y = b.op("ReduceL2", {xz}, attrs({{"axes", Is({1})}, {"keepdims", I(0)}}));
    // A smooth term on the same X keeps every element's gradient finite.
    ir::Value *s = b.op("Add", {y, b.op("ReduceSum", {x}, attrs({{"axes", Is({1})},
                                                                   {"keepdims", I(0)}}))});
    ASSERT_TRUE(passes::inferShapes(b.g).isOk());
    ir::Value *r = b.data("R", {2});
    ir::Value *l = b.op("ReduceSum", {b.op("Mul", {s, r})}, {{"keepdims", I(0)}});
    ASSERT_TRUE(passes::inferShapes(b.g).isOk());
    auto grads = passes::differentiate(b.g, {l->name()});
    ASSERT_TRUE(grads.isOk()) << grads.status().message();
    auto env = evaluateGraph(b.g, false);
    ASSERT_TRUE(env.isOk()) << env.status().message();
    const Tensor &gx = env->at((*grads)[0].grad);
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(gx.getDouble(i), r->constant().getDouble(0)) << i;
  }
}

TEST(GradCheck, Where) {
  Builder b(80);
  ir::Value *cond = b.bools("cond", {1, 0, 1}, {3});
  ir::Value *y = b.op("Where", {cond, b.param("A", {2, 3}), b.param("B", {2, 1})});
  gradCheck("Where broadcast", b, y);
}

void lossCase(const std::string &op, const std::string &reduction, bool weights,
              bool ignore, bool spatial, int seed) {
  Builder b(seed);
  const Shape xs = spatial ? Shape{2, 4, 3} : Shape{5, 4};
  const Shape ts = spatial ? Shape{2, 3} : Shape{5};
  std::vector<int64_t> labels = spatial ? std::vector<int64_t>{0, 3, 2, 1, 1, 2}
                                        : std::vector<int64_t>{0, 3, 2, 1, 3};
  ir::Value *x = b.param("X", xs);
  if (op == "NegativeLogLikelihoodLoss")
    x = b.op("LogSoftmax", {x}, attrs({{"axis", I(1)}}));
  std::vector<ir::Value *> in = {x, b.ints("labels", labels, ts)};
  if (weights)
    in.push_back(b.f64s("W", {0.5, 1.0, 2.0, 1.5}, {4}));
  AttrMap a = {{"reduction", S(reduction)}};
  if (ignore)
    a["ignore_index"] = I(3);
  ir::Value *y = b.op(op, in, a);
  gradCheck(cat(op, " ", reduction, weights ? " weights" : "", ignore ? " ignore_index" : "",
                spatial ? " [N,C,d]" : ""),
            b, y);
}

TEST(GradCheck, SoftmaxCrossEntropyLoss) {
  int seed = 90;
  for (const char *r : {"mean", "sum", "none"})
    for (int w = 0; w < 2; ++w)
      for (int ig = 0; ig < 2; ++ig)
        for (int sp = 0; sp < 2; ++sp)
          lossCase("SoftmaxCrossEntropyLoss", r, w, ig, sp, seed++);
}

TEST(GradCheck, NegativeLogLikelihoodLoss) {
  int seed = 120;
  for (const char *r : {"mean", "sum", "none"})
    for (int w = 0; w < 2; ++w)
      for (int ig = 0; ig < 2; ++ig, ++seed)
        lossCase("NegativeLogLikelihoodLoss", r, w, ig, seed % 2 == 0, seed);
}

//===--- (b) GPT ops ------------------------------------------------------===//

TEST(GradCheck, Softmax) {
  int seed = 140;
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (int64_t opset : {11, 13})
      for (int64_t axis : {0, 1, -1}) {
        Builder b(seed++, opset);
        ir::Value *y = b.op(op, {b.param("X", {2, 3, 4})}, attrs({{"axis", I(axis)}}));
        gradCheck(cat(op, " opset ", opset, " axis ", axis), b, y);
      }
}

// pipec:MaskedSoftmax (fuse-masked-softmax): the mask broadcast over the
// leading axes or along the rows, filling where it is true or false, with
// a scale; every row keeps an unmasked element.
TEST(GradCheck, MaskedSoftmax) {
  int seed = 150;
  for (int fillWhen : {1, 0})
    for (const Shape &mask : {Shape{3, 5}, Shape{3, 1}, Shape{1, 1, 5}}) {
      Builder b(seed++);
      std::vector<int> m;
      const int64_t n = mask[0] * (mask.size() > 1 ? mask[1] : 1) * (mask.size() > 2 ? mask[2] : 1);
      for (int64_t i = 0; i < n; ++i)
        m.push_back(mask.back() == 1 || i % 5 == 0 ? 1 - fillWhen : (i * 7 + seed) % 3 == 0 ? fillWhen : 1 - fillWhen);
      AttrMap a = attrs({{"scale", F(0.7)}, {"fill", F(-INFINITY)}, {"fill_when", I(fillWhen)}});
      ir::Value *y = b.node("MaskedSoftmax", {b.param("X", {2, 3, 5}), b.bools("M", m, mask)}, a, 1, "pipec")[0];
      gradCheck(cat("MaskedSoftmax mask ", shapeStr(mask), " fill_when ", fillWhen), b, y);
    }
}

// pipec:Attention (fuse-attention): dQ, dKT and dV from one
// pipec:AttentionGrad, unmasked, with an additive mask broadcast over the
// heads, and with a causal bool mask (every row keeps its first key).
TEST(GradCheck, Attention) {
  int seed = 155;
  // Every row of the [4, 6] scores keeps its first two keys.
  std::vector<int> causal;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j)
      causal.push_back(j > i + 1 ? 1 : 0);
  // Also with the gradient reading the forward's probabilities
  // (keep-attention-probs).
  for (bool keepProbs : {false, true})
    for (const char *kind : {"none", "add", "bool"}) {
      Builder b(seed++);
      std::vector<ir::Value *> in{b.param("Q", {2, 3, 4, 5}), b.param("KT", {2, 3, 5, 6}), b.param("V", {2, 3, 6, 2})};
      AttrMap a = attrs({{"scale", F(0.6)}, {"mask", S(kind)}});
      if (std::string(kind) == "add") {
        in.push_back(b.data("M", {1, 4, 6}));
      } else if (std::string(kind) == "bool") {
        in.push_back(b.bools("M", causal, {4, 6}));
        a = attrs({{"scale", F(0.6)}, {"mask", S(kind)}, {"fill", F(-INFINITY)}, {"fill_when", I(1)}});
      }
      ir::Value *y = b.node("Attention", in, a, 1, "pipec")[0];
      gradCheck(cat("Attention ", keepProbs ? "kept P mask " : "mask ", kind), b, y, 1e-5, keepProbs);
    }
  // heads_inner: Q [n, s, h, d], K [n, t, h, d], V [n, t, h, dv] -> O [n, s, h, dv].
  for (const char *kind : {"none", "bool"}) {
    Builder b(seed++);
    std::vector<ir::Value *> in{b.param("Q", {2, 4, 3, 5}), b.param("K", {2, 6, 3, 5}), b.param("V", {2, 6, 3, 2})};
    AttrMap a = attrs({{"scale", F(0.6)}, {"mask", S(kind)}, {"heads_inner", I(1)}});
    if (std::string(kind) == "bool") {
      in.push_back(b.bools("M", causal, {4, 6}));
      a["fill"] = F(-INFINITY);
      a["fill_when"] = I(1);
    }
    ir::Value *y = b.node("Attention", in, a, 1, "pipec")[0];
    gradCheck(cat("Attention heads_inner mask ", kind), b, y);
  }
}

TEST(GradCheck, LayerNormalization) {
  int seed = 160;
  for (int64_t axis : {-1, 1}) {
    Builder b(seed++);
    Shape norm = axis == -1 ? Shape{4} : Shape{3, 4};
    ir::Value *y = b.op("LayerNormalization",
                        {b.param("X", {2, 3, 4}), b.param("scale", norm), b.param("bias", norm)},
                        attrs({{"axis", I(axis)}, {"epsilon", F(1e-5f)}}));
    gradCheck(cat("LayerNormalization axis ", axis), b, y);
  }
  // X, scale and bias all trained: one LayerNormalizationGrad with three
  // outputs (checked above); X fixed: LayerNormalizationScaleGrad and a
  // ReduceSum; 40 rows: two row blocks of the fused node's column sums.
  {
    Builder b(seed++);
    ir::Value *y = b.op("LayerNormalization", {b.data("X", {2, 3, 4}), b.param("scale", {4}), b.param("bias", {4})},
                        attrs({{"axis", I(-1)}, {"epsilon", F(1e-5f)}}));
    gradCheck("LayerNormalization of data", b, y);
  }
  {
    Builder b(seed++);
    ir::Value *y = b.op("LayerNormalization", {b.param("X", {40, 3}), b.param("scale", {3}), b.param("bias", {3})},
                        attrs({{"axis", I(-1)}, {"epsilon", F(1e-5f)}}));
    gradCheck("LayerNormalization 40 rows", b, y);
  }
}

TEST(GradCheck, Gelu) {
  int seed = 170;
  for (const char *a : {"none", "tanh"}) {
    Builder b(seed++, 20);
    ir::Value *y = b.op("Gelu", {b.param("X", {3, 4})}, attrs({{"approximate", S(a)}}));
    gradCheck(cat("Gelu approximate=", a), b, y);
  }
}

TEST(GradCheck, DataMovement) {
  {
    Builder b(180);
    ir::Value *y = b.op("Transpose", {b.param("X", {2, 3, 4})}, attrs({{"perm", Is({1, 2, 0})}}));
    gradCheck("Transpose perm [1,2,0]", b, y);
  }
  {
    Builder b(181);
    ir::Value *y = b.op("Transpose", {b.param("X", {2, 3})});
    gradCheck("Transpose default", b, y);
  }
  {
    Builder b(182);
    ir::Value *y = b.op("Reshape", {b.param("X", {2, 3, 4}), b.ints("s", {6, -1}, {2})});
    gradCheck("Reshape", b, y);
  }
  {
    Builder b(183);
    ir::Value *y = b.op("Flatten", {b.param("X", {2, 3, 4})}, attrs({{"axis", I(2)}}));
    gradCheck("Flatten axis 2", b, y);
  }
  {
    Builder b(184);
    ir::Value *u = b.op("Unsqueeze", {b.param("X", {2, 3}), b.ints("a", {0, 3}, {2})});
    ir::Value *y = b.op("Squeeze", {b.op("Tanh", {u}), b.ints("a2", {0}, {1})});
    gradCheck("Unsqueeze + Squeeze", b, y);
  }
  {
    Builder b(185);
    ir::Value *emb = b.param("E", {5, 3});
    ir::Value *y = b.op("Gather", {emb, b.ints("idx", {1, 4, 1, 0, 1, 2}, {2, 3})});
    gradCheck("Gather (embedding, repeated ids)", b, y);
  }
  {
    Builder b(186);
    ir::Value *y = b.op("Gather", {b.param("X", {2, 4, 3}), b.ints("idx", {3, -1, 0}, {3})},
                        attrs({{"axis", I(1)}}));
    gradCheck("Gather axis 1, negative index", b, y);
  }
  {
    Builder b(187);
    ir::Value *y = b.op("Concat", {b.param("A", {2, 3}), b.data("K", {2, 1}), b.param("B", {2, 2})},
                        attrs({{"axis", I(-1)}}));
    gradCheck("Concat axis -1", b, y);
  }
  {
    Builder b(188);
    auto outs = b.node("Split", {b.param("X", {2, 6}), b.ints("sp", {1, 2, 3}, {3})},
                       attrs({{"axis", I(1)}}), 3);
    // Use two of the three outputs: the third gets a zero gradient.
    ir::Value *y = b.op("Concat", {b.op("Exp", {outs[0]}), outs[2]}, attrs({{"axis", I(1)}}));
    gradCheck("Split (one output unused)", b, y);
  }
  {
    Builder b(189);
    ir::Value *y = b.op("Slice", {b.param("X", {4, 5}), b.ints("st", {1, -4}, {2}),
                                  b.ints("en", {3, 100}, {2}), b.ints("ax", {0, 1}, {2})});
    gradCheck("Slice", b, y);
  }
  {
    Builder b(190);
    ir::Value *y = b.op("Expand", {b.param("X", {3, 1}), b.ints("sh", {2, 3, 4}, {3})});
    gradCheck("Expand", b, y);
  }
}

TEST(GradCheck, Pad) {
  {
    Builder b(500, 13);
    ir::Value *y = b.op("Pad", {b.param("X", {2, 3}), b.ints("p", {1, 0, 2, 3}, {4}),
                                b.f64s("v", {0.5}, {})});
    gradCheck("Pad opset 13 constant value", b, y);
  }
  {
    // The constant is trainable too: its gradient sums dY over the padding.
    Builder b(501, 13);
    ir::Value *y = b.op("Pad", {b.param("X", {2, 3}), b.ints("p", {0, 1, 1, 2}, {4}),
                                b.param("v", {})});
    gradCheck("Pad opset 13 trainable constant", b, y);
  }
  {
    Builder b(502, 13);
    ir::Value *y = b.op("Pad", {b.param("X", {3, 4}), b.ints("p", {-1, 2, 1, -2}, {4})});
    gradCheck("Pad opset 13 negative pads (crop)", b, y);
  }
  {
    Builder b(503, 18);
    ir::Value *y = b.op("Pad", {b.param("X", {2, 3, 2}), b.ints("p", {1, 2}, {2}), nullptr,
                                b.ints("axes", {-2}, {1})});
    gradCheck("Pad opset 18 axes input", b, y);
  }
  {
    Builder b(504, 10);
    ir::Value *y = b.op("Pad", {b.param("X", {2, 3})},
                        attrs({{"pads", Is({1, 1, 0, 2})}, {"value", F(1.5f)}}));
    gradCheck("Pad opset 10 attributes", b, y);
  }
  for (const char *mode : {"reflect", "edge"}) {
    Builder b(505, 13);
    ir::Value *y = b.op("Pad", {b.param("X", {3, 3}), b.ints("p", {1, 1, 1, 1}, {4})},
                        attrs({{"mode", S(mode)}}));
    ir::Value *l = b.op("ReduceSum", {y}, {{"keepdims", I(0)}});
    ASSERT_TRUE(passes::inferShapes(b.g).isOk());
    auto grads = passes::differentiate(b.g, {l->name()});
    ASSERT_FALSE(grads.isOk());
    EXPECT_NE(grads.status().message().find(
                  cat("node 'Pad' (Pad, opset 13): mode '", mode, "' is not differentiated")),
              std::string::npos)
        << grads.status().message();
  }
}

TEST(GradCheck, Tile) {
  int seed = 510;
  for (const std::vector<int64_t> &reps :
       {std::vector<int64_t>{2, 3}, std::vector<int64_t>{1, 2}, std::vector<int64_t>{1, 1}}) {
    Builder b(seed++);
    ir::Value *y = b.op("Tile", {b.param("X", {2, 3}), b.ints("r", reps, {2})});
    gradCheck(cat("Tile repeats ", shapeStr(reps)), b, y);
  }
  Builder b(seed++);
  ir::Value *y = b.op("Tile", {b.param("X", {2, 1, 3}), b.ints("r", {2, 4, 1}, {3})});
  gradCheck("Tile [2,1,3] repeats [2,4,1]", b, y);
}

/// Resize (and Upsample): linear in X, so dX = A^T dY (pipec:ResizeGrad)
/// for every mode and coordinate transformation, up and down.
TEST(GradCheck, Resize) {
  struct Case {
    std::string label;
    int64_t opset;
    Shape x;
    std::vector<double> scales; ///< empty: sizes
    std::vector<int64_t> sizes;
    AttrMap attrs;
    std::vector<double> roi = {};
  };
  const std::vector<Case> cases = {
      {"nearest up asymmetric", 13, {1, 2, 3, 2}, {1, 1, 2, 3}, {},
       attrs({{"coordinate_transformation_mode", S("asymmetric")}})},
      {"nearest down half_pixel ceil", 13, {1, 1, 5, 7}, {}, {1, 1, 3, 4},
       attrs({{"nearest_mode", S("ceil")}})},
      {"nearest up round_prefer_ceil", 13, {2, 3, 4}, {}, {2, 5, 9},
       attrs({{"nearest_mode", S("round_prefer_ceil")}})},
      {"linear up half_pixel", 13, {1, 2, 3, 4}, {1, 1, 1.5, 2}, {}, attrs({{"mode", S("linear")}})},
      {"linear down align_corners", 13, {1, 2, 4, 5}, {}, {1, 2, 2, 3},
       attrs({{"mode", S("linear")}, {"coordinate_transformation_mode", S("align_corners")}})},
      {"linear down scales align_corners", 13, {1, 1, 4, 5}, {1, 1, 0.6, 0.6}, {},
       attrs({{"mode", S("linear")}, {"coordinate_transformation_mode", S("align_corners")}})},
      {"trilinear pytorch_half_pixel", 13, {1, 1, 2, 3, 2}, {1, 1, 2, 1.5, 0.5}, {},
       attrs({{"mode", S("linear")}, {"coordinate_transformation_mode", S("pytorch_half_pixel")}})},
      {"linear rank 1 asymmetric", 11, {5}, {}, {8},
       attrs({{"mode", S("linear")}, {"coordinate_transformation_mode", S("asymmetric")}})},
      {"cubic up half_pixel", 13, {1, 1, 4, 4}, {1, 1, 2, 1.5}, {}, attrs({{"mode", S("cubic")}})},
      {"cubic down exclude_outside", 13, {1, 2, 6, 5}, {1, 1, 0.5, 0.8}, {},
       attrs({{"mode", S("cubic")}, {"cubic_coeff_a", F(-0.5f)}, {"exclude_outside", I(1)}})},
      {"cubic up align_corners", 13, {1, 1, 3, 4}, {}, {1, 1, 5, 7},
       attrs({{"mode", S("cubic")}, {"coordinate_transformation_mode", S("align_corners")}})},
      {"cubic asymmetric", 13, {1, 1, 4, 3}, {1, 1, 1.75, 2}, {},
       attrs({{"mode", S("cubic")}, {"coordinate_transformation_mode", S("asymmetric")}})},
      {"linear tf_crop_and_resize", 13, {1, 1, 4, 4}, {}, {1, 1, 3, 5},
       attrs({{"mode", S("linear")},
              {"coordinate_transformation_mode", S("tf_crop_and_resize")},
              {"extrapolation_value", F(2.5f)}}),
       {0, 0, -0.2, 0.3, 1, 1, 0.7, 1.3}},
      {"nearest tf_half_pixel_for_nn", 13, {1, 1, 4, 4}, {}, {1, 1, 3, 2},
       attrs({{"coordinate_transformation_mode", S("tf_half_pixel_for_nn")}})},
      {"linear antialias down, axes", 18, {1, 2, 8, 7}, {0.5, 0.4}, {},
       attrs({{"mode", S("linear")}, {"antialias", I(1)}, {"axes", Is({2, -1})}})},
      {"cubic antialias down", 18, {1, 1, 9, 6}, {1, 1, 0.5, 0.7}, {},
       attrs({{"mode", S("cubic")}, {"antialias", I(1)}})},
      {"linear not_larger", 18, {1, 1, 4, 6}, {}, {3, 5},
       attrs({{"mode", S("linear")}, {"axes", Is({2, 3})},
              {"keep_aspect_ratio_policy", S("not_larger")}})},
      {"linear half_pixel_symmetric", 19, {1, 1, 5, 4}, {1, 1, 1.7, 0.7}, {},
       attrs({{"mode", S("linear")}, {"coordinate_transformation_mode", S("half_pixel_symmetric")}})},
      {"nearest down", 10, {1, 1, 4, 5}, {1, 1, 0.6, 0.6}, {}, {}},
      {"linear up", 10, {1, 1, 2, 3}, {1, 1, 2, 2.5}, {}, attrs({{"mode", S("linear")}})},
  };
  int seed = 530;
  for (const Case &c : cases) {
    Builder b(seed++, c.opset);
    std::vector<ir::Value *> in = {b.param("X", c.x)};
    const auto n = static_cast<int64_t>(c.scales.empty() ? c.sizes.size() : c.scales.size());
    ir::Value *scales = c.scales.empty() ? nullptr : b.f64s("scales", c.scales, {n});
    if (c.opset < 11) {
      in.push_back(scales);
    } else {
      in.push_back(c.roi.empty() ? nullptr : b.f64s("roi", c.roi, {2 * n}));
      in.push_back(scales);
      if (!c.sizes.empty())
        in.push_back(b.ints("sizes", c.sizes, {n}));
    }
    ir::Value *y = b.op("Resize", in, c.attrs);
    gradCheck(cat("Resize-", c.opset, " ", c.label), b, y);
  }
  for (const char *mode : {"nearest", "linear"}) {
    Builder b(seed++, 9);
    ir::Value *y = b.op("Upsample", {b.param("X", {1, 2, 2, 3}), b.f64s("s", {1, 1, 2, 1.5}, {4})},
                        attrs({{"mode", S(mode)}}));
    gradCheck(cat("Upsample-9 ", mode), b, y);
  }
  Builder b(seed++, 8);
  ir::Value *y = b.op("Upsample", {b.param("X", {1, 1, 2, 3})},
                      attrs({{"mode", S("linear")}, {"scales", Attribute::ofFloats({1, 1, 3, 2})}}));
  gradCheck("Upsample-8 linear", b, y);
}

TEST(GradCheck, Einsum) {
  struct Case {
    const char *eq;
    std::vector<Shape> shapes;
  };
  const Case cases[] = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}},
      {"bij,bjk->bik", {{2, 2, 3}, {2, 3, 4}}},
      {"ij->ji", {{2, 3}}},
      {"ij,kj->ik", {{2, 3}, {4, 3}}},
      {"ij,jk", {{2, 3}, {3, 4}}},           // implicit output "ik"
      {"ij,jk->i", {{2, 3}, {3, 4}}},        // k summed within B only
      {"i,j->ij", {{3}, {4}}},               // outer product
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 3}}},
      {"ij->", {{2, 3}}},                    // total sum, scalar dY
      {"i,i->", {{4}, {4}}},                 // dot
      {"bhqd,bhkd->bhqk", {{1, 2, 3, 2}, {1, 2, 4, 2}}}, // attention scores
      {"ik, jk -> ij", {{2, 3}, {4, 3}}},    // blanks
  };
  int seed = 520;
  for (const Case &cs : cases) {
    Builder b(seed++, 13);
    std::vector<ir::Value *> in;
    for (size_t i = 0; i < cs.shapes.size(); ++i)
      in.push_back(b.param(cat("X", i), cs.shapes[i]));
    ir::Value *y = b.op("Einsum", in, attrs({{"equation", S(cs.eq)}}));
    gradCheck(cat("Einsum ", cs.eq), b, y);
  }
  for (const char *eq : {"ii->i", "...ij,...jk->...ik"}) {
    Builder b(seed++, 13);
    const bool ellipsis = std::string(eq).find("...") != std::string::npos;
    std::vector<ir::Value *> in = {b.param("X", ellipsis ? Shape{2, 3} : Shape{3, 3})};
    if (ellipsis)
      in.push_back(b.param("Y", {3, 2}));
    ir::Value *y = b.op("Einsum", in, attrs({{"equation", S(eq)}}));
    ir::Value *l = b.op("ReduceSum", {y}, {{"keepdims", I(0)}});
    ASSERT_TRUE(passes::inferShapes(b.g).isOk());
    auto grads = passes::differentiate(b.g, {l->name()});
    ASSERT_FALSE(grads.isOk()) << eq;
    EXPECT_NE(grads.status().message().find("(Einsum, opset 13)"), std::string::npos)
        << grads.status().message();
    std::printf("[gradcheck] refused: %s\n", grads.status().message().c_str());
  }
}

//===--- (c) CNN ops ------------------------------------------------------===//

TEST(GradCheck, GlobalAveragePool) {
  for (const Shape &xs : {Shape{2, 3, 3, 4}, Shape{2, 2, 5}}) {
    Builder b(300);
    ir::Value *y = b.op("GlobalAveragePool", {b.param("X", xs)});
    gradCheck(cat("GlobalAveragePool ", shapeStr(xs)), b, y);
  }
}

TEST(GradCheck, Conv) {
  struct Case {
    const char *label;
    Shape x, w;
    AttrMap a;
    bool bias;
  };
  const Case cases[] = {
      {"Conv 3x3", {2, 2, 5, 5}, {3, 2, 3, 3}, {}, true},
      {"Conv 3x3 stride 2 pads 1", {2, 2, 5, 6}, {3, 2, 3, 3},
       attrs({{"strides", Is({2, 2})}, {"pads", Is({1, 1, 1, 1})}}), true},
      {"Conv dilations 2 asymmetric pads", {1, 2, 6, 5}, {2, 2, 2, 3},
       attrs({{"dilations", Is({2, 1})}, {"pads", Is({1, 0, 2, 1})}}), false},
      {"Conv group 2", {2, 4, 4, 4}, {4, 2, 3, 3},
       attrs({{"group", I(2)}, {"pads", Is({1, 1, 1, 1})}}), true},
      {"Conv depthwise stride 2", {1, 3, 5, 5}, {3, 1, 3, 3},
       attrs({{"group", I(3)}, {"strides", Is({2, 2})}}), false},
      {"Conv 1x1", {2, 3, 3, 3}, {2, 3, 1, 1}, {}, true},
      {"Conv SAME_UPPER stride 2", {1, 2, 5, 4}, {2, 2, 3, 3},
       attrs({{"auto_pad", S("SAME_UPPER")}, {"strides", Is({2, 2})}}), false},
      {"Conv 1-D stride 2 pads 1", {2, 2, 7}, {3, 2, 3},
       attrs({{"strides", Is({2})}, {"pads", Is({1, 1})}}), true},
      {"Conv 3-D strides asymmetric pads", {1, 2, 4, 5, 4}, {2, 2, 3, 2, 3},
       attrs({{"strides", Is({2, 1, 2})}, {"pads", Is({1, 0, 1, 1, 1, 0})}}), true},
      {"Conv 3-D group 2 dilations", {2, 4, 5, 3, 4}, {2, 2, 2, 2, 2},
       attrs({{"group", I(2)}, {"dilations", Is({2, 1, 1})}}), false},
  };
  for (const Case &cs : cases) {
    Builder b(301);
    std::vector<ir::Value *> in = {b.param("X", cs.x), b.param("W", cs.w)};
    if (cs.bias)
      in.push_back(b.param("B", {cs.w[0]}));
    ir::Value *y = b.op("Conv", in, cs.a);
    gradCheck(cs.label, b, y);
  }
}

TEST(GradCheck, BatchNormalization) {
  // Batch statistics (the harness evaluates with ExecContext::training;
  // without training_mode the kernels follow it), then training_mode 1 and
  // 0 (the given statistics) at opset 15.
  struct Case {
    const char *label;
    int64_t opset;
    int mode; ///< training_mode, -1 for none
    Shape x;
    bool xIsData = false; ///< no dX: ScaleGrad sums dY and X itself
  };
  const Case cases[] = {{"BatchNormalization training (context)", 9, -1, {3, 2, 3, 2}},
                        {"BatchNormalization training_mode=1", 15, 1, {4, 3, 2}},
                        {"BatchNormalization training_mode=0", 15, 0, {2, 3, 2, 2}},
                        {"BatchNormalization [N, C]", 9, -1, {5, 3}},
                        {"BatchNormalization of data (no dX)", 15, 1, {3, 2, 4}, true},
                        {"BatchNormalization of data, training_mode=0", 15, 0, {3, 2, 4}, true}};
  for (const Case &cs : cases) {
    Builder b(302, cs.opset);
    const int64_t C = cs.x[1];
    ir::Value *x = cs.xIsData ? b.data("X", cs.x) : b.param("X", cs.x);
    ir::Value *scale = b.param("scale", {C});
    ir::Value *bias = b.param("B", {C});
    std::vector<double> mv, vv;
    for (int64_t i = 0; i < C; ++i) {
      mv.push_back(0.1 * static_cast<double>(i) - 0.1);
      vv.push_back(0.5 + 0.25 * static_cast<double>(i));
    }
    AttrMap a = attrs({{"epsilon", F(1e-3f)}});
    if (cs.mode >= 0)
      a["training_mode"] = I(cs.mode);
    ir::Value *y = b.op("BatchNormalization",
                        {x, scale, bias, b.f64s("mean", mv, {C}), b.f64s("var", vv, {C})}, a);
    gradCheck(cs.label, b, y);
  }
}

TEST(GradCheck, Pool) {
  struct Case {
    const char *label;
    const char *op;
    Shape x;
    AttrMap a;
  };
  const Case cases[] = {
      {"MaxPool 2x2 stride 2", "MaxPool", {2, 2, 4, 4},
       attrs({{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}})},
      {"MaxPool 3x3 stride 2 pads 1 (overlap)", "MaxPool", {2, 2, 5, 5},
       attrs({{"kernel_shape", Is({3, 3})}, {"strides", Is({2, 2})}, {"pads", Is({1, 1, 1, 1})}})},
      {"MaxPool dilations 2 ceil_mode", "MaxPool", {1, 2, 6, 5},
       attrs({{"kernel_shape", Is({2, 2})}, {"dilations", Is({2, 1})}, {"strides", Is({2, 2})},
              {"ceil_mode", I(1)}})},
      {"MaxPool 1-D", "MaxPool", {2, 3, 7}, attrs({{"kernel_shape", Is({3})}, {"strides", Is({2})}})},
      {"AveragePool 3x3 pads 1 exclude pad", "AveragePool", {2, 2, 5, 4},
       attrs({{"kernel_shape", Is({3, 3})}, {"strides", Is({2, 1})}, {"pads", Is({1, 1, 1, 1})}})},
      {"AveragePool 3x3 pads 1 include pad", "AveragePool", {2, 2, 5, 4},
       attrs({{"kernel_shape", Is({3, 3})}, {"strides", Is({2, 1})}, {"pads", Is({1, 1, 1, 1})},
              {"count_include_pad", I(1)}})},
      {"AveragePool ceil_mode", "AveragePool", {1, 2, 5, 5},
       attrs({{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}, {"ceil_mode", I(1)}})},
  };
  for (const Case &cs : cases) {
    Builder b(303);
    ir::Value *y = b.op(cs.op, {b.param("X", cs.x)}, cs.a);
    gradCheck(cs.label, b, y);
  }
}

TEST(GradCheck, InstanceNormalization) {
  int seed = 540;
  for (const Shape &xs : {Shape{2, 3, 4}, Shape{2, 2, 3, 3}}) {
    Builder b(seed++);
    const int64_t C = xs[1];
    ir::Value *y = b.op("InstanceNormalization",
                        {b.param("X", xs), b.param("scale", {C}), b.param("B", {C})},
                        attrs({{"epsilon", F(1e-3f)}}));
    gradCheck(cat("InstanceNormalization ", shapeStr(xs)), b, y);
  }
  Builder b(seed++, 18);
  ir::Value *y = b.op("InstanceNormalization",
                      {b.param("X", {2, 2, 5}), b.f64s("scale", {0.5, 2}, {2}), b.data("B", {2})});
  gradCheck("InstanceNormalization opset 18, constant scale", b, y);
}

TEST(GradCheck, ConvTranspose) {
  struct Case {
    const char *label;
    Shape x, w;
    AttrMap a;
    bool bias;
  };
  const Case cases[] = {
      {"ConvTranspose 3x3", {2, 2, 3, 3}, {2, 3, 3, 3}, {}, true},
      {"ConvTranspose stride 2 pads 1 output_padding 1", {1, 2, 3, 3}, {2, 2, 3, 3},
       attrs({{"strides", Is({2, 2})}, {"pads", Is({1, 1, 1, 1})}, {"output_padding", Is({1, 1})}}),
       true},
      {"ConvTranspose stride 2 output_padding 1 (no pads)", {1, 2, 3, 2}, {2, 1, 2, 2},
       attrs({{"strides", Is({2, 2})}, {"output_padding", Is({1, 1})}}), false},
      {"ConvTranspose group 2 dilations 2", {1, 4, 3, 3}, {4, 1, 2, 2},
       attrs({{"group", I(2)}, {"dilations", Is({2, 2})}}), true},
      {"ConvTranspose output_shape", {1, 2, 3, 3}, {2, 2, 3, 3},
       attrs({{"strides", Is({2, 2})}, {"output_shape", Is({6, 7})}}), false},
      {"ConvTranspose SAME_UPPER stride 2", {1, 1, 3, 2}, {1, 2, 3, 3},
       attrs({{"strides", Is({2, 2})}, {"auto_pad", S("SAME_UPPER")}}), false},
      {"ConvTranspose SAME_LOWER stride 2", {1, 1, 3, 2}, {1, 2, 2, 3},
       attrs({{"strides", Is({2, 2})}, {"auto_pad", S("SAME_LOWER")}}), false},
      {"ConvTranspose 1-D stride 3", {2, 2, 4}, {2, 2, 3}, attrs({{"strides", Is({3})}}), true},
      {"ConvTranspose 3-D stride 2 pads 1", {1, 2, 2, 3, 2}, {2, 2, 2, 3, 2},
       attrs({{"strides", Is({2, 2, 2})}, {"pads", Is({1, 0, 1, 0, 1, 0})}}), true},
  };
  for (const Case &cs : cases) {
    Builder b(550);
    std::vector<ir::Value *> in = {b.param("X", cs.x), b.param("W", cs.w)};
    if (cs.bias)
      in.push_back(b.param("B", {cs.w[1] * attrInt(cs.a, "group", 1)}));
    ir::Value *y = b.op("ConvTranspose", in, cs.a);
    gradCheck(cs.label, b, y);
  }
}

/// A small residual CNN: Conv -> BatchNormalization -> Relu -> MaxPool ->
/// Conv (+ skip) -> GlobalAveragePool -> Flatten -> Gemm -> SCE.
TEST(GradCheck, CnnEndToEnd) {
  Builder b(304);
  ir::Value *x = b.data("x", {2, 2, 6, 6});
  auto pads1 = attrs({{"pads", Is({1, 1, 1, 1})}});
  ir::Value *h = b.op("Conv", {x, b.param("W1", {3, 2, 3, 3}), b.param("b1", {3})}, pads1);
  h = b.op("BatchNormalization", {h, b.param("s1", {3}, true), b.param("c1", {3}),
                                  b.f64s("m1", {0, 0, 0}, {3}), b.f64s("v1", {1, 1, 1}, {3})});
  h = b.op("Relu", {h});
  h = b.op("MaxPool", {h}, attrs({{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}}));
  ir::Value *h2 = b.op("Conv", {h, b.param("W2", {3, 3, 3, 3})}, pads1);
  h = b.op("Add", {h, h2});
  h = b.op("GlobalAveragePool", {h});
  h = b.op("Flatten", {h});
  ir::Value *logits = b.op("Gemm", {h, b.param("W3", {3, 4}), b.param("b3", {4})});
  ir::Value *loss = b.op("SoftmaxCrossEntropyLoss", {logits, b.ints("labels", {1, 3}, {2})});
  b.g.addOutput(loss);
  CheckResult r = gradCheck("CNN (Conv BN Relu MaxPool GAP Gemm SCE)", b, loss);
  EXPECT_GT(r.checked, 100);
}

//===--- Driver behaviour -------------------------------------------------===//

/// x -> Gemm(W1, b1) -> Relu -> Gemm(W2, b2) -> SCE(labels), with W1 used
/// again through a skip term to exercise accumulation.
void buildMlp(Builder &b) {
  ir::Value *x = b.data("x", {4, 3});
  ir::Value *w1 = b.param("W1", {3, 5});
  ir::Value *b1 = b.param("b1", {5});
  ir::Value *w2 = b.param("W2", {5, 3});
  ir::Value *b2 = b.param("b2", {3});
  ir::Value *h = b.op("Gemm", {x, w1, b1});
  ir::Value *r = b.op("Relu", {h});
  ir::Value *s = b.op("Add", {r, b.op("Tanh", {h})});
  ir::Value *logits = b.op("Gemm", {s, w2, b2});
  ir::Value *labels = b.ints("labels", {0, 2, 1, 2}, {4});
  ir::Value *loss = b.op("SoftmaxCrossEntropyLoss", {logits, labels});
  b.g.addOutput(loss);
}

TEST(GradCheck, MlpEndToEnd) {
  Builder b(200);
  buildMlp(b);
  ir::Value *loss = b.g.outputs()[0];
  CheckResult r = gradCheck("MLP (Gemm Relu Tanh Add SCE)", b, loss);
  EXPECT_EQ(r.checked, 3 * 5 + 5 + 5 * 3 + 3);
}

TEST(Autodiff, NamesAndPhases) {
  Builder b(201);
  buildMlp(b);
  ASSERT_TRUE(passes::inferShapes(b.g).isOk());
  auto grads = passes::differentiate(b.g, {b.g.outputs()[0]->name()});
  ASSERT_TRUE(grads.isOk()) << grads.status().message();
  std::string text = ir::printGraph(b.g);
  std::printf("%s\n", text.c_str());
  ASSERT_EQ(grads->size(), 4u);
  EXPECT_EQ((*grads)[0].grad->name(), "grad/W1");
  EXPECT_EQ((*grads)[3].grad->name(), "grad/b2");
  int bwd = 0, wgrad = 0;
  for (ir::Node *n : b.g.nodes()) {
    if (n->phase() == ir::Phase::Forward)
      continue;
    EXPECT_FALSE(n->forwardOf().empty()) << n->name();
    EXPECT_NE(b.g.findNode(n->forwardOf()), nullptr) << n->forwardOf();
    (n->phase() == ir::Phase::Backward ? bwd : wgrad)++;
  }
  EXPECT_GT(bwd, 0);
  EXPECT_GT(wgrad, 0);
  // Weight gradients of the last Gemm are W; the gradient of its input is B.
  for (const passes::GradientPair &p : *grads)
    EXPECT_EQ(p.grad->producer()->phase(), ir::Phase::WeightGrad) << p.grad->name();
  // Deterministic: a second run prints the same graph.
  Builder b2(201);
  buildMlp(b2);
  ASSERT_TRUE(passes::inferShapes(b2.g).isOk());
  ASSERT_TRUE(passes::differentiate(b2.g, {b2.g.outputs()[0]->name()}).isOk());
  EXPECT_EQ(ir::printGraph(b2.g), text);
}

/// BatchNormalization's gradient: one statistics node and dX on the way to
/// the activation gradient (B), dScale and dBias in a node of their own that
/// only parameter gradients read (W), with given and with batch statistics.
TEST(Autodiff, BatchNormalizationPhases) {
  for (int mode : {0, 1}) {
    Builder b(305, 15);
    ir::Value *h = b.op("Mul", {b.data("x", {2, 3, 4}), b.param("P", {2, 3, 4})});
    ir::Value *y = b.op("BatchNormalization",
                        {h, b.param("scale", {3}, true), b.param("B", {3}),
                         b.f64s("mean", {0, 0, 0}, {3}), b.f64s("var", {1, 1, 1}, {3})},
                        attrs({{"training_mode", I(mode)}}));
    ir::Value *loss = b.op("ReduceSum", {b.op("Mul", {y, b.data("R", {2, 3, 4})})},
                           attrs({{"keepdims", I(0)}}));
    ASSERT_TRUE(passes::inferShapes(b.g).isOk());
    auto grads = passes::differentiate(b.g, {loss->name()});
    ASSERT_TRUE(grads.isOk()) << grads.status().message();
    std::map<std::string, ir::Phase> phase;
    for (ir::Node *n : b.g.nodes())
      if (n->domain() == "pipec" && n->opType().rfind("BatchNormalization", 0) == 0) {
        EXPECT_FALSE(phase.count(n->opType())) << n->opType() << " emitted twice";
        phase[n->opType()] = n->phase();
      }
    ASSERT_EQ(phase.size(), 3u) << "mode " << mode;
    EXPECT_EQ(phase["BatchNormalizationStats"], ir::Phase::Backward) << "mode " << mode;
    EXPECT_EQ(phase["BatchNormalizationGrad"], ir::Phase::Backward) << "mode " << mode;
    EXPECT_EQ(phase["BatchNormalizationScaleGrad"], ir::Phase::WeightGrad) << "mode " << mode;
    for (const passes::GradientPair &p : *grads) {
      if (p.param->name() != "P") {
        EXPECT_EQ(p.grad->producer()->opType(), "BatchNormalizationScaleGrad") << p.grad->name();
      }
    }
  }
}

TEST(Autodiff, NoRuleError) {
  Builder b(202);
  ir::Value *y = b.op("Tan", {b.param("X", {3})});
  ir::Value *l = b.op("ReduceSum", {y}, {{"keepdims", I(0)}});
  ASSERT_TRUE(passes::inferShapes(b.g).isOk());
  auto grads = passes::differentiate(b.g, {l->name()});
  ASSERT_FALSE(grads.isOk());
  EXPECT_NE(grads.status().message().find("no gradient rule for op Tan (node 'Tan'"),
            std::string::npos)
      << grads.status().message();
}

TEST(Autodiff, BadLoss) {
  Builder b(203);
  ir::Value *y = b.op("Relu", {b.param("X", {3})});
  ASSERT_TRUE(passes::inferShapes(b.g).isOk());
  auto grads = passes::differentiate(b.g, {y->name()});
  ASSERT_FALSE(grads.isOk());
  EXPECT_NE(grads.status().message().find("must be a float scalar"), std::string::npos);
}

TEST(Loss, AttachAndFind) {
  for (const char *kind : {"cross-entropy", "mse"}) {
    Builder b(210);
    ir::Value *logits = b.op("MatMul", {b.data("x", {4, 3}), b.param("W", {3, 5})});
    b.g.addOutput(logits);
    ASSERT_TRUE(passes::inferShapes(b.g).isOk());
    EXPECT_FALSE(passes::findLoss(b.g).isOk());
    auto loss = passes::attachLoss(b.g, {kind, logits->name(), "target", "loss"});
    ASSERT_TRUE(loss.isOk()) << loss.status().message();
    EXPECT_EQ((*loss)->type().str(), "f64[]");
    ir::Value *t = b.g.findValue("target");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type().str(), std::string(kind) == "mse" ? "f64[4,5]" : "i64[4]");
    auto found = passes::findLoss(b.g);
    ASSERT_TRUE(found.isOk()) << found.status().message();
    EXPECT_EQ(*found, *loss);
    auto grads = passes::differentiate(b.g, {"loss"});
    ASSERT_TRUE(grads.isOk()) << grads.status().message();
    EXPECT_EQ(grads->size(), 1u);
  }
  Builder b(211);
  ir::Value *x = b.param("X", {3});
  b.g.addOutput(b.op("ReduceSum", {x}, {{"keepdims", I(0)}}));
  b.g.addOutput(b.op("ReduceMean", {x}, {{"keepdims", I(0)}}));
  ASSERT_TRUE(passes::inferShapes(b.g).isOk());
  auto found = passes::findLoss(b.g);
  ASSERT_FALSE(found.isOk());
  EXPECT_NE(found.status().message().find("several scalar outputs (ReduceSum_out, "
                                          "ReduceMean_out): pick one with --loss-output"),
            std::string::npos)
      << found.status().message();
  EXPECT_TRUE(passes::findLoss(b.g, "ReduceMean_out").isOk());
}

} // namespace
