//===- driver/Driver.cpp - The compile pipeline as one call --------------===//
#include "driver/Driver.h"

#include "codegen/Report.h"
#include "ir/Verifier.h"
#include "runtime/plan/Predicted.h"
#include "passes/TrainingPasses.h"
#include "runtime/train/Optimizer.h"
#include "support/PhaseTimer.h"
#include "runtime/train/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace pipec::driver {

using namespace pipec::codegen;

namespace {
/// The pass pipeline of `opts` (none with noPasses) added to `pm`: the
/// user's (--passes), or the default one, which on an inference graph
/// ends with fold-batchnorm, channels-last, fuse-gemm-epilogue and
/// fuse-elementwise (a training graph runs the last two after autodiff:
/// prepareGraph; its BatchNormalizations train and its convolutions stay
/// NCHW, the layout their gradient kernels take).
Status addPipeline(passes::PassManager &pm, const CompileOptions &opts, bool training) {
  const bool reduced = opts.precision.precision != passes::Precision::Fp32;
  if (opts.noPasses || !opts.passes.empty()) {
    // The user's pipeline (or none): an inference graph's copies go in
    // last (a training graph's after autodiff: prepareGraph).
    for (const std::string &p : opts.passes)
      PIPEC_TRY(pm.add(p));
    if (reduced && !training)
      pm.add(passes::createMixedPrecisionPass(opts.precision));
    return Status::ok();
  }
  for (const std::string &p : passes::defaultPipeline())
    PIPEC_TRY(pm.add(p));
  if (!training) {
    PIPEC_TRY(pm.add("fold-batchnorm"));
    PIPEC_TRY(pm.add("channels-last"));
    PIPEC_TRY(pm.add("fuse-gemm-epilogue"));
    PIPEC_TRY(pm.add("pack-qkv")); // after the epilogues: a projection is one node
    // The products' final form is known: their operands' copies can go in.
    if (reduced)
      pm.add(passes::createMixedPrecisionPass(opts.precision));
    PIPEC_TRY(pm.add("fuse-elementwise"));
  }
  return Status::ok();
}
} // namespace

Status runPasses(ir::Graph &g, const CompileOptions &opts) {
  passes::PassManager pm(opts.passManager);
  PIPEC_TRY(addPipeline(pm, opts, opts.emit.training));
  return pm.run(g);
}

