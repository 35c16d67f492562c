//===- driver/AutoPlan.h - Choosing K, M, schedule and recompute -*- C++ -*-===//
//
// pipec --auto: given N devices, a memory budget per device and the global
// batch B (samples per step), chooses the pipeline from the cost model:
// the devices used K <= N, the micro-batch size b (a divisor of B; M =
// B / b micro-batches), the schedule and its virtual stages, and the
// recompute policy per stage (the memory model's "auto": per stage the
// least recompute that fits). Every candidate is partitioned as pipec would
// (partitioner/Partitioner.h) and its step simulated; the fastest predicted
// step wins (fewer devices, then less memory, on a tie). Candidates the
// schedule cannot run (interleaved with M not a multiple of K, more stages
// than layers) or whose devices do not fit the budget are rejected with the
// partitioner's reason. The graph is imported and prepared (passes,
// training) once per micro-batch size; a candidate costs one partition.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "driver/Driver.h"
#include "pipeline/Schedule.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pipec::driver {



struct AutoPlanOptions {
  int devices = 1;          ///< N: at most this many devices
  int64_t globalBatch = 0;  ///< B: samples per step
};

struct AutoCandidate {
  int devices = 1;            ///< K
  int64_t microBatchSize = 1; ///< b
  int microBatches = 1;       ///< M = B / b
  pipeline::Schedule schedule;
  /// Predicted step (seconds), bubble fraction, the largest device's memory.
  double stepSeconds = 0, bubbleFraction = 0, peakMemoryBytes = 0;
  /// Per stage: the recompute policy the memory model chose.
  std::vector<std::string> recompute;
  std::string rejected; ///< why not, for a rejected candidate
  /// "K=2 b=4 M=8 interleaved v=2".
  std::string label() const;
};

struct AutoPlan {
  std::vector<AutoCandidate> feasible; ///< fastest predicted step first
  std::vector<AutoCandidate> rejected;
  double searchSeconds = 0;
};

/// Imports the model with micro-batch size `batch` bound.
using GraphLoader = std::function<Expected<std::unique_ptr<ir::Graph>>(int64_t batch)>;

/// Searches as described above. `base` gives the training options, the
/// profile, the memory budget and the op times; its K, M, schedule and
/// recompute are the search's. Errors: N < 1, B < 1, no feasible
/// candidate (with the reasons).
Expected<AutoPlan> autoPlan(const GraphLoader &load, const CompileOptions &base,
                            const AutoPlanOptions &opts);

/// The best `show` candidates and the rejected ones, counted by reason.
nlohmann::json autoPlanToJson(const AutoPlan &plan, size_t show);
std::string renderAutoPlanText(const AutoPlan &plan, size_t show);

} // namespace pipec::driver
