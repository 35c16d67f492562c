//===- tests/unit/OptimizerTest.cpp - Optimizers, schedules, clipping, checkpoints -===//
//
// Each optimizer runs several steps on small vectors and is compared with a
// float64 reference written here straight from torch.optim's documented
// algorithms (AMSGrad: from torch's implementation, which keeps the maximum of
// the raw second moment; see docs/training.md). Schedules are checked against
// closed forms, clipping against a float64 norm, checkpoints for bitwise round
// trips, corruption errors and crash atomicity, and everything for bitwise
// independence of the OpenMP thread count.
// Over 700 lines: one float64 reference per optimizer, all of torch.optim's
// options, beside the checkpoint round trips.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Clip.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/LossScale.h"

#include "support/FileIO.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace pipec;
using namespace pipec::train;

namespace {

// --- float64 references from the torch.optim pseudocode ----------------------

struct RefState {
  std::vector<double> a, b, c; // the optimizer's buffers, as named per kind
};

/// torch.optim.SGD's algorithm.
void refSgd(const OptimizerConfig &c, int64_t t, double lr, std::vector<double> &p,
            const std::vector<double> &grad, RefState &s) {
  double wd = c.weightDecay.value_or(0), mu = c.momentum, tau = c.dampening;
  s.a.resize(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    double g = grad[i];
    if (wd != 0)
      g = g + wd * p[i];
    if (mu != 0) {
      s.a[i] = t > 1 ? mu * s.a[i] + (1 - tau) * g : g;
      g = c.nesterov ? g + mu * s.a[i] : s.a[i];
    }
    p[i] = p[i] - lr * g;
  }
}

/// torch.optim.Adam / AdamW's algorithm.
void refAdam(const OptimizerConfig &c, int64_t t, double lr, std::vector<double> &p,
             const std::vector<double> &grad, RefState &s) {
  double wd = c.resolved().weightDecay.value(), b1 = c.beta1, b2 = c.beta2;
  bool adamw = c.kind == "adamw";
  s.a.resize(p.size());
  s.b.resize(p.size());
  s.c.resize(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    double g = grad[i];
    if (adamw)
      p[i] = p[i] - lr * wd * p[i];
    else if (wd != 0)
      g = g + wd * p[i];
    s.a[i] = b1 * s.a[i] + (1 - b1) * g;
    s.b[i] = b2 * s.b[i] + (1 - b2) * g * g;
    double mhat = s.a[i] / (1 - std::pow(b1, t));
    double v = s.b[i];
    if (c.amsgrad) {
      s.c[i] = std::max(s.c[i], s.b[i]);
      v = s.c[i];
    }
    double vhat = v / (1 - std::pow(b2, t));
    p[i] = p[i] - lr * mhat / (std::sqrt(vhat) + c.eps);
  }
}

/// torch.optim.RMSprop's algorithm (a: square_avg, b: buffer, c: g_ave).
void refRms(const OptimizerConfig &c, int64_t t, double lr, std::vector<double> &p,
            const std::vector<double> &grad, RefState &s) {
  double wd = c.weightDecay.value_or(0), al = c.alpha, mu = c.momentum;
  s.a.resize(p.size());
  s.b.resize(p.size());
  s.c.resize(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    double g = grad[i];
    if (wd != 0)
      g = g + wd * p[i];
    s.a[i] = al * s.a[i] + (1 - al) * g * g;
    double vt = s.a[i];
    if (c.centered) {
      s.c[i] = s.c[i] * al + (1 - al) * g;
      vt = vt - s.c[i] * s.c[i];
    }
    if (mu > 0) {
      s.b[i] = mu * s.b[i] + g / (std::sqrt(vt) + c.eps);
      p[i] = p[i] - lr * s.b[i];
    } else {
      p[i] = p[i] - lr * g / (std::sqrt(vt) + c.eps);
    }
  }
}

/// Gradients whose magnitude swings between steps (so AMSGrad's maximum and
/// RMSprop's centring matter), deterministic in (step, element).
std::vector<float> gradAt(int64_t t, size_t n) {
  static const double amp[] = {1.0, 0.1, 2.0, 0.05, 0.7, 1.5, 0.3};
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = static_cast<float>(amp[(t - 1) % 7] * std::sin(0.7 * static_cast<double>(i) +
                                                          1.3 * static_cast<double>(t)) +
                              0.01 * static_cast<double>(t));
  return g;
}

std::vector<float> initialParams(size_t n) {
  std::vector<float> p(n);
  for (size_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(std::cos(0.3 * static_cast<double>(i)) * 1.5);
  return p;
}

/// Max |x - r| <= tol * max(1e-3, max|r|): a relative error on the buffer's scale.
void expectClose(const std::vector<float> &x, const std::vector<double> &r, double tol,
                 const std::string &what) {
  ASSERT_EQ(x.size(), r.size()) << what;
  double scale = 1e-3;
  for (double v : r)
    scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], r[i], tol * scale) << what << " element " << i;
}

