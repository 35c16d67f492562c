//===- partitioner/PipelineSim.cpp - Simulating a pipeline schedule -------===//
#include "partitioner/PipelineSim.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace pipec::partitioner {

const char *simOpName(SimOp op) {
  switch (op) {
  case SimOp::Forward: return "F";
  case SimOp::Backward: return "B";
  case SimOp::WeightGrad: return "W";
  case SimOp::Recompute: return "R";
  case SimOp::Send: return "send";
  case SimOp::Recv: return "recv";
  case SimOp::Optimizer: return "opt";
  }
  return "?";
}

Expected<SimResult> simulate(const std::vector<SimProgram> &programs) {
  const size_t K = programs.size();
  SimResult r;
  r.events.resize(K);
  r.busy.assign(K, 0.0);
  std::vector<size_t> pc(K, 0);
  std::vector<double> clock(K, 0.0);
  // Finished sends not yet received, per (sender, receiver, tag, micro-batch):
  // arrival times in order.
  using Key = std::tuple<int, int, int64_t, int>;
  std::map<Key, std::vector<double>> arrived;
  std::map<Key, size_t> taken;
  size_t remaining = 0;
  for (const SimProgram &p : programs)
    remaining += p.size();
  while (remaining > 0) {
    bool progress = false;
    for (size_t d = 0; d < K; ++d) {
      while (pc[d] < programs[d].size()) {
        const SimInstr &in = programs[d][pc[d]];
        double start = clock[d];
        if (in.op == SimOp::Recv) {
          if (in.peer < 0 || static_cast<size_t>(in.peer) >= K)
            return errorf("device ", d, " instruction ", pc[d], ": recv from device ", in.peer,
                          " of ", K);
          Key key{in.peer, static_cast<int>(d), in.tag, in.microBatch};
          auto it = arrived.find(key);
          size_t &n = taken[key];
          if (it == arrived.end() || it->second.size() <= n)
            break; // wait for the send
          start = std::max(start, it->second[n++]);
        }
        double end = start + in.duration;
        if (in.op == SimOp::Send) {
          if (in.peer < 0 || static_cast<size_t>(in.peer) >= K || in.peer == static_cast<int>(d))
            return errorf("device ", d, " instruction ", pc[d], ": send to device ", in.peer,
                          " of ", K);
          arrived[Key{static_cast<int>(d), in.peer, in.tag, in.microBatch}].push_back(end);
        } else if (in.op != SimOp::Recv) {
          r.busy[d] += in.duration;
        }
        r.events[d].push_back({pc[d], start, end});
        clock[d] = end;
        ++pc[d];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::string blocked;
      for (size_t d = 0; d < K; ++d)
        if (pc[d] < programs[d].size())
          blocked += cat(blocked.empty() ? "" : ", ", "device ", d, " at instruction ", pc[d],
                         " (recv tag ", programs[d][pc[d]].tag, " of micro-batch ",
                         programs[d][pc[d]].microBatch, " from device ",
                         programs[d][pc[d]].peer, ")");
      return errorf("the schedule deadlocks: ", blocked, " wait(s) for a send that never comes");
    }
  }
  for (size_t d = 0; d < K; ++d)
    r.makespan = std::max(r.makespan, clock[d]);
  double busy = 0;
  for (double b : r.busy)
    busy += b;
  r.bubbleFraction = r.makespan > 0 ? 1.0 - busy / (static_cast<double>(K) * r.makespan) : 0.0;
  return r;
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
    costs.push_back({st.forward, st.backward + st.recompute, st.weightGrad, st.sendForward,
                     st.sendBackward});
  PIPEC_ASSIGN(pipeline::Slots slots,
               schedule.build(K, static_cast<unsigned>(M), training, costs));
  // Tags: 2s activations into stage s, 2s + 1 gradients into stage s.
  std::vector<SimProgram> progs(K);
  for (unsigned d = 0; d < K; ++d) {
    SimProgram &p = progs[d];
    const int self = static_cast<int>(d);
    auto deviceOf = [&](unsigned s) { return static_cast<int>(schedule.deviceOf(s, K)); };
    for (const pipeline::Slot &slot : slots[d]) {
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
    }
  }
  return progs;
}

} // namespace pipec::partitioner
