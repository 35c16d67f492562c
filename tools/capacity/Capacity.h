//===- tools/capacity/Capacity.h - Largest model that fits K devices -*- C++ -*-===//
//
// "How many repeated blocks of this architecture family can K devices of a
// given memory train under this recompute policy and schedule?" -- the
// question of GPipe's Table 1, answered with the partitioner's own memory
// model (ChainModel::evaluate), not a separate formula.
//
// A model of billions of parameters cannot be built here (its weights would
// be allocated), so the family is built at three small block counts at the
// real width and batch. Stages made of whole blocks are evaluated in each:
// the first stage (with the fixed front, e.g. the embedding), a middle stage,
// the last stage (with the fixed back: head and loss), and the whole model
// (K = 1). The memory model is a sum over the stage's nodes (weights,
// gradients, optimizer state, stashed activations times the in-flight count)
// plus terms that do not grow with the stage (cut tensors, the largest
// node's workspace), so every part is affine in the number of blocks for a
// given stage index and K: the first two sizes fit it, the third checks it
// (an error if the fit is off by more than a part in 10^6).
//
// The largest L is then the largest number of blocks whose even split over
// K stages (every stage floor(L/K) or ceil(L/K) blocks; the ceilings go to
// the stages with the most room) keeps every stage within the budget.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "partitioner/StageModel.h"

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pipec::partitioner {

/// A family of models: fixed parts around `blocks` identical blocks.
struct LayerFamily {
  std::string name; ///< for messages ("gpt dmodel 1024")
  /// The training graph (differentiated, typed, passes run) with `blocks`
  /// blocks and a fixed batch of `batch` samples (one micro-batch).
  std::function<Expected<std::unique_ptr<ir::Graph>>(int64_t blocks, int64_t batch)> build;
  /// The block a forward node belongs to; -1 for the fixed parts.
  std::function<int(const ir::Node &)> blockOf;
};

struct CapacityQuery {
  std::string label;         ///< "Naive-1", "Pipeline-8", ...
  int numStages = 1;         ///< K
  int microBatches = 1;      ///< M
  int64_t microBatchSize = 1; ///< samples per micro-batch (the graph's batch)
  /// One stage per device (gpipe, 1f1b, zbh1, zbh2).
  pipeline::Schedule schedule;
  std::string recompute = "none";
  int optimizerStates = 2;   ///< adam
  std::string profile = "accel-8gb";
  double memoryBudget = 0;   ///< bytes per device; 0 for the profile's capacity
};

/// Blocks per stage in the small instances: fit on the first two, check on
/// the third. An instance has probe[i] + 2 blocks, so that a middle stage
/// has a block before and after it.
using CapacityProbe = std::array<int, 3>;
inline constexpr CapacityProbe kDefaultProbe = {1, 2, 3};

struct CapacityResult {
  CapacityQuery query;
  double memoryBudget = 0;
  int64_t blocks = 0;            ///< largest L that fits; 0 if not even K blocks
  double parameters = 0;         ///< of the L-block model (0 when blocks is 0)
  double fixedParameters = 0, parametersPerBlock = 0;
  std::vector<int64_t> blocksPerStage;
  std::vector<MemoryBreakdown> stageMemory; ///< at `blocks` (at K blocks if none fit)
  std::vector<std::string> stageRecompute;
  int bindingStage = 0;          ///< the stage with the least room left
  /// Largest relative error of the affine fit at the third size (all stage
  /// kinds, all memory parts, the parameter count).
  double fitError = 0;
  const MemoryBreakdown &binding() const { return stageMemory[static_cast<size_t>(bindingStage)]; }
};

/// The largest number of blocks of `family` that `query` fits. Errors: the
/// family's builder, blocks that are not contiguous in the forward chain, a
/// memory model that is not affine in the blocks, a per-block memory that
/// does not grow (the capacity would be unbounded).
Expected<CapacityResult> maxTrainableBlocks(const LayerFamily &family, const CapacityQuery &query,
                                            CapacityProbe probe = kDefaultProbe);
/// The same for several queries; builds each instance once per micro-batch
/// size.
Expected<std::vector<CapacityResult>> maxTrainableBlocks(const LayerFamily &family,
                                                         const std::vector<CapacityQuery> &queries,
                                                         CapacityProbe probe = kDefaultProbe);

nlohmann::json capacityToJson(const CapacityResult &r);

} // namespace pipec::partitioner