namespace {

/// Data parallelism: what the exchange between the D replicas costs per
/// step, into the plan and the report. Replica 0's device of each stage
/// receives every other replica's gradients of the stage's parameters and,
/// when the replicas are processes, sends the updated weights back: 2 (D-1)
/// messages of the stage's parameter bytes one after the other at the
/// profile's link figures; the stages exchange at the same time. A step
/// then takes D x M micro-batches.
///
/// A sharded optimizer (ZeRO-1) gives each parameter to one replica
/// (Parameter.shard): per stage, the largest parameters first, each to the
/// replica that holds the fewest bytes so far (the lowest on a tie), as
/// PyTorch's ZeroRedundancyOptimizer partitions. That replica's device
/// alone keeps its optimizer state, takes the other replicas' gradients
/// and sends the weight back: the same bytes move, spread over the
/// replicas' devices instead of converging on replica 0's.
void addReplicaExchange(Compiled &c, int D, bool shard, int optimizerStates) {
  plan::Plan &p = c.plan.plan;
  const int K = p.devices_size();
  std::vector<int> producer(p.tensors_size(), -1);
  for (int d = 0; d < K; ++d)
    for (const plan::Node &n : p.devices(d).nodes())
      for (int32_t o : n.outputs())
        producer[o] = d;
  std::vector<double> stageBytes(static_cast<size_t>(K), 0.0);
  // Per stage, the parameter bytes each replica updates.
  std::vector<std::vector<double>> owned(static_cast<size_t>(K), std::vector<double>(static_cast<size_t>(D), 0.0));
  std::vector<int> order;
  for (int i = 0; i < p.training().params_size(); ++i)
    if (const plan::Parameter &pp = p.training().params(i); producer[pp.grad()] >= 0) {
      stageBytes[producer[pp.grad()]] += static_cast<double>(p.tensors(pp.weight()).bytes());
      order.push_back(i);
    }
  auto bytesOf = [&](int i) { return p.tensors(p.training().params(i).weight()).bytes(); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytesOf(a) > bytesOf(b); });
  for (int i : order) {
    plan::Parameter *pp = p.mutable_training()->mutable_params(i);
    std::vector<double> &load = owned[static_cast<size_t>(producer[pp->grad()])];
    const int r = shard ? static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin()) : 0;
    pp->set_shard(static_cast<uint32_t>(r));
    load[static_cast<size_t>(r)] += static_cast<double>(bytesOf(i));
  }
  const partitioner::CostModel &model = c.partition.estimate.model;
  double bytes = 0, seconds = 0;
  for (int s = 0; s < K; ++s) {
    const double b = stageBytes[static_cast<size_t>(s)];
    bytes += 2.0 * (D - 1) * b;
    // Each device's messages one after the other: the gradients of what
    // it does not update out and the weights in, the other replicas'
    // gradients of what it updates in and the weights out.
    for (double mine : owned[static_cast<size_t>(s)])
      seconds = std::max(seconds, (mine < b ? 2.0 * model.transferTime(b - mine) : 0.0) +
                                      (mine > 0 ? 2.0 * (D - 1) * model.transferTime(mine) : 0.0));
  }
  plan::Pipeline *pl = p.mutable_pipeline();
  pl->set_replica_exchange_bytes(static_cast<uint64_t>(bytes));
  pl->set_predicted_replica_exchange_seconds(seconds);
  nlohmann::json &r = c.report;
  const double pipeline = r["predicted_step_seconds"].get<double>();
  const double step = pipeline + seconds;
  r["data_parallel"] = D;
  r["replica_exchange_bytes_per_step"] = bytes;
  r["predicted_replica_exchange_seconds"] = seconds;
  r["predicted_step_seconds"] = step;
  if (step > 0) {
    r["predicted_samples_per_second"] = r["predicted_samples_per_second"].get<double>() * D * pipeline / step;
    r["predicted_speedup"] = r["single_device_step_seconds"].get<double>() * D / step;
  }
  if (!shard)
    return;
  // The report's training state per device: the gradients of every
  // parameter the stage computes, the optimizer's state of the largest
  // shard (a device keeps only its replica's).
  const double states = optimizerStates;
  nlohmann::json shards = nlohmann::json::array();
  double largest = 0, unsharded = 0;
  for (int s = 0; s < K; ++s) {
    const std::vector<double> &load = owned[static_cast<size_t>(s)];
    shards.push_back(load);
    const double most = *std::max_element(load.begin(), load.end());
    largest = std::max(largest, most * states);
    unsharded = std::max(unsharded, stageBytes[static_cast<size_t>(s)] * states);
    for (nlohmann::json &js : r["stage_list"])
      if (js["device"].get<int>() == s) {
        const double before = js["training_state_bytes"].get<double>();
        const double after = before - (stageBytes[static_cast<size_t>(s)] - most) * states;
        js["training_state_bytes"] = after;
        js["peak_memory_bytes"] = js["peak_memory_bytes"].get<double>() - before + after;
      }
  }
  r["optimizer_sharded"] = true;
  r["updated_parameter_bytes_per_replica"] = shards;
  r["optimizer_state_bytes_largest_shard"] = largest;
  r["optimizer_state_bytes_unsharded"] = unsharded;
}

} // namespace

