//===- runtime/SessionTraining.cpp - A session's training state -----------===//
//
// The Session's training side (runtime/Session.h): preparing the parameters'
// state (gradient accumulators, optimizer buffers, the second weight
// version of 2bw), planning the updates made inside a step, the training
// steps and gradients, flushing a no-flush schedule, weights, and
// checkpoints. The step itself is runProgram's (runtime/Session.cpp); the
// update rule runtime/train/StepUpdate.h's.
//
//===----------------------------------------------------------------------===//
#include "runtime/Session.h"
#include "runtime/SessionResident.h"

#include "pipeline/Schedule.h"
#include "runtime/DeviceThreads.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Clip.h"
#include "support/Format.h"
#include "support/Machine.h"
#include "support/Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

namespace pipec::runtime {

Status Session::prepareTraining() {
  const plan::Training &t = lp_.plan.training();
  PIPEC_ASSIGN(train::OptimizerConfig oc, train::parseOptimizer(t.optimizer()));
  PIPEC_ASSIGN(train::Optimizer opt, train::Optimizer::create(oc));
  optimizer_ = opt;
  if (t.lr_schedule().empty()) {
    lrSchedule_.baseLr = opt.baseLr();
  } else {
    PIPEC_ASSIGN(lrSchedule_, train::parseLrSchedule(t.lr_schedule(), opt.baseLr()));
  }
  paramOfGrad_.assign(lp_.plan.tensors_size(), -1);
  stateDst_.assign(lp_.plan.tensors_size(), nullptr);
  std::vector<int> producer(lp_.plan.tensors_size(), -1);
  for (int d = 0; d < lp_.plan.devices_size(); ++d)
    for (const plan::Node &n : lp_.plan.devices(d).nodes())
      for (int32_t o : n.outputs())
        producer[o] = d;
  for (const plan::StateUpdate &u : t.state_updates()) {
    stateDst_[u.value()] = residentData(u.state());
    if (!stateDst_[u.value()])
      return errorf("state '", lp_.plan.tensors(u.state()).name(), "' is not resident");
    stateProducer_.push_back(producer[u.value()]);
  }
  for (const plan::Parameter &pp : t.params()) {
    ParamState ps;
    ps.weight = pp.weight();
    ps.grad = pp.grad();
    ps.planInPlace = pp.accumulate_in_place();
    ps.device = producer[pp.grad()];
    if (ps.device < 0)
      return errorf("no device computes the gradient '", lp_.plan.tensors(pp.grad()).name(), "'");
    // A sharded optimizer: the replica the plan gives the parameter.
    ps.owner = lp_.plan.pipeline().shard_optimizer() ? static_cast<int>(pp.shard()) : 0;
    ps.updater = ps.owner * stages() + ps.device;
    // The devices of one process share the loaded weights: every device
    // that reads a parameter sees the one copy the optimizer updates. In a
    // distributed run each process has its own copy; the other devices
    // that read it receive it after every update.
    ps.data = static_cast<float *>(residentData(pp.weight()));
    if (!ps.data)
      return errorf("parameter '", lp_.plan.tensors(pp.weight()).name(), "' is not resident");
    ps.n = static_cast<int64_t>(lp_.plan.tensors(pp.weight()).bytes() / sizeof(float));
    // The devices that read the weight: its stages, in every replica.
    std::vector<int> holders;
    int stagesHolding = 0;
    for (int r = 0; r < replicas(); ++r)
      for (const plan::Device &dev : lp_.plan.devices())
        if (std::find(dev.weights().begin(), dev.weights().end(), pp.weight()) != dev.weights().end()) {
          holders.push_back(r * stages() + dev.index());
          stagesHolding += r == 0;
        }
    sharedParams_ = sharedParams_ || stagesHolding > 1;
    std::erase(holders, ps.updater);
    otherHolders_.push_back(holders);
    // Gradient accumulators live on every replica's device that computes
    // the gradient; the optimizer's state where the parameter is updated
    // (replica 0, or the owner of a sharded optimizer).
    if (isLocal(ps.device))
      ps.accum.assign(static_cast<size_t>(ps.n), 0.0f);
    if (isLocal(ps.updater))
      ps.state.assign(opt.stateTensors(), LargeVector<float>(static_cast<size_t>(ps.n), 0.0f));
    ps.replicaAccum.resize(static_cast<size_t>(replicas() - 1));
    for (int r = 1; r < replicas(); ++r)
      if (isLocal(r * stages() + ps.device))
        ps.replicaAccum[static_cast<size_t>(r - 1)].assign(static_cast<size_t>(ps.n), 0.0f);
    paramOfGrad_[pp.grad()] = static_cast<int>(params_.size());
    params_.push_back(std::move(ps));
  }
  if (t.has_loss_scaling()) {
    // Dynamic loss scaling (runtime/train/LossScale.h): the seed is set
    // before each step, and a step with non-finite gradients is skipped.
    const plan::LossScaling &ls = t.loss_scaling();
    const int32_t seed = ls.seed();
    if (seed < 0 || seed >= lp_.plan.tensors_size() ||
        lp_.plan.tensors(seed).kind() != plan::TensorInfo::CONSTANT ||
        lp_.plan.tensors(seed).dtype() != static_cast<int32_t>(DType::F32) ||
        lp_.plan.tensors(seed).bytes() != sizeof(float) || !lp_.weightAddress(seed))
      return errorf("the plan's loss scaling names tensor ", seed, ", which is no f32 scalar constant");
    scaler_ = train::LossScaler(ls.initial_scale(), ls.window());
    PIPEC_TRY(scaler_.restore(ls.initial_scale(), 0).withContext("the plan's loss scaling"));
    lossScaleSeed_ = seed;
    opts_.skipNonFinite = true;
  }
  if (!lp_.plan.pipeline().schedule().empty()) {
    PIPEC_ASSIGN(pipeline::Schedule sched, pipeline::Schedule::ofPlan(lp_.plan.pipeline().schedule(),
                                                                      lp_.plan.pipeline().stages_per_device()));
    noFlush_ = sched.noFlush();
  }
  if (noFlush_) {
    // 2bw: each device updates its own parameters when its backward passes
    // of a step are done, while the other devices go on; nothing may need
    // all of them at once.
    const std::string name = lp_.plan.pipeline().schedule();
    auto refuse = [&](const std::string &what) {
      return errorf("the ", name, " schedule does not support ", what,
                    " (its devices update their weights at different times, without a collective)");
    };
    if (t.clip_grad_norm() > 0)
      return refuse("gradient clipping");
    if (opts_.skipNonFinite)
      return refuse("skipping non-finite steps");
    if (replicas() > 1)
      return refuse("data parallelism");
    if (sharedParams_)
      return refuse("parameters read on several devices (tied weights)");
    if (onGpus())
      return refuse("GPUs yet");
    // The second version where the parameter is updated (this process's
    // devices in a distributed run).
    std::vector<std::vector<std::pair<int32_t, void *>>> second(devices_.size());
    for (ParamState &ps : params_) {
      if (!isLocal(ps.device))
        continue;
      ps.second.assign(ps.data, ps.data + ps.n); // W(-1) = W(0)
      second[static_cast<size_t>(ps.device)].emplace_back(ps.weight, ps.second.data());
    }
    for (size_t d = 0; d < devices_.size(); ++d)
      if (devices_[d])
        devices_[d]->setSecondWeightVersion(second[d]);
    for (auto &sq : stepSquares_)
      sq.assign(params_.size(), 0.0);
  }
  // Where the plan says the kernel that computes a gradient adds into its
  // output (the weight-gradient GEMMs: Parameter.accumulate_in_place), it
  // sums the micro-batches straight into the parameter's accumulator:
  // collect() then has no copy and no pass over the gradient per
  // micro-batch (which showed in perf profiles of the GPT-like sample's
  // step). A backend whose kernel cannot collects it instead.
  if (opts_.accumulateInPlace)
    for (ParamState &ps : params_) {
      if (!ps.planInPlace)
        continue;
      const plan::TensorInfo &g = lp_.plan.tensors(ps.grad);
      if (g.dtype() == static_cast<int32_t>(DType::F32) &&
          g.bytes() == static_cast<uint64_t>(ps.n) * sizeof(float))
        for (int r = 0; r < replicas(); ++r) {
          const int d = r * stages() + ps.device;
          if (isLocal(d))
            ps.inPlace = devices_[d]->accumulateInto(ps.grad, ps.accumOf(r)) || ps.inPlace;
        }
    }
  PIPEC_TRY(prepareResident());
  return planParamUpdates();
}

Status Session::planParamUpdates() {
  const plan::Plan &p = lp_.plan;
  const plan::Training &t = p.training();
  // The OPTIMIZER instruction's path that updates one parameter after the
  // other with nothing to wait for (runProgram's optimize).
  if (!opts_.updateInStep || noFlush_ || replicas() > 1 || onGpus() || t.clip_grad_norm() > 0 ||
      opts_.skipNonFinite || (transport() && sharedParams_ && !distributed()))
    return Status::ok();
  const size_t T = static_cast<size_t>(p.tensors_size());
  std::vector<char> isOutput(T, 0);
  for (int32_t o : p.outputs())
    isOutput[static_cast<size_t>(o)] = 1;
  for (int d : localDevices_) {
    const plan::Device &dev = p.devices(d);
    int optimizerAt = -1, optimizers = 0;
    for (int i = 0; i < dev.program_size(); ++i)
      if (dev.program(i).kind() == plan::Instruction::OPTIMIZER) {
        optimizerAt = i;
        ++optimizers;
      }
    if (optimizers != 1)
      continue;
    // The parameter each tensor holds the bytes of: its weight, and the
    // views of it (a Reshape of a weight reads the weight's bytes).
    std::vector<int> viewOf(T, -1);
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].device == d && params_[i].inPlace && otherHolders_[i].empty())
        viewOf[static_cast<size_t>(params_[i].weight)] = static_cast<int>(i);
    for (bool changed = true; changed;) {
      changed = false;
      for (const plan::Node &n : dev.nodes())
        if (n.view() && n.inputs_size() > 0 && n.inputs(0) >= 0 && viewOf[n.inputs(0)] >= 0 &&
            n.outputs_size() == 1 && viewOf[n.outputs(0)] != viewOf[n.inputs(0)]) {
          viewOf[n.outputs(0)] = viewOf[n.inputs(0)];
          changed = true;
        }
    }
    // Per parameter: the instruction and node of its last use (-1: none),
    // or refused (-2): its bytes are sent or returned.
    std::vector<std::pair<int, int32_t>> last(params_.size(), {-1, -1});
    for (size_t k = 0; k < T; ++k)
      if (viewOf[k] >= 0 && isOutput[k])
        last[static_cast<size_t>(viewOf[k])].first = -2;
    for (int i = 0; i < dev.program_size(); ++i) {
      const plan::Instruction &ins = dev.program(i);
      if (ins.kind() == plan::Instruction::SEND && viewOf[ins.tensor()] >= 0)
        last[static_cast<size_t>(viewOf[ins.tensor()])].first = -2;
      if (ins.kind() == plan::Instruction::OPTIMIZER || ins.kind() == plan::Instruction::SEND ||
          ins.kind() == plan::Instruction::RECV)
        continue;
      for (int32_t ni : ins.nodes()) {
        const plan::Node &n = dev.nodes(ni);
        if (n.view())
          continue; // reads nothing; its output's readers do
        auto use = [&](int param) {
          if (param >= 0 && last[static_cast<size_t>(param)].first != -2)
            last[static_cast<size_t>(param)] = {i, ni};
        };
        for (int32_t in : n.inputs())
          if (in >= 0)
            use(viewOf[in]);
        for (int32_t out : n.outputs())
          if (paramOfGrad_[out] >= 0 && params_[paramOfGrad_[out]].device == d)
            use(viewOf[params_[paramOfGrad_[out]].weight]);
      }
    }
    std::map<std::pair<int, int32_t>, std::vector<int>> after;
    for (size_t i = 0; i < params_.size(); ++i)
      if (last[i].first >= 0 && last[i].first < optimizerAt)
        after[last[i]].push_back(static_cast<int>(i));
    std::vector<DeviceExecutor::ParamUpdate> updates;
    for (auto &[at, which] : after) {
      for (int i : which)
        params_[static_cast<size_t>(i)].inStep = true;
      updates.push_back({at.first, at.second, which});
    }
    PIPEC_TRY(devices_[d]->setParamUpdates(std::move(updates)));
  }
  return Status::ok();
}

