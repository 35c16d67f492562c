//===- pipeline/Simulate.cpp - Timing per-device programs -----------------===//
#include "pipeline/Simulate.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace pipec::pipeline {

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

} // namespace pipec::pipeline