Expected<EmitOptions> prepareGraph(ir::Graph &g, const CompileOptions &opts, PhaseTimer &phases) {
  EmitOptions emit = opts.emit;
  if (emit.shardOptimizer && (!emit.training || emit.dataParallel < 2))
    return errorf("--shard-optimizer shards the optimizer's state over the replicas of data parallelism: it "
                  "needs --train and --data-parallel 2 or more");
  passes::PassManagerOptions pmo = opts.passManager;
  pmo.laterPasses.push_back("recompute");
  passes::PassManager pm(pmo);
  PIPEC_TRY(addPipeline(pm, opts, emit.training));
  passes::TrainingResults results;
  if (emit.training) {
    const TrainOptions &t = opts.train;
    // Validate the optimizer and schedule now, not at the first step; the
    // optimizer is parsed here once.
    if (!std::isfinite(t.lr) || t.lr < 0)
      return errorf("--lr must be a positive number (got ", t.lr, ")");
    PIPEC_ASSIGN(train::OptimizerConfig oc,
                 train::parseOptimizer(t.optimizer, t.lr > 0 ? std::optional<double>(t.lr)
                                                             : std::nullopt));
    PIPEC_ASSIGN(train::Optimizer optimizer, train::Optimizer::create(oc));
    if (!t.lrSchedule.empty())
      PIPEC_TRY(train::parseLrSchedule(t.lrSchedule, optimizer.baseLr()).status());
    if (!(t.clipGradNorm >= 0) || !std::isfinite(t.clipGradNorm))
      return errorf("--clip-grad-norm must be a positive number (got ", t.clipGradNorm, ")");
    if (!t.lossKind.empty() && !t.lossOutput.empty())
      return errorf("give either --loss (attach a loss) or --loss-output (use the model's), not both");
    emit.train.optimizer = optimizer.config().str();
    emit.train.optimizerKind = oc.kind;
    emit.train.optimizerStates = static_cast<int>(optimizer.stateTensors());
    emit.train.lrSchedule = t.lrSchedule;
    emit.train.clipGradNorm = t.clipGradNorm;
    passes::LossOptions lo;
    lo.kind = t.lossKind;
    lo.logits = t.logits;
    lo.target = t.labels;
    // Dynamic loss scaling: on with --loss-scale, and for fp16 training
    // (whose gradients would underflow fp16 unscaled) from 2^16.
    double lossScale = t.lossScale;
    if (lossScale == 0 && opts.precision.precision == passes::Precision::Fp16)
      lossScale = 65536.0;
    if (lossScale != 0) {
      int exp = 0;
      if (!(lossScale >= 1) || !std::isfinite(lossScale) || std::frexp(lossScale, &exp) != 0.5)
        return errorf("--loss-scale must be a power of two of at least 1 (got ", t.lossScale,
                      "): the gradients are divided by it exactly");
      if (t.lossScaleWindow < 0)
        return errorf("--loss-scale-window must be at least 1 (got ", t.lossScaleWindow, ")");
      results.scaleLoss = true;
      emit.train.lossScale = lossScale;
      emit.train.lossScaleWindow = t.lossScaleWindow > 0 ? t.lossScaleWindow : 2000;
    } else if (t.lossScaleWindow != 0) {
      return errorf("--loss-scale-window needs loss scaling (--loss-scale, or --precision fp16)");
    }
    pm.add(passes::createLossPass(lo, t.lossOutput, results));
    pm.add(passes::createTrainingStatePass(results));
    pm.add(passes::createAutodiffPass(results));
  }
  // The default pipeline's pack-qkv, keep-attention-probs,
  // fuse-gemm-epilogue and fuse-elementwise run after autodiff on a
  // training graph (fused nodes have no gradient rule), so that the
  // backward's elementwise trees fuse too.
  const bool reduced = opts.precision.precision != passes::Precision::Fp32;
  if (emit.training && !opts.noPasses && opts.passes.empty()) {
    PIPEC_TRY(pm.add("pack-qkv"));
    pm.add(passes::createKeepAttentionProbsPass());
    pm.add(passes::createFuseGemmEpiloguePass(&results));
    if (reduced)
      pm.add(passes::createMixedPrecisionPass(opts.precision));
    pm.add(passes::createFuseElementwisePass(&results));
  } else if (reduced && emit.training) {
    // A pipeline of the user's (or none): the copies go in last.
    pm.add(passes::createMixedPrecisionPass(opts.precision));
  }
  PIPEC_TRY(pm.run(g));
  phases.done(emit.training ? "passes (with training)" : "passes");
  // --stop-after: the graph as the passes left it, for --emit=ir.
  if (opts.passManager.stopAfter >= 0 && static_cast<size_t>(opts.passManager.stopAfter) < pm.size())
    return emit;
  if (emit.training) {
    emit.train.loss = results.loss;
    emit.train.lossScaleSeed = results.lossScaleSeed;
    for (const passes::StateUpdate &u : results.stateUpdates)
      emit.train.stateUpdates.emplace_back(u.state, u.value);
    for (const passes::GradientPair &gp : results.gradients)
      emit.train.paramGrads.emplace_back(gp.param, gp.grad);
    // Gradients whose GEMM sums the micro-batches itself (beta 1) rather
    // than the runtime in a pass per micro-batch: the plan says so
    // (Parameter.accumulate_in_place) and the cost model charges no pass.
    for (const auto &[param, grad] : emit.train.paramGrads) {
      const ir::Node *n = grad->producer();
      const bool noC = n && (n->inputs().size() < 3 || !n->inputs()[2] ||
                             attrFloat(n->attrs(), "beta", 1.0f) == 0.0f);
      if (n && n->is("Gemm") && noC && n->outputs().size() == 1 && grad->users().empty() &&
          !grad->isGraphOutput() && grad->type().dtype == DType::F32)
        emit.train.accumulatedInPlace.insert(param);
    }
  }
  PIPEC_TRY(ir::verifyGraph(g).withContext("the graph is not ready for code generation"));
  phases.done("verify");
  return emit;
}

