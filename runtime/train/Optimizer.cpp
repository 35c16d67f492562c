//===- runtime/train/Optimizer.cpp - torch.optim update rules -------------===//
//
// Each update is one loop over a chunk of elements, written op by op in the
// order of torch.optim's single-tensor path (comments give the PyTorch op) so
// that each float rounding matches. Loop-invariant options are template
// parameters: every instantiation is a branch-free loop GCC vectorizes.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Optimizer.h"

#include "runtime/train/Clip.h"
#include "runtime/train/Spec.h"
#include "support/Parallel.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <utility>

namespace pipec::train {

namespace {

bool isKind(const std::string &k) {
  return k == "sgd" || k == "adam" || k == "adamw" || k == "rmsprop";
}

/// Shortest text that reads back as the same double.
std::string num(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// Runs `body(lo, hi)` over fixed chunks of [0, n), in parallel when there is
/// more than one chunk.
template <typename F> void forChunks(int64_t n, F body) {
  int64_t chunks = (n + kTrainChunk - 1) / kTrainChunk;
  parallelFor(chunks, true, [&](int64_t c) {
    body(c * kTrainChunk, std::min(n, (c + 1) * kTrainChunk));
  });
}

/// Elements a prologue (scaleSquareAndStep's) and the update take at a
/// time inside a chunk: the prologue's pass over a piece leaves it in L1
/// for the update, and the update's streams from memory keep flowing from
/// piece to piece. With the prologue over the whole chunk first (16K
/// elements) the squared sum added a large part to Adam's time; pieces of
/// 512 or 1024 took it back to about Adam's alone, larger pieces did not
/// (bench/GemmBench.cpp; bench/results/log.md).
constexpr int64_t kProloguePiece = 1024;

/// forChunks(n, body), with `prologue(lo, hi)` before `body(lo, hi)` on
/// each piece of kProloguePiece elements of a chunk where it is given.
/// Each chunk's pieces run in order on one thread.
template <typename F>
void forChunksWith(int64_t n, const std::function<void(int64_t, int64_t)> &prologue, F body) {
  forChunks(n, [&](int64_t lo, int64_t hi) {
    if (!prologue) {
      body(lo, hi);
      return;
    }
    for (int64_t b = lo; b < hi; b += kProloguePiece) {
      const int64_t e = std::min(hi, b + kProloguePiece);
      prologue(b, e);
      body(b, e);
    }
  });
}

/// torch.lerp(a, b, w) as ATen's CPU kernel computes it.
inline float lerp(float a, float b, float w, bool small) {
  return small ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

// --- SGD -------------------------------------------------------------------

struct SgdScalars {
  float negLr, wd, mu, oneMinusDamp;
};

template <bool WD, bool MOMENTUM, bool FIRST, bool NESTEROV>
void sgdChunk(const SgdScalars s, float *__restrict p, const float *__restrict g,
              float *__restrict buf, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float d = g[i];
    if constexpr (WD)
      d = d + s.wd * p[i]; // d_p = d_p.add(param, alpha=wd)
    if constexpr (MOMENTUM) {
      float b;
      if constexpr (FIRST)
        b = d; // buf = clone(d_p)
      else
        b = buf[i] * s.mu + s.oneMinusDamp * d; // buf.mul_(mu).add_(d_p, alpha=1-damp)
      buf[i] = b;
      if constexpr (NESTEROV)
        d = d + s.mu * b; // d_p = d_p.add(buf, alpha=mu)
      else
        d = b;
    }
    p[i] = p[i] + s.negLr * d; // param.add_(d_p, alpha=-lr)
  }
}

using SgdFn = void (*)(SgdScalars, float *, const float *, float *, int64_t, int64_t);

template <size_t... I> constexpr auto makeSgdTable(std::index_sequence<I...>) {
  return std::array<SgdFn, sizeof...(I)>{
      &sgdChunk<(I & 1) != 0, (I & 2) != 0, (I & 4) != 0, (I & 8) != 0>...};
}

SgdFn pickSgd(bool wd, bool momentum, bool first, bool nesterov) {
  static constexpr auto table = makeSgdTable(std::make_index_sequence<16>());
  return table[wd | momentum << 1 | first << 2 | nesterov << 3];
}

// --- Adam / AdamW ------------------------------------------------------------

struct AdamScalars {
  float wd;          // L2 weight decay (adam)
  float decay;       // 1 - lr*wd (adamw)
  float w1;          // 1 - beta1, lerp weight
  bool w1Small;      // |w1| < 0.5 (lerp formula choice)
  float beta2, oneMinusBeta2;
  float bc2Sqrt;     // sqrt(1 - beta2^t)
  float eps;
  float negStepSize; // -lr / (1 - beta1^t)
};

template <bool L2, bool DECOUPLED, bool AMSGRAD>
void adamChunk(const AdamScalars s, float *__restrict p, const float *__restrict g,
               float *__restrict m, float *__restrict v, float *__restrict vmax,
               int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float gi = g[i];
    float pi = p[i];
    if constexpr (L2)
      gi = gi + s.wd * pi; // grad = grad.add(param, alpha=wd)
    if constexpr (DECOUPLED)
      pi = pi * s.decay; // param.mul_(1 - lr*wd)
    float mi = lerp(m[i], gi, s.w1, s.w1Small); // exp_avg.lerp_(grad, 1-beta1)
    float vi = v[i] * s.beta2;                  // exp_avg_sq.mul_(beta2)
    vi = vi + s.oneMinusBeta2 * gi * gi;        //   .addcmul_(grad, grad, value=1-beta2)
    m[i] = mi;
    v[i] = vi;
    float vd = vi;
    if constexpr (AMSGRAD) {
      vd = std::max(vmax[i], vi); // torch.maximum(max_exp_avg_sq, exp_avg_sq)
      vmax[i] = vd;
    }
    float denom = std::sqrt(vd) / s.bc2Sqrt + s.eps; // (v.sqrt() / bc2_sqrt).add_(eps)
    p[i] = pi + s.negStepSize * mi / denom;           // param.addcdiv_(m, denom, -step_size)
  }
}

using AdamFn = void (*)(AdamScalars, float *, const float *, float *, float *, float *,
                        int64_t, int64_t);

template <size_t... I> constexpr auto makeAdamTable(std::index_sequence<I...>) {
  return std::array<AdamFn, sizeof...(I)>{
      &adamChunk<(I & 1) != 0, (I & 2) != 0, (I & 4) != 0>...};
}

AdamFn pickAdam(bool l2, bool decoupled, bool amsgrad) {
  static constexpr auto table = makeAdamTable(std::make_index_sequence<8>());
  return table[l2 | decoupled << 1 | amsgrad << 2];
}

// --- RMSprop -----------------------------------------------------------------

struct RmsScalars {
  float wd, alpha, oneMinusAlpha, w, eps, mu, negLr;
  bool wSmall;
};

template <bool WD, bool CENTERED, bool MOMENTUM>
void rmsChunk(const RmsScalars s, float *__restrict p, const float *__restrict g,
              float *__restrict sq, float *__restrict buf, float *__restrict gavg,
              int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float gi = g[i];
    if constexpr (WD)
      gi = gi + s.wd * p[i]; // grad = grad.add(param, alpha=wd)
    float v = sq[i] * s.alpha;           // square_avg.mul_(alpha)
    v = v + s.oneMinusAlpha * gi * gi;   //   .addcmul_(grad, grad, value=1-alpha)
    sq[i] = v;
    float avg;
    if constexpr (CENTERED) {
      float ga = lerp(gavg[i], gi, s.w, s.wSmall); // grad_avg.lerp_(grad, 1-alpha)
      gavg[i] = ga;
      avg = std::sqrt(v + -1.0f * ga * ga); // square_avg.addcmul(ga, ga, value=-1).sqrt_()
    } else {
      avg = std::sqrt(v); // square_avg.sqrt()
    }
    avg = avg + s.eps; // avg.add_(eps)
    if constexpr (MOMENTUM) {
      float b = buf[i] * s.mu + 1.0f * gi / avg; // buf.mul_(mu).addcdiv_(grad, avg)
      buf[i] = b;
      p[i] = p[i] + s.negLr * b; // param.add_(buf, alpha=-lr)
    } else {
      p[i] = p[i] + s.negLr * gi / avg; // param.addcdiv_(grad, avg, value=-lr)
    }
  }
}

using RmsFn = void (*)(RmsScalars, float *, const float *, float *, float *, float *,
                       int64_t, int64_t);

template <size_t... I> constexpr auto makeRmsTable(std::index_sequence<I...>) {
  return std::array<RmsFn, sizeof...(I)>{
      &rmsChunk<(I & 1) != 0, (I & 2) != 0, (I & 4) != 0>...};
}

RmsFn pickRms(bool wd, bool centered, bool momentum) {
  static constexpr auto table = makeRmsTable(std::make_index_sequence<8>());
  return table[wd | centered << 1 | momentum << 2];
}

} // namespace

