//===- runtime/Executor.cpp - Runs one device's instruction stream --------===//
#include "runtime/Executor.h"
#include "runtime/dist/DeviceLink.h"
#include "runtime/EmulatedGpu.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/ElementwiseJit.h"
#include "runtime/cuda/CudaBackend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace pipec::runtime {

namespace {

Attribute attrFromPlan(const plan::Attribute &a) {
  switch (a.kind()) {
  case plan::Attribute::INT: return Attribute::ofInt(a.i());
  case plan::Attribute::FLOAT: return Attribute::ofFloat(a.f());
  case plan::Attribute::STRING: return Attribute::ofString(a.s());
  case plan::Attribute::INTS: return Attribute::ofInts({a.ints().begin(), a.ints().end()});
  case plan::Attribute::FLOATS: return Attribute::ofFloats({a.floats().begin(), a.floats().end()});
  case plan::Attribute::STRINGS:
    return Attribute::ofStrings({a.strings().begin(), a.strings().end()});
  case plan::Attribute::TENSOR: {
    Tensor t(static_cast<DType>(a.tensor_dtype()),
             Shape(a.tensor_shape().begin(), a.tensor_shape().end()));
    if (a.tensor_data().size() == t.bytes() && t.bytes())
      std::memcpy(t.raw(), a.tensor_data().data(), t.bytes());
    return Attribute::ofTensor(std::move(t));
  }
  default: return Attribute::ofInt(0);
  }
}

TensorDesc descOf(const plan::TensorInfo &t) {
  return TensorDesc{static_cast<DType>(t.dtype()), Shape(t.shape().begin(), t.shape().end())};
}

} // namespace

Expected<std::unique_ptr<DeviceExecutor>> DeviceExecutor::create(const plan::LoadedPlan &lp,
                                                                 int index, const DevicePlacement &where) {
  const int gpu = where.gpu;
  const int K = lp.plan.devices_size();
  const int64_t D = std::max<uint32_t>(lp.plan.pipeline().data_parallel(), 1);
  if (index < 0 || index >= K * D)
    return errorf("the plan has no device ", index, " (", K, " stage(s) x ", D, " replica(s))");
  std::unique_ptr<DeviceExecutor> ex(new DeviceExecutor(lp, index, index % K));
  if (gpu >= 0) {
    PIPEC_ASSIGN(ex->backend_, cuda::makeCudaBackend(gpu, where.tf32));
  } else if (where.emulateGpu) {
    ex->backend_ = makeEmulatedGpuBackend();
  } else {
    ex->backend_ = cpu::makeCpuBackend();
  }
  ex->async_ = ex->backend_->residentTraining();
  Status prepared = ex->prepare();
  if (!prepared && gpu >= 0)
    return prepared.withContext(cat("device ", index, " on ", ex->backend_->name()));
  PIPEC_TRY(std::move(prepared));
  return ex;
}

