//===- pipeline/Schedule.cpp - Pipeline schedules, one concept ------------===//
#include "pipeline/Schedule.h"

#include <algorithm>
#include <cstddef>
#include <limits>

namespace pipec::pipeline {

namespace {

struct Named {
  ScheduleKind kind;
  const char *name;
};
constexpr Named kSchedules[] = {
    {ScheduleKind::GPipe, "gpipe"},       {ScheduleKind::OneFOneB, "1f1b"},
    {ScheduleKind::Interleaved, "interleaved"}, {ScheduleKind::ZBH1, "zbh1"},
    {ScheduleKind::ZBH2, "zbh2"},         {ScheduleKind::ZBV, "zbv"},
    {ScheduleKind::TwoBW, "2bw"},
};

void backward(std::vector<Slot> &out, unsigned mb, unsigned stage) {
  out.push_back({Work::Recompute, mb, stage});
  out.push_back({Work::Backward, mb, stage});
  out.push_back({Work::WeightGrad, mb, stage});
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

/// gpipe, 1f1b, zbh1, zbh2: one stage per device, `warmup` forwards, then
/// one forward and one backward, then the drain; W(mb) after B(mb + defer).
std::vector<Slot> oneStagePerDevice(unsigned s, unsigned M, unsigned warmup, unsigned defer) {
  std::vector<Slot> out;
  for (unsigned mb = 0; mb < warmup; ++mb)
    out.push_back({Work::Forward, mb, s});
  for (unsigned i = 0; i + warmup < M; ++i) {
    out.push_back({Work::Forward, warmup + i, s});
    backward(out, i, s);
  }
  for (unsigned mb = M - warmup; mb < M; ++mb)
    backward(out, mb, s);
  return defer ? deferWeightGrads(out, defer) : out;
}

/// 2bw on device d of K: the 1F1B steady state F(j), B(j - w) across step
/// boundaries, w = K - d - 1 < M; B(j - w) for j < w is B(M - w + j) of
/// the step before. The optimizer follows the step's last B and W.
std::vector<Slot> withoutFlush(unsigned d, unsigned K, unsigned M) {
  const unsigned w = K - d - 1;
  std::vector<Slot> out;
  for (unsigned j = 0; j < M; ++j) {
    out.push_back({Work::Forward, j, d});
    const bool previous = j < w;
    const unsigned mb = previous ? M - w + j : j - w;
    for (Work work : {Work::Recompute, Work::Backward, Work::WeightGrad})
      out.push_back({work, mb, d, previous});
    if (mb == M - 1)
      out.push_back({Work::Optimizer, 0, 0, previous});
  }
  return out;
}

/// Interleaved 1F1B on device d of K with v stages each (Megatron-LM's
/// order): the i-th forward of the device runs micro-batch
/// (i / Kv) K + i mod K on its stage ((i / K) mod v), the i-th backward the
/// same micro-batch on its stage (v - 1 - (i / K) mod v).
std::vector<Slot> interleaved(unsigned d, unsigned K, unsigned v, unsigned M, bool training) {
  const unsigned total = v * M;
  auto mbOf = [&](unsigned i) { return i / (K * v) * K + i % K; };
  auto fwd = [&](unsigned i) {
    return Slot{Work::Forward, mbOf(i), ((i / K) % v) * K + d};
  };
  std::vector<Slot> out;
  if (!training) {
    for (unsigned i = 0; i < total; ++i)
      out.push_back(fwd(i));
    return out;
  }
  auto bwd = [&](unsigned i) { backward(out, mbOf(i), (v - 1 - (i / K) % v) * K + d); };
  const unsigned warmup = std::min(2 * (K - d - 1) + (v - 1) * K, total);
  for (unsigned i = 0; i < warmup; ++i)
    out.push_back(fwd(i));
  for (unsigned i = 0; i + warmup < total; ++i) {
    out.push_back(fwd(warmup + i));
    bwd(i);
  }
  for (unsigned i = total - warmup; i < total; ++i)
    bwd(i);
  return out;
}

/// ZB-V: list scheduling on the stages' times (unit times when none are
/// given). Device d holds stages d and 2K-1-d. Whenever a device is free,
/// it runs the first ready operation of: the B of the lowest micro-batch
/// (the later stage on a tie: the critical path back to the first stage),
/// an F (the later stage first, so a micro-batch reaches the loss early),
/// the oldest pending W (which fills what would be bubbles). A device holds
/// at most 2K stage activations (F done, W not yet): K micro-batches of a
/// one-stage device's, 1F1B's peak; a new micro-batch (an F of the device's
/// first stage) leaves one of them free for an F of its second stage. Per
/// stage, F, B and W each run in ascending micro-batch order. ScheduleTest
/// runs it to the end for every K and M it checks; a schedule that cannot
/// go on is an error.
Expected<Slots> zeroBubbleV(unsigned K, unsigned M, bool training,
                            const std::vector<StageCost> &cost) {
  const unsigned S = 2 * K;
  const auto deviceOf = [&](unsigned s) { return s < K ? s : S - 1 - s; };
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // Finish times of F and B per (stage, micro-batch); next micro-batch per
  // stage and kind.
  std::vector<double> fDone(size_t{S} * M, kNever), bDone(size_t{S} * M, kNever);
  std::vector<unsigned> nextF(S, 0), nextB(S, 0), nextW(S, 0);
  auto at = [&](unsigned s, unsigned mb) { return size_t{s} * M + mb; };
  auto costOf = [&](unsigned s) { return s < cost.size() ? cost[s] : StageCost{}; };
  std::vector<double> freeAt(K, 0.0);
  Slots out(K);
  const size_t total = size_t{S} * M * (training ? 3 : 1);
  // Each candidate's ready time (kNever: waits on work not scheduled yet).
  struct Candidate {
    Work work;
    unsigned stage;
    double ready;
  };
  // The candidates of device d, in priority order.
  auto candidates = [&](unsigned d) {
    const unsigned mine[2] = {S - 1 - d, d}; // later stage first
    const unsigned held = nextF[d] - nextW[d] + nextF[S - 1 - d] - nextW[S - 1 - d];
    std::vector<Candidate> cands;
    if (training)
      for (unsigned s : mine) {
        const unsigned mb = nextB[s];
        if (mb >= M)
          continue;
        double ready = fDone[at(s, mb)];
        if (s + 1 < S)
          ready = std::max(ready, bDone[at(s + 1, mb)] +
                                      (deviceOf(s + 1) != d ? costOf(s + 1).sendBackward : 0));
        cands.push_back({Work::Backward, s, ready});
      }
    // Of two B, the lower micro-batch first (the later stage on a tie).
    if (cands.size() == 2 && nextB[cands[1].stage] < nextB[cands[0].stage])
      std::swap(cands[0], cands[1]);
    for (unsigned s : mine) {
      const unsigned mb = nextF[s];
      if (mb >= M || (training && held + (s == d ? 1 : 0) >= 2 * K))
        continue;
      double ready = 0;
      if (s > 0)
        ready = fDone[at(s - 1, mb)] + (deviceOf(s - 1) != d ? costOf(s - 1).sendForward : 0);
      cands.push_back({Work::Forward, s, ready});
    }
    if (training) {
      const unsigned first = nextW[mine[0]] <= nextW[mine[1]] ? 0 : 1;
      for (unsigned i : {first, 1 - first}) {
        const unsigned s = mine[i], mb = nextW[s];
        if (mb < nextB[s])
          cands.push_back({Work::WeightGrad, s, bDone[at(s, mb)]});
      }
    }
    return cands;
  };
  for (size_t scheduled = 0; scheduled < total;) {
    // The devices free first, in index order: the first with a ready
    // candidate runs it; if none has one, they idle until a candidate gets
    // ready or another device finishes its work.
    const double t = *std::min_element(freeAt.begin(), freeAt.end());
    unsigned d = K;
    Candidate pick{};
    double wake = kNever;
    for (unsigned e = 0; e < K && d == K; ++e) {
      if (freeAt[e] != t)
        continue;
      for (const Candidate &c : candidates(e)) {
        if (c.ready <= t) {
          d = e, pick = c;
          break;
        }
        wake = std::min(wake, c.ready);
      }
    }
    if (d == K) {
      for (unsigned e = 0; e < K; ++e)
        if (freeAt[e] > t)
          wake = std::min(wake, freeAt[e]);
      if (wake == kNever)
        return errorf("internal error: the zbv schedule of K=", K, ", M=", M, " cannot go on");
      for (double &f : freeAt)
        f = std::max(f, wake);
      continue;
    }
    const unsigned s = pick.stage;
    const StageCost c = costOf(s);
    if (pick.work == Work::Backward) {
      const unsigned mb = nextB[s]++;
      bDone[at(s, mb)] = t + c.backward;
      freeAt[d] = t + c.backward;
      out[d].push_back({Work::Recompute, mb, s});
      out[d].push_back({Work::Backward, mb, s});
    } else if (pick.work == Work::Forward) {
      const unsigned mb = nextF[s]++;
      fDone[at(s, mb)] = t + c.forward;
      freeAt[d] = t + c.forward;
      out[d].push_back({Work::Forward, mb, s});
    } else {
      const unsigned mb = nextW[s]++;
      freeAt[d] = t + c.weightGrad;
      out[d].push_back({Work::WeightGrad, mb, s});
    }
    ++scheduled;
  }
  return out;
}

} // namespace

const std::vector<std::string> &Schedule::names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Named &s : kSchedules)
      n.push_back(s.name);
    return n;
  }();
  return names;
}

