//===- runtime/Session.cpp - A loaded plan, ready to run ------------------===//
#include "runtime/Session.h"
#include "runtime/SessionResident.h"
#include "pipeline/Schedule.h"

#include <omp.h>

#include "runtime/DeviceThreads.h"
#include "runtime/EmulatedLink.h"
#include "runtime/dist/DeviceLink.h"
#include "runtime/dist/StepExchange.h"
#include "runtime/cuda/NcclLink.h"
#include "runtime/plan/Rendezvous.h"
#include "runtime/cuda/Gpu.h"
#include "support/Format.h"
#include "support/Machine.h"
#include "support/Parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

namespace pipec::runtime {

Session::Session() = default;
Session::~Session() {
  // A step that failed may leave work queued on a device that reads
  // another's memory (a receive's copy): every device's queues finish
  // before any device's memory goes.
  for (auto &d : devices_)
    if (d)
      (void)d->quiesce();
}

namespace {

/// Refuses a plan whose allocations in this process (every device's arena
/// and weights; for training each parameter's gradient accumulator and
/// optimizer state) exceed the memory this process may use, before any is
/// made: the kernel would grant them lazily and end the run half-way.
Status checkFitsMachine(const plan::Plan &p, int onlyDevice, bool arenasOnGpu) {
  const int D = static_cast<int>(std::max<uint32_t>(p.pipeline().data_parallel(), 1));
  const uint64_t machine = usableMemoryBytes();
  if (machine == 0)
    return Status::ok(); // nothing to check against
  long double arenas = 0, weights = 0, state = 0;
  for (const plan::Device &d : p.devices()) {
    if (onlyDevice >= 0 && d.index() != onlyDevice % p.devices_size())
      continue;
    // Replicas have arenas of their own (on the GPUs with --device cuda).
    if (!arenasOnGpu)
      arenas += static_cast<long double>(std::max<uint64_t>(d.arena_bytes(), 64)) * (onlyDevice >= 0 ? 1 : D);
  }
  // Every process loads the weight files whole, once, whatever devices it
  // runs.
  for (const plan::WeightFile &f : p.weight_files())
    weights += f.bytes();
  if (p.pipeline().training()) {
    PIPEC_ASSIGN(train::OptimizerConfig oc, train::parseOptimizer(p.training().optimizer()));
    PIPEC_ASSIGN(train::Optimizer opt, train::Optimizer::create(oc));
    // A gradient per replica where it is computed, the optimizer's state
    // where the parameter is updated (replica 0, or its shard's replica);
    // one device: the parameters its stage computes gradients of.
    std::vector<char> mine(static_cast<size_t>(p.tensors_size()), onlyDevice < 0);
    if (onlyDevice >= 0)
      for (const plan::Node &n : p.devices(onlyDevice % p.devices_size()).nodes())
        for (int32_t o : n.outputs())
          if (o >= 0 && o < p.tensors_size())
            mine[static_cast<size_t>(o)] = 1;
    const int replica = onlyDevice / p.devices_size();
    for (const plan::Parameter &pp : p.training().params()) {
      const int owner = p.pipeline().shard_optimizer() ? static_cast<int>(pp.shard()) : 0;
      const long double copies =
          onlyDevice < 0 ? D + opt.stateTensors() : 1 + (replica == owner ? opt.stateTensors() : 0);
      if (pp.weight() >= 0 && pp.weight() < p.tensors_size() && pp.grad() >= 0 &&
          pp.grad() < p.tensors_size() && mine[static_cast<size_t>(pp.grad())])
        state += static_cast<long double>(p.tensors(pp.weight()).bytes()) * copies;
    }
  }
  const long double total = arenas + weights + state;
  if (total <= machine)
    return Status::ok();
  const std::string devices =
      onlyDevice >= 0 ? cat("device ", onlyDevice) : cat(p.devices_size() * D, " device(s)");
  return errorf("it needs ", formatBytes(static_cast<double>(total)), " of memory on this machine (",
                devices, ": arenas ", formatBytes(static_cast<double>(arenas)),
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
  PIPEC_ASSIGN(s->lp_, plan::loadPlan(planDir, plan::LoadWeights::No));
  s->opts_ = opts;
  // K stages, D replicas of them: N devices.
  const int K = s->lp_.plan.devices_size();
  const int D = s->replicas();
  const int N = K * D;
  if (opts.failDevice >= N)
    return errorf("cannot inject a failure on device ", opts.failDevice, ": the plan has ", N, " devices");
  if (opts.rank >= 0) {
    if (!opts.transport)
      return errorf("a distributed run needs a transport");
    if (opts.transport->numDevices() != N || opts.rank >= N)
      return errorf("plan '", planDir, "' has ",
                    D > 1 ? cat(K, " stage(s) x ", D, " replicas = ", N, " devices") : cat(N, " device(s)"),
                    " and runs on as many MPI ranks (mpirun -np ", N, "); this job has ",
                    opts.transport->numDevices());
  }
  PIPEC_TRY(checkFitsMachine(s->lp_.plan, opts.rank, opts.cuda).withContext(cat("plan '", planDir, "'")));
  // The weights, once the machine is known to hold them.
  PIPEC_TRY(plan::loadWeights(s->lp_));
  int gpus = 0;
  if (opts.cuda) {
    auto listed = cuda::listGpus();
    if (!listed)
      return listed.status();
    gpus = static_cast<int>(listed->size());
  }
  omp_set_num_threads(opts.threadsPerDevice);
  // Trace times count from a common epoch: in a distributed run, rank 0's
  // wall clock when the session opened, which every process converts to
  // its own steady clock (the hosts' clocks agree as well as NTP keeps
  // them; on one host exactly).
  auto epoch = std::chrono::steady_clock::now();
  if (opts.rank >= 0 && opts.trace) {
    double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    double shared = opts.rank == 0 ? wall : 0.0;
    PIPEC_TRY(opts.transport->allReduceSum(opts.rank, &shared, 1));
    epoch -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(wall - shared));
  }
  for (int d = 0; d < N; ++d) {
    if (opts.rank >= 0 && d != opts.rank) {
      s->devices_.push_back(nullptr);
      continue;
    }
    DevicePlacement where;
    where.gpu = opts.cuda ? (opts.rank >= 0 && opts.localRank >= 0 ? opts.localRank : d) % gpus : -1;
    where.emulateGpu = opts.emulateGpu && !opts.cuda;
    where.tf32 = opts.tf32;
    PIPEC_ASSIGN(auto ex, DeviceExecutor::create(s->lp_, d, where));
    if (opts.trace)
      ex->enableTrace(epoch);
    ex->setRecording(opts.recordings);
    ex->setCopyQueue(opts.copyStream);
    s->devices_.push_back(std::move(ex));
    s->localDevices_.push_back(d);
  }
  if (opts.rank >= 0) {
    const plan::Plan &p = s->lp_.plan;
    std::vector<int> producer(p.tensors_size(), -1);
    for (int d = K - 1; d >= 0; --d) // the lowest device that computes it
      for (const plan::Node &n : p.devices(d).nodes())
        for (int32_t o : n.outputs())
          producer[o] = d;
    for (int32_t t : p.outputs())
      s->outputProducer_.push_back(producer[t]);
    s->gatheredStats_.resize(N);
    s->gatheredTrace_.resize(N);
  }
  // One device runs on the caller's thread; with several, the others get a
  // thread each and a transport connects them.
  if (N > 1 && opts.rank < 0) {
    double spin = opts.spinSeconds;
    if (spin < 0) {
      const unsigned cores = usableCores();
      spin = cores > 0 && static_cast<unsigned>(N * std::max(1, opts.threadsPerDevice)) <= cores
                 ? kAutoSpinSeconds
                 : 0.0;
    }
    s->transport_ = makeInProcessTransport(N, spin);
    s->threads_ = std::make_unique<DeviceThreads>(N, opts.threadsPerDevice, spin);
  }
  // GPUs of one process hand messages over on the devices.
  bool onDevices = opts.deviceMessages && (opts.cuda || opts.emulateGpu) && opts.rank < 0 && N > 1;
  for (auto &ex : s->devices_)
    onDevices = onDevices && ex && ex->backend().deviceMessages();
  for (auto &ex : s->devices_)
    if (ex)
      ex->setDeviceMessages(onDevices);
  if (opts.nccl) {
    // One rank per GPU, the messages over NCCL: the plan's order must be
    // one NCCL keeps (plan::checkRendezvous), each rank's channels made
    // in the same order.
    if (!(opts.cuda || opts.emulateGpu) || opts.rank < 0 || !opts.transport)
      return errorf("messages over NCCL are for one rank per GPU: mpirun -np N piperun PLAN --device cuda");
    PIPEC_TRY(plan::checkRendezvous(s->lp_.plan).withContext(cat("plan '", planDir, "' over NCCL")));
    DeviceExecutor &mine = *s->devices_[opts.rank];
    // Emulated GPUs: the same channels and order, checked, over MPI.
    if (opts.cuda) {
      PIPEC_ASSIGN(s->link_, cuda::makeNcclLink(plan::rankLinks(s->lp_.plan, opts.rank), opts.rank,
                                                *opts.transport, mine.backend().deviceIndex()));
    } else {
      PIPEC_ASSIGN(s->link_, makeEmulatedLink(s->lp_.plan, opts.rank, *opts.transport));
    }
    mine.setDeviceLink(s->link_.get());
  }
  if (s->isTraining())
    PIPEC_TRY(s->prepareTraining().withContext(cat("plan '", planDir, "'")));
  // Each program compiled now, its operands final, so that no step pays
  // for it.
  for (auto &ex : s->devices_)
    if (ex)
      ex->prepareSchedule();
  return s;
}

void Session::resetMeasurements() {
  stepSeconds_ = 0;
  measuredSteps_ = 0;
  for (auto &d : devices_)
    if (d)
      d->resetMeasurements();
}

TensorDesc Session::stepDesc(int32_t t) const {
  const plan::TensorInfo &ti = lp_.plan.tensors(t);
  TensorDesc d{static_cast<DType>(ti.dtype()), Shape(ti.shape().begin(), ti.shape().end())};
  const unsigned M = stepMicroBatches();
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

int Session::deviceHolding(int32_t tensor, unsigned mb) const {
  for (size_t d = 0; d < devices_.size(); ++d)
    if (devices_[d] && devices_[d]->address(tensor, mb))
      return static_cast<int>(d);
  return -1;
}

void *Session::residentData(int32_t tensor) const { return lp_.weightAddress(tensor); }

const DeviceStats &Session::deviceStats(int d) const {
  if (isLocal(d))
    return devices_[d]->stats();
  return gatheredStats_[static_cast<size_t>(d)];
}

const std::vector<TraceEvent> &Session::deviceTrace(int d) const {
  if (isLocal(d))
    return devices_[d]->trace();
  return gatheredTrace_[static_cast<size_t>(d)];
}

Status Session::gatherStats() {
  if (!distributed() || devices_.size() < 2)
    return Status::ok();
  Transport *tr = transport();
  const int me = opts_.rank;
  const uint32_t stats = static_cast<uint32_t>(SessionMessage::Stats);
  const uint32_t trace = static_cast<uint32_t>(SessionMessage::Trace);
  if (me != 0) {
    const DeviceExecutor &ex = *devices_[me];
    const uint64_t events = ex.trace().size();
    PIPEC_TRY(tr->send(me, 0, sessionTag(stats, 0), &ex.stats(), sizeof(DeviceStats)));
    PIPEC_TRY(tr->send(me, 0, sessionTag(trace, 0), &events, sizeof events));
    if (events)
      PIPEC_TRY(tr->send(me, 0, sessionTag(trace, 1), ex.trace().data(), events * sizeof(TraceEvent)));
    return Status::ok();
  }
  for (int d = 1; d < static_cast<int>(devices_.size()); ++d) {
    PIPEC_TRY(tr->recv(0, d, sessionTag(stats, 0), &gatheredStats_[d], sizeof(DeviceStats)));
    uint64_t events = 0;
    PIPEC_TRY(tr->recv(0, d, sessionTag(trace, 0), &events, sizeof events));
    if (events > (uint64_t{1} << 32))
      return errorf("rank ", d, " reports ", events, " trace events");
    gatheredTrace_[d].resize(events);
    if (events)
      PIPEC_TRY(tr->recv(0, d, sessionTag(trace, 1), gatheredTrace_[d].data(), events * sizeof(TraceEvent)));
  }
  return Status::ok();
}

Status Session::agree(const Status &mine, const std::string &what) {
  return agreeAcrossRanks(*transport(), opts_.rank, static_cast<int>(devices_.size()), mine, what);
}

/// One step's inputs and outputs, as the devices' feed and collect see
/// them. Micro-batches are numbered in the step (0 .. MT - 1).
struct Session::StepIo {
  const std::vector<Tensor> &inputs;
  bool training = false;
  std::vector<int> inputIndex, outputIndex; ///< per tensor: its input / output, -1
  std::vector<Tensor> outputs;
  std::vector<char> collected; ///< outputs x micro-batches: written
};

Expected<std::unique_ptr<Session::StepIo>> Session::beginStep(const std::vector<Tensor> &inputs, bool training,
                                                              bool drain) {
  const plan::Plan &p = lp_.plan;
  const unsigned MT = stepMicroBatches();
  if (!broken_.isOk())
    return broken_.withContext("an earlier step failed; open the plan again");
  if (!drain && inputs.size() != static_cast<size_t>(p.inputs_size()))
    return errorf("the model takes ", p.inputs_size(), " inputs, got ", inputs.size());
  auto io = std::unique_ptr<StepIo>(new StepIo{inputs, training, {}, {}, {}, {}});
  io->inputIndex.assign(p.tensors_size(), -1);
  io->outputIndex.assign(p.tensors_size(), -1);
  for (int i = 0; i < p.inputs_size(); ++i) {
    int32_t t = p.inputs(i);
    io->inputIndex[t] = i;
    if (drain)
      continue;
    const plan::TensorInfo &ti = p.tensors(t);
    TensorDesc mbDesc{static_cast<DType>(ti.dtype()), Shape(ti.shape().begin(), ti.shape().end())};
    if (inputs[i].desc() != stepDesc(t) && inputs[i].desc() != mbDesc)
      return errorf("input '", ti.name(), "' is ", inputs[i].desc().str(), ", the plan expects ",
                    stepDesc(t).str(), MT > 1 ? cat(" (or ", mbDesc.str(), " for every micro-batch)") : "");
  }
  for (int i = 0; i < p.outputs_size(); ++i) {
    io->outputIndex[p.outputs(i)] = i;
    TensorDesc d = stepDesc(p.outputs(i));
    // Every byte of an output is written by the step (or the step fails).
    if (static_cast<size_t>(i) < lastOutputs_.size() && lastOutputs_[i].soleOwner() &&
        lastOutputs_[i].desc() == d)
      io->outputs.push_back(lastOutputs_[i]);
    else
      io->outputs.emplace_back(d);
  }
  lastOutputs_.clear();
  io->collected.assign(static_cast<size_t>(p.outputs_size()) * MT, 0);
  return io;
}

Status Session::feed(const StepIo &io, int32_t t, unsigned mb, void *dst) const {
  const Tensor &src = io.inputs[io.inputIndex[t]];
  size_t bytes = lp_.plan.tensors(t).bytes();
  size_t off = src.bytes() == bytes ? 0 : bytes * mb;
  std::memcpy(dst, static_cast<const char *>(src.raw()) + off, bytes);
  return Status::ok();
}

Status Session::collect(StepIo &io, int32_t t, unsigned mb, const void *src) {
  const plan::Plan &p = lp_.plan;
  const unsigned M = p.pipeline().num_micro_batches();
  const unsigned replica = mb / M;
  if (io.training && stateDst_[t] && replica == 0) {
    // Running statistics: micro-batches update them in ascending order
    // on the one device that computes them; with replicas, those of
    // replica 0 (as data-parallel trainers keep rank 0's).
    std::memcpy(stateDst_[t], src, p.tensors(t).bytes());
  }
  if (io.training && paramOfGrad_[t] >= 0) {
    // Sum gradients in ascending micro-batch order: bitwise the same for
    // any partition and schedule. Each replica sums its own.
    ParamState &ps = params_[paramOfGrad_[t]];
    const float *g = static_cast<const float *>(src);
    float *acc = ps.accumOf(static_cast<int>(replica));
    if (mb % M == 0)
      std::memcpy(acc, g, static_cast<size_t>(ps.n) * sizeof(float));
    else
      for (int64_t i = 0; i < ps.n; ++i)
        acc[i] += g[i];
  }
  int oi = io.outputIndex[t];
  if (oi < 0)
    return Status::ok();
  size_t bytes = p.tensors(t).bytes();
  std::memcpy(static_cast<char *>(io.outputs[oi].raw()) + bytes * mb, src, bytes);
  io.collected[static_cast<size_t>(oi) * stepMicroBatches() + mb] = 1;
  return Status::ok();
}

Status Session::runDevices(const std::function<Status(int)> &runDevice) {
  if (!threads_) {
    Status s = runDevice(localDevices_.front());
    if (!s)
      broken_ = s;
    return s;
  }
  std::vector<Status> results = threads_->run(runDevice);
  // Report the device that failed first, not the ones it stopped.
  Status first = Status::ok();
  for (const Status &r : results)
    if (!r && (first.isOk() || (first.message().rfind("stopped because device", 0) == 0 &&
                                r.message().rfind("stopped because device", 0) != 0)))
      first = r;
  if (!first.isOk())
    broken_ = first;
  return first;
}

Status Session::finishNoFlushStep(bool drain, uint64_t call) {
  drainPending_ = !drain;
  // The squared sums of the step before now complete on every device (in
  // a distributed run each process has its devices' slots: summed over
  // the processes, every other slot 0, so exactly).
  if (drain || call > 0) {
    std::vector<double> done = stepSquares_[(call + 1) % 2]; // step call - 1's
    if (distributed()) {
      Status s = transport()->allReduceSum(opts_.rank, done.data(), done.size());
      if (!s) {
        transport()->abort(s);
        broken_ = s;
        return s;
      }
    }
    double total = 0.0;
    for (double v : done)
      total += v;
    lastNoFlushNorm_ = std::sqrt(total);
  }
  if (!drain)
    std::fill(stepSquares_[(call + 1) % 2].begin(), stepSquares_[(call + 1) % 2].end(), 0.0);
  return Status::ok();
}

Status Session::collectUnproduced(StepIo &io) {
  // Outputs that no node produces (graph inputs or constants passed
  // through); in a distributed run the leader's outputs are the step's.
  const plan::Plan &p = lp_.plan;
  const unsigned M = p.pipeline().num_micro_batches(), MT = stepMicroBatches();
  for (int i = 0; i < p.outputs_size() && leader(); ++i) {
    int32_t t = p.outputs(i);
    for (unsigned mb = 0; mb < MT; ++mb) {
      if (io.collected[static_cast<size_t>(i) * MT + mb])
        continue;
      const void *src = nullptr;
      if (io.inputIndex[t] >= 0) {
        const Tensor &in = io.inputs[io.inputIndex[t]];
        size_t bytes = p.tensors(t).bytes();
        src = static_cast<const char *>(in.raw()) + (in.bytes() == bytes ? 0 : bytes * mb);
      } else {
        int holder = deviceHolding(t, mb % M);
        src = residentData(t); // a constant; a GPU's arena is not for the host to read
        if (!src && holder >= 0 && devices_[holder]->hostAddressable())
          src = devices_[holder]->address(t, mb % M);
      }
      if (!src)
        return errorf("graph output '", p.tensors(t).name(), "' of micro-batch ", mb,
                      " was never produced");
      PIPEC_TRY(collect(io, t, mb, src));
    }
  }
  return Status::ok();
}

Expected<std::vector<Tensor>> Session::runProgram(const std::vector<Tensor> &inputs, bool training,
                                                  TrainStep *step, bool drain) {
  const plan::Plan &p = lp_.plan;
  // M micro-batches per replica, MT per step: device r*K + s runs
  // micro-batches r*M .. r*M + M - 1 (as its executor numbers them too).
  const unsigned M = p.pipeline().num_micro_batches();
  const unsigned MT = stepMicroBatches();
  const int K = stages(), D = replicas();
  PIPEC_ASSIGN(std::unique_ptr<StepIo> io, beginStep(inputs, training, drain));

  // Every device updates the parameters whose gradients it computed
  // (runtime/train/StepUpdate.h). The global gradient norm needs every
  // device: each writes the squared sums of its own gradients into their
  // slots (one slot per parameter) and the slots are added in parameter
  // order, as one device would. Clipping needs the norm before any
  // update, and a parameter that several devices read (tied weights) must
  // not change while another device still reads it: then the slots are
  // exchanged by an all-reduce, a collective every device waits at (the
  // rule's collective path). Otherwise a device updates its parameters as
  // soon as its own backward passes are done, while the others finish
  // theirs, and the norm is added up after the step. In a distributed run
  // every process has its own copy of the weights: a shared parameter is
  // sent to the other devices that read it after its update
  // (runtime/dist/StepExchange.h), so it needs no collective.
  Transport *const tr = transport();
  train::UpdateRule rule;
  rule.clip = p.training().clip_grad_norm();
  rule.skipNonFinite = opts_.skipNonFinite;
  rule.collective = tr && (rule.clip > 0 || (sharedParams_ && !distributed()) || opts_.skipNonFinite);
  rule.gradientsOnly = gradientsOnly_;
  // planParamUpdates' updates inside the programs, which gradients() does
  // not take.
  rule.inStep = training && !gradientsOnly_;
  const int64_t stepNumber = static_cast<int64_t>(steps_) + 1;
  const float lr = training ? lrSchedule_.lrAt(stepNumber) : 0.0f;
  std::optional<train::StepUpdate> update;
  if (training && lossScaleSeed_ >= 0) {
    // Loss scaling: the seed of every micro-batch's backward is the scale
    // (set here, before any device runs; each process sets its own copy).
    seedValue_ = static_cast<float>(scaler_.scale());
    std::memcpy(lp_.weightAddress(lossScaleSeed_), &seedValue_, sizeof seedValue_);
    // A device with a copy of its own (a GPU): the copy, ordered before
    // the step's kernels on its stream (a host optimizer's step refreshes
    // every copy anyway).
    if (resident_)
      for (int d : localDevices_)
        if (void *copy = devices_[d]->weightAddress(lossScaleSeed_);
            copy && copy != lp_.weightAddress(lossScaleSeed_))
          PIPEC_TRY(devices_[d]->backend().upload(copy, &seedValue_, sizeof seedValue_));
  }
  if (training)
    update.emplace(*optimizer_, params_, rule, stepNumber, lr, MT, localDevices_.back(),
                   static_cast<float>(scaler_.enabled() ? scaler_.scale() : 1.0));
  StepExchange exchange(tr, params_, otherHolders_, K, D, distributed() && (sharedParams_ || D > 1));
  const uint64_t call = steps_;

  cpu::ExecContext ctx;
  ctx.seed = opts_.seed;
  ctx.step = steps_;
  ctx.training = training;
  auto runDevice = [&](int d) -> Status {
    DeviceExecutor::StepIO dio;
    // The executor numbers its replica's micro-batches from 0.
    const unsigned base = static_cast<unsigned>(d / K) * M;
    dio.feed = [this, &io, base](int32_t t, unsigned mb, void *dst) { return feed(*io, t, base + mb, dst); };
    dio.collect = [this, &io, base](int32_t t, unsigned mb, const void *src) {
      return collect(*io, t, base + mb, src);
    };
    if (training && resident_)
      dio.optimize = [&](int dev, bool) { return optimizeResident(dev, rule, stepNumber, lr, tr); };
    else if (training)
      dio.optimize = [&](int dev, bool) -> Status {
        PIPEC_TRY(exchange.reduceReplicaGradients(dev));
        auto allReduce = [tr, dev](double *v, size_t n) { return tr->allReduceSum(dev, v, n); };
        PIPEC_ASSIGN(const bool updated, update->optimize(dev, allReduce));
        return updated ? exchange.syncSharedWeights(dev) : Status::ok();
      };
    if (rule.inStep)
      dio.update = [&](int, const std::vector<int> &which) { return update->updateInStep(which); };
    if (noFlush_) {
      // 2bw: no collective; the gradient norm's slots are added up once
      // every device has updated (finishNoFlushStep).
      dio.optimize = [&](int dev, bool previousStep) -> Status {
        if (previousStep && call == 0)
          return errorf("device ", dev, ": a previous-step update in the first step");
        const uint64_t s = previousStep ? call - 1 : call;
        return train::updateNoFlush(*optimizer_, params_, lrSchedule_, dev, s, M, stepSquares_[s % 2]);
      };
      dio.part = drain ? DeviceExecutor::StepIO::Part::PreviousStep
                 : drainPending_ ? DeviceExecutor::StepIO::Part::All
                                 : DeviceExecutor::StepIO::Part::CurrentStep;
      dio.weightVersion = static_cast<int>((call + 1) % 2); // step `call` reads W(call - 1)
    }
    dio.transport = tr;
    if (d == opts_.failDevice)
      dio.failAtInstruction = opts_.failAtInstruction;
    Status s = devices_[d]->runStep(ctx, dio);
    // The step's messages over NCCL are done (or failed).
    if (s && link_)
      s = link_->finishStep();
    // An error stops every device: the others' receives and collectives
    // fail with it instead of waiting forever. (The MPI transport names the
    // rank that failed itself.)
    if (!s && link_)
      link_->abort(s);
    if (!s && tr)
      tr->abort(distributed() ? s : s.withContext(cat("stopped because device ", d, " failed")));
    return s;
  };
  auto t0 = std::chrono::steady_clock::now();
  PIPEC_TRY(runDevices(runDevice));
  if (noFlush_) {
    PIPEC_TRY(finishNoFlushStep(drain, call));
    if (drain)
      return std::vector<Tensor>{};
  }
  stepSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++measuredSteps_;

  // Training: the sum of the loss output's elements, as the sum over the
  // replicas in order of each replica's sum (its micro-batches in order),
  // which a distributed run adds the same way.
  std::vector<Tensor> &outputs = io->outputs;
  const int lossIndex = training ? io->outputIndex[p.training().loss()] : -1;
  std::vector<double> replicaLoss(static_cast<size_t>(D), 0.0);
  std::vector<double> noSquares(update ? 0 : params_.size(), 0.0); // inference: no norm
  std::vector<double> residentSquares;
  bool residentSkipped = false;
  if (update && resident_)
    residentStepResults(rule, residentSquares, residentSkipped);
  std::vector<double> &sq = !update ? noSquares : resident_ ? residentSquares : update->squares();
  auto sumLoss = [&](int r) {
    const Tensor &l = outputs[lossIndex];
    const int64_t per = l.numel() / D;
    double sum = 0;
    for (int64_t i = r * per; i < (r + 1) * per; ++i)
      sum += l.getDouble(i);
    return sum;
  };
  if (distributed()) {
    if (training)
      for (int r = 0; r < D; ++r)
        if (outputProducer_[lossIndex] >= 0 && r * K + outputProducer_[lossIndex] == opts_.rank)
          replicaLoss[r] = sumLoss(r);
    StepResults how;
    how.outputProducer = &outputProducer_;
    how.stages = K;
    how.replicas = D;
    how.stepMicroBatches = MT;
    how.training = training;
    how.collective = rule.collective;
    Status s = exchangeStepResults(*tr, opts_.rank, how, outputs, io->collected, sq, replicaLoss);
    if (!s) {
      tr->abort(s);
      broken_ = s;
      return s;
    }
  } else if (training) {
    for (int r = 0; r < D; ++r)
      replicaLoss[r] = sumLoss(r);
  }
  double lossSum = 0;
  for (double part : replicaLoss)
    lossSum += part;
  if (training && noFlush_) {
    step->gradNorm = call > 0 ? lastNoFlushNorm_ : std::nan("");
    step->lr = lr; // what this step's gradients are applied with
  } else if (training) {
    double total = 0.0;
    for (double v : sq)
      total += v;
    step->gradNorm = std::sqrt(total);
    step->lr = lr;
    step->skipped = resident_ ? residentSkipped : update->skipped();
    for (size_t i = 0; i < params_.size() && step->firstNonFinite.empty(); ++i)
      if (!std::isfinite(sq[i]))
        step->firstNonFinite = lp_.plan.tensors(params_[i].weight).name();
  }
  PIPEC_TRY(collectUnproduced(*io));
  if (training)
    step->loss = lossSum / static_cast<double>(std::max<int64_t>(outputs[lossIndex].numel(), 1));
  ++steps_;
  lastOutputs_ = outputs;
  return outputs;
}

} // namespace pipec::runtime