uint64_t Session::trainingStateBytes(int device) const {
  // Every replica's device holds the gradients of its stage; the device
  // that updates a parameter (replica 0's, or its shard's) its optimizer
  // state too.
  uint64_t bytes = 0;
  if (!optimizer_)
    return 0;
  const int stage = device % stages();
  for (const ParamState &ps : params_)
    if (ps.device == stage)
      bytes += static_cast<uint64_t>(ps.n) * sizeof(float) *
               (1 + (ps.updater == device ? optimizer_->stateTensors() : 0));
  return bytes;
}

Status Session::gatherTrainingState() {
  if (!distributed() || !isTraining() || devices_.size() < 2)
    return Status::ok();
  Transport *tr = transport();
  const int me = opts_.rank;
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::Gather);
  uint32_t index = 0;
  // Every process walks the same list in the same order: the index of a
  // message is its position.
  auto move = [&](int owner, void *data, size_t bytes) -> Status {
    const uint64_t tag = sessionTag(kind, index++);
    if (owner <= 0)
      return Status::ok();
    if (me == owner)
      return tr->send(me, 0, tag, data, bytes);
    if (me == 0)
      return tr->recv(0, owner, tag, data, bytes);
    return Status::ok();
  };
  if (noFlush_ && drainPending_)
    return errorf("the training state is not final until the last step is flushed (Session::flush)");
  PIPEC_TRY(pullResident());
  // The weights after the steps so far (2bw: the latest of its versions).
  for (ParamState &ps : params_)
    PIPEC_TRY(move(ps.device, ps.version(static_cast<int64_t>(steps_)), static_cast<size_t>(ps.n) * sizeof(float)));
  const auto &updates = lp_.plan.training().state_updates();
  for (int k = 0; k < updates.size(); ++k)
    PIPEC_TRY(move(stateProducer_[k], residentData(updates[k].state()),
                   lp_.plan.tensors(updates[k].state()).bytes()));
  return Status::ok();
}