// --- Configuration -----------------------------------------------------------

OptimizerConfig OptimizerConfig::resolved() const {
  OptimizerConfig c = *this;
  if (!c.lr) {
    if (kind == "adam" || kind == "adamw")
      c.lr = 1e-3;
    else if (kind == "rmsprop")
      c.lr = 1e-2;
  }
  if (!c.weightDecay)
    c.weightDecay = kind == "adamw" ? 1e-2 : 0.0;
  return c;
}

Status OptimizerConfig::validate() const {
  if (!isKind(kind))
    return errorf("unknown optimizer '", kind, "' (known: sgd, adam, adamw, rmsprop)");
  OptimizerConfig c = resolved();
  auto check = [&](const char *what, double v, bool ok, const char *rule) -> Status {
    if (!std::isfinite(v) || !ok)
      return errorf(kind, ": invalid ", what, " ", num(v), " (", rule, ")");
    return Status::ok();
  };
  if (!c.lr)
    return errorf(kind, ": a learning rate is required (torch.optim.SGD has no default)");
  PIPEC_TRY(check("learning rate", *c.lr, *c.lr >= 0, "must be >= 0"));
  PIPEC_TRY(check("weight_decay", *c.weightDecay, *c.weightDecay >= 0, "must be >= 0"));
  if (kind == "sgd") {
    PIPEC_TRY(check("momentum", momentum, momentum >= 0, "must be >= 0"));
    PIPEC_TRY(check("dampening", dampening, true, "must be finite"));
    if (nesterov && (momentum <= 0 || dampening != 0))
      return errorf(kind, ": Nesterov momentum requires a momentum > 0 and zero dampening (momentum ",
                    num(momentum), ", dampening ", num(dampening), ")");
  } else if (kind == "adam" || kind == "adamw") {
    PIPEC_TRY(check("eps", eps, eps >= 0, "must be >= 0"));
    PIPEC_TRY(check("beta1", beta1, beta1 >= 0 && beta1 < 1, "must be in [0, 1)"));
    PIPEC_TRY(check("beta2", beta2, beta2 >= 0 && beta2 < 1, "must be in [0, 1)"));
  } else {
    PIPEC_TRY(check("eps", eps, eps >= 0, "must be >= 0"));
    PIPEC_TRY(check("momentum", momentum, momentum >= 0, "must be >= 0"));
    // torch checks only alpha >= 0; alpha > 1 makes square_avg negative and
    // the update NaN, so pipec refuses it too.
    PIPEC_TRY(check("alpha", alpha, alpha >= 0 && alpha <= 1, "must be in [0, 1]"));
  }
  return Status::ok();
}

