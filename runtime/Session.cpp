//===- runtime/Session.cpp - A loaded plan, ready to run ------------------===//
#include "runtime/Session.h"

#include <omp.h>

#include <cstring>

namespace pipec::runtime {

Expected<std::unique_ptr<Session>> Session::open(const std::string &planDir,
                                                 const SessionOptions &opts) {
  if (opts.threadsPerDevice < 1)
    return errorf("threads per device must be at least 1 (got ", opts.threadsPerDevice, ")");
  std::unique_ptr<Session> s(new Session());
  PIPEC_ASSIGN(s->lp_, plan::loadPlan(planDir));
  s->opts_ = opts;
  if (s->lp_.plan.pipeline().training())
    return errorf("plan '", planDir, "' is a training plan; this runtime runs inference plans only");
  if (s->lp_.plan.devices_size() != 1)
    return errorf("plan '", planDir, "' has ", s->lp_.plan.devices_size(),
                  " devices; this runtime runs single-device plans only");
  omp_set_num_threads(opts.threadsPerDevice);
  for (int d = 0; d < s->lp_.plan.devices_size(); ++d) {
    PIPEC_ASSIGN(auto ex, DeviceExecutor::create(s->lp_, d));
    s->devices_.push_back(std::move(ex));
  }
  return s;
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
    int oi = outputIndex[t];
    size_t bytes = p.tensors(t).bytes();
    std::memcpy(static_cast<char *>(outputs[oi].raw()) + bytes * mb, src, bytes);
    collected[static_cast<size_t>(oi) * M + mb] = 1;
    return Status::ok();
  };
  cpu::ExecContext ctx;
  ctx.seed = opts_.seed;
  ctx.step = steps_;
  ctx.training = false;
  for (auto &d : devices_)
    PIPEC_TRY(d->runStep(ctx, feed, collect));
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
  ++steps_;
  return outputs;
}

} // namespace pipec::runtime