Expected<Session::TrainStep> Session::train(const std::vector<Tensor> &inputs) {
  if (!isTraining())
    return errorf("this is an inference plan: it has no loss, gradients or optimizer");
  TrainStep step;
  step.lossScale = scaler_.scale();
  PIPEC_ASSIGN(step.outputs, runProgram(inputs, true, &step));
  PIPEC_TRY(scaler_.afterStep(step.skipped).withContext(cat("step ", steps_)));
  return step;
}

Expected<Session::Gradients> Session::gradients(const std::vector<Tensor> &inputs) {
  if (!isTraining())
    return errorf("this is an inference plan: it has no loss or gradients");
  if (noFlush_ || distributed() || replicas() > 1)
    return errorf("gradients() takes a flush schedule's plan run by one process with one pipeline");
  gradientsOnly_ = true;
  TrainStep step;
  auto ran = runProgram(inputs, true, &step);
  gradientsOnly_ = false;
  PIPEC_TRY(ran.status());
  if (resident_)
    PIPEC_TRY(pullResidentGradients());
  Gradients out;
  out.loss = step.loss;
  for (const ParamState &ps : params_) {
    const plan::TensorInfo &ti = lp_.plan.tensors(ps.weight);
    Tensor g(TensorDesc{DType::F32, Shape(ti.shape().begin(), ti.shape().end())});
    std::memcpy(g.raw(), ps.accum.data(), static_cast<size_t>(ps.n) * sizeof(float));
    out.values.emplace_back(ti.name(), std::move(g));
  }
  return out;
}