/// Runs `steps` updates of `cfg` with pipec and with the reference.
void checkAgainstReference(const OptimizerConfig &cfg, float lr, int steps = 7) {
  SCOPED_TRACE(cfg.str());
  const size_t n = 37;
  Expected<Optimizer> opt = Optimizer::create(cfg);
  ASSERT_TRUE(opt.isOk()) << opt.status().message();
  std::vector<float> p = initialParams(n);
  std::vector<double> pr(p.begin(), p.end());
  std::vector<std::vector<float>> state(opt->stateTensors(), std::vector<float>(n, 0.0f));
  std::vector<float *> ptrs;
  for (auto &s : state)
    ptrs.push_back(s.data());
  RefState rs;
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<float> g = gradAt(t, n);
    std::vector<double> gd(g.begin(), g.end());
    Status st = opt->step(t, lr, p.data(), g.data(), ptrs, static_cast<int64_t>(n));
    ASSERT_TRUE(st.isOk()) << st.message();
    if (cfg.kind == "sgd")
      refSgd(opt->config(), t, lr, pr, gd, rs);
    else if (cfg.kind == "rmsprop")
      refRms(opt->config(), t, lr, pr, gd, rs);
    else
      refAdam(opt->config(), t, lr, pr, gd, rs);
    expectClose(p, pr, 2e-5, cat("param after step ", t));
  }
  // State buffers, by name.
  const auto &names = opt->stateNames();
  for (size_t k = 0; k < names.size(); ++k) {
    const std::vector<double> *r = nullptr;
    if (names[k] == "momentum_buffer")
      r = cfg.kind == "sgd" ? &rs.a : &rs.b;
    else if (names[k] == "exp_avg" || names[k] == "square_avg")
      r = &rs.a;
    else if (names[k] == "exp_avg_sq")
      r = &rs.b;
    else if (names[k] == "max_exp_avg_sq" || names[k] == "grad_avg")
      r = &rs.c;
    ASSERT_NE(r, nullptr) << names[k];
    expectClose(state[k], *r, 2e-5, names[k]);
  }
}

OptimizerConfig make(const std::string &kind) {
  OptimizerConfig c;
  c.kind = kind;
  return c;
}

/// The optimizer of a --optimizer spec ("adam:wd=0.01").
Expected<Optimizer> fromSpec(const std::string &spec) {
  PIPEC_ASSIGN(OptimizerConfig c, parseOptimizer(spec));
  return Optimizer::create(c);
}

} // namespace

// --- Configuration -----------------------------------------------------------

TEST(OptimizerConfigTest, TorchDefaults) {
  OptimizerConfig adam = make("adam").resolved();
  EXPECT_EQ(*adam.lr, 1e-3);
  EXPECT_EQ(*adam.weightDecay, 0.0);
  EXPECT_EQ(adam.beta1, 0.9);
  EXPECT_EQ(adam.beta2, 0.999);
  EXPECT_EQ(adam.eps, 1e-8);
  EXPECT_FALSE(adam.amsgrad);
  OptimizerConfig adamw = make("adamw").resolved();
  EXPECT_EQ(*adamw.lr, 1e-3);
  EXPECT_EQ(*adamw.weightDecay, 1e-2);
  OptimizerConfig rms = make("rmsprop").resolved();
  EXPECT_EQ(*rms.lr, 1e-2);
  EXPECT_EQ(rms.alpha, 0.99);
  EXPECT_EQ(rms.eps, 1e-8);
  EXPECT_EQ(rms.momentum, 0.0);
  EXPECT_FALSE(rms.centered);
  EXPECT_EQ(*rms.weightDecay, 0.0);
  OptimizerConfig sgd = make("sgd").resolved();
  EXPECT_FALSE(sgd.lr.has_value());
  EXPECT_EQ(sgd.momentum, 0.0);
  EXPECT_EQ(sgd.dampening, 0.0);
  EXPECT_FALSE(sgd.nesterov);
  EXPECT_EQ(*sgd.weightDecay, 0.0);
}

TEST(OptimizerConfigTest, ValidationRefusesWhatTorchRefuses) {
  auto err = [](OptimizerConfig c) { return c.validate().message(); };
  EXPECT_NE(err(make("sgd")).find("learning rate is required"), std::string::npos);
  OptimizerConfig c = make("sgd");
  c.lr = 0.1;
  EXPECT_TRUE(c.validate().isOk());
  c.nesterov = true;
  EXPECT_NE(err(c).find("Nesterov"), std::string::npos);
  c.momentum = 0.9;
  EXPECT_TRUE(c.validate().isOk());
  c.dampening = 0.1;
  EXPECT_NE(err(c).find("zero dampening"), std::string::npos);
  c = make("sgd");
  c.lr = -0.1;
  EXPECT_NE(err(c).find("invalid learning rate -0.1"), std::string::npos);
  c = make("adam");
  c.beta1 = 1.0;
  EXPECT_NE(err(c).find("beta1"), std::string::npos);
  c = make("adamw");
  c.beta2 = -0.1;
  EXPECT_NE(err(c).find("beta2"), std::string::npos);
  c = make("adam");
  c.eps = -1;
  EXPECT_NE(err(c).find("eps"), std::string::npos);
  c = make("adam");
  c.weightDecay = -1e-2;
  EXPECT_NE(err(c).find("weight_decay"), std::string::npos);
  c = make("rmsprop");
  c.momentum = -0.5;
  EXPECT_NE(err(c).find("momentum"), std::string::npos);
  c = make("rmsprop");
  c.alpha = 1.5;
  EXPECT_NE(err(c).find("alpha"), std::string::npos);
  c = make("lamb");
  EXPECT_NE(err(c).find("unknown optimizer 'lamb'"), std::string::npos);
  c = make("adam");
  c.lr = std::nan("");
  EXPECT_FALSE(c.validate().isOk());
}

