//===- runtime/train/StepUpdate.cpp - A training step's parameter updates -===//
#include "runtime/train/StepUpdate.h"

#include "runtime/train/Clip.h"

#include <cmath>

namespace pipec::train {

StepUpdate::StepUpdate(const Optimizer &optimizer, std::vector<ParamState> &params, const UpdateRule &rule,
                       int64_t stepNumber, float lr, unsigned microBatches, int lastLocalDevice, float lossScale)
    : opt_(optimizer), params_(params), rule_(rule), stepNumber_(stepNumber), lr_(lr),
      microBatches_(microBatches),
      // 1/M, divided by the power of two S exactly: (S g) (1/M) / S is
      // bitwise g (1/M) wherever S g did not overflow.
      invM_((1.0f / static_cast<float>(microBatches)) / lossScale), scaled_(lossScale != 1.0f),
      lastLocal_(lastLocalDevice), sq_(params.size(), 0.0) {}

Status StepUpdate::updateOne(size_t i) {
  ParamState &ps = params_[i];
  // The loss of a step is the mean of the micro-batch losses, so its
  // gradient is the mean of theirs.
  PIPEC_ASSIGN(sq_[i], opt_.scaleSquareAndStep(stepNumber_, lr_, ps.data, ps.gradient(),
                                               microBatches_ > 1 || scaled_ ? invM_ : 1.0f, ps.stateBuffers(), ps.n));
  return Status::ok();
}

Status StepUpdate::updateInStep(const std::vector<int> &which) {
  for (int i : which)
    PIPEC_TRY(updateOne(static_cast<size_t>(i)));
  return Status::ok();
}

Expected<bool> StepUpdate::optimize(int d, const std::function<Status(double *, size_t)> &allReduce) {
  const bool collective = rule_.collective, clipping = rule_.clip > 0;
  if (!collective && !clipping && !rule_.skipNonFinite && !rule_.gradientsOnly) {
    // Nothing waits for the norm: each parameter's update in one pass
    // (updateOne), but for those already updated in the step.
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].updater == d && !(rule_.inStep && params_[i].inStep))
        PIPEC_TRY(updateOne(i));
    return true;
  }
  std::vector<double> mine(collective ? params_.size() : 0, 0.0);
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState &ps = params_[i];
    if (ps.updater != d)
      continue;
    if (microBatches_ > 1 || scaled_)
      scaleGrad(ps.gradient(), ps.n, invM_);
    (collective ? mine[i] : sq_[i]) = gradSquaredSum(ps.gradient(), ps.n);
  }
  if (collective) {
    // Every slot has one non-zero contribution, so the sum is exact.
    PIPEC_TRY(allReduce(mine.data(), mine.size()));
    if (rule_.skipNonFinite) {
      double total = 0.0;
      for (double v : mine)
        total += v;
      if (!std::isfinite(total)) {
        if (d == lastLocal_) {
          sq_ = mine;
          skip_ = true;
        }
        return false; // every device sees the same total
      }
    }
    if (clipping) {
      double total = 0.0;
      for (double v : mine)
        total += v;
      double coef = clipCoefficient(std::sqrt(total), rule_.clip);
      if (coef < 1.0 || std::isnan(coef))
        for (ParamState &ps : params_)
          if (ps.updater == d)
            scaleGrad(ps.gradient(), ps.n, static_cast<float>(coef));
    }
    if (d == lastLocal_)
      sq_ = mine;
  } else if (clipping || rule_.skipNonFinite) {
    // One device: every gradient is its own.
    double total = 0.0;
    for (double v : sq_)
      total += v;
    if (rule_.skipNonFinite && !std::isfinite(total)) {
      skip_ = true;
      return false;
    }
    if (clipping) {
      double coef = clipCoefficient(std::sqrt(total), rule_.clip);
      if (coef < 1.0 || std::isnan(coef))
        for (ParamState &ps : params_)
          scaleGrad(ps.gradient(), ps.n, static_cast<float>(coef));
    }
  }
  for (ParamState &ps : params_) {
    if (ps.updater != d || rule_.gradientsOnly)
      continue;
    PIPEC_TRY(opt_.step(stepNumber_, lr_, ps.data, ps.gradient(), ps.stateBuffers(), ps.n));
  }
  return true;
}

Status updateNoFlush(const Optimizer &optimizer, std::vector<ParamState> &params, const LrSchedule &schedule,
                     int d, uint64_t s, unsigned microBatches, std::vector<double> &squares) {
  const int64_t number = static_cast<int64_t>(s) + 1;
  const float stepLr = schedule.lrAt(number);
  for (size_t i = 0; i < params.size(); ++i) {
    ParamState &ps = params[i];
    if (ps.updater != d)
      continue;
    const int64_t v = static_cast<int64_t>(s);
    PIPEC_ASSIGN(squares[i], optimizer.scaleSquareAndStep(
                                 number, stepLr, ps.version(v + 1), ps.gradient(),
                                 microBatches > 1 ? 1.0f / static_cast<float>(microBatches) : 1.0f,
                                 ps.stateBuffers(), ps.n, ps.version(v)));
  }
  return Status::ok();
}

} // namespace pipec::train
