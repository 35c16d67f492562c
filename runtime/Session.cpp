//===- runtime/Session.cpp - A loaded plan, ready to run ------------------===//
#include "runtime/Session.h"

#include <omp.h>

#include "runtime/DeviceThreads.h"
#include "support/Format.h"
#include "support/Machine.h"
#include "support/Parallel.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Clip.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace pipec::runtime {

Session::Session() = default;
Session::~Session() = default;

namespace {

/// Refuses a plan whose allocations in this process (every device's arena
/// and weights; for training each parameter's gradient accumulator and
/// optimizer state) exceed the memory this process may use, before any is
/// made: the kernel would grant them lazily and end the run half-way.
Status checkFitsMachine(const plan::Plan &p) {
  const uint64_t machine = usableMemoryBytes();
  if (machine == 0)
    return Status::ok(); // nothing to check against
  long double arenas = 0, weights = 0, state = 0;
  for (const plan::Device &d : p.devices()) {
    arenas += std::max<uint64_t>(d.arena_bytes(), 64);
    weights += d.weight_bytes();
  }
  if (p.pipeline().training()) {
    PIPEC_ASSIGN(train::OptimizerConfig oc, train::parseOptimizer(p.training().optimizer()));
    PIPEC_ASSIGN(train::Optimizer opt, train::Optimizer::create(oc));
    for (const plan::Parameter &pp : p.training().params())
      if (pp.weight() >= 0 && pp.weight() < p.tensors_size())
        state += static_cast<long double>(p.tensors(pp.weight()).bytes()) *
                 (1 + opt.stateTensors());
  }
  const long double total = arenas + weights + state;
  if (total <= machine)
    return Status::ok();
  return errorf("it needs ", formatBytes(static_cast<double>(total)), " of memory on this machine (",
                p.devices_size(), " device(s): arenas ", formatBytes(static_cast<double>(arenas)),
                ", weights ", formatBytes(static_cast<double>(weights)), ", training state ",
                formatBytes(static_cast<double>(state)), "), more than the ",
                formatBytes(static_cast<double>(machine)),
                " it has (compile it with smaller micro-batches, or --recompute)");
}

} // namespace

Expected<std::unique_ptr<Session>> Session::open(const std::string &planDir,
                                                 const SessionOptions &opts) {
  if (opts.threadsPerDevice < 1)
    return errorf("threads per device must be at least 1 (got ", opts.threadsPerDevice, ")");
  std::unique_ptr<Session> s(new Session());
  PIPEC_ASSIGN(s->lp_, plan::loadPlan(planDir));
  s->opts_ = opts;
  if (opts.failDevice >= s->lp_.plan.devices_size())
    return errorf("cannot inject a failure on device ", opts.failDevice, ": the plan has ",
                  s->lp_.plan.devices_size(), " devices");
  PIPEC_TRY(checkFitsMachine(s->lp_.plan).withContext(cat("plan '", planDir, "'")));
  omp_set_num_threads(opts.threadsPerDevice);
  const int K = s->lp_.plan.devices_size();
  auto epoch = std::chrono::steady_clock::now();
  for (int d = 0; d < K; ++d) {
    PIPEC_ASSIGN(auto ex, DeviceExecutor::create(s->lp_, d));
    if (opts.trace)
      ex->enableTrace(epoch);
    s->devices_.push_back(std::move(ex));
  }
  // One device runs on the caller's thread; with several, the others get a
  // thread each and a transport connects them.
  if (K > 1) {
    double spin = opts.spinSeconds;
    if (spin < 0) {
      const unsigned cores = usableCores();
      spin = cores > 0 && static_cast<unsigned>(K * std::max(1, opts.threadsPerDevice)) <= cores
                 ? kAutoSpinSeconds
                 : 0.0;
    }
    s->transport_ = makeInProcessTransport(K, spin);
    s->threads_ = std::make_unique<DeviceThreads>(K, opts.threadsPerDevice, spin);
  }
  if (s->isTraining())
    PIPEC_TRY(s->prepareTraining().withContext(cat("plan '", planDir, "'")));
  return s;
}