Status DeviceExecutor::prepare() {
  const plan::Plan &p = lp_.plan;
  const plan::Device &dev = p.devices(stage_);
  const unsigned M = p.pipeline().num_micro_batches();
  const size_t T = static_cast<size_t>(p.tensors_size());

  uint64_t arenaBytes = std::max<uint64_t>(dev.arena_bytes(), 64);
  stats_.arenaBytes = arenaBytes;

  offsetOf_.assign(T * M, -1);
  for (const plan::Allocation &a : dev.allocations())
    offsetOf_[static_cast<size_t>(a.tensor()) * M + a.micro_batch()] =
        static_cast<int64_t>(a.offset());

  // The weights as loaded (host memory): the kernels are prepared on them
  // (constant inputs they read at load), then the backend places them
  // (the CPU reads them in place). Kernels do not assume more than element
  // alignment of their operands.
  weightAddr_.assign(T, nullptr);
  for (int32_t w : dev.weights()) {
    const plan::TensorInfo &t = p.tensors(w);
    if (t.kind() != plan::TensorInfo::WEIGHT && t.kind() != plan::TensorInfo::CONSTANT)
      return errorf("device ", index_, " lists tensor '", t.name(), "' as a weight");
    weightAddr_[w] = lp_.weightAddress(w);
  }

  // Tensors whose bytes change only between steps: parameters, and
  // constants other than the running statistics a step updates.
  std::vector<char> stateUpdated(T, 0);
  for (const plan::StateUpdate &u : p.training().state_updates())
    stateUpdated[u.state()] = 1;

  kernels_.clear();
  size_t workspaceBytes = 64;
  for (const plan::Node &n : dev.nodes()) {
    if (n.view()) {
      // The plan placed the output on the input's bytes (the validator
      // proved it): nothing to run.
      kernels_.emplace_back();
      continue;
    }
    cpu::OpDesc d;
    d.name = n.name();
    d.opType = n.op_type();
    d.domain = n.domain();
    d.opset = n.opset();
    for (const plan::Attribute &a : n.attrs())
      d.attrs[a.name()] = attrFromPlan(a);
    for (int32_t t : n.inputs()) {
      if (t < 0) {
        d.inputs.emplace_back();
        d.constInputs.emplace_back();
        d.stepInvariant.push_back(false);
        continue;
      }
      const plan::TensorInfo &ti = p.tensors(t);
      d.inputs.push_back(descOf(ti));
      d.stepInvariant.push_back((ti.kind() == plan::TensorInfo::WEIGHT ||
                                 ti.kind() == plan::TensorInfo::CONSTANT) &&
                                !stateUpdated[t]);
      if (ti.kind() == plan::TensorInfo::CONSTANT) {
        if (!weightAddr_[t])
          return errorf("device ", index_, ": node '", n.name(), "' reads constant '", ti.name(),
                        "' that the device does not load");
        d.constInputs.emplace_back(descOf(ti), weightAddr_[t], nullptr);
      } else {
        d.constInputs.emplace_back();
      }
    }
    for (int32_t t : n.outputs())
      d.outputs.push_back(descOf(p.tensors(t)));
    PIPEC_ASSIGN(kernel::KernelPtr k, backend_->createKernel(d));
    k->nodeId = n.node_id();
    workspaceBytes = std::max(workspaceBytes, k->workspaceBytes() + 64);
    kernels_.push_back(std::move(k));
  }

  // The device's memory, before the operands take its addresses.
  auto memory = backend_->alloc(arenaBytes);
  if (!memory)
    return errorf("device ", index_, ": its arena of ", arenaBytes, " bytes: ", memory.status().message());
  arena_ = std::shared_ptr<void>(*memory, [](void *) {}); // freed with the backend
  PIPEC_ASSIGN(workspace_, backend_->alloc(workspaceBytes));
  for (int32_t w : dev.weights()) {
    PIPEC_ASSIGN(weightAddr_[w], backend_->residentWeight(weightAddr_[w], p.tensors(w).bytes()));
  }
  // A state update's value (a BatchNormalization's running statistics)
  // replaces the state on the host after each micro-batch (Session::
  // collect), which the CPU's kernels read in place. A device reads its
  // own copy: the value replaces that too, in stream order, so that the
  // next micro-batch reads it as on the CPU.
  stateOf_.assign(T, -1);
  if (!backend_->hostAddressable())
    for (const plan::StateUpdate &u : p.training().state_updates())
      if (weightAddr_[u.state()] && p.tensors(u.value()).bytes() == p.tensors(u.state()).bytes() &&
          p.tensors(u.state()).dtype() == static_cast<int32_t>(DType::F32))
        stateOf_[u.value()] = u.state();

  // Which inputs to feed before, and outputs to collect after, each
  // instruction; every tensor instance a node touches must be resident.
  std::vector<char> isInput(T, 0), isOutput(T, 0);
  for (int32_t t : p.inputs())
    isInput[t] = 1;
  for (int32_t t : p.outputs())
    isOutput[t] = 1;
  for (const plan::Parameter &pp : p.training().params())
    isOutput[pp.grad()] = 1;
  for (const plan::StateUpdate &u : p.training().state_updates())
    isOutput[u.value()] = 1;
  std::vector<char> fed(T * M, 0);
  struct InputRead {
    int32_t tensor;
    unsigned mb;
    const plan::Node *node;
  };
  std::vector<InputRead> previousReads;
  feedBefore_.assign(dev.program_size(), {});
  collectAfter_.assign(dev.program_size(), {});
  accumAfter_.assign(dev.program_size(), {});
  highWater_.assign(dev.program_size(), 0);
  operands_.assign(dev.program_size(), {});
  operands2_.clear();
  weightOperands_.assign(dev.program_size(), {});
  accumulates_.assign(dev.nodes_size(), 0);
  guardCount_.assign(dev.nodes_size(), 0);
  guardWhen_.assign(dev.nodes_size(), 0);
  for (int ni = 0; ni < dev.nodes_size(); ++ni) {
    const plan::Node &n = dev.nodes(ni);
    if (!kernels_[ni] || !backend_->hostAddressable() || n.guards_size() == 0 || n.guards_size() > 32)
      continue;
    guardCount_[ni] = static_cast<uint8_t>(n.guards_size());
    for (int k = 0; k < n.guards_size(); ++k)
      if (n.guards(k).when())
        guardWhen_[ni] |= 1u << k;
  }
  auto reach = [&](int i, int32_t t, unsigned mb) {
    int64_t off = offsetOf_[static_cast<size_t>(t) * M + mb];
    if (off >= 0)
      highWater_[i] = std::max<uint64_t>(highWater_[i], static_cast<uint64_t>(off) + p.tensors(t).bytes());
  };
  for (int i = 0; i < dev.program_size(); ++i) {
    const plan::Instruction &ins = dev.program(i);
    unsigned mb = ins.micro_batch();
    if (ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::RECV) {
      if (!address(ins.tensor(), mb))
        return errorf("device ", index_, ": ", plan::Instruction::Kind_Name(ins.kind()), " of '",
                      p.tensors(ins.tensor()).name(), "' of micro-batch ", mb,
                      " has no memory in the plan");
      reach(i, ins.tensor(), mb);
      continue;
    }
    for (int32_t ni : ins.nodes()) {
      const plan::Node &n = dev.nodes(ni);
      // The node's operand addresses, inputs then outputs, resolved once
      // here rather than at every run; a view runs nothing and has none.
      const bool runs = kernels_[ni] != nullptr;
      for (int32_t t : n.inputs()) {
        if (runs) {
          if (t >= 0 && weightAddr_[t])
            weightOperands_[i].emplace_back(static_cast<uint32_t>(operands_[i].size()), t);
          operands_[i].push_back(t < 0 ? nullptr : address(t, mb));
        }
        if (t < 0)
          continue;
        if (!address(t, mb))
          return errorf("device ", index_, ": node '", n.name(), "' reads '", p.tensors(t).name(),
                        "' of micro-batch ", mb, ", which has no memory in the plan");
        reach(i, t, mb);
        // Inputs are fed for the step a call starts: a previous-step
        // instruction reads what its step's instructions were fed in the
        // call before (checked below).
        if (isInput[t] && ins.previous_step())
          previousReads.push_back({t, mb, &n});
        else if (isInput[t] && !fed[t * M + mb]) {
          fed[t * M + mb] = 1;
          feedBefore_[i].push_back(t);
        }
      }
      for (int32_t t : n.outputs()) {
        if (!address(t, mb))
          return errorf("device ", index_, ": node '", n.name(), "' writes '", p.tensors(t).name(),
                        "' of micro-batch ", mb, ", which has no memory in the plan");
        if (runs)
          operands_[i].push_back(address(t, mb));
        reach(i, t, mb);
        if (isOutput[t])
          collectAfter_[i].push_back(t);
      }
      for (int k = 0; k < guardCount_[ni]; ++k) {
        const int32_t t = n.guards(k).tensor();
        if (!address(t, mb))
          return errorf("device ", index_, ": node '", n.name(), "' is guarded on '", p.tensors(t).name(),
                        "' of micro-batch ", mb, ", which has no memory in the plan");
        operands_[i].push_back(address(t, mb));
        reach(i, t, mb);
      }
    }
  }
  for (const InputRead &r : previousReads)
    if (!fed[r.tensor * M + r.mb])
      return errorf("device ", index_, ": node '", r.node->name(), "' of the previous step reads input '",
                    p.tensors(r.tensor).name(), "' of micro-batch ", r.mb,
                    ", which no instruction of its step is fed before");
  planReceives();
  return Status::ok();
}