Status Session::setWeight(const std::string &name, const Tensor &value) {
  if (noFlush_ && drainPending_)
    return errorf("cannot set weight '", name, "' while a step is pending (Session::flush)");
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState &ps = params_[i];
    const plan::TensorInfo &ti = lp_.plan.tensors(ps.weight);
    if (ti.name() != name)
      continue;
    if (value.dtype() != DType::F32 || value.numel() != ps.n)
      return errorf("weight '", name, "' takes ", ps.n, " float32 values, got ", value.desc().str());
    std::memcpy(ps.version(static_cast<int64_t>(steps_)), value.raw(), static_cast<size_t>(ps.n) * sizeof(float));
    // The device's copy is the weight; the host's others stay as they are.
    return resident_ ? pushResident(static_cast<int>(i)) : Status::ok();
  }
  return errorf("the plan has no trained parameter named '", name, "'");
}

Status Session::flush(double *gradNorm) {
  if (!noFlush_ || !drainPending_) {
    if (gradNorm)
      *gradNorm = noFlush_ ? lastNoFlushNorm_ : 0.0;
    return Status::ok();
  }
  PIPEC_TRY(runProgram({}, true, nullptr, true).status());
  if (gradNorm)
    *gradNorm = lastNoFlushNorm_;
  return Status::ok();
}