TEST(OptimizerConfigTest, ParseSpecs) {
  Expected<OptimizerConfig> c = parseOptimizer("adamw:lr=3e-4,wd=0.1,beta2=0.95,amsgrad=true");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->kind, "adamw");
  EXPECT_EQ(*c->lr, 3e-4);
  EXPECT_EQ(*c->weightDecay, 0.1);
  EXPECT_EQ(c->beta1, 0.9);
  EXPECT_EQ(c->beta2, 0.95);
  EXPECT_TRUE(c->amsgrad);
  // str() parses back to the same config.
  Expected<OptimizerConfig> back = parseOptimizer(c->str());
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->str(), c->str());

  c = parseOptimizer(" SGD : lr = 0.1 , momentum=0.9, nesterov=1 ");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(*c->lr, 0.1);
  EXPECT_TRUE(c->nesterov);

  auto err = [](const std::string &s) {
    Expected<OptimizerConfig> e = parseOptimizer(s);
    return e.isOk() ? std::string("<ok>") : e.status().message();
  };
  EXPECT_NE(err("sgd").find("learning rate is required"), std::string::npos);
  EXPECT_NE(err("adam:momentum=0.9").find("has no key 'momentum'"), std::string::npos);
  EXPECT_NE(err("adam:lr=abc").find("not a finite number"), std::string::npos);
  EXPECT_NE(err("adam:lr=1,lr=2").find("given twice"), std::string::npos);
  EXPECT_NE(err("adam:lr").find("not key=value"), std::string::npos);
  EXPECT_NE(err("adagrad:lr=1").find("unknown optimizer"), std::string::npos);
  EXPECT_NE(err("rmsprop:centered=maybe").find("not a boolean"), std::string::npos);
  EXPECT_NE(err("adam:wd=0.1,weight_decay=0.1").find("not both"), std::string::npos);
  EXPECT_NE(err("sgd:lr=0.1,nesterov=true").find("Nesterov"), std::string::npos);

  // A learning rate given apart (pipec --lr) completes the spec before it
  // is validated, and replaces the spec's own.
  c = parseOptimizer("sgd", 0.1);
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(*c->lr, 0.1);
  c = parseOptimizer("sgd:lr=0.5,momentum=0.9", 0.25);
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(*c->lr, 0.25);
  EXPECT_EQ(c->momentum, 0.9);
  c = parseOptimizer("adam", -1.0);
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("learning rate -1"), std::string::npos) << c.status().message();
}

TEST(OptimizerTest, StateTensorCounts) {
  auto count = [](const std::string &spec) {
    Expected<Optimizer> o = fromSpec(spec);
    EXPECT_TRUE(o.isOk()) << spec << ": " << o.status().message();
    return o.isOk() ? o->stateTensors() : size_t(-1);
  };
  EXPECT_EQ(count("sgd:lr=0.1"), 0u);
  EXPECT_EQ(count("sgd:lr=0.1,momentum=0.9"), 1u);
  EXPECT_EQ(count("adam"), 2u);
  EXPECT_EQ(count("adamw:amsgrad=true"), 3u);
  EXPECT_EQ(count("rmsprop"), 1u);
  EXPECT_EQ(count("rmsprop:momentum=0.9"), 2u);
  EXPECT_EQ(count("rmsprop:momentum=0.9,centered=true"), 3u);
  Expected<Optimizer> o = fromSpec("rmsprop:centered=true");
  ASSERT_TRUE(o.isOk()) << o.status().message();
  EXPECT_EQ(o->stateNames(), (std::vector<std::string>{"square_avg", "grad_avg"}));
}

TEST(OptimizerTest, StepRefusesBadArguments) {
  auto created = Optimizer::create(make("adam"));
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Optimizer o = created.take();
  std::vector<float> p(4), g(4), m(4), v(4);
  EXPECT_NE(o.step(0, 1e-3f, p.data(), g.data(), {m.data(), v.data()}, 4).message().find(
                "1-based"),
            std::string::npos);
  EXPECT_NE(o.step(1, 1e-3f, p.data(), g.data(), {m.data()}, 4).message().find(
                "expected 2 state buffers, got 1"),
            std::string::npos);
  EXPECT_FALSE(o.step(1, -1.0f, p.data(), g.data(), {m.data(), v.data()}, 4).isOk());
  EXPECT_FALSE(o.step(1, 1e-3f, p.data(), g.data(), {m.data(), nullptr}, 4).isOk());
  EXPECT_TRUE(o.step(1, 1e-3f, nullptr, nullptr, {nullptr, nullptr}, 0).isOk());
}

// --- Against the float64 references ------------------------------------------

TEST(OptimizerTest, SgdMatchesReference) {
  for (double mu : {0.0, 0.9})
    for (double damp : {0.0, 0.1})
      for (bool nesterov : {false, true})
        for (double wd : {0.0, 1e-2}) {
          OptimizerConfig c = make("sgd");
          c.lr = 0.05;
          c.momentum = mu;
          c.dampening = damp;
          c.nesterov = nesterov;
          c.weightDecay = wd;
          if (!c.validate().isOk())
            continue; // nesterov without momentum or with dampening
          checkAgainstReference(c, 0.05f);
        }
}

TEST(OptimizerTest, AdamAndAdamWMatchReference) {
  for (const char *kind : {"adam", "adamw"})
    for (double wd : {0.0, 0.1})
      for (bool amsgrad : {false, true})
        for (auto betas : {std::pair{0.9, 0.999}, std::pair{0.3, 0.5}}) {
          OptimizerConfig c = make(kind);
          c.weightDecay = wd;
          c.amsgrad = amsgrad;
          c.beta1 = betas.first;
          c.beta2 = betas.second;
          checkAgainstReference(c, 0.01f);
        }
  checkAgainstReference(make("adamw"), 1e-3f); // all defaults
}

