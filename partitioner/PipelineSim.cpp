//===- partitioner/PipelineSim.cpp - Simulating a pipeline schedule -------===//
#include "partitioner/PipelineSim.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace pipec::partitioner {

using pipeline::SimInstr;
using pipeline::SimOp;
using pipeline::SimProgram;

pipeline::StageCost stageCost(const StageTimes &t) {
  return {t.forward, t.backward + t.recompute, t.weightGrad, t.sendForward, t.sendBackward};
}

Expected<std::vector<SimProgram>> idealSchedule(const pipeline::Schedule &schedule, int M,
                                                bool training, const std::vector<StageTimes> &t) {
  const unsigned per = schedule.stagesPerDevice();
  if (t.empty() || t.size() % per != 0 || M < 1)
    return errorf("the ", schedule.name(), " schedule needs a multiple of ", per,
                  " stages and at least one micro-batch (got ", t.size(), " stages, M=", M, ")");
  const unsigned K = static_cast<unsigned>(t.size()) / per;
  const unsigned S = static_cast<unsigned>(t.size());
  std::vector<pipeline::StageCost> costs;
  for (const StageTimes &st : t)
    costs.push_back(stageCost(st));
  PIPEC_ASSIGN(pipeline::Slots slots,
               schedule.build(K, static_cast<unsigned>(M), training, costs));
  // Tags: 2s activations into stage s, 2s + 1 gradients into stage s.
  std::vector<SimProgram> progs(K);
  for (unsigned d = 0; d < K; ++d) {
    SimProgram &p = progs[d];
    const int self = static_cast<int>(d);
    auto deviceOf = [&](unsigned s) { return static_cast<int>(schedule.deviceOf(s, K)); };
    for (const pipeline::Slot &slot : slots[d]) {
      const size_t first = p.size();
      const unsigned s = slot.stage;
      const int mb = static_cast<int>(slot.microBatch);
      const StageTimes &st = t[s];
      switch (slot.work) {
      case pipeline::Work::Forward:
        if (s > 0 && deviceOf(s - 1) != self)
          p.push_back({SimOp::Recv, mb, 0, deviceOf(s - 1), 2 * int64_t{s}});
        p.push_back({SimOp::Forward, mb, st.forward, -1, 0});
        if (s + 1 < S && deviceOf(s + 1) != self)
          p.push_back({SimOp::Send, mb, st.sendForward, deviceOf(s + 1), 2 * int64_t{s} + 2});
        break;
      case pipeline::Work::Recompute:
        if (st.recompute > 0)
          p.push_back({SimOp::Recompute, mb, st.recompute, -1, 0});
        break;
      case pipeline::Work::Backward:
        if (s + 1 < S && deviceOf(s + 1) != self)
          p.push_back({SimOp::Recv, mb, 0, deviceOf(s + 1), 2 * int64_t{s} + 1});
        p.push_back({SimOp::Backward, mb, st.backward, -1, 0});
        if (s > 0 && deviceOf(s - 1) != self)
          p.push_back({SimOp::Send, mb, st.sendBackward, deviceOf(s - 1), 2 * int64_t{s} - 1});
        break;
      case pipeline::Work::WeightGrad:
        if (st.weightGrad > 0)
          p.push_back({SimOp::WeightGrad, mb, st.weightGrad, -1, 0});
        break;
      case pipeline::Work::Optimizer: {
        double opt = 0;
        for (unsigned s2 = 0; s2 < S; ++s2)
          if (deviceOf(s2) == self)
            opt += t[s2].optimizer;
        if (opt > 0)
          p.push_back({SimOp::Optimizer, 0, opt, -1, 0});
        break;
      }
      }
      for (size_t i = first; i < p.size(); ++i)
        p[i].previousStep = slot.previousStep;
    }
  }
  return progs;
}

} // namespace pipec::partitioner
