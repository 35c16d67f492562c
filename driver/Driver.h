//===- driver/Driver.h - The compile pipeline as one call -----*- C++ -*-===//
//
// Runs what `pipec` runs after import: the pass pipeline, verification,
// partitioning, plan emission and the report. Shared by the pipec tool, the
// conformance runner and the benchmarks, so they all compile the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/PlanEmitter.h"
#include "ir/IR.h"
#include "partitioner/Partitioner.h"
#include "passes/MixedPrecision.h"
#include "passes/PassManager.h"
#include "support/PhaseTimer.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace pipec::driver {

using codegen::EmitOptions;
using codegen::EmittedPlan;

/// Training: how to find or attach the loss, and the optimizer.
struct TrainOptions {
  std::string lossOutput;   ///< --loss-output: a scalar graph output
  std::string lossKind;     ///< --loss cross-entropy|mse (attach one)
  std::string logits;       ///< --logits
  std::string labels = "labels"; ///< --labels: the new target input's name
  std::string optimizer = "adam";
  double lr = 0;            ///< > 0: overrides the optimizer spec's rate
  std::string lrSchedule;   ///< --lr-schedule (runtime/train/LrSchedule.h)
  double clipGradNorm = 0;
  /// --loss-scale: dynamic loss scaling from this scale (a power of two);
  /// 0: none, except with --precision fp16 (then 65536).
  double lossScale = 0;
  /// --loss-scale-window: finite steps in a row that double the scale
  /// (0: 2000).
  int64_t lossScaleWindow = 0;
};

struct CompileOptions {
  /// Pass flags to run; empty means passes::defaultPipeline().
  std::vector<std::string> passes;
  bool noPasses = false;
  passes::PassManagerOptions passManager;
  partitioner::PartitionOptions partition;
  EmitOptions emit;
  /// Set with emit.training: differentiate and train.
  TrainOptions train;
  /// pipec --precision / --keep-fp32: the products' operands in bf16 or
  /// fp16 (passes/MixedPrecision.h).
  passes::MixedPrecisionOptions precision;
};

struct Compiled {
  partitioner::Partition partition;
  EmittedPlan plan;
  nlohmann::json report;
};

/// Runs the passes on `g` (changing it), then partitions and emits.
Expected<Compiled> compileGraph(ir::Graph &g, const CompileOptions &opts);
/// compileGraph's first part: the passes and, for training, the loss, the
/// training state and autodiff (the optimizer checked), then verification.
/// Returns opts.emit with the training spec filled in.
Expected<EmitOptions> prepareGraph(ir::Graph &g, const CompileOptions &opts, PhaseTimer &phases);
/// The partition options compileGraph uses for a graph prepared so: the
/// schedule, M, the optimizer's state count and the gradients the runtime
/// accumulates in place.
Expected<partitioner::PartitionOptions> partitionOptionsFor(const CompileOptions &opts,
                                                            const EmitOptions &emit);
/// Partitions a prepared graph and runs the recompute pass (a training
/// graph with po.recompute other than none), which places its clones.
Expected<partitioner::Partition> partitionAndRecompute(ir::Graph &g, const CompileOptions &opts,
                                                       const EmitOptions &emit,
                                                       const partitioner::PartitionOptions &po);
/// Only the pass pipeline of compileGraph, without the training passes
/// (for --emit=ir). With opts.emit.training it leaves out fuse-elementwise,
/// which compileGraph runs after autodiff: the graph is ready for them.
Status runPasses(ir::Graph &g, const CompileOptions &opts);

} // namespace pipec::driver