std::string Schedule::namesText() {
  std::string known;
  const auto &n = names();
  for (size_t i = 0; i < n.size(); ++i)
    known += (i == 0 ? "" : i + 1 == n.size() ? " or " : ", ") + n[i];
  return known;
}

const std::string &Schedule::name() const {
  for (size_t i = 0; i < std::size(kSchedules); ++i)
    if (kSchedules[i].kind == kind_)
      return names()[i];
  return names()[1];
}

Expected<Schedule> Schedule::parse(const std::string &name, unsigned virtualStages) {
  Schedule s;
  const Named *found = nullptr;
  for (const Named &n : kSchedules)
    if (name == n.name)
      found = &n;
  if (!found)
    return errorf("unknown pipeline schedule '", name, "' (known: ", namesText(), ")");
  s.kind_ = found->kind;
  if (s.kind_ == ScheduleKind::Interleaved) {
    s.perDevice_ = virtualStages == 0 ? 2 : virtualStages;
    if (s.perDevice_ < 2 || s.perDevice_ > 64)
      return errorf("--virtual-stages must be 2 to 64 for the interleaved schedule (got ",
                    virtualStages, ")");
  } else {
    if (virtualStages > 1)
      return errorf("--virtual-stages ", virtualStages,
                    " needs --schedule interleaved (the ", name, " schedule runs ",
                    s.kind_ == ScheduleKind::ZBV ? "two stages per device, in a V" : "one stage per device",
                    ")");
    s.perDevice_ = s.kind_ == ScheduleKind::ZBV ? 2 : 1;
  }
  return s;
}

