//===- runtime/train/LrSchedule.h - Learning-rate schedules ---*- C++ -*-===//
//
// The learning rate of each optimizer step, as closed forms of PyTorch's
// schedulers stepped once per optimizer step. With t = step - 1 (the steps
// already taken, torch's `last_epoch`) and lr the optimizer's base rate:
//
//   constant      lr
//   exponential   lr * gamma^t                                (ExponentialLR)
//   cosine        min + (lr - min) * (1 + cos(pi * t / T)) / 2 (CosineAnnealingLR)
//
// A warm-up of W steps comes first (torch: SequentialLR of LinearLR(start, 1,
// W) and the decay, milestone W): for t < W the rate is
// lr * (start + (1 - start) * t / W), and the decay then runs on t - W.
// "linear-warmup" is a constant schedule with a warm-up.
//
// Spec grammar (runtime/train/Spec.h): KIND[:KEY=VALUE,...] with
//   constant       [warmup=W] [start=F]
//   linear-warmup  warmup=W [start=F]
//   exponential    gamma=G [warmup=W] [start=F]
//   cosine         T=STEPS [min=ETA_MIN] [warmup=W] [start=F]
// e.g. "cosine:T=1000,min=1e-5,warmup=100". W, T are step counts; start is
// the warm-up's first factor (default 0, so step 1 runs at lr 0 as in the
// common linear warm-up); min is an absolute rate (default 0).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <string>

namespace pipec::train {

/// A learning-rate schedule: a pure function of the step number.
struct LrSchedule {
  enum class Kind { Constant, Exponential, Cosine };
  Kind kind = Kind::Constant;
  /// The optimizer's learning rate (the schedule's peak).
  double baseLr = 0.0;
  /// Warm-up steps (0: none) and the factor of baseLr it starts from.
  int64_t warmup = 0;
  double warmupStart = 0.0;
  /// exponential: decay per step.
  double gamma = 1.0;
  /// cosine: period T_max in steps (after the warm-up) and floor eta_min.
  int64_t tMax = 1;
  double etaMin = 0.0;

  /// The learning rate of 1-based optimizer step `step` (computed in double,
  /// rounded to float once). Steps < 1 are treated as step 1.
  float lrAt(int64_t step) const;
  /// Same, unrounded.
  double lrAtExact(int64_t step) const;
  /// The spec that parses back to this schedule (without the base rate).
  std::string str() const;
  /// Checks ranges (warm-up start in [0,1], gamma > 0, T >= 1, lr >= 0).
  Status validate() const;
};

/// Parses a schedule spec (grammar above) for an optimizer whose learning
/// rate is `baseLr`. Errors name the spec and the bad key or value.
Expected<LrSchedule> parseLrSchedule(const std::string &spec, double baseLr);

} // namespace pipec::train
