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
// With data parallelism every replica's device sums its own micro-batches;
// at the OPTIMIZER the updater of each parameter (replica 0's device of
// its stage, or its shard's) takes the other replicas' sums and adds them
// in replica order, ((g0 + g1) + g2) ..., as StepExchange does on the
// host, updates, and sends the new weight to the other replicas' devices.
// Between the GPUs of one process the buffers go device to device
// (DeviceExecutor::sendMemory: an address and an event); between
// processes through the host (the transport's staging).
//
//===----------------------------------------------------------------------===//
#include "runtime/SessionResident.h"

#include "runtime/train/Clip.h"
#include "support/Format.h"

#include <cmath>

namespace pipec::runtime {

Status Session::prepareResident() {
  const plan::Plan &p = lp_.plan;
  if (!opts_.resident || !onGpus() || noFlush_ || sharedParams_ || !p.training().state_updates().empty())
    return Status::ok();
  for (int d : localDevices_)
    if (!devices_[d]->backend().residentTraining())
      return Status::ok();
  const int K = stages(), D = replicas();
  std::vector<char> isOutput(static_cast<size_t>(p.tensors_size()), 0);
  for (int32_t t : p.outputs())
    isOutput[static_cast<size_t>(t)] = 1;
  for (const ParamState &ps : params_) {
    if (isOutput[static_cast<size_t>(ps.grad)])
      return Status::ok();
    for (int rep = 0; rep < D; ++rep)
      if (const int d = rep * K + ps.device; isLocal(d) && !devices_[d]->weightAddress(ps.weight))
        return Status::ok();
  }

  auto r = std::make_unique<Resident>();
  r->params.resize(params_.size());
  r->grads.assign(params_.size(), std::vector<float *>(static_cast<size_t>(D), nullptr));
  r->paramsOf.resize(devices_.size());
  r->updaters.resize(devices_.size());
  r->scratch.assign(devices_.size(), nullptr);
  r->scratchHalf.assign(devices_.size(), 0);
  std::vector<uint64_t> scratchBytes(devices_.size(), 0);
  std::vector<std::vector<kernel::ParamBuffers>> buffers(devices_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState &ps = params_[i];
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    const plan::TensorInfo &g = p.tensors(ps.grad);
    // Every replica's device of the stage sums its micro-batches.
    ps.inPlace = false;
    for (int rep = 0; rep < D; ++rep) {
      const int d = rep * K + ps.device;
      if (!isLocal(d))
        continue;
      DeviceExecutor &dev = *devices_[d];
      PIPEC_ASSIGN(void *grad, dev.backend().alloc(std::max<uint64_t>(bytes, 4)));
      float *sum = static_cast<float *>(grad);
      r->grads[i][static_cast<size_t>(rep)] = sum;
      const bool inPlace = opts_.accumulateInPlace && ps.planInPlace &&
                           g.dtype() == static_cast<int32_t>(DType::F32) && g.bytes() == bytes &&
                           dev.accumulateInto(ps.grad, sum, /*deviceMemory=*/true);
      if (!inPlace && !dev.accumulateOnDevice(ps.grad, sum))
        return errorf("device ", d, " does not compute the gradient '", g.name(), "' it updates with");
      ps.inPlace = ps.inPlace || inPlace;
    }
    if (!isLocal(ps.updater))
      continue;
    const int u = ps.updater, replica = u / K;
    kernel::Backend &b = devices_[u]->backend();
    kernel::ParamBuffers &rp = r->params[i];
    rp.param = static_cast<float *>(devices_[u]->weightAddress(ps.weight));
    rp.n = ps.n;
    rp.grad = r->grads[i][static_cast<size_t>(replica)];
    if (D > 1)
      scratchBytes[static_cast<size_t>(u)] = std::max(scratchBytes[static_cast<size_t>(u)], bytes);
    for (size_t k = 0; k < ps.state.size(); ++k) {
      PIPEC_ASSIGN(void *st, b.alloc(std::max<uint64_t>(bytes, 4)));
      rp.state[k] = static_cast<float *>(st);
      PIPEC_TRY(b.upload(st, ps.state[k].data(), bytes)); // zeros
    }
    r->paramsOf[static_cast<size_t>(u)].push_back(static_cast<int>(i));
    buffers[static_cast<size_t>(u)].push_back(rp);
  }
  for (int d : localDevices_) {
    kernel::Backend &b = devices_[d]->backend();
    if (!buffers[static_cast<size_t>(d)].empty()) {
      PIPEC_ASSIGN(r->updaters[static_cast<size_t>(d)], b.paramUpdater(buffers[static_cast<size_t>(d)]));
    }
    if (scratchBytes[static_cast<size_t>(d)] > 0) {
      PIPEC_ASSIGN(void *scratch, b.alloc(2 * scratchBytes[static_cast<size_t>(d)]));
      r->scratch[static_cast<size_t>(d)] = static_cast<float *>(scratch);
      r->scratchHalf[static_cast<size_t>(d)] = scratchBytes[static_cast<size_t>(d)] / sizeof(float);
    }
    devices_[d]->setResidentWeights(true);
    PIPEC_TRY(b.sync());
  }
  resident_ = std::move(r);
  return Status::ok();
}

Status Session::reduceResidentGradients(int d, Transport &tr) {
  const int K = stages(), D = replicas();
  if (D < 2)
    return Status::ok();
  Resident &r = *resident_;
  DeviceExecutor &dev = *devices_[d];
  const int replica = d / K, stage = d % K;
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::ReplicaGradient);
  // Sends first: a send never waits for its receive. The sums are not
  // written again before the step ends.
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState &ps = params_[i];
    if (ps.device == stage && ps.updater != d)
      PIPEC_TRY(dev.sendMemory(tr, ps.updater, sessionTag(kind, static_cast<uint32_t>(i)),
                               r.grads[i][static_cast<size_t>(replica)], static_cast<uint64_t>(ps.n) * sizeof(float)));
  }
  // The sum in replica order, whichever replica updates (StepExchange's
  // order, so that every placement of the update gives the same bits):
  // replica 0 adds into its own sum; a later one starts from replica 0's
  // in the second half of its scratch (one parameter after the other, in
  // stream order) and copies the total into its own.
  kernel::Backend &b = dev.backend();
  const size_t half = r.scratchHalf[static_cast<size_t>(d)];
  for (int i : r.paramsOf[static_cast<size_t>(d)]) {
    const ParamState &ps = params_[static_cast<size_t>(i)];
    const uint64_t tag = sessionTag(kind, static_cast<uint32_t>(i));
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    float *own = r.grads[static_cast<size_t>(i)][static_cast<size_t>(replica)];
    float *part = r.scratch[static_cast<size_t>(d)];
    float *sum = own;
    if (replica > 0) {
      sum = part + half;
      PIPEC_TRY(dev.recvMemory(tr, stage, tag, sum, bytes));
    }
    for (int k = 1; k < D; ++k) {
      const float *add = own;
      if (k != replica) {
        PIPEC_TRY(dev.recvMemory(tr, k * K + stage, tag, part, bytes));
        add = part;
      }
      PIPEC_TRY(b.accumulate(sum, add, ps.n, false));
    }
    if (sum != own)
      PIPEC_TRY(b.accumulate(own, sum, ps.n, true));
  }
  return Status::ok();
}