std::string OptimizerConfig::str() const {
  OptimizerConfig c = resolved();
  std::string s = kind + ":";
  if (c.lr)
    s += "lr=" + num(*c.lr) + ",";
  s += "weight_decay=" + num(*c.weightDecay);
  auto b = [](bool v) { return v ? "true" : "false"; };
  if (kind == "sgd")
    s += cat(",momentum=", num(momentum), ",dampening=", num(dampening), ",nesterov=",
             b(nesterov));
  else if (kind == "adam" || kind == "adamw")
    s += cat(",beta1=", num(beta1), ",beta2=", num(beta2), ",eps=", num(eps), ",amsgrad=",
             b(amsgrad));
  else if (kind == "rmsprop")
    s += cat(",alpha=", num(alpha), ",eps=", num(eps), ",momentum=", num(momentum),
             ",centered=", b(centered));
  return s;
}

Expected<OptimizerConfig> parseOptimizer(const std::string &text, std::optional<double> lr) {
  PIPEC_ASSIGN(Spec spec, Spec::parse(text));
  OptimizerConfig c;
  c.kind = spec.kind();
  if (!isKind(c.kind))
    return errorf("optimizer spec '", text, "': unknown optimizer '", c.kind,
                  "' (known: sgd, adam, adamw, rmsprop)");
  auto optional = [&](const char *key, std::optional<double> &field) -> Status {
    if (!spec.has(key))
      return Status::ok();
    double v = 0;
    PIPEC_TRY(spec.getDouble(key, v));
    field = v;
    return Status::ok();
  };
  PIPEC_TRY(optional("lr", c.lr));
  if (spec.has("wd") && spec.has("weight_decay"))
    return errorf("optimizer spec '", text, "': give weight_decay or wd, not both");
  PIPEC_TRY(optional("weight_decay", c.weightDecay));
  PIPEC_TRY(optional("wd", c.weightDecay));
  std::string accepted = "lr, weight_decay (wd), ";
  if (c.kind == "sgd") {
    PIPEC_TRY(spec.getDouble("momentum", c.momentum));
    PIPEC_TRY(spec.getDouble("dampening", c.dampening));
    PIPEC_TRY(spec.getBool("nesterov", c.nesterov));
    accepted += "momentum, dampening, nesterov";
  } else if (c.kind == "adam" || c.kind == "adamw") {
    PIPEC_TRY(spec.getDouble("beta1", c.beta1));
    PIPEC_TRY(spec.getDouble("beta2", c.beta2));
    PIPEC_TRY(spec.getDouble("eps", c.eps));
    PIPEC_TRY(spec.getBool("amsgrad", c.amsgrad));
    accepted += "beta1, beta2, eps, amsgrad";
  } else {
    PIPEC_TRY(spec.getDouble("alpha", c.alpha));
    PIPEC_TRY(spec.getDouble("eps", c.eps));
    PIPEC_TRY(spec.getDouble("momentum", c.momentum));
    PIPEC_TRY(spec.getBool("centered", c.centered));
    accepted += "alpha, eps, momentum, centered";
  }
  PIPEC_TRY(spec.checkAllUsed(accepted));
  if (lr)
    c.lr = *lr;
  PIPEC_TRY(c.validate().withContext(cat("optimizer spec '", text, "'",
                                         lr ? cat(" with learning rate ", num(*lr)) : "")));
  return c.resolved();
}