TEST(OptimizerTest, RmspropMatchesReference) {
  for (bool centered : {false, true})
    for (double mu : {0.0, 0.9})
      for (double wd : {0.0, 0.1})
        for (double alpha : {0.99, 0.3}) {
          OptimizerConfig c = make("rmsprop");
          c.centered = centered;
          c.momentum = mu;
          c.weightDecay = wd;
          c.alpha = alpha;
          checkAgainstReference(c, 0.01f);
        }
}

// --- Closed forms ------------------------------------------------------------

TEST(OptimizerTest, AdamFirstStepMovesByLrTimesSign) {
  auto created = Optimizer::create(make("adam"));
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Optimizer o = created.take();
  std::vector<float> p = initialParams(16), p0 = p, g = gradAt(3, 16);
  std::vector<float> m(16), v(16);
  ASSERT_TRUE(o.step(1, 1e-3f, p.data(), g.data(), {m.data(), v.data()}, 16).isOk());
  for (size_t i = 0; i < 16; ++i) {
    double sign = g[i] > 0 ? 1.0 : -1.0;
    EXPECT_NEAR(p[i] - p0[i], -1e-3 * sign, 1e-3 * 1e-3) << i;
  }
}

TEST(OptimizerTest, PlainSgdIsExactlyOneFloatAxpy) {
  OptimizerConfig c = make("sgd");
  c.lr = 0.1;
  auto created = Optimizer::create(c);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Optimizer o = created.take();
  std::vector<float> p = initialParams(100), g = gradAt(1, 100), want(100);
  for (size_t i = 0; i < 100; ++i) {
    volatile float step = -0.1f * g[i]; // two roundings, as torch: no FMA
    want[i] = p[i] + step;
  }
  ASSERT_TRUE(o.step(1, 0.1f, p.data(), g.data(), {}, 100).isOk());
  EXPECT_EQ(std::memcmp(p.data(), want.data(), 100 * sizeof(float)), 0);
}

TEST(OptimizerTest, AdamWWithZeroGradientOnlyDecays) {
  auto created = Optimizer::create(make("adamw")); // wd 1e-2
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Optimizer o = created.take();
  std::vector<float> p = initialParams(8), p0 = p, g(8, 0.0f), m(8), v(8);
  ASSERT_TRUE(o.step(1, 0.5f, p.data(), g.data(), {m.data(), v.data()}, 8).isOk());
  float decay = static_cast<float>(1.0 - 0.5 * 1e-2);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(p[i], p0[i] * decay) << i;
}

TEST(OptimizerTest, SgdMomentumBufferStartsAsTheGradient) {
  OptimizerConfig c = make("sgd");
  c.lr = 1.0;
  c.momentum = 0.9;
  c.dampening = 0.5; // not applied at step 1
  auto created = Optimizer::create(c);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Optimizer o = created.take();
  std::vector<float> p(3, 0.0f), g = {1.0f, -2.0f, 4.0f}, b(3, 123.0f);
  ASSERT_TRUE(o.step(1, 1.0f, p.data(), g.data(), {b.data()}, 3).isOk());
  EXPECT_EQ(b, g);
  ASSERT_TRUE(o.step(2, 1.0f, p.data(), g.data(), {b.data()}, 3).isOk());
  for (size_t i = 0; i < 3; ++i)
    EXPECT_FLOAT_EQ(b[i], 0.9f * g[i] + 0.5f * g[i]);
}

// --- Threads -------------------------------------------------------------------

TEST(OptimizerTest, BitwiseIndependentOfThreadCount) {
  const int64_t n = 4 * kTrainChunk + 77;
  std::vector<std::string> specs = {"sgd:lr=0.1,momentum=0.9,nesterov=true,wd=1e-4",
                                    "adam:wd=0.01,amsgrad=true", "adamw:lr=1e-3",
                                    "rmsprop:momentum=0.5,centered=true,wd=0.1"};
  for (const std::string &spec : specs) {
    auto created = fromSpec(spec);
    ASSERT_TRUE(created.isOk()) << created.status().message();
    Optimizer o = created.take();
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> p = initialParams(static_cast<size_t>(n));
      std::vector<std::vector<float>> state(o.stateTensors(),
                                            std::vector<float>(static_cast<size_t>(n)));
      std::vector<float *> ptrs;
      for (auto &s : state)
        ptrs.push_back(s.data());
      for (int64_t t = 1; t <= 3; ++t) {
        std::vector<float> g = gradAt(t, static_cast<size_t>(n));
        ASSERT_TRUE(o.step(t, 1e-2f, p.data(), g.data(), ptrs, n).isOk());
      }
      for (auto &s : state)
        p.insert(p.end(), s.begin(), s.end());
      results.push_back(std::move(p));
    }
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4), 0)
        << spec;
  }
  // The clipping norm too.
  std::vector<float> g = gradAt(2, static_cast<size_t>(n));
  omp_set_num_threads(1);
  double s1 = gradSquaredSum(g.data(), n);
  omp_set_num_threads(2);
  double s2 = gradSquaredSum(g.data(), n);
  EXPECT_EQ(std::memcmp(&s1, &s2, sizeof s1), 0);
  long double exact = 0;
  for (int64_t i = 0; i < n; ++i)
    exact += static_cast<long double>(g[i]) * g[i];
  EXPECT_NEAR(s1, static_cast<double>(exact), 1e-13 * static_cast<double>(exact));
}

// --- Schedules -----------------------------------------------------------------

