//===- runtime/dist/Mpi.h - Ranks of an MPI job as plan devices ------*- C++ -*-===//
//
// `mpirun -np K piperun PLAN` runs device r of a K-device plan on rank r.
// This header is the whole of MPI that the rest of pipec sees: whether this
// process was started by an MPI launcher, the job's rank and size, and a
// Transport (runtime/dist/Transport.h) whose devices are the ranks. Without a
// launcher in the environment nothing here touches MPI, and piperun runs
// every device as a thread of one process.
//
// The transport (runtime/dist/MpiTransport.cpp):
//  - send() copies the tensor into a buffer it owns and starts an
//    MPI_Isend, so the device computes while the message travels; buffers
//    of completed sends are reused.
//  - recv() posts an MPI_Irecv into the destination and polls it, spinning
//    for `spinSeconds`, then yielding the core between polls, then
//    sleeping in growing pauses (up to 200 us), so ranks that share cores
//    leave them to the one computing. While it polls it also watches for
//    an abort notice from any rank.
//  - allReduceSum() gathers every rank's values on rank 0, adds them in
//    rank order (as the in-process transport adds in device order: the
//    same bits) and sends the sum back.
//  - abort() sends a notice with the error to every other rank; a rank
//    that receives one fails its current and every later call with
//    "stopped because rank R failed: ...".
// A 64-bit message tag maps to an MPI tag: tensor instances (tensor id
// below 2^19, micro-batch below 2^11) and session messages (kind below 8,
// index below 2^26) have disjoint ranges below 2^30, the transport's own
// above; a tag outside them is an error, not a collision.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/Transport.h"

#include <memory>
#include <optional>

namespace pipec::runtime {

struct MpiJob {
  int rank = 0;
  int size = 1;
  /// The rank among those of its host (MPI_COMM_TYPE_SHARED).
  int localRank = 0;
};

/// Whether the environment says this process was started by an MPI
/// launcher (Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, or PMI's
/// PMI_SIZE).
bool launchedByMpi();

/// Initializes MPI (one thread calls it: MPI_THREAD_FUNNELED) when
/// launchedByMpi(), and returns the job; nullopt without a launcher.
Expected<std::optional<MpiJob>> initMpi();

/// Ends MPI after a run that succeeded on this rank (MPI_Finalize).
void finalizeMpi();

/// Ends the whole job after an error on this rank: waits up to
/// `graceSeconds` for this rank's abort notices to leave (so the other
/// ranks can say why they stop), then MPI_Abort with `code`. A rank that
/// stopped because another failed waits (up to 5 s) for that rank to end
/// the job instead.
[[noreturn]] void abortMpi(Transport *transport, int code, double graceSeconds);

/// The transport between the ranks of the job (initMpi first).
std::unique_ptr<Transport> makeMpiTransport(const MpiJob &job, double spinSeconds);

} // namespace pipec::runtime
