//===- runtime/train/LossScale.h - Dynamic loss scaling -------*- C++ -*-===//
//
// The rule of a plan's Training.loss_scaling (docs/precision.md): the loss
// gradient's seed is the scale S; a step whose gradients are not all
// finite is skipped (on every device, rank and replica alike: the skip is
// decided on the agreed global squared sum) and halves S; `window` finite
// steps in a row double it. S stays a power of two, so dividing the
// gradients by it is exact. Every process applies the rule to the same
// sequence of decisions and so holds the same S.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cmath>
#include <cstdint>

namespace pipec::train {

class LossScaler {
public:
  LossScaler() = default;
  LossScaler(double initial, int64_t window) : scale_(initial), window_(window) {}

  bool enabled() const { return scale_ > 0; }
  /// The scale of the next step (0: no loss scaling).
  double scale() const { return scale_; }
  int64_t window() const { return window_; }
  /// Finite steps in a row since the scale last changed.
  int64_t goodSteps() const { return good_; }

  /// The step just run was skipped (non-finite gradients) or not. Fails
  /// when a step at scale 1 overflows: then the overflow is not the
  /// scale's (a non-finite loss, or gradients beyond the 16-bit range).
  Status afterStep(bool skipped) {
    if (!enabled())
      return Status::ok();
    if (skipped) {
      if (scale_ <= 1.0)
        return errorf("the gradients are not finite at loss scale 1: not an overflow the scale causes "
                      "(check the loss and the data, lower --lr)");
      scale_ /= 2.0;
      good_ = 0;
      return Status::ok();
    }
    if (++good_ >= window_) {
      scale_ *= 2.0;
      good_ = 0;
    }
    return Status::ok();
  }

  /// A checkpoint's state: the scale and the finite steps since it changed.
  Status restore(double scale, int64_t good) {
    int exp = 0;
    if (!(scale >= 1.0) || !std::isfinite(scale) || std::frexp(scale, &exp) != 0.5 || good < 0 || good >= window_)
      return errorf("loss scale ", scale, " after ", good, " finite steps is not a state of the rule (window ",
                    window_, ")");
    scale_ = scale;
    good_ = good;
    return Status::ok();
  }

private:
  double scale_ = 0;
  int64_t window_ = 0;
  int64_t good_ = 0;
};

} // namespace pipec::train
