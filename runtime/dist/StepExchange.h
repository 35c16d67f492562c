//===- runtime/dist/StepExchange.h - What devices exchange besides tensors -*- C++ -*-===//
//
// The messages of a training or inference step that are not the plan's
// tensor messages (those the executors send themselves), over any
// Transport:
//  - data parallelism: each replica's summed gradients go to the device
//    that updates the parameter (replica 0's of the stage, or with a
//    sharded optimizer its shard's replica's), which adds them in replica
//    order;
//  - a distributed run (one process per device): after a parameter's
//    update, the other devices that read it (tied weights, replicas) take
//    its new value; after the step, the gradient norm's slots and the
//    replicas' losses are summed over the processes and an inference
//    step's outputs are sent to the leader; every process agrees on
//    whether a collective operation failed anywhere;
//  - the leader gathers every device's stats and trace.
// Each message carries a sessionTag (runtime/dist/Transport.h) that every
// process computes alike, so receives match by construction.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/Transport.h"
#include "runtime/train/StepUpdate.h"
#include "support/Tensor.h"

#include <string>
#include <vector>

namespace pipec::runtime {

class StepExchange {
public:
  /// `otherHolders[i]`: the devices besides parameter i's updater that
  /// hold its weight (distributed runs; empty otherwise). `syncWeights`:
  /// whether they must be sent the weight after each update.
  StepExchange(Transport *transport, std::vector<train::ParamState> &params,
               const std::vector<std::vector<int>> &otherHolders, int stages, int replicas, bool syncWeights)
      : tr_(transport), params_(params), otherHolders_(otherHolders), K_(stages), D_(replicas),
        syncWeights_(syncWeights) {}

  /// At device d's OPTIMIZER, before its updates: device d sends its
  /// gradient sums of the parameters another replica updates to that
  /// replica's device, and sums the others' of those it updates in
  /// replica order. Nothing without data parallelism.
  Status reduceReplicaGradients(int d);
  /// After device d's updates: the updater of each parameter sends it to
  /// the other devices that hold it, which take it (every device is past
  /// its last read of the step's weights at its OPTIMIZER instruction).
  Status syncSharedWeights(int d);

private:
  Transport *tr_;
  std::vector<train::ParamState> &params_;
  const std::vector<std::vector<int>> &otherHolders_;
  const int K_, D_;
  const bool syncWeights_;
};

/// What a distributed step's processes exchange once every device of the
/// step has run (StepExchange's messages during the step are done).
struct StepResults {
  /// Per graph output, the stage whose device produces it (-1: none).
  const std::vector<int> *outputProducer = nullptr;
  int stages = 1, replicas = 1;
  /// Micro-batches of the step over all replicas.
  unsigned stepMicroBatches = 1;
  bool training = false;
  /// The norm's slots were already summed by the update's all-reduce.
  bool collective = false;
};

/// Distributed, after a step: a training step's squared-sum slots `sq`
/// (unless already agreed) and per-replica losses are summed over the
/// processes (each slot has one non-zero contribution: exact, the same
/// bits everywhere); an inference step's outputs come to the leader,
/// which marks them in `collected` (outputs x micro-batches).
Status exchangeStepResults(Transport &tr, int rank, const StepResults &how, std::vector<Tensor> &outputs,
                           std::vector<char> &collected, std::vector<double> &sq,
                           std::vector<double> &replicaLoss);

/// Distributed: every process passes its own status; each returns its
/// own error, or one naming the first rank that failed, or ok.
Status agreeAcrossRanks(Transport &tr, int rank, int ranks, const Status &mine, const std::string &what);

} // namespace pipec::runtime