unsigned Schedule::deviceOf(unsigned stage, unsigned devices) const {
  if (kind_ == ScheduleKind::ZBV)
    return stage < devices ? stage : 2 * devices - 1 - stage;
  return stage % devices;
}

Status Schedule::check(unsigned K, unsigned M, bool training) const {
  if (K < 1 || M < 1)
    return errorf("a schedule needs at least one device and one micro-batch (got K=", K, ", M=",
                  M, ")");
  if (perDevice_ > 1 && K < 2)
    return errorf("the ", name(), " schedule needs at least 2 devices (got K=", K,
                  "): it places ", perDevice_, " stages on each device");
  if (kind_ == ScheduleKind::Interleaved && M % K != 0)
    return errorf("the interleaved schedule needs the micro-batch count to be a multiple of K (got M=",
                  M, ", K=", K, "): its micro-batches go through the devices in groups of K");
  if (kind_ == ScheduleKind::TwoBW && !training)
    return errorf("the 2bw schedule is for training (it keeps two weight versions across steps); "
                  "an inference plan takes another schedule");
  if (kind_ == ScheduleKind::TwoBW && M < K)
    return errorf("the 2bw schedule needs at least as many micro-batches as devices (got M=", M,
                  ", K=", K, "): the first device's warm-up forwards of a step must end before the "
                  "step's last micro-batch starts");
  return Status::ok();
}