// --- Optimizer ---------------------------------------------------------------

Expected<Optimizer> Optimizer::create(const OptimizerConfig &config) {
  PIPEC_TRY(config.validate());
  Optimizer o;
  o.cfg_ = config.resolved();
  const OptimizerConfig &c = o.cfg_;
  if (c.kind == "sgd") {
    o.kind_ = Kind::Sgd;
    if (c.momentum != 0)
      o.stateNames_ = {"momentum_buffer"};
  } else if (c.kind == "adam" || c.kind == "adamw") {
    o.kind_ = c.kind == "adam" ? Kind::Adam : Kind::AdamW;
    o.stateNames_ = {"exp_avg", "exp_avg_sq"};
    if (c.amsgrad)
      o.stateNames_.push_back("max_exp_avg_sq");
  } else {
    o.kind_ = Kind::RmsProp;
    o.stateNames_ = {"square_avg"};
    if (c.momentum > 0)
      o.stateNames_.push_back("momentum_buffer");
    if (c.centered)
      o.stateNames_.push_back("grad_avg");
  }
  return o;
}

UpdateScalars Optimizer::scalars(int64_t step, float lr) const {
  const double lrD = lr, wd = *cfg_.weightDecay;
  UpdateScalars u;
  u.states = static_cast<int32_t>(stateNames_.size());
  u.wd = static_cast<float>(wd);
  u.negLr = static_cast<float>(-lrD);
  switch (kind_) {
  case Kind::Sgd:
    u.kind = UpdateScalars::Sgd;
    u.l2 = wd != 0;
    u.momentum = cfg_.momentum != 0;
    u.first = step == 1;
    u.nesterov = cfg_.nesterov;
    u.mu = static_cast<float>(cfg_.momentum);
    u.oneMinusDamp = static_cast<float>(1.0 - cfg_.dampening);
    break;
  case Kind::Adam:
  case Kind::AdamW: {
    const double t = static_cast<double>(step);
    const double bc1 = 1.0 - std::pow(cfg_.beta1, t);
    const double bc2 = 1.0 - std::pow(cfg_.beta2, t);
    u.kind = UpdateScalars::Adam;
    const bool decoupled = kind_ == Kind::AdamW;
    u.l2 = !decoupled && wd != 0;
    u.decoupled = decoupled && wd != 0;
    u.amsgrad = cfg_.amsgrad;
    u.decay = static_cast<float>(1.0 - lrD * wd);
    u.lerpWeight = static_cast<float>(1.0 - cfg_.beta1);
    u.lerpSmall = std::abs(u.lerpWeight) < 0.5f;
    u.beta2 = static_cast<float>(cfg_.beta2);
    u.oneMinusBeta2 = static_cast<float>(1.0 - cfg_.beta2);
    u.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
    u.eps = static_cast<float>(cfg_.eps);
    u.negStepSize = static_cast<float>(-(lrD / bc1));
    break;
  }
  case Kind::RmsProp:
    u.kind = UpdateScalars::RmsProp;
    u.l2 = wd != 0;
    u.centered = cfg_.centered;
    u.momentum = cfg_.momentum > 0;
    u.alpha = static_cast<float>(cfg_.alpha);
    u.oneMinusAlpha = static_cast<float>(1.0 - cfg_.alpha);
    u.lerpWeight = u.oneMinusAlpha;
    u.lerpSmall = std::abs(u.lerpWeight) < 0.5f;
    u.eps = static_cast<float>(cfg_.eps);
    u.mu = static_cast<float>(cfg_.momentum);
    break;
  }
  return u;
}