// The one-pass form the runtime uses when nothing waits for the norm: the
// gradient scaled in place, its squared sum and the update (from a copy of
// the parameter, as 2BW's other version) are bitwise the three passes.
TEST(OptimizerTest, ScaleSquareAndStepIsBitwiseTheThreePasses) {
  const int64_t n = 3 * kTrainChunk + 77;
  for (const char *spec : {"sgd:lr=0.1,momentum=0.9,nesterov=true,wd=1e-4",
                                  "adam:wd=0.01,amsgrad=true", "adamw:lr=1e-3",
                                  "rmsprop:momentum=0.5,centered=true,wd=0.1"}) {
    auto created = fromSpec(spec);
    ASSERT_TRUE(created.isOk()) << created.status().message();
    Optimizer o = created.take();
    for (float scale : {1.0f, 0.25f, 1.0f / 3.0f}) {
      for (bool copy : {false, true}) {
        std::vector<float> p1 = initialParams(static_cast<size_t>(n)), p2 = p1;
        std::vector<std::vector<float>> s1(o.stateTensors(), std::vector<float>(static_cast<size_t>(n)));
        std::vector<std::vector<float>> s2 = s1;
        std::vector<float *> ptr1, ptr2;
        for (size_t i = 0; i < s1.size(); ++i) {
          ptr1.push_back(s1[i].data());
          ptr2.push_back(s2[i].data());
        }
        for (int64_t t = 1; t <= 3; ++t) {
          std::vector<float> g1 = gradAt(t, static_cast<size_t>(n)), g2 = g1;
          const std::vector<float> before = p1;
          if (scale != 1.0f)
            scaleGrad(g1.data(), n, scale);
          const double sum1 = gradSquaredSum(g1.data(), n);
          ASSERT_TRUE(o.step(t, 1e-2f, p1.data(), g1.data(), ptr1, n).isOk());
          if (copy) // the other version: whatever it held is overwritten
            std::fill(p2.begin(), p2.end(), -7.0f);
          Expected<double> sum2 = o.scaleSquareAndStep(t, 1e-2f, p2.data(), g2.data(), scale, ptr2, n,
                                                       copy ? before.data() : nullptr);
          ASSERT_TRUE(sum2.isOk()) << sum2.status().message();
          EXPECT_EQ(std::memcmp(&sum1, &*sum2, sizeof sum1), 0) << spec << " step " << t;
          EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * 4), 0) << spec << " step " << t;
        }
        EXPECT_EQ(std::memcmp(p1.data(), p2.data(), p1.size() * 4), 0) << spec << " scale " << scale;
        for (size_t i = 0; i < s1.size(); ++i)
          EXPECT_EQ(std::memcmp(s1[i].data(), s2[i].data(), s1[i].size() * 4), 0) << spec;
      }
    }
  }
  auto created = fromSpec("adam");
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Optimizer o = created.take();
  std::vector<float> p(4), m(4), v(4);
  EXPECT_FALSE(o.scaleSquareAndStep(1, 1e-3f, p.data(), nullptr, 1.0f, {m.data(), v.data()}, 4).isOk());
  EXPECT_FALSE(o.scaleSquareAndStep(0, 1e-3f, p.data(), p.data(), 1.0f, {m.data(), v.data()}, 4).isOk());
}

TEST(ScheduleTest, ClosedForms) {
  const double lr = 1e-3;
  Expected<LrSchedule> s = parseLrSchedule("constant", lr);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->lrAt(1), static_cast<float>(lr));
  EXPECT_EQ(s->lrAt(100000), static_cast<float>(lr));

  s = parseLrSchedule("exponential:gamma=0.9", lr);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->lrAtExact(1), lr); // torch: the first step uses the base rate
  EXPECT_DOUBLE_EQ(s->lrAtExact(4), lr * 0.9 * 0.9 * 0.9);
  double recursive = lr; // ExponentialLR's recursive form
  for (int t = 1; t < 50; ++t)
    recursive *= 0.9;
  EXPECT_NEAR(s->lrAtExact(50), recursive, 1e-14);

  s = parseLrSchedule("cosine:T=1000,min=1e-5", lr);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->lrAtExact(1), lr);
  EXPECT_DOUBLE_EQ(s->lrAtExact(501), 1e-5 + (lr - 1e-5) * 0.5);
  EXPECT_NEAR(s->lrAtExact(1001), 1e-5, 1e-18);
  double t = 123;
  EXPECT_DOUBLE_EQ(s->lrAtExact(124),
                   1e-5 + (lr - 1e-5) * (1 + std::cos(std::numbers::pi * t / 1000)) / 2);

  s = parseLrSchedule("cosine:T=1000,min=1e-5,warmup=100", lr);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->lrAtExact(1), 0.0);
  EXPECT_DOUBLE_EQ(s->lrAtExact(51), lr * 0.5);
  EXPECT_DOUBLE_EQ(s->lrAtExact(100), lr * 0.99);
  EXPECT_DOUBLE_EQ(s->lrAtExact(101), lr); // the decay starts at its own t = 0
  EXPECT_DOUBLE_EQ(s->lrAtExact(601), 1e-5 + (lr - 1e-5) * 0.5);
  EXPECT_NEAR(s->lrAtExact(1101), 1e-5, 1e-18);

  s = parseLrSchedule("linear-warmup:warmup=10,start=0.1", lr);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->lrAtExact(1), lr * 0.1);
  EXPECT_DOUBLE_EQ(s->lrAtExact(6), lr * (0.1 + 0.9 * 0.5));
  EXPECT_DOUBLE_EQ(s->lrAtExact(11), lr);
  EXPECT_DOUBLE_EQ(s->lrAtExact(5000), lr);

  s = parseLrSchedule("exponential:gamma=0.5,warmup=4", 1.0);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->lrAtExact(3), 0.5);
  EXPECT_DOUBLE_EQ(s->lrAtExact(5), 1.0);
  EXPECT_DOUBLE_EQ(s->lrAtExact(7), 0.25);
  EXPECT_EQ(s->lrAt(7), 0.25f);
}