void DeviceExecutor::planReceives() {
  const plan::Plan &p = lp_.plan;
  const plan::Device &dev = p.devices(stage_);
  const unsigned M = p.pipeline().num_micro_batches();
  const int n = dev.program_size();
  // The arena bytes each instruction touches: its message, or its nodes'
  // operands (views and guards included; feeds, collects and gradient
  // sums are of those).
  touches_.assign(static_cast<size_t>(n), {});
  for (int i = 0; i < n; ++i) {
    const plan::Instruction &ins = dev.program(i);
    auto touch = [&](int32_t t) {
      const int64_t off = t < 0 ? -1 : offsetOf_[static_cast<size_t>(t) * M + ins.micro_batch()];
      if (off >= 0 && !weightAddr_[t] && p.tensors(t).bytes() > 0)
        touches_[i].emplace_back(static_cast<uint64_t>(off), static_cast<uint64_t>(off) + p.tensors(t).bytes());
    };
    if (ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::RECV) {
      touch(ins.tensor());
      continue;
    }
    for (int32_t ni : ins.nodes()) {
      const plan::Node &node = dev.nodes(ni);
      for (int32_t t : node.inputs())
        touch(t);
      for (int32_t t : node.outputs())
        touch(t);
      for (const plan::Guard &g : node.guards())
        touch(g.tensor());
    }
  }
  auto overlap = [&](int a, int b) {
    for (const auto &[b0, e0] : touches_[a])
      for (const auto &[b1, e1] : touches_[b])
        if (b0 < e1 && b1 < e0)
          return true;
    return false;
  };
  // Per part of a run (StepIO::Part: all, the current step's, the
  // previous step's instructions), where each RECV's bytes are free.
  for (int part = 0; part < 3; ++part) {
    auto runs = [&](int i) { return part == 0 || dev.program(i).previous_step() == (part == 2); };
    freeAfter_[part].assign(static_cast<size_t>(n), -1);
    eventAfter_[part].assign(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      if (dev.program(i).kind() != plan::Instruction::RECV || !runs(i))
        continue;
      for (int j = i - 1; j >= 0; --j)
        if (runs(j) && overlap(i, j)) {
          freeAfter_[part][static_cast<size_t>(i)] = j;
          eventAfter_[part][static_cast<size_t>(j)] = 1;
          break;
        }
    }
  }
  afterEvent_.assign(static_cast<size_t>(n), nullptr);
}

Expected<void *> DeviceExecutor::hostView(int32_t tensor, unsigned mb) {
  return backend_->hostView(address(tensor, mb), lp_.plan.tensors(tensor).bytes());
}

bool DeviceExecutor::accumulateInto(int32_t tensor, void *dst, bool deviceMemory) {
  const plan::Plan &p = lp_.plan;
  const plan::Device &dev = p.devices(stage_);
  // `dst` is host memory unless said otherwise: where the host cannot
  // address the device's, the gradients come to it per micro-batch
  // (collect).
  if (tensor < 0 || tensor >= p.tensors_size() || !dst || (!deviceMemory && !backend_->hostAddressable()))
    return false;
  for (int32_t t : p.outputs())
    if (t == tensor)
      return false;
  int producer = -1;
  for (int ni = 0; ni < dev.nodes_size(); ++ni) {
    const plan::Node &n = dev.nodes(ni);
    for (int32_t t : n.inputs())
      if (t == tensor)
        return false;
    for (int32_t t : n.outputs())
      if (t == tensor) {
        if (producer >= 0 || n.outputs_size() != 1)
          return false;
        producer = ni;
      }
  }
  if (producer < 0 || !kernels_[producer] || !kernels_[producer]->canAccumulate())
    return false;
  for (const plan::Instruction &ins : dev.program())
    if ((ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::RECV) &&
        ins.tensor() == tensor)
      return false;
  // Point the producer's output operand at `dst` in every instruction that
  // runs it, and collect the tensor no more.
  for (int i = 0; i < dev.program_size(); ++i) {
    const plan::Instruction &ins = dev.program(i);
    size_t at = 0;
    for (int32_t ni : ins.nodes()) {
      if (!kernels_[ni])
        continue;
      const plan::Node &n = dev.nodes(ni);
      if (ni == producer) {
        operands_[i][at + static_cast<size_t>(n.inputs_size())] = dst;
        if (!operands2_.empty())
          operands2_[i][at + static_cast<size_t>(n.inputs_size())] = dst;
      }
      at += static_cast<size_t>(n.inputs_size() + n.outputs_size() + guardCount_[ni]);
    }
    auto &c = collectAfter_[i];
    c.erase(std::remove(c.begin(), c.end(), tensor), c.end());
  }
  accumulates_[producer] = 1;
  resetSchedule();
  return true;
}

bool DeviceExecutor::accumulateOnDevice(int32_t tensor, float *dst) {
  const plan::Plan &p = lp_.plan;
  const plan::Device &dev = p.devices(stage_);
  if (!async_ || tensor < 0 || tensor >= p.tensors_size() || !dst)
    return false;
  for (int32_t t : p.outputs())
    if (t == tensor)
      return false;
  bool found = false;
  for (int i = 0; i < dev.program_size(); ++i) {
    auto &c = collectAfter_[static_cast<size_t>(i)];
    auto at = std::find(c.begin(), c.end(), tensor);
    if (at == c.end())
      continue;
    c.erase(at);
    accumAfter_[static_cast<size_t>(i)].emplace_back(tensor, dst);
    found = true;
  }
  return found;
}

void DeviceExecutor::setSecondWeightVersion(const std::vector<std::pair<int32_t, void *>> &addr) {
  resetSchedule();
  operands2_ = operands_;
  for (size_t i = 0; i < operands2_.size(); ++i)
    for (const auto &[at, tensor] : weightOperands_[i])
      for (const auto &[t, a] : addr)
        if (t == tensor)
          operands2_[i][at] = a;
}

void DeviceExecutor::resetMeasurements() {
  const uint64_t arena = stats_.arenaBytes, high = stats_.arenaHighWater;
  stats_ = DeviceStats{};
  stats_.arenaBytes = arena;
  stats_.arenaHighWater = high;
  std::fill(nodeSeconds_.begin(), nodeSeconds_.end(), 0.0);
  trace_.clear();
}

