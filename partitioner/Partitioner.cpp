//===- partitioner/Partitioner.cpp - Cutting a graph into stages ----------===//
#include "partitioner/Partitioner.h"

namespace pipec::partitioner {

Expected<Partition> partitionGraph(const ir::Graph &g, const PartitionOptions &opts) {
  if (opts.microBatches < 1)
    return errorf("the number of micro-batches must be at least 1 (got ", opts.microBatches, ")");
  if (opts.numStages < 1)
    return errorf("the number of stages must be at least 1 (got ", opts.numStages, ")");
  if (g.numNodes() == 0)
    return errorf("the graph has no nodes to place on a stage");
  if (static_cast<size_t>(opts.numStages) > g.numNodes())
    return errorf("cannot cut ", g.numNodes(), " nodes into ", opts.numStages, " stages");
  if (opts.numStages > 1)
    return errorf("pipelined compilation (-k ", opts.numStages,
                  ") is not available in this build: the balancing partitioner is not "
                  "implemented yet; use -k 1");
  Partition p;
  p.stages.push_back({0, g.numNodes()});
  p.stageOf.assign(g.numNodes(), 0);
  return p;
}

} // namespace pipec::partitioner
