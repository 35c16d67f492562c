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

bool isScheduleName(const std::string &s) {
  return s == "gpipe" || s == "1f1b" || s == "zbh1" || s == "zbh2";
}

unsigned scheduleWarmupForwards(const std::string &schedule, unsigned K, unsigned s, unsigned M) {
  if (schedule == "1f1b" || schedule == "zbh1")
    return std::min(K - s - 1, M);
  if (schedule == "zbh2") // ZB-H2: K - s - 1 more, to fill the warm-up bubble
    return std::min(2 * (K - s) - 2, M);
  return M;
}

unsigned scheduleWeightGradDefer(const std::string &schedule, unsigned s) {
  return schedule == "zbh1" || schedule == "zbh2" ? s : 0;
}

unsigned scheduleMicroBatchesInFlight(const std::string &schedule, unsigned K, unsigned s,
                                      unsigned M) {
  if (schedule == "gpipe" || !isScheduleName(schedule))
    return M;
  // The warm-up forwards and the one before each backward, plus the inputs
  // of the weight gradients still deferred.
  return std::min(scheduleWarmupForwards(schedule, K, s, M) + 1 +
                      scheduleWeightGradDefer(schedule, s),
                  M);
}

Expected<std::vector<SimProgram>> idealSchedule(const std::string &schedule, int M, bool training,
                                                const std::vector<StageTimes> &t) {
  const int K = static_cast<int>(t.size());
  if (K < 1 || M < 1)
    return errorf("a schedule needs at least one stage and one micro-batch (got K=", K, ", M=", M,
                  ")");
  // Stage times do not separate weight gradients from input gradients, so
  // zbh1 and zbh2 are simulated without deferring them here; the report
  // simulates the emitted programs, where W has its own time.
  if (!isScheduleName(schedule) && schedule != "single")
    return errorf("unknown schedule '", schedule, "' (gpipe, 1f1b, zbh1, zbh2)");
  // Tags: 0 activations (forward), 1 gradients (backward).
  std::vector<SimProgram> progs(static_cast<size_t>(K));
  for (int s = 0; s < K; ++s) {
    SimProgram &p = progs[static_cast<size_t>(s)];
    const StageTimes &st = t[static_cast<size_t>(s)];
    auto fwd = [&](int mb) {
      if (s > 0)
        p.push_back({SimOp::Recv, mb, 0, s - 1, 0});
      p.push_back({SimOp::Forward, mb, st.forward, -1, 0});
      if (s + 1 < K)
        p.push_back({SimOp::Send, mb, st.sendForward, s + 1, 0});
    };
    auto bwd = [&](int mb) {
      if (s + 1 < K)
        p.push_back({SimOp::Recv, mb, 0, s + 1, 1});
      if (st.recompute > 0)
        p.push_back({SimOp::Recompute, mb, st.recompute, -1, 0});
      p.push_back({SimOp::Backward, mb, st.backward, -1, 0});
      if (s > 0)
        p.push_back({SimOp::Send, mb, st.sendBackward, s - 1, 1});
    };
    if (!training) {
      for (int mb = 0; mb < M; ++mb)
        fwd(mb);
      continue;
    }
    const int warm = static_cast<int>(scheduleWarmupForwards(
        schedule, static_cast<unsigned>(K), static_cast<unsigned>(s), static_cast<unsigned>(M)));
    for (int mb = 0; mb < warm; ++mb)
      fwd(mb);
    for (int i = 0; i + warm < M; ++i) {
      fwd(warm + i);
      bwd(i);
    }
    for (int mb = M - warm; mb < M; ++mb)
      bwd(mb);
    if (st.optimizer > 0)
      p.push_back({SimOp::Optimizer, 0, st.optimizer, -1, 0});
  }
  return progs;
}

} // namespace pipec::partitioner
