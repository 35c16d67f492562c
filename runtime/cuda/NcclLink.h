//===- runtime/cuda/NcclLink.h - GPU messages of an MPI job over NCCL -*- C++ -*-===//
//
// runtime/dist/DeviceLink.h over NCCL: one two-rank communicator per
// channel of plan::rankLinks (the sender is its rank 0), each with a stream
// of its own on this rank's GPU and two events (the device's stream to the
// channel's, and back). Setting up is runtime/dist/LinkSetup.h's (in
// ascending channel id on every rank, the NCCL unique id and the GPUs'
// UUIDs exchanged over the MPI transport, a channel whose ends are one GPU
// refused: `--gpu-transport host` can run it), each channel joined with
// ncclCommInitRank. Every channel carries
// one byte each way before the first step (the warm-up that makes NCCL
// connect). A watchdog thread polls every communicator's asynchronous
// error and aborts them all (ncclCommAbort) on the first, so that no
// stream waits forever for a peer that is gone; abort() does the same.
// Compiled into every build: without CUDA and NCCL it says why.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/DeviceLink.h"
#include "runtime/dist/Transport.h"
#include "runtime/plan/Rendezvous.h"

#include <memory>

namespace pipec::cuda {

/// The link of rank `rank` on GPU `gpu` (an index into listGpus()).
Expected<std::unique_ptr<runtime::DeviceLink>> makeNcclLink(const plan::RankLinks &links, int rank,
                                                            runtime::Transport &transport, int gpu);

} // namespace pipec::cuda