void Session::resetMeasurements() {
  stepSeconds_ = 0;
  measuredSteps_ = 0;
  for (auto &d : devices_)
    d->resetMeasurements();
}

Status Session::prepareTraining() {
  const plan::Training &t = lp_.plan.training();
  PIPEC_ASSIGN(train::OptimizerConfig oc, train::parseOptimizer(t.optimizer()));
  PIPEC_ASSIGN(train::Optimizer opt, train::Optimizer::create(oc));
  optimizer_ = opt;
  if (t.lr_schedule().empty()) {
    schedule_.baseLr = opt.baseLr();
  } else {
    PIPEC_ASSIGN(schedule_, train::parseSchedule(t.lr_schedule(), opt.baseLr()));
  }
  paramOfGrad_.assign(lp_.plan.tensors_size(), -1);
  stateDst_.assign(lp_.plan.tensors_size(), nullptr);
  for (const plan::StateUpdate &u : t.state_updates()) {
    int holder = deviceHolding(u.state(), 0);
    if (holder < 0)
      return errorf("state '", lp_.plan.tensors(u.state()).name(), "' is not resident");
    stateDst_[u.value()] = devices_[holder]->address(u.state(), 0);
  }
  std::vector<int> producer(lp_.plan.tensors_size(), -1);
  for (int d = 0; d < lp_.plan.devices_size(); ++d)
    for (const plan::Node &n : lp_.plan.devices(d).nodes())
      for (int32_t o : n.outputs())
        producer[o] = d;
  for (const plan::Parameter &pp : t.params()) {
    ParamState ps;
    ps.weight = pp.weight();
    ps.grad = pp.grad();
    ps.device = producer[pp.grad()];
    if (ps.device < 0)
      return errorf("no device computes the gradient '", lp_.plan.tensors(pp.grad()).name(), "'");
    // The devices of one process share the loaded weights: every device
    // that reads a parameter sees the one copy the optimizer updates.
    int holder = deviceHolding(pp.weight(), 0);
    ps.data = holder < 0 ? nullptr : static_cast<float *>(devices_[holder]->address(pp.weight(), 0));
    if (!ps.data)
      return errorf("parameter '", lp_.plan.tensors(pp.weight()).name(), "' is not resident");
    ps.n = static_cast<int64_t>(lp_.plan.tensors(pp.weight()).bytes() / sizeof(float));
    int holders = 0;
    for (const auto &dev : devices_)
      holders += dev->address(pp.weight(), 0) != nullptr;
    sharedParams_ = sharedParams_ || holders > 1;
    ps.accum.assign(static_cast<size_t>(ps.n), 0.0f);
    ps.state.assign(opt.stateTensors(), std::vector<float>(static_cast<size_t>(ps.n), 0.0f));
    paramOfGrad_[pp.grad()] = static_cast<int>(params_.size());
    params_.push_back(std::move(ps));
  }
  // Where the kernel that computes a gradient can add into its output (the
  // weight-gradient GEMMs), it sums the micro-batches straight into the
  // parameter's accumulator: collect() then has no copy and no pass over
  // the gradient per micro-batch (3.8% of a K=1 step of the GPT-like sample
  // at M=16 in perf).
  if (opts_.accumulateInPlace)
    for (ParamState &ps : params_) {
      const plan::TensorInfo &g = lp_.plan.tensors(ps.grad);
      if (g.dtype() == static_cast<int32_t>(DType::F32) &&
          g.bytes() == static_cast<uint64_t>(ps.n) * sizeof(float))
        ps.inPlace = devices_[ps.device]->accumulateInto(ps.grad, ps.accum.data());
    }
  return Status::ok();
}

