//===- runtime/dist/LinkSetup.h - Making a rank's message channels -*- C++ -*-===//
//
// How a rank makes the channels of plan::rankLinks (runtime/plan/
// Rendezvous.h) for a DeviceLink, whatever makes a channel's communicator
// (NCCL's ncclCommInitRank in runtime/cuda/NcclLink.cpp; tests pass their
// own): in ascending channel id, the sender makes the channel's token (an
// NCCL unique id) and sends it with its GPU's identity over the MPI
// transport; the receiver answers with its own identity; a channel whose
// two ends are one GPU is refused on both (NCCL cannot connect them); then
// both join the channel, the sender as its rank 0, the receiver as 1, and
// joining waits for the other end. Every rank makes its channels in one
// global order, so a rank waits to join only for a peer whose channels of
// lower id are made: no two ranks wait for each other in a cycle.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/Transport.h"
#include "runtime/plan/Rendezvous.h"
#include "support/Format.h"

#include <array>
#include <cstring>
#include <functional>

namespace pipec::runtime {

/// A channel's token: NCCL's unique id (NCCL_UNIQUE_ID_BYTES).
using LinkToken = std::array<unsigned char, 128>;
/// A GPU's identity (its UUID).
using GpuIdentity = std::array<unsigned char, 16>;

struct LinkEnds {
  /// A fresh token for a channel this rank sends on.
  std::function<Expected<LinkToken>()> makeToken;
  /// Joins channel `index` (into RankLinks::channels) with `token` as
  /// `commRank` (0: sender, 1: receiver); waits for the other end.
  std::function<Status(size_t index, const LinkToken &token, int commRank)> join;
};

/// Makes rank `rank`'s channels (see above); `gpu` names its GPU in errors.
inline Status setUpChannels(const plan::RankLinks &links, int rank, Transport &transport, const GpuIdentity &mine,
                            int gpu, const LinkEnds &ends) {
  struct Hello {
    LinkToken token;
    GpuIdentity identity;
    int32_t rank, gpu;
  };
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::LinkSetup);
  for (size_t k = 0; k < links.channels.size(); ++k) {
    const plan::RankChannel &c = links.channels[k];
    Hello out{}, in{};
    out.identity = mine;
    out.rank = rank;
    out.gpu = gpu;
    const uint64_t there = sessionTag(kind, static_cast<uint32_t>(c.id) * 2);
    const uint64_t back = sessionTag(kind, static_cast<uint32_t>(c.id) * 2 + 1);
    if (c.sender) {
      PIPEC_ASSIGN(out.token, ends.makeToken());
      PIPEC_TRY(transport.send(rank, c.peer, there, &out, sizeof out));
      PIPEC_TRY(transport.recv(rank, c.peer, back, &in, sizeof in));
    } else {
      PIPEC_TRY(transport.recv(rank, c.peer, there, &in, sizeof in));
      PIPEC_TRY(transport.send(rank, c.peer, back, &out, sizeof out));
    }
    if (in.rank != c.peer)
      return errorf("rank ", rank, ": channel ", c.id, " answered by rank ", in.rank, ", not rank ", c.peer);
    if (in.identity == mine)
      return errorf("rank ", rank, " and rank ", c.peer, " run on one GPU (GPU ", gpu, " here, ", in.gpu,
                    " there): NCCL cannot connect two ranks on one GPU; give each rank a GPU of its own, or "
                    "pass --gpu-transport host");
    PIPEC_TRY(ends.join(k, c.sender ? out.token : in.token, c.sender ? 0 : 1));
  }
  return Status::ok();
}

} // namespace pipec::runtime
