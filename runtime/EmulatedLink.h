//===- runtime/EmulatedLink.h - The NCCL link on emulated GPUs --*- C++ -*-===//
//
// runtime/cuda/NcclLink.cpp's link for the ranks of an MPI job on emulated
// GPUs (runtime/EmulatedGpu.h, whose memory the host addresses), so that
// `mpirun ... piperun PLAN --device cuda-emulated --gpu-transport nccl`
// runs what the NCCL path decides on a machine without GPUs: the same
// channels (plan::rankLinks), made by the same setup (runtime/dist/
// LinkSetup.h: tokens and GPU identities over MPI, in ascending channel
// id; each rank is a GPU of its own), and each message posted on its
// channel in the order the executor and the session post them. A message
// travels over the MPI transport with a header saying what its sender
// posted (tensor and micro-batch, or a replica exchange, its bytes, its
// place on the channel); the receiver refuses one that is not what it
// posted its receive for, where NCCL, which matches the k-th send with
// the k-th receive whatever they hold, would deliver the wrong bytes. At
// the end of a step each plan channel must have carried the messages the
// plan gives it. A message leaves when posted, once the host has waited
// for the emulated GPU's stream (where NCCL's streams wait for it).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/DeviceLink.h"
#include "runtime/dist/Transport.h"
#include "runtime/plan/plan.pb.h"

#include <memory>

namespace pipec::runtime {

/// Rank `rank`'s link; the channels are made before it returns.
Expected<std::unique_ptr<DeviceLink>> makeEmulatedLink(const plan::Plan &p, int rank, Transport &transport);

} // namespace pipec::runtime