TensorDesc Session::stepDesc(int32_t t) const {
  const plan::TensorInfo &ti = lp_.plan.tensors(t);
  TensorDesc d{static_cast<DType>(ti.dtype()), Shape(ti.shape().begin(), ti.shape().end())};
  unsigned M = lp_.plan.pipeline().num_micro_batches();
  if (M > 1) {
    if (d.shape.empty())
      d.shape.push_back(M);
    else
      d.shape[0] *= M;
  }
  return d;
}

std::vector<TensorDesc> Session::stepInputDescs() const {
  std::vector<TensorDesc> r;
  for (int32_t t : lp_.plan.inputs())
    r.push_back(stepDesc(t));
  return r;
}

std::vector<TensorDesc> Session::stepOutputDescs() const {
  std::vector<TensorDesc> r;
  for (int32_t t : lp_.plan.outputs())
    r.push_back(stepDesc(t));
  return r;
}

std::vector<std::string> Session::inputNames() const {
  std::vector<std::string> r;
  for (int32_t t : lp_.plan.inputs())
    r.push_back(lp_.plan.tensors(t).name());
  return r;
}

std::vector<std::string> Session::outputNames() const {
  std::vector<std::string> r;
  for (int32_t t : lp_.plan.outputs())
    r.push_back(lp_.plan.tensors(t).name());
  return r;
}

Expected<std::vector<Tensor>> Session::run(const std::vector<Tensor> &inputs) {
  if (isTraining())
    return errorf("this is a training plan: run it with train(), not run()");
  return runProgram(inputs, false, nullptr);
}

uint64_t Session::trainingStateBytes(int device) const {
  uint64_t bytes = 0;
  for (const ParamState &ps : params_)
    if (ps.device == device)
      bytes += static_cast<uint64_t>(ps.n) * sizeof(float) * (1 + ps.state.size());
  return bytes;
}

int Session::deviceHolding(int32_t tensor, unsigned mb) const {
  for (size_t d = 0; d < devices_.size(); ++d)
    if (devices_[d]->address(tensor, mb))
      return static_cast<int>(d);
  return -1;
}

Expected<Session::TrainStep> Session::train(const std::vector<Tensor> &inputs) {
  if (!isTraining())
    return errorf("this is an inference plan: it has no loss, gradients or optimizer");
  TrainStep step;
  PIPEC_ASSIGN(step.outputs, runProgram(inputs, true, &step));
  return step;
}

Status Session::saveCheckpoint(const std::string &dir) const {
  if (!isTraining())
    return errorf("checkpoints hold training state; this is an inference plan");
  const plan::Plan &p = lp_.plan;
  train::Checkpoint c;
  c.step = static_cast<int64_t>(steps_);
  c.meta["plan.source_crc32c"] = std::to_string(p.source_crc32c());
  c.meta["optimizer"] = p.training().optimizer();
  c.meta["schedule"] = p.training().lr_schedule();
  c.meta["rng.seed"] = std::to_string(opts_.seed);
  for (const ParamState &ps : params_) {
    const std::string &name = p.tensors(ps.weight).name();
    PIPEC_TRY(c.addFloats("param/" + name, ps.data, ps.n));
    for (size_t k = 0; k < ps.state.size(); ++k)
      PIPEC_TRY(c.addFloats("state/" + name + "/" + optimizer_->stateNames()[k], ps.state[k].data(), ps.n));
  }
  for (const plan::StateUpdate &u : p.training().state_updates()) {
    const plan::TensorInfo &ti = p.tensors(u.state());
    const void *data = devices_[deviceHolding(u.state(), 0)]->address(u.state(), 0);
    PIPEC_TRY(c.addFloats("buffer/" + ti.name(), static_cast<const float *>(data),
                          static_cast<int64_t>(ti.bytes() / sizeof(float))));
  }
  return train::writeCheckpoint(dir, c);
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
  for (ParamState &ps : params_) {
    const std::string &name = p.tensors(ps.weight).name();
    PIPEC_TRY(c.restoreFloats("param/" + name, ps.data, ps.n).withContext("checkpoint '" + dir + "'"));
    for (size_t k = 0; k < ps.state.size(); ++k)
      PIPEC_TRY(c.restoreFloats("state/" + name + "/" + optimizer_->stateNames()[k], ps.state[k].data(), ps.n)
                    .withContext("checkpoint '" + dir + "'"));
  }
  for (const plan::StateUpdate &u : p.training().state_updates()) {
    const plan::TensorInfo &ti = p.tensors(u.state());
    void *data = devices_[deviceHolding(u.state(), 0)]->address(u.state(), 0);
    PIPEC_TRY(c.restoreFloats("buffer/" + ti.name(), static_cast<float *>(data),
                              static_cast<int64_t>(ti.bytes() / sizeof(float)))
                  .withContext("checkpoint '" + dir + "'"));
  }
  steps_ = static_cast<uint64_t>(c.step);
  return Status::ok();
}