Expected<partitioner::PartitionOptions> partitionOptionsFor(const CompileOptions &opts,
                                                            const EmitOptions &emit) {
  partitioner::PartitionOptions po = opts.partition;
  po.microBatches = opts.emit.microBatches;
  po.schedule = opts.emit.schedule;
  po.training = emit.training;
  if (emit.training) {
    // The memory model counts the optimizer's state tensors per parameter.
    po.optimizerStates = emit.train.optimizerStates;
    if (emit.shardOptimizer)
      po.optimizerShards = emit.dataParallel;
    po.optimizer = emit.train.optimizerKind;
    po.accumulatedInPlace = emit.train.accumulatedInPlace;
  }
  return po;
}

Expected<partitioner::Partition> partitionAndRecompute(ir::Graph &g, const CompileOptions &opts,
                                                       const EmitOptions &emit,
                                                       const partitioner::PartitionOptions &po) {
  PIPEC_ASSIGN(partitioner::Partition part, partitioner::partitionGraph(g, po));
  if (po.recompute == "none")
    return part;
  if (!emit.training)
    return errorf("--recompute ", po.recompute,
                  " needs --train: an inference plan keeps no activations for a backward pass");
  // auto: the memory model chose a policy per stage.
  passes::RecomputeOptions ro;
  for (size_t s = 0; s < part.numStages(); ++s)
    ro.policies.push_back(po.recompute == "auto" && s < part.estimate.stages.size()
                              ? part.estimate.stages[s].recompute
                              : po.recompute);
  ro.stageOf = [&](const ir::Node *n) { return part.stageOf(n); };
  ro.assign = [&](const ir::Node *n, int s) { part.assign(n, s); };
  passes::PassManagerOptions pmo = opts.passManager;
  pmo.stopAfter = -1;
  pmo.printAfter.clear(); // validated by the first pass manager
  for (const std::string &p : opts.passManager.printAfter)
    if (p == "recompute" || p == "all")
      pmo.printAfter.push_back(p);
  passes::PassManager pm(pmo);
  passes::TrainingResults results;
  pm.add(passes::createRecomputePass(ro, results));
  PIPEC_TRY(pm.run(g));
  PIPEC_TRY(ir::verifyGraph(g).withContext("after recompute"));
  return part;
}

