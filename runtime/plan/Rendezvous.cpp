//===- runtime/plan/Rendezvous.cpp - Plans on order-matched transports ----===//
#include "runtime/plan/Rendezvous.h"

#include "pipeline/Schedule.h"
#include "runtime/plan/ScheduleCheck.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace pipec::plan {

namespace {

std::string describe(const Plan &p, int d, int i) {
  const Instruction &ins = p.devices(d).program(i);
  return cat(ins.kind() == Instruction::SEND ? "SEND" : "RECV", "(mb ", ins.micro_batch(), ", '",
             p.tensors(ins.tensor()).name(), "' ", ins.kind() == Instruction::SEND ? "to" : "from",
             " device ", ins.peer(), ")");
}

Status checkUnrolled(const Plan &p, bool optimizerIsCollective) {
  const int K = p.devices_size();
  const std::vector<CommChannel> channels = commChannels(p);
  // Order: on each channel the k-th SEND meets the k-th RECV.
  for (const CommChannel &c : channels) {
    if (c.sends.size() != c.recvs.size())
      return errorf("schedule: device ", c.from, " sends ", c.sends.size(), " message(s) of stage ", c.stage,
                    " to device ", c.to, ", which receives ", c.recvs.size());
    for (size_t k = 0; k < c.sends.size(); ++k) {
      const Instruction &x = p.devices(c.from).program(c.sends[k]), &y = p.devices(c.to).program(c.recvs[k]);
      if (x.tensor() != y.tensor() || x.micro_batch() != y.micro_batch())
        return errorf("schedule: on a transport that matches messages in order (NCCL), message ", k,
                      " of stage ", c.stage, " from device ", c.from, " to device ", c.to, " is ",
                      describe(p, c.from, c.sends[k]), " (instruction ", c.sends[k], ") but device ", c.to,
                      " takes ", describe(p, c.to, c.recvs[k]), " (instruction ", c.recvs[k], ")");
    }
  }
  // Each message instruction's channel and place on it.
  std::vector<std::vector<std::pair<int, int>>> where(static_cast<size_t>(K));
  for (int d = 0; d < K; ++d)
    where[static_cast<size_t>(d)].assign(static_cast<size_t>(p.devices(d).program_size()), {-1, -1});
  for (size_t c = 0; c < channels.size(); ++c) {
    for (size_t k = 0; k < channels[c].sends.size(); ++k)
      where[static_cast<size_t>(channels[c].from)][static_cast<size_t>(channels[c].sends[k])] = {
          static_cast<int>(c), static_cast<int>(k)};
    for (size_t k = 0; k < channels[c].recvs.size(); ++k)
      where[static_cast<size_t>(channels[c].to)][static_cast<size_t>(channels[c].recvs[k])] = {
          static_cast<int>(c), static_cast<int>(k)};
  }
  // Progress: per channel, sends posted, receives posted, messages done
  // (the first `done` of each, in order).
  std::vector<size_t> sent(channels.size(), 0), posted(channels.size(), 0), done(channels.size(), 0);
  std::vector<int> pc(static_cast<size_t>(K), 0);
  for (;;) {
    bool moved = false, finished = true;
    for (int d = 0; d < K; ++d) {
      const Device &dev = p.devices(d);
      int &at = pc[static_cast<size_t>(d)];
      while (at < dev.program_size()) {
        const Instruction &ins = dev.program(at);
        if (ins.kind() == Instruction::SEND) {
          ++sent[static_cast<size_t>(where[static_cast<size_t>(d)][static_cast<size_t>(at)].first)];
        } else if (ins.kind() == Instruction::RECV) {
          const auto [c, k] = where[static_cast<size_t>(d)][static_cast<size_t>(at)];
          posted[static_cast<size_t>(c)] = std::max(posted[static_cast<size_t>(c)], static_cast<size_t>(k) + 1);
          // A rendezvous completes once both ends are posted, in order.
          while (done[static_cast<size_t>(c)] < std::min(sent[static_cast<size_t>(c)], posted[static_cast<size_t>(c)]))
            ++done[static_cast<size_t>(c)];
          if (done[static_cast<size_t>(c)] <= static_cast<size_t>(k))
            break;
        } else if (ins.kind() == Instruction::OPTIMIZER && optimizerIsCollective) {
          bool all = true;
          for (int e = 0; e < K; ++e)
            all = all && pc[static_cast<size_t>(e)] < p.devices(e).program_size() &&
                  p.devices(e).program(pc[static_cast<size_t>(e)]).kind() == Instruction::OPTIMIZER;
          if (!all)
            break;
          for (int e = 0; e < K; ++e)
            ++pc[static_cast<size_t>(e)];
          moved = true;
          continue;
        }
        ++at;
        moved = true;
      }
      finished = finished && at >= dev.program_size();
    }
    if (finished)
      return Status::ok();
    if (!moved) {
      std::string stuck;
      for (int d = 0; d < K; ++d)
        if (const int at = pc[static_cast<size_t>(d)]; at < p.devices(d).program_size())
          stuck += cat(stuck.empty() ? "" : "; ", "device ", d, " waits at instruction ", at, " ",
                       p.devices(d).program(at).kind() == Instruction::RECV
                           ? describe(p, d, at)
                           : Instruction::Kind_Name(p.devices(d).program(at).kind()));
      return errorf("schedule: with sends that wait for their receives (NCCL), the devices deadlock: ", stuck);
    }
  }
}

} // namespace