Expected<Tensor> Session::weight(const std::string &name) const {
  const plan::Plan &p = lp_.plan;
  for (int32_t t = 0; t < p.tensors_size(); ++t) {
    const plan::TensorInfo &ti = p.tensors(t);
    if (ti.name() != name || (ti.kind() != plan::TensorInfo::WEIGHT &&
                              ti.kind() != plan::TensorInfo::CONSTANT))
      continue;
    Tensor out(TensorDesc{static_cast<DType>(ti.dtype()), Shape(ti.shape().begin(), ti.shape().end())});
    int holder = deviceHolding(t, 0);
    const void *src = holder < 0 ? nullptr : devices_[holder]->address(t, 0);
    if (!src)
      return errorf("weight '", name, "' is not resident");
    std::memcpy(out.raw(), src, out.bytes());
    return out;
  }
  return errorf("the plan has no weight named '", name, "'");
}

Expected<std::vector<Tensor>> Session::runProgram(const std::vector<Tensor> &inputs, bool training,
                                                  TrainStep *step) {
  const plan::Plan &p = lp_.plan;
  const unsigned M = p.pipeline().num_micro_batches();
  if (!broken_.isOk())
    return broken_.withContext("an earlier step failed; open the plan again");
  if (inputs.size() != static_cast<size_t>(p.inputs_size()))
    return errorf("the model takes ", p.inputs_size(), " inputs, got ", inputs.size());
  std::vector<int> inputIndex(p.tensors_size(), -1), outputIndex(p.tensors_size(), -1);
  for (int i = 0; i < p.inputs_size(); ++i) {
    int32_t t = p.inputs(i);
    inputIndex[t] = i;
    const plan::TensorInfo &ti = p.tensors(t);
    TensorDesc mbDesc{static_cast<DType>(ti.dtype()), Shape(ti.shape().begin(), ti.shape().end())};
    if (inputs[i].desc() != stepDesc(t) && inputs[i].desc() != mbDesc)
      return errorf("input '", ti.name(), "' is ", inputs[i].desc().str(), ", the plan expects ",
                    stepDesc(t).str(), M > 1 ? cat(" (or ", mbDesc.str(), " for every micro-batch)") : "");
  }
  std::vector<Tensor> outputs;
  for (int i = 0; i < p.outputs_size(); ++i) {
    outputIndex[p.outputs(i)] = i;
    TensorDesc d = stepDesc(p.outputs(i));
    // Every byte of an output is written below (or the step fails).
    if (static_cast<size_t>(i) < lastOutputs_.size() && lastOutputs_[i].soleOwner() &&
        lastOutputs_[i].desc() == d)
      outputs.push_back(lastOutputs_[i]);
    else
      outputs.emplace_back(d);
  }
  lastOutputs_.clear();
  auto feed = [&](int32_t t, unsigned mb, void *dst) -> Status {
    const Tensor &src = inputs[inputIndex[t]];
    size_t bytes = p.tensors(t).bytes();
    size_t off = src.bytes() == bytes ? 0 : bytes * mb;
    std::memcpy(dst, static_cast<const char *>(src.raw()) + off, bytes);
    return Status::ok();
  };
  std::vector<char> collected(static_cast<size_t>(p.outputs_size()) * M, 0);
  auto collect = [&](int32_t t, unsigned mb, const void *src) -> Status {
    if (training && stateDst_[t]) {
      // Running statistics: micro-batches update them in ascending order
      // on the one device that computes them.
      std::memcpy(stateDst_[t], src, p.tensors(t).bytes());
    }
    if (training && paramOfGrad_[t] >= 0) {
      // Sum gradients in ascending micro-batch order: bitwise the same for
      // any partition and schedule.
      ParamState &ps = params_[paramOfGrad_[t]];
      const float *g = static_cast<const float *>(src);
      if (mb == 0)
        std::memcpy(ps.accum.data(), g, ps.accum.size() * sizeof(float));
      else
        for (int64_t i = 0; i < ps.n; ++i)
          ps.accum[i] += g[i];
    }
    int oi = outputIndex[t];
    if (oi < 0)
      return Status::ok();
    size_t bytes = p.tensors(t).bytes();
    std::memcpy(static_cast<char *>(outputs[oi].raw()) + bytes * mb, src, bytes);
    collected[static_cast<size_t>(oi) * M + mb] = 1;
    return Status::ok();
  };
  // Every device updates the parameters whose gradients it computed. The
  // global gradient norm needs every device: each writes the squared sums
  // of its own gradients into their slots of `sq` (one slot per
  // parameter) and the slots are added in parameter order, as one device
  // would. Clipping needs the norm before any update, and a parameter that
  // several devices read (tied weights) must not change while another
  // device still reads it: then the slots are exchanged by an all-reduce,
  // a collective every device waits at (every slot has one non-zero
  // contribution, so the sum is exact). Otherwise a device updates its
  // parameters as soon as its own backward passes are done, while the
  // others finish theirs, and the norm is added up after the step.
  const int K = static_cast<int>(devices_.size());
  const double clip = p.training().clip_grad_norm();
  const bool collective = transport_ && (clip > 0 || sharedParams_ || opts_.skipNonFinite);
  bool skip = false; // the step's gradients are not finite: drop the update
  std::vector<double> sq(params_.size(), 0.0);
  const int64_t stepNumber = static_cast<int64_t>(steps_) + 1;
  const float lr = training ? schedule_.lrAt(stepNumber) : 0.0f;
  auto optimize = [&](int d) -> Status {
    // The loss of a step is the mean of the micro-batch losses, so its
    // gradient is the mean of theirs.
    const float invM = 1.0f / static_cast<float>(M);
    std::vector<double> mine(collective ? params_.size() : 0, 0.0);
    for (size_t i = 0; i < params_.size(); ++i) {
      ParamState &ps = params_[i];
      if (ps.device != d)
        continue;
      if (M > 1)
        train::scaleGrad(ps.accum.data(), ps.n, invM);
      (collective ? mine[i] : sq[i]) = train::gradSquaredSum(ps.accum.data(), ps.n);
    }
    if (collective) {
      PIPEC_TRY(transport_->allReduceSum(d, mine.data(), mine.size()));
      if (opts_.skipNonFinite) {
        double total = 0.0;
        for (double v : mine)
          total += v;
        if (!std::isfinite(total)) {
          if (d == K - 1) {
            sq = mine;
            skip = true;
          }
          return Status::ok(); // every device sees the same total
        }
      }
      if (clip > 0) {
        double total = 0.0;
        for (double v : mine)
          total += v;
        double coef = train::clipCoefficient(std::sqrt(total), clip);
        if (coef < 1.0 || std::isnan(coef))
          for (ParamState &ps : params_)
            if (ps.device == d)
              train::scaleGrad(ps.accum.data(), ps.n, static_cast<float>(coef));
      }
      if (d == K - 1)
        sq = mine;
    } else if (clip > 0 || opts_.skipNonFinite) {
      // One device: every gradient is its own.
      double total = 0.0;
      for (double v : sq)
        total += v;
      if (opts_.skipNonFinite && !std::isfinite(total)) {
        skip = true;
        return Status::ok();
      }
      if (clip > 0) {
        double coef = train::clipCoefficient(std::sqrt(total), clip);
        if (coef < 1.0 || std::isnan(coef))
          for (ParamState &ps : params_)
            train::scaleGrad(ps.accum.data(), ps.n, static_cast<float>(coef));
      }
    }
    for (ParamState &ps : params_) {
      if (ps.device != d)
        continue;
      std::vector<float *> state;
      for (auto &s : ps.state)
        state.push_back(s.data());
      PIPEC_TRY(optimizer_->step(stepNumber, lr, ps.data, ps.accum.data(), state, ps.n));
    }
    return Status::ok();
  };
  cpu::ExecContext ctx;
  ctx.seed = opts_.seed;
  ctx.step = steps_;
  ctx.training = training;
  auto runDevice = [&](int d) -> Status {
    DeviceExecutor::StepIO io;
    io.feed = feed;
    io.collect = collect;
    if (training)
      io.optimize = optimize;
    io.transport = transport_.get();
    if (d == opts_.failDevice)
      io.failAtInstruction = opts_.failAtInstruction;
    Status s = devices_[d]->runStep(ctx, io);
    // An error stops every device: the others' receives and collectives
    // fail with it instead of waiting forever.
    if (!s && transport_)
      transport_->abort(s.withContext(cat("stopped because device ", d, " failed")));
    return s;
  };
  auto t0 = std::chrono::steady_clock::now();
  if (!threads_) {
    Status s = runDevice(0);
    if (!s) {
      broken_ = s;
      return s;
    }
  } else {
    std::vector<Status> results = threads_->run(runDevice);
    // Report the device that failed first, not the ones it stopped.
    Status first = Status::ok();
    for (const Status &r : results)
      if (!r && (first.isOk() || (first.message().rfind("stopped because device", 0) == 0 &&
                                  r.message().rfind("stopped because device", 0) != 0)))
        first = r;
    if (!first.isOk()) {
      broken_ = first;
      return first;
    }
  }
  stepSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++measuredSteps_;
  if (training) {
    double total = 0.0;
    for (double v : sq)
      total += v;
    step->gradNorm = std::sqrt(total);
    step->lr = lr;
    step->skipped = skip;
    for (size_t i = 0; i < params_.size() && step->firstNonFinite.empty(); ++i)
      if (!std::isfinite(sq[i]))
        step->firstNonFinite = lp_.plan.tensors(params_[i].weight).name();
  }
  // Outputs that no node produces (graph inputs or constants passed through).
  for (int i = 0; i < p.outputs_size(); ++i) {
    int32_t t = p.outputs(i);
    for (unsigned mb = 0; mb < M; ++mb) {
      if (collected[static_cast<size_t>(i) * M + mb])
        continue;
      const void *src = nullptr;
      if (inputIndex[t] >= 0) {
        const Tensor &in = inputs[inputIndex[t]];
        size_t bytes = p.tensors(t).bytes();
        src = static_cast<const char *>(in.raw()) + (in.bytes() == bytes ? 0 : bytes * mb);
      } else {
        int holder = deviceHolding(t, mb);
        src = holder < 0 ? nullptr : devices_[holder]->address(t, mb);
      }
      if (!src)
        return errorf("graph output '", p.tensors(t).name(), "' of micro-batch ", mb,
                      " was never produced");
      PIPEC_TRY(collect(t, mb, src));
    }
  }
  if (training) {
    int oi = outputIndex[p.training().loss()];
    double sum = 0;
    for (int64_t i = 0; i < outputs[oi].numel(); ++i)
      sum += outputs[oi].getDouble(i);
    step->loss = sum / static_cast<double>(std::max<int64_t>(outputs[oi].numel(), 1));
  }
  ++steps_;
  lastOutputs_ = outputs;
  return outputs;
}

} // namespace pipec::runtime