void *DeviceExecutor::address(int32_t tensor, unsigned mb) {
  if (weightAddr_[tensor])
    return weightAddr_[tensor];
  const unsigned M = lp_.plan.pipeline().num_micro_batches();
  int64_t off = offsetOf_[static_cast<size_t>(tensor) * M + mb];
  return off < 0 ? nullptr : static_cast<char *>(arena_.get()) + off;
}

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
bool isCompute(plan::Instruction::Kind k) {
  return k == plan::Instruction::FORWARD || k == plan::Instruction::BACKWARD ||
         k == plan::Instruction::WEIGHT_GRAD || k == plan::Instruction::RECOMPUTE;
}
} // namespace

Status DeviceExecutor::beginInstruction(Run &r, int i) {
  if (i == r.io->failAtInstruction)
    return errorf("device ", index_, ": injected failure at instruction ", i);
  const plan::Plan &p = lp_.plan;
  const plan::Instruction &ins = p.devices(stage_).program(i);
  // A RECV's copy follows the ones before it on the copy queue.
  if (!inFlight_.empty() && ins.kind() != plan::Instruction::RECV)
    PIPEC_TRY(awaitCopies(i));
  const unsigned mb = r.mb = ins.micro_batch();
  r.ctx.step = ins.previous_step() ? r.step - 1 : r.step;
  r.ctx.deviceStep = deviceStep_ ? deviceStep_ + (ins.previous_step() ? 1 : 0) : nullptr;
  // Kernels (Dropout's random stream) see the micro-batch's number in the
  // step: replica r runs micro-batches r*M .. r*M + M - 1.
  r.ctx.microBatch = static_cast<uint64_t>(replicaBase_ / p.devices_size()) * p.pipeline().num_micro_batches() + mb;
  for (int32_t t : feedBefore_[i]) {
    const uint64_t bytes = p.tensors(t).bytes();
    if (async_) {
      // A slot of its own: the copy is in flight while the host goes on.
      PIPEC_ASSIGN(void *host, ioSlot(bytes));
      PIPEC_TRY(r.io->feed(t, mb, host));
      PIPEC_TRY(backend_->upload(address(t, mb), host, bytes));
      continue;
    }
    PIPEC_ASSIGN(void *host, backend_->staging(address(t, mb), bytes));
    PIPEC_TRY(r.io->feed(t, mb, host));
    PIPEC_TRY(backend_->commit(address(t, mb), host, bytes));
  }
  stats_.arenaHighWater = std::max(stats_.arenaHighWater, highWater_[i]);
  r.t0 = Clock::now();
  return Status::ok();
}

Status DeviceExecutor::otherInstruction(Run &r, int i) {
  const plan::Plan &p = lp_.plan;
  const plan::Instruction &ins = p.devices(stage_).program(i);
  const unsigned mb = r.mb;
  const StepIO &io = *r.io;
  switch (ins.kind()) {
  case plan::Instruction::OPTIMIZER:
    if (!io.optimize)
      return errorf("device ", index_, ": the plan has an optimizer step but the run is not training");
    // A host optimizer needs the gradients complete and collected; a
    // resident one is enqueued behind them.
    if (!residentWeights_)
      PIPEC_TRY(flushCollects(io));
    return io.optimize(index_, ins.previous_step());
  case plan::Instruction::SEND: {
    if (!io.transport)
      return errorf("device ", index_, ": the plan sends tensors but the run has no transport");
    const size_t bytes = p.tensors(ins.tensor()).bytes();
    const uint64_t tag = messageTag(ins.tensor(), mb);
    if (link_) {
      // The mailbox: the arena's bytes may be written again before the
      // receive has taken them.
      void *&box = mailbox_[tag];
      if (!box) {
        PIPEC_ASSIGN(box, backend_->alloc(bytes));
      }
      PIPEC_TRY(backend_->copyFromDevice(box, address(ins.tensor(), mb), backend_->deviceIndex(), bytes,
                                         kernel::Queue::Compute));
      PIPEC_TRY(link_->send(i, box, bytes, backend_->stream()));
      stats_.bytesSent += bytes;
      return Status::ok();
    }
    const void *src = address(ins.tensor(), mb);
    if (deviceMessages_) {
      void *&box = mailbox_[tag];
      if (!box) {
        PIPEC_ASSIGN(box, backend_->alloc(bytes));
      }
      PIPEC_TRY(backend_->copyFromDevice(box, src, backend_->deviceIndex(), bytes, kernel::Queue::Compute));
      src = box;
    }
    PIPEC_TRY(sendMemory(*io.transport, replicaBase_ + ins.peer(), tag, src, bytes));
    stats_.bytesSent += bytes;
    return Status::ok();
  }
  case plan::Instruction::RECV: {
    if (!io.transport)
      return errorf("device ", index_, ": the plan receives tensors but the run has no transport");
    const size_t bytes = p.tensors(ins.tensor()).bytes();
    void *at = address(ins.tensor(), mb);
    if (link_)
      return link_->recv(i, at, bytes, backend_->stream());
    if (deviceMessages_)
      return recvOnDevice(r, i, at, bytes);
    return recvMemory(*io.transport, replicaBase_ + ins.peer(), messageTag(ins.tensor(), mb), at, bytes);
  }
  default:
    return errorf("device ", index_, ": instruction kind ", plan::Instruction::Kind_Name(ins.kind()),
                  " is not supported by this runtime");
  }
}

Status DeviceExecutor::sendMemory(Transport &tr, int to, uint64_t tag, const void *src, uint64_t bytes) {
  if (link_)
    return link_->sendTo(to, tag, src, bytes, backend_->stream());
  if (deviceMessages_) {
    PIPEC_ASSIGN(void *event, backend_->recordEvent(tag, kernel::Queue::Compute));
    const DeviceMessage m{const_cast<void *>(src), event, backend_->deviceIndex(), bytes};
    return tr.send(index_, to, tag, &m, sizeof m);
  }
  PIPEC_ASSIGN(void *host, backend_->hostView(const_cast<void *>(src), bytes));
  return tr.send(index_, to, tag, host, bytes);
}

Status DeviceExecutor::recvMemory(Transport &tr, int from, uint64_t tag, void *dst, uint64_t bytes) {
  if (link_)
    return link_->recvFrom(from, tag, dst, bytes, backend_->stream());
  if (deviceMessages_) {
    PIPEC_ASSIGN(DeviceMessage m, takeDeviceMessage(tr, from, tag, bytes));
    PIPEC_TRY(backend_->waitEvent(m.event, kernel::Queue::Compute));
    return backend_->copyFromDevice(dst, m.mailbox, m.device, bytes, kernel::Queue::Compute);
  }
  PIPEC_ASSIGN(void *host, backend_->staging(dst, bytes));
  PIPEC_TRY(tr.recv(index_, from, tag, host, bytes));
  return backend_->commit(dst, host, bytes);
}