const Session::ParamState *Session::paramOfWeight(int32_t tensor) const {
  for (const ParamState &ps : params_)
    if (ps.weight == tensor)
      return &ps;
  return nullptr;
}

Status Session::saveCheckpoint(const std::string &dir) {
  if (!isTraining())
    return errorf("checkpoints hold training state; this is an inference plan");
  // A failed step may have updated some parameters (on the devices that
  // got that far) and not others.
  if (!broken_.isOk())
    return broken_.withContext("no checkpoint: an earlier step failed and may have updated only some parameters");
  PIPEC_TRY(flush()); // 2bw: the weights after every step so far
  if (distributed() && devices_.size() > 1) {
    // Each process writes the part it owns into the leader's staging
    // directory; once every part is there the leader commits the whole.
    const int n = static_cast<int>(devices_.size());
    Status begun = leader() ? train::beginCheckpointParts(dir, static_cast<int64_t>(steps_)).status()
                            : Status::ok();
    PIPEC_TRY(agree(begun, cat("checkpoint '", dir, "'")));
    const std::string tmp = train::checkpointPartsDirectory(dir, static_cast<int64_t>(steps_));
    PIPEC_ASSIGN(train::Checkpoint part, checkpointContents(opts_.rank));
    PIPEC_TRY(agree(train::writeCheckpointPart(tmp, opts_.rank, n, part), cat("checkpoint '", dir, "'")));
    return agree(leader() ? train::commitCheckpointParts(tmp, dir, n) : Status::ok(),
                 cat("checkpoint '", dir, "'"));
  }
  PIPEC_ASSIGN(train::Checkpoint c, checkpointContents(-1));
  return train::writeCheckpoint(dir, c);
}

Expected<train::Checkpoint> Session::checkpointContents(int owner) const {
  // owner -1: everything (one process); else what that device updates or
  // computes: its parameters with their optimizer state, its statistics.
  const plan::Plan &p = lp_.plan;
  PIPEC_TRY(pullResident());
  train::Checkpoint c;
  c.step = static_cast<int64_t>(steps_);
  c.meta["plan.source_crc32c"] = std::to_string(p.source_crc32c());
  c.meta["optimizer"] = p.training().optimizer();
  c.meta["schedule"] = p.training().lr_schedule();
  c.meta["rng.seed"] = std::to_string(opts_.seed);
  if (scaler_.enabled()) {
    char scale[32]; // every digit: the restore checks for a power of two
    std::snprintf(scale, sizeof scale, "%.17g", scaler_.scale());
    c.meta["loss_scale.scale"] = scale;
    c.meta["loss_scale.good_steps"] = std::to_string(scaler_.goodSteps());
  }
  for (const ParamState &ps : params_) {
    if (owner >= 0 && ps.updater != owner)
      continue;
    const std::string &name = p.tensors(ps.weight).name();
    // 2bw: the weights after the last step and the version before, which
    // the next step reads.
    PIPEC_TRY(c.addFloats("param/" + name, ps.version(static_cast<int64_t>(steps_)), ps.n));
    if (noFlush_)
      PIPEC_TRY(c.addFloats("previous/" + name, ps.version(static_cast<int64_t>(steps_) - 1), ps.n));
    for (size_t k = 0; k < ps.state.size(); ++k)
      PIPEC_TRY(c.addFloats("state/" + name + "/" + optimizer_->stateNames()[k], ps.state[k].data(), ps.n));
  }
  const auto &updates = p.training().state_updates();
  for (int k = 0; k < updates.size(); ++k) {
    if (owner >= 0 && stateProducer_[static_cast<size_t>(k)] != owner)
      continue;
    const plan::TensorInfo &ti = p.tensors(updates[k].state());
    const void *data = residentData(updates[k].state());
    PIPEC_TRY(c.addFloats("buffer/" + ti.name(), static_cast<const float *>(data),
                          static_cast<int64_t>(ti.bytes() / sizeof(float))));
  }
  return c;
}

