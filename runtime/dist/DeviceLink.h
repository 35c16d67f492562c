//===- runtime/dist/DeviceLink.h - Messages between GPUs of a job -*- C++ -*-===//
//
// Stage-to-stage messages between the GPUs of different processes, enqueued
// on the devices' streams rather than passed through the host: NCCL's
// point-to-point operations (runtime/cuda/NcclLink.cpp). A rank's messages
// travel on the channels of plan::rankLinks (runtime/plan/Rendezvous.h),
// each a two-rank communicator with a stream at both ends, in the plan's
// order, which plan::checkRendezvous proves can neither mismatch nor
// deadlock.
//
//  - send(): the SEND of instruction `instruction` of the rank's program:
//    `bytes` at device address `src` (a buffer the step does not write
//    again: the executor's mailbox) leave once everything `stream` has
//    enqueued so far is done; the device's stream does not wait for them.
//  - recv(): the RECV's `bytes` land at `dst` once what `stream` has
//    enqueued so far is done (the arena's bytes are free then); what
//    `stream` enqueues next waits for them.
//  - sendTo(), recvFrom(): the same for what the session exchanges
//    between replicas (data parallelism: gradient sums, updated weights),
//    on the replica channel to or from rank `peer`, in the order
//    plan::rankLinks states; `tag` (sessionTag) says what the message is,
//    for checks and errors (NCCL does not carry it).
//  - finishStep(): waits for the step's messages (a send is done once its
//    receive is) and reports the first failure.
//  - abort(): fails every pending and later operation, so that a rank
//    whose peer failed stops instead of waiting for it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>

namespace pipec::runtime {

class DeviceLink {
public:
  virtual ~DeviceLink() = default;
  virtual Status send(int instruction, const void *src, uint64_t bytes, void *stream) = 0;
  virtual Status recv(int instruction, void *dst, uint64_t bytes, void *stream) = 0;
  virtual Status sendTo(int peer, uint64_t tag, const void *src, uint64_t bytes, void *stream) = 0;
  virtual Status recvFrom(int peer, uint64_t tag, void *dst, uint64_t bytes, void *stream) = 0;
  virtual Status finishStep() = 0;
  virtual void abort(const Status &why) = 0;
};

} // namespace pipec::runtime