Expected<DeviceExecutor::DeviceMessage> DeviceExecutor::takeDeviceMessage(Transport &tr, int from, uint64_t tag,
                                                                          uint64_t bytes) {
  DeviceMessage m{};
  PIPEC_TRY(tr.recv(index_, from, tag, &m, sizeof m));
  if (m.bytes != bytes || !m.mailbox)
    return errorf("device ", index_, ": a device message of ", m.bytes, " bytes from device ", from, " (", bytes,
                  " bytes expected)");
  return m;
}

namespace {
// Event slots of the receives on the copy queue, apart from the message
// tags (messageTag: bit 63 clear; sessionTag: bit 62 clear).
constexpr uint64_t kAfterSlot = uint64_t{3} << 62, kCopiedSlot = (uint64_t{3} << 62) | (uint64_t{1} << 40);
} // namespace

Status DeviceExecutor::recvOnDevice(Run &r, int i, void *at, uint64_t bytes) {
  const plan::Instruction &ins = lp_.plan.devices(stage_).program(i);
  PIPEC_ASSIGN(DeviceMessage m, takeDeviceMessage(*r.io->transport, replicaBase_ + ins.peer(),
                                                  messageTag(ins.tensor(), r.mb), bytes));
  if (!copyQueueOn_) {
    PIPEC_TRY(backend_->waitEvent(m.event, kernel::Queue::Compute));
    return backend_->copyFromDevice(at, m.mailbox, m.device, bytes, kernel::Queue::Compute);
  }
  // The copy queue waits for the place in the arena to be free and for
  // the sender's copy into its mailbox; the compute queue goes on.
  const int free = freeAfter_[static_cast<int>(r.io->part)][static_cast<size_t>(i)];
  if (free >= 0 && afterEvent_[static_cast<size_t>(free)])
    PIPEC_TRY(backend_->waitEvent(afterEvent_[static_cast<size_t>(free)], kernel::Queue::Copy));
  PIPEC_TRY(backend_->waitEvent(m.event, kernel::Queue::Copy));
  PIPEC_TRY(backend_->copyFromDevice(at, m.mailbox, m.device, bytes, kernel::Queue::Copy));
  PIPEC_ASSIGN(void *done, backend_->recordEvent(kCopiedSlot | static_cast<uint64_t>(i), kernel::Queue::Copy));
  const uint64_t begin = static_cast<uint64_t>(static_cast<char *>(at) - static_cast<char *>(arena_.get()));
  inFlight_.push_back({begin, begin + bytes, done});
  return Status::ok();
}