std::vector<CommChannel> commChannels(const Plan &p) {
  // The stage of the instruction that computes each tensor (on whichever
  // device computes it: a relayed tensor keeps its origin's), and per
  // device the stage of the first instruction that reads it there.
  const size_t T = static_cast<size_t>(p.tensors_size());
  std::vector<int> stageOf(T, 0);
  std::vector<char> known(T, 0);
  std::vector<std::vector<int>> readBy(static_cast<size_t>(p.devices_size()), std::vector<int>(T, -1));
  for (int d = 0; d < p.devices_size(); ++d) {
    const Device &dev = p.devices(d);
    for (const Instruction &ins : dev.program()) {
      if (ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV)
        continue;
      for (int32_t n : ins.nodes()) {
        if (n < 0 || n >= dev.nodes_size())
          continue;
        for (int32_t t : dev.nodes(n).inputs())
          if (t >= 0 && static_cast<size_t>(t) < T && readBy[static_cast<size_t>(d)][static_cast<size_t>(t)] < 0)
            readBy[static_cast<size_t>(d)][static_cast<size_t>(t)] = static_cast<int>(ins.stage());
        for (int32_t t : dev.nodes(n).outputs())
          if (t >= 0 && static_cast<size_t>(t) < T && !known[static_cast<size_t>(t)]) {
            known[static_cast<size_t>(t)] = 1;
            stageOf[static_cast<size_t>(t)] = static_cast<int>(ins.stage());
          }
      }
    }
  }
  std::map<std::tuple<int, int, int, int>, CommChannel> byKey;
  auto channel = [&](int from, int to, int32_t tensor) -> CommChannel & {
    const bool valid = tensor >= 0 && static_cast<size_t>(tensor) < T;
    const int stage = valid ? stageOf[static_cast<size_t>(tensor)] : 0;
    const int reader =
        valid && to >= 0 && to < p.devices_size() ? readBy[static_cast<size_t>(to)][static_cast<size_t>(tensor)] : -1;
    CommChannel &c = byKey[{from, to, stage, reader}];
    c.from = from;
    c.to = to;
    c.stage = stage;
    c.readerStage = reader;
    return c;
  };
  for (int d = 0; d < p.devices_size(); ++d)
    for (int i = 0; i < p.devices(d).program_size(); ++i) {
      const Instruction &ins = p.devices(d).program(i);
      if (ins.kind() == Instruction::SEND)
        channel(d, ins.peer(), ins.tensor()).sends.push_back(i);
      else if (ins.kind() == Instruction::RECV)
        channel(ins.peer(), d, ins.tensor()).recvs.push_back(i);
    }
  std::vector<CommChannel> r;
  for (auto &[key, c] : byKey)
    r.push_back(std::move(c));
  return r;
}

