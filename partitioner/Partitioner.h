//===- partitioner/Partitioner.h - Cutting a graph into stages -*- C++ -*-===//
//
// The partitioner assigns contiguous ranges of the graph's topological order
// to K pipeline stages. It is an analysis: it returns a Partition and never
// changes the graph. This version places the whole graph on one stage and
// refuses K > 1 with a clear error until the balancing partitioner lands.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <string>
#include <vector>

namespace pipec::partitioner {

struct PartitionOptions {
  int numStages = 1;    ///< K
  int microBatches = 1; ///< M
};

struct Stage {
  size_t begin = 0; ///< first node (index in graph order)
  size_t end = 0;   ///< one past the last node
};

struct Partition {
  std::vector<Stage> stages;
  /// Stage of each node, by index in graph order.
  std::vector<int> stageOf;
};

Expected<Partition> partitionGraph(const ir::Graph &g, const PartitionOptions &opts);

} // namespace pipec::partitioner
