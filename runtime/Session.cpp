//===- runtime/Session.cpp - A loaded plan, ready to run ------------------===//
#include "runtime/Session.h"

#include <omp.h>

#include "runtime/train/Checkpoint.h"
#include "runtime/train/Clip.h"

#include <cmath>
#include <cstring>

namespace pipec::runtime {

Expected<std::unique_ptr<Session>> Session::open(const std::string &planDir,
                                                 const SessionOptions &opts) {
  if (opts.threadsPerDevice < 1)
    return errorf("threads per device must be at least 1 (got ", opts.threadsPerDevice, ")");
  std::unique_ptr<Session> s(new Session());
  PIPEC_ASSIGN(s->lp_, plan::loadPlan(planDir));
  s->opts_ = opts;
  if (s->lp_.plan.devices_size() != 1)
    return errorf("plan '", planDir, "' has ", s->lp_.plan.devices_size(),
                  " devices; this runtime runs single-device plans only");
  omp_set_num_threads(opts.threadsPerDevice);
  for (int d = 0; d < s->lp_.plan.devices_size(); ++d) {
    PIPEC_ASSIGN(auto ex, DeviceExecutor::create(s->lp_, d));
    s->devices_.push_back(std::move(ex));
  }
  if (s->isTraining())
    PIPEC_TRY(s->prepareTraining().withContext(cat("plan '", planDir, "'")));
  return s;
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
  for (const plan::Parameter &pp : t.params()) {
    ParamState ps;
    ps.weight = pp.weight();
    ps.grad = pp.grad();
    ps.data = static_cast<float *>(devices_[0]->address(pp.weight(), 0));
    if (!ps.data)
      return errorf("parameter '", lp_.plan.tensors(pp.weight()).name(), "' is not resident");
    ps.n = static_cast<int64_t>(lp_.plan.tensors(pp.weight()).bytes() / sizeof(float));
    ps.accum.assign(static_cast<size_t>(ps.n), 0.0f);
    ps.state.assign(opt.stateTensors(), std::vector<float>(static_cast<size_t>(ps.n), 0.0f));
    paramOfGrad_[pp.grad()] = static_cast<int>(params_.size());
    params_.push_back(std::move(ps));
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
    const void *src = devices_[0]->address(t, 0);
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
    outputs.emplace_back(stepDesc(p.outputs(i)));
  }
  auto feed = [&](int32_t t, unsigned mb, void *dst) -> Status {
    const Tensor &src = inputs[inputIndex[t]];
    size_t bytes = p.tensors(t).bytes();
    size_t off = src.bytes() == bytes ? 0 : bytes * mb;
    std::memcpy(dst, static_cast<const char *>(src.raw()) + off, bytes);
    return Status::ok();
  };
  std::vector<char> collected(static_cast<size_t>(p.outputs_size()) * M, 0);
  auto collect = [&](int32_t t, unsigned mb, const void *src) -> Status {
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
  auto optimize = [&]() -> Status {
    // The loss of a step is the mean of the micro-batch losses, so its
    // gradient is the mean of theirs.
    const float invM = 1.0f / static_cast<float>(M);
    std::vector<train::GradRef> grads;
    for (ParamState &ps : params_) {
      if (M > 1)
        train::scaleGrad(ps.accum.data(), ps.n, invM);
      grads.push_back({ps.accum.data(), ps.n});
    }
    double clip = p.training().clip_grad_norm();
    if (clip > 0) {
      PIPEC_ASSIGN(step->gradNorm, train::clipGradNorm(grads, clip));
    } else {
      double sq = 0;
      for (const train::GradRef &g : grads)
        sq += train::gradSquaredSum(g.data, g.n);
      step->gradNorm = std::sqrt(sq);
    }
    int64_t t = static_cast<int64_t>(steps_) + 1;
    step->lr = schedule_.lrAt(t);
    for (ParamState &ps : params_) {
      std::vector<float *> state;
      for (auto &s : ps.state)
        state.push_back(s.data());
      PIPEC_TRY(optimizer_->step(t, step->lr, ps.data, ps.accum.data(), state, ps.n));
    }
    return Status::ok();
  };
  cpu::ExecContext ctx;
  ctx.seed = opts_.seed;
  ctx.step = steps_;
  ctx.training = training;
  for (auto &d : devices_)
    PIPEC_TRY(d->runStep(ctx, feed, collect, training ? DeviceExecutor::OptimizeFn(optimize) : nullptr));
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
        src = devices_[0]->address(t, mb);
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
  return outputs;
}

} // namespace pipec::runtime