Expected<Compiled> compileGraph(ir::Graph &g, const CompileOptions &opts) {
  PhaseTimer phases;
  PIPEC_ASSIGN(EmitOptions emit, prepareGraph(g, opts, phases));
  if (opts.passManager.stopAfter >= 0)
    return errorf("--stop-after ", opts.passManager.stopAfter,
                  " stops the passes before code generation: use it with --emit=ir");
  PIPEC_ASSIGN(partitioner::PartitionOptions po, partitionOptionsFor(opts, emit));
  Compiled c;
  PIPEC_ASSIGN(c.partition, partitionAndRecompute(g, opts, emit, po));
  phases.done(po.recompute == "none" ? "partition" : "partition and recompute");
  // The cost model's predictions go into the plan, so that piperun can put
  // its measurements next to them.
  const partitioner::PartitionEstimate &est = c.partition.estimate;
  // Devices of a pipeline compute at the same time: the profile's
  // two-core time (StageModel scales the stage times the same way).
  const double concurrent = c.partition.numDevices() > 1 ? est.model.profile.concurrentSlowdown : 1.0;
  emit.nodeSeconds = [&](const ir::Node &n) { return est.model.nodeTime(n) * concurrent; };
  for (const partitioner::StageEstimate &se : est.stages)
    emit.stageCosts.push_back(partitioner::stageCost(partitioner::timesOf(se)));
  PIPEC_ASSIGN(c.plan, emitPlan(g, c.partition, emit));
  phases.append(c.plan.phaseSeconds);
  if (c.partition.numDevices() == static_cast<size_t>(c.plan.plan.devices_size())) {
    // A device's prediction sums its stages'.
    const double M = emit.microBatches;
    for (size_t s = 0; s < est.stages.size(); ++s) {
      const partitioner::StageEstimate &se = est.stages[s];
      plan::Device *dev = c.plan.plan.mutable_devices(c.partition.deviceOf(static_cast<int>(s)));
      dev->set_predicted_busy_seconds(
          dev->predicted_busy_seconds() +
          (se.forwardTime + se.backwardTime + se.recomputeTime) * M + se.optimizerTime);
      dev->set_predicted_memory_bytes(dev->predicted_memory_bytes() + se.memory.total());
    }
  }
  // Every instruction's predicted seconds: what the report simulates and
  // what piperun puts beside its measurements.
  {
    plan::Plan &pl = c.plan.plan;
    std::vector<double> optimizer(static_cast<size_t>(pl.devices_size()), 0.0);
    if (c.partition.numDevices() == static_cast<size_t>(pl.devices_size()))
      for (size_t s = 0; s < est.stages.size(); ++s)
        optimizer[static_cast<size_t>(c.partition.deviceOf(static_cast<int>(s)))] +=
            est.stages[s].optimizerTime;
    for (int d = 0; d < pl.devices_size(); ++d) {
      plan::Device *dev = pl.mutable_devices(d);
      for (plan::Instruction &ins : *dev->mutable_program()) {
        if (ins.kind() == plan::Instruction::SEND)
          ins.set_predicted_seconds(
              est.model.transferTime(static_cast<double>(pl.tensors(ins.tensor()).bytes())));
        else if (ins.kind() == plan::Instruction::OPTIMIZER)
          ins.set_predicted_seconds(optimizer[static_cast<size_t>(d)]);
        else
          ins.set_predicted_seconds(plan::predictedSeconds(*dev, ins)); // its nodes' sum
      }
    }
  }
  PIPEC_ASSIGN(c.report, buildReport(g, c.partition, c.plan));
  if (emit.dataParallel > 1)
    addReplicaExchange(c, emit.dataParallel, emit.shardOptimizer, emit.train.optimizerStates);
  // The step the report predicts: its simulation of the emitted programs
  // (the partition's ideal schedule where those cannot be timed).
  c.plan.plan.mutable_pipeline()->set_predicted_step_seconds(
      c.report["predicted_step_seconds"].get<double>());
  phases.done("report");
  if (opts.passManager.timePasses && opts.passManager.out)
    phases.print(*opts.passManager.out, "compile phases", true);
  return c;
}

} // namespace pipec::driver
