//===- runtime/SessionResident.cpp - Training state on the devices --------===//
//
// Resident training (Session::residentTraining): on devices whose memory
// the host does not address (GPUs), the trained parameters, their
// gradients summed over the micro-batches and the optimizer's state stay
// in the device's memory for the whole run. The devices sum the
// gradients (in the gradient kernel itself where it can add in place,
// else by Backend::accumulate after each micro-batch), and at the
// OPTIMIZER instruction each device's ParamUpdater runs train::StepUpdate's
// passes over all of its parameters, enqueued behind the step's kernels.
// The host reads the squared sums (the gradient norm) once the step is
// done, and copies the weights and the optimizer state only when it needs
// them: weight(), checkpoints, setWeight, loadCheckpoint. Only clipping
// or skipping over several devices waits for the devices inside the step:
// their squared sums are all-reduced on the host, as the CPU path does.
//
//===----------------------------------------------------------------------===//
#include "runtime/SessionResident.h"

#include "runtime/train/Clip.h"
#include "support/Format.h"

#include <cmath>

namespace pipec::runtime {

Status Session::prepareResident() {
  const plan::Plan &p = lp_.plan;
  if (!opts_.resident || !onGpus() || distributed() || replicas() > 1 || noFlush_ || sharedParams_ ||
      !p.training().state_updates().empty())
    return Status::ok();
  for (int d : localDevices_)
    if (!devices_[d]->backend().residentTraining())
      return Status::ok();
  std::vector<char> isOutput(static_cast<size_t>(p.tensors_size()), 0);
  for (int32_t t : p.outputs())
    isOutput[static_cast<size_t>(t)] = 1;
  for (const ParamState &ps : params_)
    if (isOutput[static_cast<size_t>(ps.grad)] || !devices_[ps.device]->weightAddress(ps.weight))
      return Status::ok();

  auto r = std::make_unique<Resident>();
  r->params.resize(params_.size());
  r->paramsOf.resize(devices_.size());
  r->updaters.resize(devices_.size());
  std::vector<std::vector<kernel::ParamBuffers>> buffers(devices_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState &ps = params_[i];
    DeviceExecutor &dev = *devices_[ps.device];
    kernel::Backend &b = dev.backend();
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    kernel::ParamBuffers &rp = r->params[i];
    rp.param = static_cast<float *>(dev.weightAddress(ps.weight));
    rp.n = ps.n;
    PIPEC_ASSIGN(void *grad, b.alloc(std::max<uint64_t>(bytes, 4)));
    rp.grad = static_cast<float *>(grad);
    for (size_t k = 0; k < ps.state.size(); ++k) {
      PIPEC_ASSIGN(void *st, b.alloc(std::max<uint64_t>(bytes, 4)));
      rp.state[k] = static_cast<float *>(st);
      PIPEC_TRY(b.upload(st, ps.state[k].data(), bytes)); // zeros
    }
    const plan::TensorInfo &g = p.tensors(ps.grad);
    const bool inPlace = opts_.accumulateInPlace && ps.planInPlace &&
                         g.dtype() == static_cast<int32_t>(DType::F32) && g.bytes() == bytes &&
                         dev.accumulateInto(ps.grad, rp.grad, /*deviceMemory=*/true);
    if (!inPlace && !dev.accumulateOnDevice(ps.grad, rp.grad))
      return errorf("device ", ps.device, " does not compute the gradient '", g.name(), "' it updates with");
    ps.inPlace = inPlace;
    r->paramsOf[static_cast<size_t>(ps.device)].push_back(static_cast<int>(i));
    buffers[static_cast<size_t>(ps.device)].push_back(rp);
  }
  for (int d : localDevices_) {
    kernel::Backend &b = devices_[d]->backend();
    if (!buffers[static_cast<size_t>(d)].empty()) {
      PIPEC_ASSIGN(r->updaters[static_cast<size_t>(d)], b.paramUpdater(buffers[static_cast<size_t>(d)]));
    }
    devices_[d]->setResidentWeights(true);
    PIPEC_TRY(b.sync());
  }
  resident_ = std::move(r);
  return Status::ok();
}

Status Session::optimizeResident(int d, const train::UpdateRule &rule, int64_t stepNumber, float lr,
                                 Transport *tr) {
  Resident &r = *resident_;
  kernel::ParamUpdater *u = r.updaters[static_cast<size_t>(d)].get();
  const std::vector<int> &mine = r.paramsOf[static_cast<size_t>(d)];
  const unsigned MT = stepMicroBatches();
  // The step's loss is the mean of the micro-batches' losses; under loss
  // scaling the gradients are also divided by the scale (a power of two:
  // exactly), as train::StepUpdate does.
  const float scale = static_cast<float>(scaler_.enabled() ? scaler_.scale() : 1.0);
  if (u)
    PIPEC_TRY(u->squares(MT > 1 || scale != 1.0f ? (1.0f / static_cast<float>(MT)) / scale : 1.0f));
  if (rule.collective) {
    // Clipping or skipping over several devices: every device's squared
    // sums, slot per parameter (each slot has one non-zero part, so the
    // sum is exact), added in parameter order as train::StepUpdate does.
    std::vector<double> all(params_.size(), 0.0);
    if (u) {
      PIPEC_TRY(u->fetchSquares());
      PIPEC_TRY(devices_[d]->backend().sync());
      const double *sq = u->squaresOnHost();
      for (size_t j = 0; j < mine.size(); ++j)
        all[static_cast<size_t>(mine[j])] = sq[j];
    }
    PIPEC_TRY(tr->allReduceSum(d, all.data(), all.size()));
    double total = 0.0;
    for (double v : all)
      total += v;
    const bool skip = rule.skipNonFinite && !std::isfinite(total);
    double coef = 1.0;
    if (!skip && rule.clip > 0)
      coef = train::clipCoefficient(std::sqrt(total), rule.clip);
    if (u)
      PIPEC_TRY(u->setDecision(skip, coef < 1.0 || std::isnan(coef), coef));
    if (d == localDevices_.back())
      r.agreedSquares = std::move(all);
  } else if (u) {
    PIPEC_TRY(u->decide(rule.clip, rule.skipNonFinite));
  }
  if (!u)
    return Status::ok();
  PIPEC_TRY(u->apply(optimizer_->scalars(stepNumber, lr), !rule.gradientsOnly));
  return u->fetchSquares();
}

void Session::residentStepResults(const train::UpdateRule &rule, std::vector<double> &squares, bool &skipped) {
  const Resident &r = *resident_;
  squares.assign(params_.size(), 0.0);
  if (rule.collective) {
    squares = r.agreedSquares;
  } else {
    for (int d : localDevices_)
      if (const kernel::ParamUpdater *u = r.updaters[static_cast<size_t>(d)].get()) {
        const double *sq = u->squaresOnHost();
        const std::vector<int> &mine = r.paramsOf[static_cast<size_t>(d)];
        for (size_t j = 0; j < mine.size(); ++j)
          squares[static_cast<size_t>(mine[j])] = sq[j];
      }
  }
  double total = 0.0;
  for (double v : squares)
    total += v;
  // What every device decided from the same sums.
  skipped = rule.skipNonFinite && !std::isfinite(total);
  resident_->hostStale = true;
}

Status Session::pullResident() const {
  if (!resident_ || !resident_->hostStale)
    return Status::ok();
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState &ps = params_[i];
    const kernel::ParamBuffers &rp = resident_->params[i];
    kernel::Backend &b = devices_[ps.device]->backend();
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    PIPEC_TRY(b.download(ps.data, rp.param, bytes));
    for (size_t k = 0; k < ps.state.size(); ++k)
      PIPEC_TRY(b.download(const_cast<float *>(ps.state[k].data()), rp.state[k], bytes));
  }
  for (int d : localDevices_)
    PIPEC_TRY(devices_[d]->backend().sync());
  resident_->hostStale = false;
  return Status::ok();
}

Status Session::pullResidentGradients() {
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState &ps = params_[i];
    PIPEC_TRY(devices_[ps.device]->backend().download(ps.accum.data(), resident_->params[i].grad,
                                                      static_cast<uint64_t>(ps.n) * sizeof(float)));
  }
  for (int d : localDevices_)
    PIPEC_TRY(devices_[d]->backend().sync());
  return Status::ok();
}

Status Session::pushResident(int only) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (only >= 0 && i != static_cast<size_t>(only))
      continue;
    const ParamState &ps = params_[i];
    const kernel::ParamBuffers &rp = resident_->params[i];
    kernel::Backend &b = devices_[ps.device]->backend();
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    PIPEC_TRY(b.upload(rp.param, ps.data, bytes));
    for (size_t k = 0; k < ps.state.size() && only < 0; ++k)
      PIPEC_TRY(b.upload(rp.state[k], ps.state[k].data(), bytes));
  }
  for (int d : localDevices_)
    PIPEC_TRY(devices_[d]->backend().sync());
  return Status::ok();
}

} // namespace pipec::runtime
