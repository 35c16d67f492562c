//===- codegen/Driver.cpp - The compile pipeline as one call --------------===//
#include "codegen/Driver.h"

#include "codegen/Report.h"
#include "ir/Verifier.h"
#include "passes/Autodiff.h"
#include "passes/Loss.h"
#include "passes/Recompute.h"
#include "passes/TrainingState.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/Schedule.h"

#include <cmath>

namespace pipec::codegen {

Status runPasses(ir::Graph &g, const CompileOptions &opts) {
  passes::PassManager pm(opts.passManager);
  if (!opts.noPasses)
    for (const std::string &p : opts.passes.empty() ? passes::defaultPipeline() : opts.passes)
      PIPEC_TRY(pm.add(p));
  return pm.run(g);
}

Expected<Compiled> compileGraph(ir::Graph &g, const CompileOptions &opts) {
  PIPEC_TRY(runPasses(g, opts));
  EmitOptions emit = opts.emit;
  if (emit.training) {
    const TrainOptions &t = opts.train;
    // Validate the optimizer and schedule now, not at the first step.
    if (!std::isfinite(t.lr) || t.lr < 0)
      return errorf("--lr must be a positive number (got ", t.lr, ")");
    PIPEC_ASSIGN(train::OptimizerConfig oc,
                 train::parseOptimizer(t.optimizer, t.lr > 0 ? std::optional<double>(t.lr)
                                                             : std::nullopt));
    PIPEC_ASSIGN(train::Optimizer optimizer, train::Optimizer::create(oc));
    if (!t.schedule.empty())
      PIPEC_TRY(train::parseSchedule(t.schedule, optimizer.baseLr()).status());
    if (!(t.clipGradNorm >= 0) || !std::isfinite(t.clipGradNorm))
      return errorf("--clip-grad-norm must be a positive number (got ", t.clipGradNorm, ")");
    ir::Value *loss = nullptr;
    if (!t.lossKind.empty()) {
      if (!t.lossOutput.empty())
        return errorf("give either --loss (attach a loss) or --loss-output (use the model's), not both");
      passes::LossOptions lo;
      lo.kind = t.lossKind;
      lo.logits = t.logits;
      lo.target = t.labels;
      PIPEC_ASSIGN(loss, passes::attachLoss(g, lo));
    } else {
      PIPEC_ASSIGN(loss, passes::findLoss(g, t.lossOutput));
    }
    if (!loss->isGraphOutput())
      g.addOutput(loss); // the runtime reports the loss of every step
    PIPEC_ASSIGN(std::vector<passes::StateUpdate> updates, passes::exposeRunningStatistics(g));
    for (const passes::StateUpdate &u : updates)
      emit.train.stateUpdates.emplace_back(u.state, u.value);
    passes::AutodiffOptions ao;
    ao.loss = loss->name();
    PIPEC_ASSIGN(std::vector<passes::GradientPair> grads, passes::differentiate(g, ao));
    emit.train.loss = loss;
    for (const passes::GradientPair &gp : grads)
      emit.train.paramGrads.emplace_back(gp.param, gp.grad);
    emit.train.optimizer = optimizer.config().str();
    emit.train.schedule = t.schedule;
    emit.train.clipGradNorm = t.clipGradNorm;
  }
  PIPEC_TRY(ir::verifyGraph(g).withContext("the graph is not ready for code generation"));
  Compiled c;
  partitioner::PartitionOptions po = opts.partition;
  po.microBatches = opts.emit.microBatches;
  po.schedule = opts.emit.schedule;
  po.training = emit.training;
  if (emit.training) {
    // The memory model counts the optimizer's state tensors per parameter.
    PIPEC_ASSIGN(train::OptimizerConfig oc, train::parseOptimizer(emit.train.optimizer));
    PIPEC_ASSIGN(train::Optimizer optimizer, train::Optimizer::create(oc));
    po.optimizerStates = static_cast<int>(optimizer.stateTensors());
    po.optimizer = oc.kind;
    // The runtime sums these gradients in their GEMM (beta 1) rather than
    // in a pass per micro-batch (DeviceExecutor::accumulateInto: a kernel
    // that can, whose output nothing else reads).
    for (const auto &[param, grad] : emit.train.paramGrads) {
      const ir::Node *n = grad->producer();
      const bool noC = n && (n->inputs().size() < 3 || !n->inputs()[2] ||
                             attrFloat(n->attrs(), "beta", 1.0f) == 0.0f);
      if (n && n->is("Gemm") && noC && n->outputs().size() == 1 && grad->users().empty() &&
          !grad->isGraphOutput() && grad->type().dtype == DType::F32)
        po.accumulatedInPlace.insert(param);
    }
  }
  PIPEC_ASSIGN(c.partition, partitioner::partitionGraph(g, po));
  if (po.recompute != "none") {
    if (!emit.training)
      return errorf("--recompute ", po.recompute,
                    " needs --train: an inference plan keeps no activations for a backward pass");
    // auto: the memory model chose a policy per stage.
    passes::RecomputeOptions ro;
    for (size_t s = 0; s < c.partition.numStages(); ++s)
      ro.policies.push_back(po.recompute == "auto" && s < c.partition.estimate.stages.size()
                                ? c.partition.estimate.stages[s].recompute
                                : po.recompute);
    ro.stageOf = [&](const ir::Node *n) { return c.partition.stageOf(n); };
    ro.assign = [&](const ir::Node *n, int s) { c.partition.assign(n, s); };
    PIPEC_TRY(passes::rematerialize(g, ro).status());
    PIPEC_TRY(ir::verifyGraph(g).withContext("after recompute"));
  }
  PIPEC_ASSIGN(c.plan, emitPlan(g, c.partition, emit));
  // The cost model's predictions go into the plan, so that piperun can put
  // its measurements next to them.
  const partitioner::PartitionEstimate &est = c.partition.estimate;
  // Devices of a pipeline compute at the same time: the profile's
  // two-core time (StageModel scales the stage times the same way).
  const double concurrent =
      c.plan.plan.devices_size() > 1 ? est.model.profile.concurrentSlowdown : 1.0;
  for (plan::Device &dev : *c.plan.plan.mutable_devices())
    for (plan::Node &pn : *dev.mutable_nodes())
      if (const ir::Node *n = g.findNode(pn.name()))
        pn.set_predicted_seconds(est.model.nodeTime(*n) * concurrent);
  if (est.stages.size() == static_cast<size_t>(c.plan.plan.devices_size())) {
    const double M = emit.microBatches;
    for (size_t s = 0; s < est.stages.size(); ++s) {
      const partitioner::StageEstimate &se = est.stages[s];
      plan::Device *dev = c.plan.plan.mutable_devices(static_cast<int>(s));
      dev->set_predicted_busy_seconds(
          (se.forwardTime + se.backwardTime + se.recomputeTime) * M + se.optimizerTime);
      dev->set_predicted_memory_bytes(se.memory.total());
    }
  }
  PIPEC_ASSIGN(c.report, buildReport(g, c.partition, c.plan));
  // The step the report predicts: its simulation of the emitted programs
  // (the partition's ideal schedule where those cannot be timed).
  c.plan.plan.mutable_pipeline()->set_predicted_step_seconds(
      c.report["predicted_step_seconds"].get<double>());
  return c;
}

} // namespace pipec::codegen
