//===- runtime/plan/Rendezvous.h - Plans on order-matched transports -*- C++ -*-===//
//
// The transports of runtime/dist/Transport.h match a message by its tag and
// buffer every send, so the schedule validator (ScheduleCheck.h) proves
// progress with sends that complete at once. NCCL's point-to-point
// operations do neither: on a communicator the k-th ncclSend from a to b
// meets the k-th ncclRecv on b from a, whatever they hold, and a send
// completes only while its receive runs (a rendezvous). A device's
// operations on one stream also complete in the order they were posted.
//
// So messages travel on channels (commChannels): one per sending device,
// receiving device, stage the tensor comes from and stage that reads it
// there (a V schedule sends a device's forward activations and its
// backward gradients to the same peer, in different orders, even from one
// stage when a skip connection crosses the V), each with its own stream at
// both ends (a two-rank communicator). The sender copies the tensor into a
// buffer of its own and posts the send on the channel, and its compute
// goes on; the receiver posts the receive on the channel when its program
// reaches the RECV (its arena bytes are free then) and waits for it there.
// A plan runs that way when:
//  - order: on every channel, the tensor instances of the sender's SENDs,
//    in program order, are those of the receiver's RECVs, in program order;
//  - progress: simulating the devices (compute at once, OPTIMIZER a
//    collective for flush schedules, a send done when its receive is
//    posted and every earlier send of its channel is done, a RECV waiting
//    for its send) runs every program to its end.
// A no-flush plan (2bw) is proven over three steps back to back, as
// ScheduleCheck does.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/plan/plan.pb.h"
#include "support/Error.h"

#include <vector>

namespace pipec::plan {

/// The messages from one device to another that come from one stage and
/// go to one, in program order: the instruction indices of the sender's
/// SENDs and of the receiver's RECVs.
struct CommChannel {
  int from = 0, to = 0;
  int stage = 0;        ///< of the instruction that computes the tensors
  int readerStage = -1; ///< of the receiver's first instruction that reads them (-1: none)
  std::vector<int> sends, recvs;
};

/// The plan's channels, ordered by (from, to, stage, readerStage).
std::vector<CommChannel> commChannels(const Plan &p);

/// A channel as one rank of an MPI job sees it: rank r*K + s runs device s
/// of replica r, and each replica has the plan's channels between its
/// ranks.
struct RankChannel {
  /// r * (the plan's channel count) + the channel's index: the same on
  /// both ranks; every rank creates its channels in ascending id, so that
  /// no two wait for each other in a cycle.
  int id = 0;
  int peer = 0;        ///< the other rank
  bool sender = false; ///< this rank sends on it (else receives)
  int stage = 0;
  size_t messages = 0; ///< per step (a replica channel: 0, the session's count)
  /// Between two replicas' devices of one stage (data parallelism), for
  /// what the session exchanges besides the plan's messages.
  bool replica = false;
};

struct RankLinks {
  std::vector<RankChannel> channels; ///< ascending id
  /// Per instruction of the rank's device's program: its channel (an
  /// index into `channels`), or -1.
  std::vector<int> ofInstruction;
  /// Per rank of the job: the replica channel this rank sends to it on,
  /// and the one it receives from it on (indices into `channels`), or -1.
  std::vector<int> sendTo, recvFrom;
};

/// The index into `links.channels` of rank `rank`'s message instruction
/// `instruction`, or of its replica channel to or from rank `peer`; an
/// error where there is none, or it goes the other way.
Expected<size_t> channelOfInstruction(const RankLinks &links, int rank, int instruction, bool sending);
Expected<size_t> channelOfPeer(const RankLinks &links, int rank, int peer, bool sending);

/// The channels of rank `rank` of a job of D x K ranks (D: the plan's
/// replicas): the plan's, and for a training plan with replicas one each
/// way between the rank and each other replica's device of its stage.
/// Those carry the replicas' gradient sums to each parameter's updater and
/// its updated weight back (runtime/SessionResident.cpp): on the channel
/// from a to b, a sends, and b receives, first the sums of the parameters
/// b updates, then the weights of those a updates, each in parameter
/// order, so the two ends agree; each direction has its own stream, so
/// neither waits for the other.
RankLinks rankLinks(const Plan &p, int rank);

/// Proves `p` (already valid: validatePlan) runs on an order-matched,
/// rendezvous transport with commChannels' channels; else says which
/// channel's order differs, or where the devices would wait forever.
Status checkRendezvous(const Plan &p);

} // namespace pipec::plan