RankLinks rankLinks(const Plan &p, int rank) {
  const int K = p.devices_size();
  const std::vector<CommChannel> channels = commChannels(p);
  RankLinks r;
  const int device = rank % K, base = rank - device;
  r.ofInstruction.assign(static_cast<size_t>(p.devices(device).program_size()), -1);
  for (size_t c = 0; c < channels.size(); ++c) {
    const CommChannel &ch = channels[c];
    if (ch.from != device && ch.to != device)
      continue;
    RankChannel rc;
    rc.id = base / K * static_cast<int>(channels.size()) + static_cast<int>(c);
    rc.sender = ch.from == device;
    rc.peer = base + (rc.sender ? ch.to : ch.from);
    rc.stage = ch.stage;
    rc.messages = rc.sender ? ch.sends.size() : ch.recvs.size();
    for (int i : rc.sender ? ch.sends : ch.recvs)
      r.ofInstruction[static_cast<size_t>(i)] = static_cast<int>(r.channels.size());
    r.channels.push_back(rc);
  }
  // The replica channels, after every replica's plan channels: the one
  // from replica a's device of stage s to replica b's has id
  // D * C + (s * D + a) * D + b, the same on both ranks.
  const int D = static_cast<int>(std::max<uint32_t>(p.pipeline().data_parallel(), 1));
  const int ranks = K * D, mine = rank / K;
  r.sendTo.assign(static_cast<size_t>(ranks), -1);
  r.recvFrom.assign(static_cast<size_t>(ranks), -1);
  if (!p.pipeline().training() || D < 2)
    return r;
  for (int a = 0; a < D; ++a)
    for (int b = 0; b < D; ++b) {
      if (a == b || (a != mine && b != mine))
        continue;
      RankChannel rc;
      rc.id = D * static_cast<int>(channels.size()) + (device * D + a) * D + b;
      rc.sender = a == mine;
      rc.peer = (rc.sender ? b : a) * K + device;
      rc.stage = device;
      rc.replica = true;
      (rc.sender ? r.sendTo : r.recvFrom)[static_cast<size_t>(rc.peer)] = static_cast<int>(r.channels.size());
      r.channels.push_back(rc);
    }
  return r;
}

Expected<size_t> channelOfInstruction(const RankLinks &links, int rank, int instruction, bool sending) {
  if (instruction < 0 || static_cast<size_t>(instruction) >= links.ofInstruction.size() ||
      links.ofInstruction[static_cast<size_t>(instruction)] < 0)
    return errorf("rank ", rank, ": instruction ", instruction, " is no message on an NCCL channel");
  const size_t k = static_cast<size_t>(links.ofInstruction[static_cast<size_t>(instruction)]);
  if (links.channels[k].sender != sending)
    return errorf("rank ", rank, ": instruction ", instruction, sending ? " sends" : " receives",
                  " on a channel this rank ", links.channels[k].sender ? "sends" : "receives", " on");
  return k;
}

Expected<size_t> channelOfPeer(const RankLinks &links, int rank, int peer, bool sending) {
  const std::vector<int> &of = sending ? links.sendTo : links.recvFrom;
  if (peer < 0 || static_cast<size_t>(peer) >= of.size() || of[static_cast<size_t>(peer)] < 0)
    return errorf("rank ", rank, ": no NCCL replica channel ", sending ? "to" : "from", " rank ", peer,
                  " (only between the replicas' devices of one stage)");
  return static_cast<size_t>(of[static_cast<size_t>(peer)]);
}

Status checkRendezvous(const Plan &p) {
  bool noFlush = false;
  if (!p.pipeline().schedule().empty()) {
    PIPEC_ASSIGN(pipeline::Schedule s, pipeline::Schedule::ofPlan(p.pipeline().schedule(),
                                                                  std::max(p.pipeline().stages_per_device(), 1u)));
    noFlush = s.noFlush();
  }
  return noFlush ? checkUnrolled(unrolledSteps(p, 3), false) : checkUnrolled(p, true);
}

} // namespace pipec::plan