TEST(ScheduleTest, SpecRoundTripAndErrors) {
  for (const char *spec : {"constant", "linear-warmup:warmup=10,start=0.25",
                           "exponential:gamma=0.99,warmup=5,start=0",
                           "cosine:T=1000,min=1e-05,warmup=100,start=0"}) {
    Expected<LrSchedule> s = parseLrSchedule(spec, 0.1);
    ASSERT_TRUE(s.isOk()) << spec << ": " << s.status().message();
    EXPECT_EQ(s->str(), spec);
  }
  auto err = [](const std::string &spec) {
    Expected<LrSchedule> s = parseLrSchedule(spec, 0.1);
    return s.isOk() ? std::string("<ok>") : s.status().message();
  };
  EXPECT_NE(err("cosine").find("needs T="), std::string::npos);
  EXPECT_NE(err("cosine:T=0").find("must be >= 1"), std::string::npos);
  EXPECT_NE(err("cosine:T=abc").find("non-negative integer"), std::string::npos);
  EXPECT_NE(err("cosine:T=10,gamma=0.5").find("has no key 'gamma'"), std::string::npos);
  EXPECT_NE(err("cosine:T=10,T=20").find("given twice"), std::string::npos);
  EXPECT_NE(err("exponential").find("needs gamma="), std::string::npos);
  EXPECT_NE(err("exponential:gamma=0").find("must be > 0"), std::string::npos);
  EXPECT_NE(err("linear-warmup").find("needs warmup="), std::string::npos);
  EXPECT_NE(err("constant:warmup=-1").find("non-negative integer"), std::string::npos);
  EXPECT_NE(err("constant:warmup=5,start=2").find("not in [0, 1]"), std::string::npos);
  EXPECT_NE(err("step:gamma=0.1").find("unknown schedule 'step'"), std::string::npos);
  EXPECT_NE(err("cosine:").find("nothing after ':'"), std::string::npos);
  EXPECT_FALSE(parseLrSchedule("constant", -1.0).isOk());
}

// --- Clipping --------------------------------------------------------------------

TEST(ClipTest, GlobalNormMatchesClipGradNorm) {
  std::vector<float> a = gradAt(1, 50), b = gradAt(3, 7);
  double ref = 0;
  for (float x : a)
    ref += static_cast<double>(x) * x;
  for (float x : b)
    ref += static_cast<double>(x) * x;
  ref = std::sqrt(ref);

  // Above the norm: nothing changes, bitwise.
  std::vector<float> a0 = a, b0 = b;
  Expected<double> norm = clipGradNorm({{a.data(), 50}, {b.data(), 7}}, ref * 2);
  ASSERT_TRUE(norm.isOk()) << norm.status().message();
  EXPECT_NEAR(*norm, ref, 1e-12 * ref);
  EXPECT_EQ(a, a0);
  EXPECT_EQ(b, b0);

  // Below: scaled by max_norm / (norm + 1e-6), rounded to float.
  double maxNorm = ref / 4;
  norm = clipGradNorm({{a.data(), 50}, {b.data(), 7}}, maxNorm);
  ASSERT_TRUE(norm.isOk()) << norm.status().message();
  EXPECT_NEAR(*norm, ref, 1e-12 * ref);
  float coef = static_cast<float>(maxNorm / (ref + 1e-6));
  for (size_t i = 0; i < 50; ++i)
    EXPECT_EQ(a[i], a0[i] * coef);
  for (size_t i = 0; i < 7; ++i)
    EXPECT_EQ(b[i], b0[i] * coef);
  double after = 0;
  for (float x : a)
    after += static_cast<double>(x) * x;
  for (float x : b)
    after += static_cast<double>(x) * x;
  EXPECT_NEAR(std::sqrt(after), maxNorm, 1e-5 * maxNorm);

  // A large gradient spanning several chunks.
  std::vector<float> big(3 * kTrainChunk + 5, 0.5f);
  norm = clipGradNorm({{big.data(), static_cast<int64_t>(big.size())}}, 1.0);
  ASSERT_TRUE(norm.isOk()) << norm.status().message();
  EXPECT_NEAR(*norm, 0.5 * std::sqrt(static_cast<double>(big.size())), 1e-9);
}

// The one-pass update sums a chunk's squares piece by piece
// (ChunkSquares): any cut into pieces, aligned to the lanes or not, gives
// chunkSquaredSum's bits. The elements span 2^-20..2^20, so that another
// order of the additions rounds differently (checked).
TEST(ClipTest, ChunkSquaresInPiecesAreTheChunksSum) {
  std::vector<float> g = gradAt(2, static_cast<size_t>(kTrainChunk));
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = std::ldexp(g[i], static_cast<int>((i * 7) % 41) - 20);
  const int64_t n = static_cast<int64_t>(g.size());
  const double whole = chunkSquaredSum(g.data(), n);
  double inOrder = 0; // one chain, element by element: another rounding
  for (float x : g)
    inOrder += static_cast<double>(x) * x;
  ASSERT_NE(whole, inOrder);
  for (const std::vector<int64_t> &cuts :
       std::vector<std::vector<int64_t>>{{2048}, {1, 3, 8, 13, 2048, 5}, {7}, {4096, 1}, {n}}) {
    ChunkSquares s;
    int64_t at = 0;
    for (size_t k = 0; at < n; ++k) {
      const int64_t len = std::min(cuts[k % cuts.size()], n - at);
      s.add(g.data() + at, len);
      at += len;
    }
    EXPECT_EQ(s.total(), whole) << "first piece " << cuts[0];
  }
  // A last chunk shorter than kTrainChunk and not a multiple of the lanes.
  ChunkSquares s;
  s.add(g.data(), 1000);
  s.add(g.data() + 1000, 77);
  EXPECT_EQ(s.total(), chunkSquaredSum(g.data(), 1077));
}