Expected<Slots> Schedule::build(unsigned K, unsigned M, bool training,
                                const std::vector<StageCost> &costs) const {
  PIPEC_TRY(check(K, M, training));
  if (kind_ == ScheduleKind::TwoBW) {
    Slots slots(K);
    for (unsigned d = 0; d < K; ++d)
      slots[d] = withoutFlush(d, K, M);
    return slots;
  }
  if (kind_ == ScheduleKind::ZBV) {
    PIPEC_ASSIGN(Slots slots, zeroBubbleV(K, M, training, costs));
    if (training)
      for (std::vector<Slot> &d : slots)
        d.push_back({Work::Optimizer, 0, 0});
    return slots;
  }
  Slots slots(K);
  for (unsigned d = 0; d < K; ++d) {
    std::vector<Slot> &out = slots[d];
    if (kind_ == ScheduleKind::Interleaved) {
      out = interleaved(d, K, perDevice_, M, training);
    } else if (!training) {
      for (unsigned mb = 0; mb < M; ++mb)
        out.push_back({Work::Forward, mb, d});
    } else {
      unsigned warmup = M, defer = 0;
      switch (kind_) {
      case ScheduleKind::OneFOneB: warmup = std::min(K - d - 1, M); break;
      case ScheduleKind::ZBH1: warmup = std::min(K - d - 1, M), defer = d; break;
      case ScheduleKind::ZBH2: warmup = std::min(2 * (K - d) - 2, M), defer = d; break;
      default: break; // gpipe: every forward, then the drain
      }
      out = oneStagePerDevice(d, M, warmup, defer);
    }
    if (training)
      out.push_back({Work::Optimizer, 0, 0});
  }
  return slots;
}

std::vector<unsigned> microBatchesInFlight(const Slots &slots, unsigned stages, bool training) {
  std::vector<unsigned> peak(stages, training ? 0 : 1);
  if (!training)
    return peak;
  // A previous-step W frees what the step before left in flight.
  std::vector<unsigned> live(stages, 0);
  for (const std::vector<Slot> &device : slots)
    for (const Slot &s : device)
      if (s.previousStep && s.work == Work::WeightGrad && s.stage < stages)
        peak[s.stage] = ++live[s.stage];
  for (const std::vector<Slot> &device : slots)
    for (const Slot &s : device) {
      if (s.stage >= stages)
        continue;
      if (s.work == Work::Forward)
        peak[s.stage] = std::max(peak[s.stage], ++live[s.stage]);
      else if (s.work == Work::WeightGrad && live[s.stage] > 0)
        --live[s.stage];
    }
  return peak;
}

Expected<std::vector<unsigned>> Schedule::microBatchesInFlight(unsigned K, unsigned M,
                                                               bool training) const {
  PIPEC_ASSIGN(Slots slots, build(K, M, training));
  return pipeline::microBatchesInFlight(slots, numStages(K), training);
}

const char *workName(Work w) {
  switch (w) {
  case Work::Forward: return "F";
  case Work::Recompute: return "R";
  case Work::Backward: return "B";
  case Work::WeightGrad: return "W";
  case Work::Optimizer: return "opt";
  }
  return "?";
}

} // namespace pipec::pipeline
