//===- partitioner/Partitioner.h - Cutting a graph into stages -*- C++ -*-===//
//
// The partitioner assigns contiguous ranges of a topological order of the
// forward nodes to K pipeline stages. It is an analysis: it returns a
// Partition and never changes the graph.
//
// Backward nodes (phases Backward and WeightGrad) and rematerialized nodes
// follow the forward node they belong to (Node::forwardOf), so a stage runs
// the forward and the backward of the same layers and keeps its own
// activations. A backward node without a forward owner goes to the stage of
// the first of its inputs that a node produces, else to the last stage.
//
// The cut minimises the bottleneck: the largest per-micro-batch stage time
// (forward + backward + recompute + sending its cut tensors, from the cost
// model) subject to every stage's memory fitting the budget. Step time on a
// homogeneous pipeline is about (M + K - 1) x bottleneck for GPipe and 1F1B,
// so for a fixed K this minimises the step. Small chains are solved exactly
// (dynamic program over all cut positions); large ones by binary search on
// the bottleneck with a greedy feasibility test (docs/partitioner.md).
//
// Contract with codegen/: Partition::stageOf(n) answers for every node of
// the graph, including nodes a later pass (recompute) adds with assign().
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "partitioner/PipelineSim.h"
#include "partitioner/StageModel.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pipec::partitioner {

struct PartitionOptions {
  int numStages = 1;    ///< K: devices (stages = K x schedule.stagesPerDevice())
  int microBatches = 1; ///< M
  /// Pipeline schedule the stages will run: decides how many stages each
  /// device holds and how many micro-batches each stage keeps in flight.
  pipeline::Schedule schedule;
  /// Whether the graph holds a backward pass (training).
  bool training = false;
  /// Device profile: a name in partitioner/profiles/ or a FILE.json; empty
  /// for kDefaultProfile.
  std::string profile;
  /// Memory per device in bytes; 0 for the profile's capacity.
  double memoryBudget = 0;
  /// > 0: choose the smallest K <= maxDevices whose devices fit the budget
  /// (numStages is then ignored).
  int maxDevices = 0;
  /// Rematerialization policy the memory model assumes: none, full,
  /// selective, auto.
  std::string recompute = "none";
  /// Measured seconds per micro-batch by node name (--op-times).
  std::unordered_map<std::string, double> opTimes;
  /// State tensors per parameter of the optimizer (adam 2, sgd 0 or 1).
  int optimizerStates = 0;
  /// Replicas the optimizer state is sharded over (ZeRO-1; 1: none).
  int optimizerShards = 1;
  /// The optimizer's kind (sgd, adam, adamw, rmsprop): the step's cost.
  std::string optimizer = "adam";
  /// Parameters whose gradient kernel sums the micro-batches in place
  /// (the runtime's DeviceExecutor::accumulateInto): no per-micro-batch
  /// accumulation pass is charged for them.
  std::unordered_set<const ir::Value *> accumulatedInPlace;
  /// "auto" (exact below a size limit), "exact" or "bisect" (for tests).
  std::string search = "auto";
};

/// What the cost and memory models predict for a partition.
struct PartitionEstimate {
  CostModel model;          ///< the profile and measured times used
  double memoryBudget = 0;  ///< bytes per device
  pipeline::Schedule schedule;
  int microBatches = 1;
  bool training = false;
  std::string recompute;
  std::vector<StageEstimate> stages;
  double bottleneck = 0;    ///< max stage time() per micro-batch
  /// Simulated step (idealSchedule of the stages) and its bubble fraction.
  double stepTime = 0, bubbleFraction = 0;
  /// The same graph on one device, same cost model.
  double singleDeviceStepTime = 0;
  std::string search;       ///< "exact" or "bisect"
};

/// A stage: the forward nodes order[begin, end).
struct Stage {
  size_t begin = 0;
  size_t end = 0;
};

struct Partition {
  /// The forward nodes in the topological order the stages cut.
  std::vector<const ir::Node *> order;
  std::vector<Stage> stages;
  PartitionEstimate estimate;

  size_t numStages() const { return stages.size(); }
  /// Devices: numStages() / estimate.schedule.stagesPerDevice().
  size_t numDevices() const { return stages.size() / estimate.schedule.stagesPerDevice(); }
  /// The device that runs stage `stage`.
  int deviceOf(int stage) const {
    return static_cast<int>(estimate.schedule.deviceOf(static_cast<unsigned>(stage),
                                                        static_cast<unsigned>(numDevices())));
  }
  /// Stage of any node of the graph; -1 for a node the partition has not seen.
  int stageOf(const ir::Node *n) const {
    auto it = stageOf_.find(n);
    return it == stageOf_.end() ? -1 : it->second;
  }
  /// Places a node (the partitioner; passes adding nodes after it).
  void assign(const ir::Node *n, int stage) { stageOf_[n] = stage; }

private:
  std::unordered_map<const ir::Node *, int> stageOf_;
};

/// Cuts the forward nodes into numStages x schedule.stagesPerDevice()
/// stages (or onto the fewest devices of at most maxDevices that fit).
/// Errors: M < 1, K < 1, more stages than forward nodes, a schedule that
/// cannot run K and M, a device over the memory budget (with the numbers),
/// an unknown profile or recompute policy.
Expected<Partition> partitionGraph(const ir::Graph &g, const PartitionOptions &opts);

/// The cost model partitionGraph uses for `opts` (profile and op times).
Expected<CostModel> makeCostModel(const PartitionOptions &opts);

/// Estimate of a given cut (stage ranges of `order`): stage times and memory
/// and the simulated step. Used by partitionGraph and by tests.
Expected<PartitionEstimate> estimatePartition(const ChainModel &chain,
                                              const std::vector<Stage> &stages);

/// A stage's per-micro-batch times as the simulator takes them (input and
/// weight gradients apart).
StageTimes timesOf(const StageEstimate &e);

/// Places the graph's non-forward nodes: each on the stage of the forward
/// node it belongs to (forwardOf), else on the stage of its first produced
/// input, else on the last stage. Forward nodes must be placed already.
Status assignNonForwardNodes(const ir::Graph &g, Partition &p);

} // namespace pipec::partitioner