TEST(ClipTest, NonFiniteAndBadArguments) {
  std::vector<float> g = {1.0f, INFINITY, 2.0f};
  Expected<double> r = clipGradNorm({{g.data(), 3}}, 1.0, /*errorIfNonfinite=*/true);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("inf"), std::string::npos);
  r = clipGradNorm({{g.data(), 3}}, 1.0);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(std::isinf(*r));
  EXPECT_EQ(g[0], 0.0f); // scaled by max_norm / inf = 0, as torch does
  EXPECT_FALSE(clipGradNorm({{g.data(), 3}}, 0.0).isOk());
  EXPECT_FALSE(clipGradNorm({{g.data(), 3}}, -1.0).isOk());
  auto none = clipGradNorm({}, 1.0);
  ASSERT_TRUE(none.isOk()) << none.status().message();
  EXPECT_EQ(*none, 0.0);
}

// --- Checkpoints -----------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            cat("pipec-ckpt-", ::getpid(), "-",
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = (root_ / "ckpt").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  static Checkpoint sample(int64_t step, float fill) {
    Checkpoint ck;
    ck.step = step;
    ck.meta["rng.seed"] = "42";
    ck.meta["data.cursor"] = cat(step * 32);
    ck.meta["optimizer"] = "adamw:lr=0.001";
    std::vector<float> w = initialParams(1000);
    for (float &x : w)
      x += fill;
    EXPECT_TRUE(ck.addFloats("fc1.weight", w.data(), 1000).isOk());
    EXPECT_TRUE(ck.addFloats("fc1.weight/exp_avg", w.data(), 13).isOk());
    EXPECT_TRUE(ck.add("empty", Tensor(DType::F32, {0, 4})).isOk());
    EXPECT_TRUE(ck.add("counts", Tensor::fromInts({1, 2, 3, step})).isOk());
    return ck;
  }

  static void expectSame(const Checkpoint &a, const Checkpoint &b) {
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.meta, b.meta);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
      EXPECT_TRUE(a.tensors[i].tensor.identical(b.tensors[i].tensor)) << a.tensors[i].name;
    }
  }

  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (const auto &e : fs::directory_iterator(root_))
      if (e.path().filename() != "ckpt")
        out.push_back(e.path().filename().string());
    return out;
  }

  void overwrite(const std::string &file, size_t offset, char byte) {
    std::fstream f(fs::path(dir_) / file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(byte);
  }

  std::string readError() {
    Expected<Checkpoint> r = readCheckpoint(dir_);
    return r.isOk() ? std::string("<ok>") : r.status().message();
  }

  fs::path root_;
  std::string dir_;
};

} // namespace

TEST_F(CheckpointTest, RoundTripIsBitwise) {
  Checkpoint ck = sample(7, 0.0f);
  ASSERT_TRUE(writeCheckpoint(dir_, ck).isOk());
  Expected<Checkpoint> back = readCheckpoint(dir_);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  expectSame(ck, *back);
  std::vector<float> w(1000);
  ASSERT_TRUE(back->restoreFloats("fc1.weight", w.data(), 1000).isOk());
  EXPECT_EQ(std::memcmp(w.data(), ck.find("fc1.weight")->raw(), 4000), 0);
  EXPECT_NE(back->restoreFloats("fc1.weight", w.data(), 999).message().find("f32[1000]"),
            std::string::npos);
  EXPECT_NE(back->restoreFloats("fc2.weight", w.data(), 1).message().find("no tensor 'fc2"),
            std::string::npos);
  EXPECT_FALSE(ck.addFloats("fc1.weight", w.data(), 1).isOk()); // duplicate name

  // Overwriting replaces it and leaves nothing beside it.
  Checkpoint ck2 = sample(8, 1.0f);
  ASSERT_TRUE(writeCheckpoint(dir_ + "/", ck2).isOk());
  back = readCheckpoint(dir_);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  expectSame(ck2, *back);
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(CheckpointTest, CorruptAndTruncatedCheckpointsAreRefused) {
  ASSERT_TRUE(writeCheckpoint(dir_, sample(3, 0.0f)).isOk());
  std::string bin = (fs::path(dir_) / "tensors.bin").string();
  std::string manifest = (fs::path(dir_) / "manifest.json").string();
  auto bin0 = readFile(bin), manifest0 = readFile(manifest);
  ASSERT_TRUE(bin0.isOk()) << bin0.status().message();
  ASSERT_TRUE(manifest0.isOk()) << manifest0.status().message();
  std::string goodBin = *bin0, goodManifest = *manifest0;

  overwrite("tensors.bin", 100, goodBin[100] ^ 0x5a);
  std::string e = readError();
  EXPECT_NE(e.find("'fc1.weight' fails its CRC-32C"), std::string::npos) << e;

  fs::resize_file(bin, goodBin.size() - 10);
  e = readError();
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  ASSERT_TRUE(writeFileAtomic(bin, goodBin).isOk());
  EXPECT_EQ(readError(), "<ok>");

  ASSERT_TRUE(writeFileAtomic(manifest, goodManifest.substr(0, goodManifest.size() / 2)).isOk());
  e = readError();
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  // Valid JSON, altered value: the manifest checksum catches it.
  std::string altered = goodManifest;
  size_t pos = altered.find("\"step\": 3");
  ASSERT_NE(pos, std::string::npos) << altered;
  altered.replace(pos, 9, "\"step\": 4");
  ASSERT_TRUE(writeFileAtomic(manifest, altered).isOk());
  e = readError();
  EXPECT_NE(e.find("fails its checksum"), std::string::npos) << e;

  fs::remove(manifest);
  e = readError();
  EXPECT_NE(e.find("manifest.json is missing"), std::string::npos) << e;

  fs::remove_all(dir_);
  e = readError();
  EXPECT_NE(e.find("no such directory"), std::string::npos) << e;
}

TEST_F(CheckpointTest, LeftoversOfACrashedWriteDoNotBreakReading) {
  Checkpoint a = sample(10, 0.0f);
  ASSERT_TRUE(writeCheckpoint(dir_, a).isOk());
  // A write killed half-way: a temporary directory with a torn manifest.
  fs::path tmp = root_ / "ckpt.tmp-00000000deadbeef-1-0";
  fs::create_directories(tmp);
  std::ofstream(tmp / "manifest.json") << "{\"format\": \"pipec-chec";
  std::ofstream(tmp / "tensors.bin") << "xyz";
  Expected<Checkpoint> r = readCheckpoint(dir_);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  expectSame(a, *r);
  // The next write succeeds and sweeps the leftover away.
  Checkpoint b = sample(11, 2.0f);
  ASSERT_TRUE(writeCheckpoint(dir_, b).isOk());
  r = readCheckpoint(dir_);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  expectSame(b, *r);
  EXPECT_TRUE(leftovers().empty());

  // Killed between the two renames of the fallback commit: only DIR.old-*.
  fs::rename(dir_, root_ / "ckpt.old-0000000000000001-1-0");
  r = readCheckpoint(dir_);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  expectSame(b, *r);
  ASSERT_TRUE(writeCheckpoint(dir_, a).isOk());
  r = readCheckpoint(dir_);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  expectSame(a, *r);
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(CheckpointTest, KilledWriterLeavesAValidCheckpoint) {
  ASSERT_TRUE(writeCheckpoint(dir_, sample(0, 0.0f)).isOk());
  for (int round = 0; round < 6; ++round) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: rewrite the checkpoint forever, each version self-consistent.
      for (int64_t k = 1;; ++k)
        if (!writeCheckpoint(dir_, sample(k, static_cast<float>(k))).isOk())
          ::_exit(1);
    }
    ::usleep(static_cast<useconds_t>(2000 + 7000 * round));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed before it was killed";
    Expected<Checkpoint> r = readCheckpoint(dir_);
    ASSERT_TRUE(r.isOk()) << "round " << round << ": " << r.status().message();
    expectSame(sample(r->step, static_cast<float>(r->step)), *r);
  }
}