Status DeviceExecutor::awaitCopies(int i) {
  for (size_t k = 0; k < inFlight_.size();) {
    const InFlight &c = inFlight_[k];
    bool touched = i < 0;
    if (!touched)
      for (const auto &[b, e] : touches_[static_cast<size_t>(i)])
        touched = touched || (b < c.end && c.begin < e);
    if (!touched) {
      ++k;
      continue;
    }
    PIPEC_TRY(backend_->waitEvent(c.done, kernel::Queue::Compute));
    inFlight_.erase(inFlight_.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return Status::ok();
}

Status DeviceExecutor::runNode(Run &r, int32_t node, void *const *in, void *const *out) {
  if (const unsigned guards = guardCount_[node]) {
    // The guards' conditions follow the outputs (one bool each): a node
    // whose outputs this micro-batch does not need is not run.
    void *const *cond = out + lp_.plan.devices(stage_).nodes(node).outputs_size();
    for (unsigned k = 0; k < guards; ++k)
      if ((*static_cast<const uint8_t *>(cond[k]) != 0) != (((guardWhen_[node] >> k) & 1u) != 0)) {
        ++stats_.nodesSkipped;
        return Status::ok();
      }
  }
  r.ctx.accumulate = accumulates_[node] && r.mb > 0;
  r.ctx.errorFlag = flags_ ? flags_ + node : nullptr;
  Status s = kernels_[node]->run(r.ctx, in, out);
  if (!s)
    return s.withContext(cat("device ", index_, " micro-batch ", r.mb));
  ++stats_.nodesRun;
  return Status::ok();
}

Status DeviceExecutor::setParamUpdates(std::vector<ParamUpdate> updates) {
  const plan::Device &dev = lp_.plan.devices(stage_);
  std::vector<std::vector<ParamUpdate>> at(static_cast<size_t>(dev.program_size()));
  for (ParamUpdate &u : updates) {
    if (u.instruction < 0 || u.instruction >= dev.program_size() || !isCompute(dev.program(u.instruction).kind()))
      return errorf("device ", index_, ": a parameter update after instruction ", u.instruction,
                    ", which is not a compute instruction");
    const auto &nodes = dev.program(u.instruction).nodes();
    if (std::find(nodes.begin(), nodes.end(), u.node) == nodes.end() || !kernels_[u.node])
      return errorf("device ", index_, ": a parameter update after node ", u.node,
                    ", which instruction ", u.instruction, " does not run");
    at[static_cast<size_t>(u.instruction)].push_back(std::move(u));
  }
  for (size_t i = 0; i < at.size(); ++i) {
    // One update per node, in the order the instruction runs its nodes.
    const auto &nodes = dev.program(static_cast<int>(i)).nodes();
    auto pos = [&](const ParamUpdate &u) { return std::find(nodes.begin(), nodes.end(), u.node) - nodes.begin(); };
    std::stable_sort(at[i].begin(), at[i].end(),
                     [&](const ParamUpdate &a, const ParamUpdate &b) { return pos(a) < pos(b); });
    for (size_t k = 1; k < at[i].size(); ++k)
      if (at[i][k].node == at[i][k - 1].node)
        return errorf("device ", index_, ": two parameter updates after node ", at[i][k].node, " of instruction ", i);
  }
  updatesAt_ = std::move(at);
  resetSchedule();
  return Status::ok();
}

const DeviceExecutor::ParamUpdate *DeviceExecutor::updateAfter(int i, int32_t node) const {
  if (updatesAt_.empty())
    return nullptr;
  for (const ParamUpdate &u : updatesAt_[static_cast<size_t>(i)])
    if (u.node == node)
      return &u;
  return nullptr;
}

Status DeviceExecutor::runUpdate(Run &r, const ParamUpdate &u) {
  if (!r.io->update)
    return Status::ok();
  const Clock::time_point t0 = Clock::now();
  Status s = r.io->update(index_, u.params);
  r.updateSeconds += seconds(t0, Clock::now());
  return s;
}

Status DeviceExecutor::endInstruction(Run &r, int i) {
  const plan::Instruction &ins = lp_.plan.devices(stage_).program(i);
  const unsigned mb = r.mb;
  // The kernels' time and errors; an asynchronous backend's only when
  // they are measured.
  if (isCompute(ins.kind()) && (!async_ || tracing_ || !nodeSeconds_.empty()))
    PIPEC_TRY(backend_->sync().withContext(cat("device ", index_, " micro-batch ", mb)));
  const Clock::time_point t1 = Clock::now();
  const double dt = seconds(r.t0, t1);
  const double updates = r.updateSeconds;
  r.updateSeconds = 0;
  switch (ins.kind()) {
  case plan::Instruction::OPTIMIZER: stats_.optimizerSeconds += dt; break;
  case plan::Instruction::SEND: stats_.commSeconds += dt; break;
  case plan::Instruction::RECV: stats_.waitSeconds += dt; break;
  default:
    stats_.busySeconds += dt - updates;
    stats_.optimizerSeconds += updates;
    break;
  }
  ++stats_.instructions;
  if (tracing_) {
    const bool message = ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::RECV;
    trace_.push_back({static_cast<int>(ins.kind()), mb, message ? ins.tensor() : -1, replicaBase_ + ins.peer(),
                      seconds(epoch_, r.t0), seconds(epoch_, t1), updates});
  }
  for (const auto &[t, dst] : accumAfter_[i]) {
    const int64_t n = static_cast<int64_t>(lp_.plan.tensors(t).bytes() / sizeof(float));
    PIPEC_TRY(backend_->accumulate(dst, static_cast<const float *>(address(t, mb)), n, mb == 0));
  }
  for (int32_t t : collectAfter_[i]) {
    if (const int32_t state = stateOf_[t]; state >= 0 && r.io->optimize) {
      const int64_t n = static_cast<int64_t>(lp_.plan.tensors(t).bytes() / sizeof(float));
      PIPEC_TRY(backend_->accumulate(static_cast<float *>(weightAddr_[state]),
                                     static_cast<const float *>(address(t, mb)), n, /*first=*/true));
    }
    if (async_) {
      const uint64_t bytes = lp_.plan.tensors(t).bytes();
      PIPEC_ASSIGN(void *host, ioSlot(bytes));
      PIPEC_TRY(backend_->download(host, address(t, mb), bytes));
      pending_.push_back({t, mb, host});
      continue;
    }
    PIPEC_ASSIGN(void *host, hostView(t, mb));
    PIPEC_TRY(r.io->collect(t, mb, host));
  }
  // A later receive's copy waits for this point of the compute queue.
  const bool freesReceive = eventAfter_[static_cast<int>(r.io->part)][static_cast<size_t>(i)] != 0;
  if (deviceMessages_ && copyQueueOn_ && !link_ && freesReceive) {
    PIPEC_ASSIGN(afterEvent_[static_cast<size_t>(i)],
                 backend_->recordEvent(kAfterSlot | static_cast<uint64_t>(i), kernel::Queue::Compute));
  }
  return Status::ok();
}

Expected<void *> DeviceExecutor::ioSlot(uint64_t bytes) {
  const uint64_t at = (ioUsed_ + 255) / 256 * 256;
  if (at + bytes > ioBufferBytes_)
    return errorf("device ", index_, ": the step's feeds and collects need more than the ", ioBufferBytes_,
                  " bytes of host buffer sized for them");
  ioUsed_ = at + bytes;
  return static_cast<char *>(ioBuffer_) + at;
}

Status DeviceExecutor::flushCollects(const StepIO &io) {
  if (!async_)
    return Status::ok();
  PIPEC_TRY(backend_->sync().withContext(cat("device ", index_)));
  for (const PendingCollect &c : pending_)
    PIPEC_TRY(io.collect(c.tensor, c.mb, c.host));
  pending_.clear();
  return Status::ok();
}

// The compiled schedule's calls: each runs one step above on the run it is
// given and keeps a failure's status there.
template <Status (DeviceExecutor::*Step)(DeviceExecutor::Run &, int)>
int32_t DeviceExecutor::thunkStep(void *run, void *i, void *, void *) {
  Run &r = *static_cast<Run *>(run);
  r.status = (r.ex->*Step)(r, static_cast<int>(reinterpret_cast<intptr_t>(i)));
  return r.status ? 0 : 1;
}
int32_t DeviceExecutor::thunkNode(void *run, void *node, void *, void *) {
  Run &r = *static_cast<Run *>(run);
  const CompiledNode &n = *static_cast<const CompiledNode *>(node);
  r.status = r.ex->runNode(r, n.node, n.in, n.out);
  return r.status ? 0 : 1;
}
int32_t DeviceExecutor::thunkUpdate(void *run, void *update, void *, void *) {
  Run &r = *static_cast<Run *>(run);
  r.status = r.ex->runUpdate(r, *static_cast<const ParamUpdate *>(update));
  return r.status ? 0 : 1;
}

const char *DeviceExecutor::interpretedBecause(const StepIO *io) const {
  // The interpreter serves backends that say so (GPUs), node timing,
  // injected failures and two weight versions (a no-flush plan's operands
  // depend on the run).
  const char *backend = backend_->interpretedBecause();
  return backend                                ? backend
         : !nodeSeconds_.empty()                ? "node times"
         : io && io->failAtInstruction >= 0     ? "an injected failure"
         : !operands2_.empty()                  ? "two weight versions"
         : !cpu::codegenEnabled()               ? "--no-codegen"
                                                : nullptr;
}

bool DeviceExecutor::useCompiled(const StepIO &io) {
  if (const char *why = interpretedBecause(&io)) {
    scheduleMode_ = cat("interpreted (", why, ")");
    return false;
  }
  if (!compileTried_)
    buildSchedule();
  return compiled_ != nullptr;
}

void DeviceExecutor::prepareSchedule() {
  if (!interpretedBecause(nullptr) && !compileTried_)
    buildSchedule();
}

void DeviceExecutor::buildSchedule() {
  compileTried_ = true;
  const plan::Device &dev = lp_.plan.devices(stage_);
  compiledNodes_.clear();
  for (int i = 0; i < dev.program_size(); ++i)
    if (isCompute(dev.program(i).kind()))
      for (int32_t ni : dev.program(i).nodes())
        if (kernels_[ni])
          compiledNodes_.push_back({ni, nullptr, nullptr});
  std::vector<cpu::ScheduleCall> calls;
  size_t at = 0;
  auto index = [](int i) { return reinterpret_cast<void *>(static_cast<intptr_t>(i)); };
  for (int i = 0; i < dev.program_size(); ++i) {
    const plan::Instruction &ins = dev.program(i);
    const uint32_t parts = ins.previous_step() ? 2u : 1u;
    calls.push_back({&thunkStep<&DeviceExecutor::beginInstruction>, index(i), nullptr, nullptr, parts});
    if (isCompute(ins.kind())) {
      void *const *operands = operands_[i].data();
      for (int32_t ni : ins.nodes()) {
        if (!kernels_[ni])
          continue;
        const plan::Node &n = dev.nodes(ni);
        CompiledNode &cn = compiledNodes_[at++];
        cn.in = operands;
        cn.out = operands + n.inputs_size();
        operands = cn.out + n.outputs_size() + guardCount_[ni];
        calls.push_back({&thunkNode, &cn, nullptr, nullptr, parts});
        if (const ParamUpdate *u = updateAfter(i, ni))
          calls.push_back({&thunkUpdate, const_cast<ParamUpdate *>(u), nullptr, nullptr, parts});
      }
    } else {
      calls.push_back({&thunkStep<&DeviceExecutor::otherInstruction>, index(i), nullptr, nullptr, parts});
    }
    calls.push_back({&thunkStep<&DeviceExecutor::endInstruction>, index(i), nullptr, nullptr, parts});
  }
  auto made = cpu::compileSchedule(calls, cat("device ", index_));
  if (!made) {
    scheduleMode_ = "interpreted (" + made.status().message() + ")";
    return;
  }
  compiled_ = *made;
  scheduleMode_ = cat("compiled (", calls.size(), " calls)");
}

Status DeviceExecutor::runStep(cpu::ExecContext ctx, const StepIO &io) {
  const plan::Device &dev = lp_.plan.devices(stage_);
  ctx.workspace = workspace_;
  ctx.stream = backend_->stream();
  ctx.halfWeights = backend_->halfWeights();
  using Part = StepIO::Part;
  // A training step's host optimizer updated the weights since the last
  // one.
  PIPEC_TRY(backend_->beginStep(io.optimize != nullptr && !residentWeights_));
  if ((link_ || deviceMessages_) && !mailboxesMade_) {
    mailboxesMade_ = true;
    // Every SEND's mailbox, before the first step posts anything: an
    // allocation between the messages of a step could wait for a device
    // whose NCCL receive waits for a send this rank has not posted yet.
    for (int i = 0; i < dev.program_size(); ++i) {
      const plan::Instruction &ins = dev.program(i);
      if (ins.kind() != plan::Instruction::SEND)
        continue;
      void *&box = mailbox_[messageTag(ins.tensor(), ins.micro_batch())];
      if (!box) {
        PIPEC_ASSIGN(box, backend_->alloc(lp_.plan.tensors(ins.tensor()).bytes()));
      }
    }
  }
  if (async_) {
    if (!ioBuffer_) {
      // Made at the first step, once the session has taken the gradients
      // it sums on the device off the collect lists (which only shrink):
      // room for every feed and collect of a step at once, and the flags.
      uint64_t need = 256; // never null, even when every tensor is empty
      for (int i = 0; i < dev.program_size(); ++i)
        for (const auto *list : {&feedBefore_[static_cast<size_t>(i)], &collectAfter_[static_cast<size_t>(i)]})
          for (int32_t t : *list)
            need += (lp_.plan.tensors(t).bytes() + 255) / 256 * 256;
      PIPEC_ASSIGN(ioBuffer_, backend_->hostBuffer(need));
      ioBufferBytes_ = need;
      PIPEC_ASSIGN(void *f, backend_->alloc(flagBytes()));
      PIPEC_ASSIGN(void *h, backend_->hostBuffer(flagBytes()));
      flags_ = static_cast<int *>(f);
      hostFlags_ = static_cast<int *>(h);
      PIPEC_ASSIGN(void *ds, backend_->alloc(2 * sizeof(uint64_t)));
      PIPEC_ASSIGN(void *hs, backend_->hostBuffer(2 * sizeof(uint64_t)));
      deviceStep_ = static_cast<uint64_t *>(ds);
      hostStep_ = static_cast<uint64_t *>(hs);
    }
    ioUsed_ = 0;
    pending_.clear();
    std::memset(hostFlags_, 0, flagBytes());
    PIPEC_TRY(backend_->upload(flags_, hostFlags_, flagBytes()));
    // The step, and the step before for previous-step instructions, where
    // recorded kernels read them (ExecContext::deviceStep). The last
    // step's copy is done: the host waited for it at that step's end.
    hostStep_[0] = ctx.step;
    hostStep_[1] = ctx.step - 1;
    PIPEC_TRY(backend_->upload(deviceStep_, hostStep_, 2 * sizeof(uint64_t)));
  }
  // Empty after a step that ended well; after a failed one its receives
  // may still be copying into the arena: this step's work waits for them.
  PIPEC_TRY(awaitCopies(-1));
  std::fill(afterEvent_.begin(), afterEvent_.end(), nullptr);
  Run r{this, ctx, &io, ctx.step, 0, {}, Status::ok()};
  if (useCompiled(io)) {
    const uint32_t parts = io.part == Part::All ? 3u : io.part == Part::CurrentStep ? 1u : 2u;
    if (compiled_(&r, parts) != 0)
      return std::move(r.status);
    PIPEC_TRY(awaitCopies(-1));
    PIPEC_TRY(checkFlags());
    return flushCollects(io);
  }
  for (int i = 0; i < dev.program_size(); ++i) {
    const plan::Instruction &ins = dev.program(i);
    if (io.part != Part::All && ins.previous_step() != (io.part == Part::PreviousStep))
      continue;
    PIPEC_TRY(beginInstruction(r, i));
    if (!isCompute(ins.kind())) {
      PIPEC_TRY(otherInstruction(r, i));
    } else {
      const bool second = !operands2_.empty() && (io.weightVersion == 1) != ins.previous_step();
      void *const *operands = (second ? operands2_ : operands_)[i].data();
      if (recordOn_ && backend_->canRecord())
        PIPEC_TRY(runRecorded(r, i, operands));
      else
        PIPEC_TRY(runNodes(r, i, operands));
    }
    PIPEC_TRY(endInstruction(r, i));
  }
  PIPEC_TRY(awaitCopies(-1));
  PIPEC_TRY(checkFlags());
  return flushCollects(io);
}

Status DeviceExecutor::runNodes(Run &r, int i, void *const *operands) {
  const plan::Device &dev = lp_.plan.devices(stage_);
  for (int32_t ni : dev.program(i).nodes()) {
    if (!kernels_[ni])
      continue; // a view
    const plan::Node &n = dev.nodes(ni);
    void *const *in = operands, *const *out = operands + n.inputs_size();
    operands = out + n.outputs_size() + guardCount_[ni];
    const Clock::time_point n0 = nodeSeconds_.empty() ? Clock::time_point() : Clock::now();
    PIPEC_TRY(runNode(r, ni, in, out));
    if (!nodeSeconds_.empty())
      nodeSeconds_[ni] += seconds(n0, Clock::now());
    if (const ParamUpdate *u = updateAfter(i, ni))
      PIPEC_TRY(runUpdate(r, *u));
  }
  return Status::ok();
}

std::string DeviceExecutor::unrecordable(int i) const {
  const plan::Device &dev = lp_.plan.devices(stage_);
  if (!nodeSeconds_.empty())
    return "node times";
  if (!operands2_.empty())
    return "two weight versions";
  if (!updatesAt_.empty() && !updatesAt_[static_cast<size_t>(i)].empty())
    return "parameter updates inside it";
  for (int32_t ni : dev.program(i).nodes()) {
    if (!kernels_[ni])
      continue;
    if (guardCount_[ni])
      return cat("node '", dev.nodes(ni).name(), "' has guards");
    if (!kernels_[ni]->replayable())
      return cat("node '", dev.nodes(ni).name(), "' (", dev.nodes(ni).op_type(), ") is not replayable");
  }
  return {};
}

Status DeviceExecutor::runRecorded(Run &r, int i, void *const *operands) {
  if (recorded_.empty())
    recorded_.resize(static_cast<size_t>(lp_.plan.devices(stage_).program_size()));
  Recorded &rec = recorded_[static_cast<size_t>(i)];
  auto eager = [&](std::string why) {
    rec.eager = true;
    if (eagerBecause_.empty())
      eagerBecause_ = cat("instruction ", i, ": ", why);
    return runNodes(r, i, operands);
  };
  if (rec.eager || rec.runs++ == 0)
    return runNodes(r, i, operands);
  void *&handle = rec.handle[r.ctx.training ? 1 : 0];
  if (!handle) {
    if (std::string why = unrecordable(i); !why.empty())
      return eager(std::move(why));
    // The recording run enqueues nothing that runs: its nodes count at
    // the replays.
    const uint64_t ran = stats_.nodesRun;
    PIPEC_TRY(backend_->beginRecording());
    Status s = runNodes(r, i, operands);
    Expected<void *> made = backend_->endRecording();
    rec.nodes = stats_.nodesRun - ran;
    stats_.nodesRun = ran;
    if (!s || !made) {
      // A real error comes again when the nodes run eagerly.
      std::string why = !s ? s.message() : made.status().message();
      if (++rec.failures < 2)
        return runNodes(r, i, operands);
      return eager(std::move(why));
    }
    handle = *made;
  }
  PIPEC_TRY(backend_->replay(handle, r.ctx.step).withContext(cat("device ", index_, " micro-batch ", r.mb)));
  stats_.nodesRun += rec.nodes;
  return Status::ok();
}

std::string DeviceExecutor::receivesSaid() const {
  if (!deviceMessages_ || link_)
    return "";
  const plan::Device &dev = lp_.plan.devices(stage_);
  size_t receives = 0, ahead = 0;
  for (int i = 0; i < dev.program_size(); ++i)
    if (dev.program(i).kind() == plan::Instruction::RECV) {
      ++receives;
      ahead += freeAfter_[0][static_cast<size_t>(i)] < i - 1;
    }
  if (!receives)
    return "";
  if (!copyQueueOn_)
    return cat("; ", receives, " receives copied on the compute stream (copy stream off)");
  return cat("; ", receives, " receives copied on the copy stream, ", ahead,
             " of them free to start before the instruction ahead of them");
}

std::string DeviceExecutor::hostSchedule() const {
  if (!backend_->canRecord())
    return scheduleMode_ + receivesSaid();
  if (!recordOn_)
    return scheduleMode_ + ", kernels launched one by one (recordings off)" + receivesSaid();
  size_t replayed = 0, eager = 0, run = 0;
  for (const Recorded &rec : recorded_) {
    replayed += !rec.eager && (rec.handle[0] || rec.handle[1]);
    eager += rec.eager;
    run += rec.runs > 0;
  }
  std::string out =
      cat(scheduleMode_, ", ", replayed, " of ", run, " compute instructions replayed as recordings");
  if (eager)
    out += cat(" (eager: ", eagerBecause_, eager > 1 ? ", ..." : "", ")");
  if (replayed + eager < run)
    out += " (an instruction is recorded at its second run)";
  return out + receivesSaid();
}

Status DeviceExecutor::checkFlags() {
  if (!flags_)
    return backend_->sync();
  const plan::Device &dev = lp_.plan.devices(stage_);
  PIPEC_TRY(backend_->download(hostFlags_, flags_, flagBytes()));
  PIPEC_TRY(backend_->sync().withContext(cat("device ", index_)));
  for (int ni = 0; ni < dev.nodes_size(); ++ni)
    if (hostFlags_[ni])
      return errorf("device ", index_, ": node '", dev.nodes(ni).name(), "' (", dev.nodes(ni).op_type(),
                    ") found an index or target out of range in this step's data");
  return Status::ok();
}

} // namespace pipec::runtime
