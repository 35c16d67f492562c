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

namespace {

/// 1 - sum(busy) / (devices * makespan).
void setBubble(SimResult &r) {
  double busy = 0;
  for (double b : r.busy)
    busy += b;
  r.bubbleFraction = r.makespan > 0 ? 1.0 - busy / (static_cast<double>(r.busy.size()) * r.makespan) : 0.0;
}

Expected<SimResult> simulateOnce(const std::vector<SimProgram> &programs);

/// `steps` steps of no-flush programs back to back: micro-batch mb of step
/// s is numbered s * M + mb. Also gives, per device, where each step's
/// instructions start in the result's programs.
std::vector<SimProgram> unrolled(const std::vector<SimProgram> &programs, int steps, int M,
                                 std::vector<std::vector<size_t>> &callStart) {
  std::vector<SimProgram> out(programs.size());
  callStart.assign(programs.size(), {});
  for (size_t d = 0; d < programs.size(); ++d)
    for (int call = 0; call <= steps; ++call) {
      callStart[d].push_back(out[d].size());
      for (const SimInstr &in : programs[d]) {
        const int step = call - (in.previousStep ? 1 : 0);
        if (step < 0 || step >= steps)
          continue;
        SimInstr u = in;
        u.previousStep = false;
        u.microBatch = step * M + in.microBatch;
        out[d].push_back(u);
      }
    }
  return out;
}

/// The steady-state step of no-flush programs (see simulate()).
Expected<SimResult> simulateSteady(const std::vector<SimProgram> &programs) {
  int M = 1;
  for (const SimProgram &p : programs)
    for (const SimInstr &in : p)
      M = std::max(M, in.microBatch + 1);
  // Four steps and three: the difference of their makespans is one step in
  // the steady state; the events are those of the third call, which holds
  // every instruction.
  constexpr int kSteps = 4, kShown = 2;
  std::vector<std::vector<size_t>> start4, start3;
  PIPEC_ASSIGN(SimResult four, simulateOnce(unrolled(programs, kSteps, M, start4)));
  PIPEC_ASSIGN(SimResult three, simulateOnce(unrolled(programs, kSteps - 1, M, start3)));
  SimResult r;
  const size_t K = programs.size();
  r.events.resize(K);
  r.busy.assign(K, 0.0);
  r.makespan = four.makespan - three.makespan;
  double origin = four.makespan;
  for (size_t d = 0; d < K; ++d)
    if (!programs[d].empty())
      origin = std::min(origin, four.events[d][start4[d][kShown]].start);
  for (size_t d = 0; d < K; ++d)
    for (size_t i = 0; i < programs[d].size(); ++i) {
      SimEvent e = four.events[d][start4[d][kShown] + i];
      e.instr = i;
      e.start -= origin;
      e.end -= origin;
      r.events[d].push_back(e);
      const SimOp op = programs[d][i].op;
      if (op != SimOp::Send && op != SimOp::Recv)
        r.busy[d] += programs[d][i].duration;
    }
  setBubble(r);
  return r;
}

} // namespace

Expected<SimResult> simulate(const std::vector<SimProgram> &programs) {
  for (const SimProgram &p : programs)
    for (const SimInstr &in : p)
      if (in.previousStep)
        return simulateSteady(programs);
  return simulateOnce(programs);
}

namespace {

Expected<SimResult> simulateOnce(const std::vector<SimProgram> &programs) {
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
  setBubble(r);
  return r;
}

} // namespace

} // namespace pipec::pipeline
