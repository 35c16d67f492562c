//===- codegen/PlanEmitter.h - IR + partition -> plan directory -*- C++ -*-===//
//
// Lowers a typed, partitioned graph to the plan format: the tensor table,
// weights laid out in one weight file, per-device nodes, instruction streams
// and arena allocations from liveness. Output is deterministic: the same
// graph and options give byte-identical plan directories.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/MemoryPlanner.h"
#include "support/PhaseTimer.h"
#include "ir/IR.h"
#include "partitioner/Partitioner.h"
#include "pipeline/Schedule.h"
#include "runtime/plan/plan.pb.h"

#include <functional>
#include <string>
#include <unordered_set>

namespace pipec::codegen {

/// What a training plan adds: the loss, each parameter's gradient and the
/// optimizer to apply once per step.
struct TrainingSpec {
  const ir::Value *loss = nullptr;
  std::vector<std::pair<const ir::Value *, const ir::Value *>> paramGrads;
  /// (state constant, forward value replacing it after each micro-batch).
  std::vector<std::pair<const ir::Value *, const ir::Value *>> stateUpdates;
  std::string optimizer;  ///< runtime/train spec ("adam:lr=0.001,...")
  /// Parameters whose gradient kernel sums the micro-batches in place
  /// (Parameter.accumulate_in_place; the memory and cost models read the
  /// same set).
  std::unordered_set<const ir::Value *> accumulatedInPlace;
  std::string optimizerKind; ///< "adam", "sgd", ...: the step's cost
  int optimizerStates = 0;   ///< state tensors per parameter (adam 2)
  std::string lrSchedule; ///< learning-rate schedule spec, "" for constant
  double clipGradNorm = 0;
  /// Dynamic loss scaling (plan Training.loss_scaling): the seed constant,
  /// the first scale and the growth window; no seed: none.
  const ir::Value *lossScaleSeed = nullptr;
  double lossScale = 0;
  int64_t lossScaleWindow = 0;
};

/// What the plan does with the weights that live in the model's external
/// data files (docs/plan-format.md). Constants held in memory (the model
/// file's own initializers, folded values) always go to weights.bin.
enum class WeightMode {
  Reference, ///< the plan refers to the files: path, size, each region's CRC-32C
  Copy,      ///< copied into weights.bin, in bounded chunks: a self-contained plan
  Describe,  ///< referenced without reading a byte (no checksums): for reports
};

struct EmitOptions {
  int microBatches = 1;
  WeightMode weights = WeightMode::Reference;
  /// The cost model's time of a node on its device, recorded in the plan
  /// (Node.predicted_seconds); none if empty.
  std::function<double(const ir::Node &)> nodeSeconds;
  /// How each device's arena is planned (codegen/MemoryPlanner.h).
  PlanMethod arenaPlanner = PlanMethod::Auto;
  /// Replicas of the pipeline (data parallelism); 1: one pipeline.
  int dataParallel = 1;
  /// Shard the optimizer over the replicas (ZeRO-1; dataParallel > 1).
  bool shardOptimizer = false;
  /// Pipeline schedule (pipeline/Schedule.h); the partition has
  /// stagesPerDevice() stages per device.
  pipeline::Schedule schedule;
  /// Predicted times of each stage's work, for the schedules whose order
  /// depends on them (zbv); unit times if empty.
  std::vector<pipeline::StageCost> stageCosts;
  bool training = false;
  TrainingSpec train;
  /// Base name and checksum of the source model, recorded in the plan.
  std::string sourceModel;
  uint32_t sourceCrc32c = 0;
  /// Compile options that shape the plan, recorded for the report (never
  /// paths that differ between otherwise identical compiles).
  std::string compileOptions;
};

/// A tensor's bytes at `offset` of weights.bin (64-byte aligned; zeros
/// between pieces).
struct WeightPiece {
  uint64_t offset = 0;
  Tensor data; ///< in memory, or file-backed (read while writing)
};

/// The plan and what goes into its weight file.
struct EmittedPlan {
  plan::Plan plan;
  std::vector<WeightPiece> weightPieces;
  /// Seconds each part of the emission took, in order (pipec --time-passes).
  PhaseTimer::Phases phaseSeconds;
  /// Planned arena peak per device and the live-size lower bound.
  std::vector<uint64_t> arenaPeak, arenaLiveBound;
};

/// Name of the single weight file in a plan directory.
inline constexpr const char *kWeightFile = "weights.bin";

Expected<EmittedPlan> emitPlan(const ir::Graph &g, const partitioner::Partition &part,
                               const EmitOptions &opts);

/// Writes plan.pb and the weight file (streamed from its pieces) into `dir`, replacing an existing plan
/// directory (and nothing else: a non-plan directory is refused).
/// `manifest` false leaves MANIFEST to a caller that adds files first.
Status writePlanDirectory(const std::string &dir, const EmittedPlan &p, bool manifest = true);

} // namespace pipec::codegen