Status Optimizer::step(int64_t step, float lr, float *param, const float *grad,
                       const std::vector<float *> &state, int64_t n) const {
  return update(step, lr, param, grad, state, n, nullptr);
}

Expected<double> Optimizer::scaleSquareAndStep(int64_t step, float lr, float *param, float *grad,
                                               float gradScale, const std::vector<float *> &state,
                                               int64_t n, const float *copyFrom) const {
  if (n > 0 && !grad)
    return errorf(cfg_.kind, " step ", step, ": null gradient");
  const int64_t chunks = (n + kTrainChunk - 1) / kTrainChunk;
  std::vector<ChunkSquares> partial(static_cast<size_t>(std::max<int64_t>(chunks, 0)));
  PIPEC_TRY(update(step, lr, param, grad, state, n, [&](int64_t lo, int64_t hi) {
    if (copyFrom)
      std::copy(copyFrom + lo, copyFrom + hi, param + lo);
    if (gradScale != 1.0f)
      for (int64_t i = lo; i < hi; ++i)
        grad[i] = grad[i] * gradScale;
    partial[static_cast<size_t>(lo / kTrainChunk)].add(grad + lo, hi - lo);
  }));
  double total = 0.0;
  for (const ChunkSquares &s : partial)
    total += s.total();
  return total;
}

Status Optimizer::update(int64_t step, float lr, float *param, const float *grad,
                         const std::vector<float *> &state, int64_t n,
                         const std::function<void(int64_t, int64_t)> &prologue) const {
  if (step < 1)
    return errorf(cfg_.kind, " step: the step number is 1-based, got ", step);
  if (!std::isfinite(lr) || lr < 0)
    return errorf(cfg_.kind, " step ", step, ": invalid learning rate ", lr);
  if (n < 0)
    return errorf(cfg_.kind, " step ", step, ": negative element count ", n);
  if (state.size() != stateTensors())
    return errorf(cfg_.kind, " step ", step, ": expected ", stateTensors(),
                  " state buffers, got ", state.size());
  if (n == 0)
    return Status::ok();
  if (!param || !grad)
    return errorf(cfg_.kind, " step ", step, ": null parameter or gradient");
  for (size_t i = 0; i < state.size(); ++i)
    if (!state[i])
      return errorf(cfg_.kind, " step ", step, ": state buffer ", i, " (", stateNames_[i],
                    ") is null");

  const UpdateScalars u = scalars(step, lr);
  switch (kind_) {
  case Kind::Sgd: {
    SgdScalars s{u.negLr, u.wd, u.mu, u.oneMinusDamp};
    SgdFn fn = pickSgd(u.l2, u.momentum, u.first, u.nesterov);
    float *buf = state.empty() ? nullptr : state[0];
    forChunksWith(n, prologue, [&](int64_t lo, int64_t hi) {
      fn(s, param, grad, buf, lo, hi);
    });
    return Status::ok();
  }
  case Kind::Adam:
  case Kind::AdamW: {
    AdamScalars s{u.wd, u.decay, u.lerpWeight, u.lerpSmall, u.beta2, u.oneMinusBeta2, u.bc2Sqrt, u.eps, u.negStepSize};
    AdamFn fn = pickAdam(u.l2, u.decoupled, u.amsgrad);
    float *vmax = u.amsgrad ? state[2] : nullptr;
    forChunksWith(n, prologue, [&](int64_t lo, int64_t hi) {
      fn(s, param, grad, state[0], state[1], vmax, lo, hi);
    });
    return Status::ok();
  }
  case Kind::RmsProp: {
    RmsScalars s{u.wd, u.alpha, u.oneMinusAlpha, u.lerpWeight, u.eps, u.mu, u.negLr, u.lerpSmall};
    RmsFn fn = pickRms(u.l2, u.centered, u.momentum);
    float *buf = u.momentum ? state[1] : nullptr;
    float *gavg = u.centered ? state.back() : nullptr;
    forChunksWith(n, prologue, [&](int64_t lo, int64_t hi) {
      fn(s, param, grad, state[0], buf, gavg, lo, hi);
    });
    return Status::ok();
  }
  }
  return errorf("unreachable optimizer kind");
}

} // namespace pipec::train
