//===- codegen/Schedule.cpp - Pipeline schedules as data ------------------===//
#include "codegen/Schedule.h"

#include "partitioner/PipelineSim.h"

#include <algorithm>

namespace pipec::codegen {

const std::vector<std::string> &scheduleNames() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "zbh1", "zbh2"};
  return names;
}

namespace {
void backward(std::vector<Slot> &out, unsigned mb) {
  out.push_back({Work::Recompute, mb});
  out.push_back({Work::Backward, mb});
  out.push_back({Work::WeightGrad, mb});
}

/// Moves each W(mb) after B(mb + defer), or to the end: the stage's
/// weight gradients wait while the input gradients a previous stage needs
/// go first. W keeps its ascending micro-batch order.
std::vector<Slot> deferWeightGrads(const std::vector<Slot> &in, unsigned defer) {
  std::vector<Slot> out, pending;
  long lastBackward = -1;
  for (const Slot &s : in) {
    if (s.work == Work::WeightGrad)
      pending.push_back(s);
    else
      out.push_back(s);
    if (s.work == Work::Backward)
      lastBackward = static_cast<long>(s.microBatch);
    size_t done = 0;
    while (done < pending.size() &&
           static_cast<long>(pending[done].microBatch + defer) <= lastBackward)
      out.push_back(pending[done++]);
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(done));
  }
  out.insert(out.end(), pending.begin(), pending.end());
  return out;
}
} // namespace

Expected<std::vector<std::vector<Slot>>> buildSchedule(const std::string &name, unsigned K,
                                                       unsigned M, bool training) {
  if (std::find(scheduleNames().begin(), scheduleNames().end(), name) == scheduleNames().end())
    return errorf("unknown pipeline schedule '", name, "' (known: gpipe, 1f1b, zbh1, zbh2)");
  if (K < 1 || M < 1)
    return errorf("a schedule needs at least one stage and one micro-batch (got K=", K, ", M=", M,
                  ")");
  std::vector<std::vector<Slot>> stages(K);
  for (unsigned s = 0; s < K; ++s) {
    std::vector<Slot> &out = stages[s];
    if (!training) {
      for (unsigned mb = 0; mb < M; ++mb)
        out.push_back({Work::Forward, mb});
      continue;
    }
    // GPipe's warm-up is every forward: the loop below then drains.
    const unsigned warmup = partitioner::scheduleWarmupForwards(name, K, s, M);
    for (unsigned mb = 0; mb < warmup; ++mb)
      out.push_back({Work::Forward, mb});
    for (unsigned i = 0; i + warmup < M; ++i) {
      out.push_back({Work::Forward, warmup + i});
      backward(out, i);
    }
    for (unsigned mb = M - warmup; mb < M; ++mb)
      backward(out, mb);
    if (unsigned defer = partitioner::scheduleWeightGradDefer(name, s))
      out = deferWeightGrads(out, defer);
    out.push_back({Work::Optimizer, 0});
  }
  return stages;
}

unsigned microBatchesInFlight(const std::string &name, unsigned K, unsigned stage, unsigned M) {
  return partitioner::scheduleMicroBatchesInFlight(name, K, stage, M);
}

} // namespace pipec::codegen