Status Session::loadCheckpoint(const std::string &dir) {
  if (!isTraining())
    return errorf("checkpoints hold training state; this is an inference plan");
  const plan::Plan &p = lp_.plan;
  PIPEC_ASSIGN(train::Checkpoint c, train::readCheckpoint(dir));
  auto meta = [&](const std::string &k) {
    auto it = c.meta.find(k);
    return it == c.meta.end() ? std::string("(none)") : it->second;
  };
  if (meta("optimizer") != p.training().optimizer() || meta("schedule") != p.training().lr_schedule())
    return errorf("checkpoint '", dir, "' was written with optimizer '", meta("optimizer"), "' and schedule '",
                  meta("schedule"), "'; this plan uses '", p.training().optimizer(), "' and '",
                  p.training().lr_schedule(), "'");
  if (meta("rng.seed") != std::to_string(opts_.seed))
    return errorf("checkpoint '", dir, "' was written with --seed ", meta("rng.seed"), "; resume with the same seed");
  const int64_t step = c.step;
  if (scaler_.enabled()) {
    // The scale the run had reached (a checkpoint without one: from the
    // plan's first scale).
    if (c.meta.count("loss_scale.scale")) {
      char *end = nullptr;
      const std::string &s = c.meta.at("loss_scale.scale");
      const double scale = std::strtod(s.c_str(), &end);
      const long long good = std::atoll(meta("loss_scale.good_steps").c_str());
      if (end == s.c_str() || *end)
        return errorf("checkpoint '", dir, "': loss_scale.scale '", s, "' is not a number");
      PIPEC_TRY(scaler_.restore(scale, good).withContext(cat("checkpoint '", dir, "'")));
    }
  }
  if (noFlush_ && drainPending_)
    return errorf("cannot load checkpoint '", dir, "' into a session whose last step is not flushed");
  for (ParamState &ps : params_) {
    const std::string &name = p.tensors(ps.weight).name();
    PIPEC_TRY(c.restoreFloats("param/" + name, ps.version(step), ps.n).withContext("checkpoint '" + dir + "'"));
    if (noFlush_)
      PIPEC_TRY(c.restoreFloats("previous/" + name, ps.version(step - 1), ps.n)
                    .withContext(cat("checkpoint '", dir, "' (a 2bw run resumes from two weight versions)")));
    // The optimizer's state where the parameter is updated (in a
    // distributed run, the process of that device).
    for (size_t k = 0; k < ps.state.size(); ++k)
      PIPEC_TRY(c.restoreFloats("state/" + name + "/" + optimizer_->stateNames()[k], ps.state[k].data(), ps.n)
                    .withContext("checkpoint '" + dir + "'"));
  }
  for (const plan::StateUpdate &u : p.training().state_updates()) {
    const plan::TensorInfo &ti = p.tensors(u.state());
    void *data = residentData(u.state());
    PIPEC_TRY(c.restoreFloats("buffer/" + ti.name(), static_cast<float *>(data),
                              static_cast<int64_t>(ti.bytes() / sizeof(float)))
                  .withContext("checkpoint '" + dir + "'"));
  }
  steps_ = static_cast<uint64_t>(c.step);
  if (resident_) {
    resident_->hostStale = false; // the host's copies are the checkpoint's
    PIPEC_TRY(pushResident());
  }
  return Status::ok();
}

Expected<Tensor> Session::weight(const std::string &name) const {
  PIPEC_ASSIGN(Tensor view, weightView(name));
  return view.clone();
}

bool Session::isTrainedWeight(const std::string &name) const {
  for (const ParamState &ps : params_)
    if (lp_.plan.tensors(ps.weight).name() == name)
      return true;
  return false;
}

Expected<Tensor> Session::weightView(const std::string &name) const {
  const plan::Plan &p = lp_.plan;
  PIPEC_TRY(pullResident());
  for (int32_t t = 0; t < p.tensors_size(); ++t) {
    const plan::TensorInfo &ti = p.tensors(t);
    if (ti.name() != name || (ti.kind() != plan::TensorInfo::WEIGHT &&
                              ti.kind() != plan::TensorInfo::CONSTANT))
      continue;
    void *data = residentData(t);
    if (const ParamState *ps = noFlush_ ? paramOfWeight(t) : nullptr) {
      if (drainPending_)
        return errorf("weight '", name, "' is not final until the last step is flushed (Session::flush)");
      data = const_cast<float *>(ps->version(static_cast<int64_t>(steps_)));
    }
    if (!data)
      return errorf("weight '", name, "' is not resident");
    return Tensor(TensorDesc{static_cast<DType>(ti.dtype()), Shape(ti.shape().begin(), ti.shape().end())},
                  data, nullptr);
  }
  return errorf("the plan has no weight named '", name, "'");
}

} // namespace pipec::runtime
