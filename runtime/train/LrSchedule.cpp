//===- runtime/train/LrSchedule.cpp - Learning-rate schedules -------------===//
#include "runtime/train/LrSchedule.h"

#include "runtime/train/Spec.h"

#include <charconv>
#include <cmath>
#include <numbers>

namespace pipec::train {

namespace {
std::string num(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
} // namespace

double LrSchedule::lrAtExact(int64_t step) const {
  int64_t t = step < 1 ? 0 : step - 1;
  if (t < warmup)
    return baseLr * (warmupStart + (1.0 - warmupStart) * static_cast<double>(t) /
                                       static_cast<double>(warmup));
  double d = static_cast<double>(t - warmup);
  switch (kind) {
  case Kind::Constant:
    return baseLr;
  case Kind::Exponential:
    return baseLr * std::pow(gamma, d);
  case Kind::Cosine:
    return etaMin + (baseLr - etaMin) *
                        (1.0 + std::cos(std::numbers::pi * d / static_cast<double>(tMax))) / 2.0;
  }
  return baseLr;
}

float LrSchedule::lrAt(int64_t step) const { return static_cast<float>(lrAtExact(step)); }

std::string LrSchedule::str() const {
  std::string s;
  switch (kind) {
  case Kind::Constant:
    s = warmup > 0 ? "linear-warmup" : "constant";
    break;
  case Kind::Exponential:
    s = "exponential:gamma=" + num(gamma);
    break;
  case Kind::Cosine:
    s = cat("cosine:T=", tMax, ",min=", num(etaMin));
    break;
  }
  if (warmup > 0) {
    s += kind == Kind::Constant ? ":" : ",";
    s += cat("warmup=", warmup, ",start=", num(warmupStart));
  }
  return s;
}

Status LrSchedule::validate() const {
  if (!std::isfinite(baseLr) || baseLr < 0)
    return errorf("schedule: invalid base learning rate ", baseLr, " (must be >= 0)");
  if (warmup < 0)
    return errorf("schedule: negative warm-up ", warmup);
  if (!(warmupStart >= 0 && warmupStart <= 1))
    return errorf("schedule: warm-up start factor ", warmupStart, " is not in [0, 1]");
  if (kind == Kind::Exponential && !(gamma > 0 && std::isfinite(gamma)))
    return errorf("schedule: exponential gamma ", gamma, " must be > 0");
  if (kind == Kind::Cosine) {
    if (tMax < 1)
      return errorf("schedule: cosine period T=", tMax, " must be >= 1");
    if (!std::isfinite(etaMin) || etaMin < 0)
      return errorf("schedule: cosine min ", etaMin, " must be >= 0");
  }
  return Status::ok();
}

Expected<LrSchedule> parseLrSchedule(const std::string &text, double baseLr) {
  PIPEC_ASSIGN(Spec spec, Spec::parse(text));
  LrSchedule s;
  s.baseLr = baseLr;
  const std::string &k = spec.kind();
  std::string accepted = "warmup, start";
  if (k == "constant" || k == "linear-warmup") {
    s.kind = LrSchedule::Kind::Constant;
    if (k == "linear-warmup" && !spec.has("warmup"))
      return errorf("schedule spec '", text, "': linear-warmup needs warmup=STEPS");
  } else if (k == "exponential") {
    s.kind = LrSchedule::Kind::Exponential;
    if (!spec.has("gamma"))
      return errorf("schedule spec '", text, "': exponential needs gamma=FACTOR");
    PIPEC_TRY(spec.getDouble("gamma", s.gamma));
    accepted = "gamma, " + accepted;
  } else if (k == "cosine") {
    s.kind = LrSchedule::Kind::Cosine;
    if (!spec.has("t"))
      return errorf("schedule spec '", text, "': cosine needs T=STEPS (its period after the warm-up)");
    PIPEC_TRY(spec.getInt("t", s.tMax));
    PIPEC_TRY(spec.getDouble("min", s.etaMin));
    accepted = "T, min, " + accepted;
  } else {
    return errorf("schedule spec '", text, "': unknown schedule '", k,
                  "' (known: constant, linear-warmup, exponential, cosine)");
  }
  PIPEC_TRY(spec.getInt("warmup", s.warmup));
  PIPEC_TRY(spec.getDouble("start", s.warmupStart));
  PIPEC_TRY(spec.checkAllUsed(accepted));
  if (k == "linear-warmup" && s.warmup < 1)
    return errorf("schedule spec '", text, "': linear-warmup needs warmup >= 1");
  PIPEC_TRY(s.validate().withContext(cat("schedule spec '", text, "'")));
  return s;
}

} // namespace pipec::train
