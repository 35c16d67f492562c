//===- partitioner/StageModel.h - Time and memory of a stage ---*- C++ -*-===//
//
// The partitioner's view of a graph: the chain of forward nodes in
// topological order, each carrying the forward, backward (Backward and
// WeightGrad nodes that belong to it), recompute and optimizer time of its
// nodes, the constants they use, the values they produce and read. A stage
// is a range [begin, end) of the chain; evaluate() gives its time and
// memory, and Sweep grows a stage one node at a time in O(degree), which is
// what the partition search runs in its inner loop.
//
// Memory of stage s of K (docs/partitioner.md):
//   weights       bytes of the constants its nodes read (2bw: its
//                 parameters twice, the two weight versions)
//   gradients     one accumulator per parameter (training)
//   optimizer     the optimizer's state tensors per parameter (adam 2, ...)
//   activations   forward values its backward reads, times the micro-batches
//                 in flight, counted from the schedule's slots
//                 (pipeline/Schedule.h: GPipe M, 1F1B min(K - s, M)); with recompute
//                 "full" only the stage inputs are kept per micro-batch, plus
//                 one micro-batch's activations while it is recomputed;
//                 "selective" keeps the outputs of FLOP-heavy ops (MatMul,
//                 Gemm, Conv, Einsum) and recomputes the rest; "auto" takes,
//                 per stage, the first of none, selective, full that fits
//   communication one micro-batch's received and sent cut tensors
//   workspace     the largest node's activation inputs plus outputs
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "partitioner/CostModel.h"
#include "pipeline/Schedule.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

namespace pipec::partitioner {

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizerState = 0, activations = 0, communication = 0,
         workspace = 0;
  double total() const {
    return weights + gradients + optimizerState + activations + communication + workspace;
  }
};

struct StageEstimate {
  size_t begin = 0, end = 0;
  /// Seconds per micro-batch.
  double forwardTime = 0, backwardTime = 0, recomputeTime = 0;
  /// Of backwardTime, the weight gradients (W; zbh1, zbh2 and zbv defer them).
  double weightGradTime = 0;
  /// Seconds per micro-batch moving activations onward and gradients back.
  double sendForwardTime = 0, sendBackwardTime = 0;
  double optimizerTime = 0; ///< once per step
  double forwardFlops = 0, backwardFlops = 0;
  double parameters = 0;  ///< elements of the trainable constants
  double bytesOut = 0;    ///< cut tensors sent to later stages per micro-batch
  double bytesIn = 0;     ///< cut tensors received from earlier stages
  int inFlight = 1;       ///< micro-batches whose activations are kept
  std::string recompute = "none"; ///< the policy applied to this stage
  MemoryBreakdown memory;
  /// Per micro-batch: compute and communication (the bottleneck measure).
  double time() const {
    return forwardTime + backwardTime + recomputeTime + sendForwardTime + sendBackwardTime;
  }
};

struct ChainOptions {
  bool training = false;
  int microBatches = 1;
  pipeline::Schedule schedule;
  std::string recompute = "none"; ///< none, full, selective, auto
  int optimizerStates = 0;
  /// Replicas the optimizer is sharded over (ZeRO-1; 1: none): a device
  /// keeps and updates about 1/shards of its stage's optimizer state.
  int optimizerShards = 1;
  /// Seconds per trained parameter element per step: the optimizer step
  /// (DeviceProfile::optimizerStepSecondsPerParameter), and the runtime's
  /// gradient accumulation over the micro-batches, charged to the
  /// parameters not in accumulatedInPlace.
  double optimizerSecondsPerParameter = 0;
  double accumulateSecondsPerParameter = 0;
  const std::unordered_set<const ir::Value *> *accumulatedInPlace = nullptr;
  double memoryBudget = 0; ///< bytes per device
};

class ChainModel {
public:
  /// `order` are the graph's forward nodes in topological order.
  static Expected<ChainModel> build(const ir::Graph &g, std::vector<const ir::Node *> order,
                                    const CostModel &cost, const ChainOptions &opts);

  size_t size() const { return nodes_.size(); }
  const ChainOptions &options() const { return opts_; }
  const CostModel &cost() const { return cost_; }
  /// Stage [begin, end) as stage `stage` of `numStages` (numStages /
  /// schedule.stagesPerDevice() devices).
  StageEstimate evaluate(size_t begin, size_t end, int stage, int numStages) const;

  /// Grows the stage [begin, end) one node at a time.
  class Sweep {
  public:
    Sweep(const ChainModel &m, size_t begin);
    /// Adds node `end()` to the stage.
    void push();
    size_t end() const { return end_; }
    /// The stage as stage `stage` of `numStages`.
    StageEstimate estimate(int stage, int numStages) const;
    /// A lower bound of time() that never decreases as the stage grows.
    double monotoneTime() const { return fwd_ + bwd_; }

  private:
    const ChainModel &m_;
    size_t begin_, end_;
    int tag_;
    double fwd_ = 0, bwd_ = 0, wgt_ = 0, opt_ = 0, cheapFwd_ = 0, fwdFlops_ = 0, bwdFlops_ = 0;
    double weights_ = 0, params_ = 0, collected_ = 0, paramBytes_ = 0;
    double out_ = 0, in_ = 0, stash_ = 0, keptStash_ = 0, stageInputs_ = 0, workspace_ = 0;
    /// Selective: kept values only the recomputed nodes read.
    double chainStash_ = 0;
  };

private:
  friend class Sweep;
  struct Use {
    int value;
    double bytes;
    int producer; ///< chain index of the producing forward node; -1 outside the chain
  };
  struct ChainNode {
    double fwd = 0, bwd = 0, wgt = 0, rec = 0, opt = 0, fwdFlops = 0, bwdFlops = 0, workspace = 0;
    bool expensive = false;
    std::vector<Use> constants;  ///< producer: 1 if a parameter, else 0
    std::vector<Use> produced;   ///< producer: last forward use index, -1 none
    std::vector<Use> inputs;     ///< forward values its forward node reads
    std::vector<Use> stashReads; ///< forward values its backward nodes read
    /// Under selective recompute, when this (cheap) node is recomputed: the
    /// forward values its clone reads (kept ones are stashed).
    std::vector<Use> chainReads;
    std::vector<Use> lastUses;   ///< values whose last forward use is this node
    std::vector<double> paramElems; ///< elements per constants[] entry
    /// Of those, elements whose gradient the runtime accumulates (not in
    /// ChainOptions::accumulatedInPlace).
    std::vector<double> collectedElems;
  };
  ChainOptions opts_;
  CostModel cost_;
  std::vector<ChainNode> nodes_;
  size_t numValues_ = 0;
  // Stamps: which values a sweep has counted (mutable scratch, one sweep at a
  // time per model).
  mutable std::vector<int> seenConst_, seenIn_, seenStash_, seenInput_, seenChain_;
  mutable int nextTag_ = 0;
  /// Micro-batches in flight per stage, by stage count (the schedule's
  /// slots, built once per count).
  const std::vector<unsigned> &inFlight(int numStages) const;
  mutable std::map<int, std::vector<unsigned>> inFlight_;
};

/// One of "none", "full", "selective", "auto".
Status checkRecomputePolicy(const std::string &policy);

nlohmann::json memoryToJson(const MemoryBreakdown &m);

} // namespace pipec::partitioner