Status Session::syncResidentWeights(int d, Transport &tr) {
  const int K = stages();
  if (replicas() < 2)
    return Status::ok();
  Resident &r = *resident_;
  DeviceExecutor &dev = *devices_[d];
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::SharedWeight);
  for (int i : r.paramsOf[static_cast<size_t>(d)])
    for (int h : otherHolders_[static_cast<size_t>(i)])
      PIPEC_TRY(dev.sendMemory(tr, h, sessionTag(kind, static_cast<uint32_t>(i)), r.params[static_cast<size_t>(i)].param,
                               static_cast<uint64_t>(params_[static_cast<size_t>(i)].n) * sizeof(float)));
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState &ps = params_[i];
    if (ps.device == d % K && ps.updater != d)
      PIPEC_TRY(dev.recvMemory(tr, ps.updater, sessionTag(kind, static_cast<uint32_t>(i)),
                               dev.weightAddress(ps.weight), static_cast<uint64_t>(ps.n) * sizeof(float)));
  }
  return Status::ok();
}

Status Session::optimizeResident(int d, const train::UpdateRule &rule, int64_t stepNumber, float lr,
                                 Transport *tr) {
  Resident &r = *resident_;
  if (replicas() > 1)
    PIPEC_TRY(reduceResidentGradients(d, *tr));
  kernel::ParamUpdater *u = r.updaters[static_cast<size_t>(d)].get();
  const std::vector<int> &mine = r.paramsOf[static_cast<size_t>(d)];
  const unsigned MT = stepMicroBatches();
  // The step's loss is the mean of the micro-batches' losses (of every
  // replica); under loss scaling the gradients are also divided by the
  // scale (a power of two: exactly), as train::StepUpdate does.
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
  if (u) {
    PIPEC_TRY(u->apply(optimizer_->scalars(stepNumber, lr), !rule.gradientsOnly));
    PIPEC_TRY(u->fetchSquares());
  }
  return replicas() > 1 ? syncResidentWeights(d, *tr) : Status::ok();
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
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    if (isLocal(ps.updater)) {
      kernel::Backend &b = devices_[ps.updater]->backend();
      PIPEC_TRY(b.download(ps.data, rp.param, bytes));
      for (size_t k = 0; k < ps.state.size(); ++k)
        PIPEC_TRY(b.download(const_cast<float *>(ps.state[k].data()), rp.state[k], bytes));
      continue;
    }
    // Updated by another process: this one's replica has the new weight.
    for (int rep = 0; rep < replicas(); ++rep)
      if (const int d = rep * stages() + ps.device; isLocal(d)) {
        PIPEC_TRY(devices_[d]->backend().download(ps.data, devices_[d]->weightAddress(ps.weight), bytes));
        break;
      }
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
    const uint64_t bytes = static_cast<uint64_t>(ps.n) * sizeof(float);
    // Every local replica's copy of the weight; the state where it is
    // updated.
    for (int rep = 0; rep < replicas(); ++rep)
      if (const int d = rep * stages() + ps.device; isLocal(d))
        PIPEC_TRY(devices_[d]->backend().upload(devices_[d]->weightAddress(ps.weight), ps.data, bytes));
    if (!isLocal(ps.updater))
      continue;
    kernel::Backend &b = devices_[ps.updater]->backend();
    for (size_t k = 0; k < ps.state.size() && only < 0; ++k)
      PIPEC_TRY(b.upload(rp.state[k], ps.state[k].data(), bytes));
  }
  for (int d : localDevices_)
    PIPEC_TRY(devices_[d]->backend().sync());
  return Status::ok();
}

} // namespace pipec::runtime