// Integers of a manifest too large for their type (a JSON number such as
// 1e34 or a 34-digit literal) are a malformed manifest, not a cast with
// undefined behaviour (the checkpoint fuzzer found the version field).
TEST(CheckpointManifest, OutOfRangeIntegersAreMalformed) {
  for (const char *field : {"\"version\": 9999999999999999999999999999999991",
                            "\"version\": 1, \"step\": 1e34",
                            "\"version\": 1, \"step\": 1, \"data_bytes\": -1"}) {
    std::string manifest = std::string("{\"format\": \"pipec-checkpoint\", ") + field +
                           ", \"meta\": {}, \"tensors\": []}";
    const uint32_t sum = train::checkpointManifestChecksum(manifest);
    manifest.insert(manifest.rfind('}'), ", \"checksum\": " + std::to_string(sum));
    auto ck = train::parseCheckpoint(manifest, "", "test");
    ASSERT_FALSE(ck.isOk()) << field;
    EXPECT_NE(ck.status().message().find("is not an integer in range"), std::string::npos)
        << field << ": " << ck.status().message();
  }
}

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterAWindowOfFiniteSteps) {
  train::LossScaler s(1024.0, 3);
  ASSERT_TRUE(s.enabled());
  // skip, finite x3 (doubles), finite, skip, finite x3 (doubles)
  const bool skips[] = {true, false, false, false, false, true, false, false, false};
  const double want[] = {512, 512, 512, 1024, 1024, 512, 512, 512, 1024};
  for (size_t i = 0; i < std::size(skips); ++i) {
    ASSERT_TRUE(s.afterStep(skips[i]).isOk());
    EXPECT_EQ(s.scale(), want[i]) << "after step " << i + 1;
  }
  EXPECT_EQ(s.goodSteps(), 0);
  // An overflow at scale 1 is not the scale's: an error, not a scale of 1/2.
  train::LossScaler one(1.0, 5);
  Status st = one.afterStep(true);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("not finite at loss scale 1"), std::string::npos) << st.message();
  // Off: nothing changes.
  train::LossScaler off;
  EXPECT_FALSE(off.enabled());
  EXPECT_TRUE(off.afterStep(true).isOk());
  EXPECT_EQ(off.scale(), 0.0);
}

TEST(LossScaler, RestoresOnlyStatesOfTheRule) {
  train::LossScaler s(65536.0, 4);
  EXPECT_TRUE(s.restore(1048576.0, 3).isOk());
  EXPECT_EQ(s.scale(), 1048576.0);
  EXPECT_EQ(s.goodSteps(), 3);
  for (auto [scale, good] : {std::pair{1048580.0, int64_t{0}}, std::pair{0.5, int64_t{0}},
                             std::pair{1024.0, int64_t{4}}, std::pair{1024.0, int64_t{-1}},
                             std::pair{std::numeric_limits<double>::infinity(), int64_t{0}}})
    EXPECT_FALSE(s.restore(scale, good).isOk()) << scale << " " << good;
}
