//===- runtime/dist/Transport.h - Moving tensors between devices ----*- C++ -*-===//
//
// The interface every transport implements: in-process (device threads of
// one piperun, runtime/dist/InProcessTransport.cpp), MPI (processes and
// machines, runtime/dist/MpiTransport.cpp); the GPUs' messages of an MPI job
// can instead travel over NCCL (runtime/dist/DeviceLink.h). Messages are matched by (source,
// destination, tag); a tag names a tensor instance of one step, so a
// receive can never take the wrong message.
//
//  - send() is asynchronous: it returns once the data has been handed
//    over (copied into a message buffer), without waiting for the receiver,
//    so sends never block and cannot deadlock a schedule.
//  - recv() blocks until the matching message arrives and copies it out.
//  - allReduceSum() is a collective of all devices: every device passes n
//    doubles and gets back the element-wise sum, added in device order so
//    that the result is bitwise the same on every device and every run.
//  - abort() fails every pending and future call with the given error, so
//    an error on one device stops every device instead of hanging them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pipec::runtime {

class Transport {
public:
  virtual ~Transport() = default;
  virtual int numDevices() const = 0;
  virtual Status send(int from, int to, uint64_t tag, const void *data, size_t bytes) = 0;
  virtual Status recv(int to, int from, uint64_t tag, void *data, size_t bytes) = 0;
  virtual Status allReduceSum(int device, double *data, size_t n) = 0;
  virtual void abort(const Status &why) = 0;
  /// Clears an abort and any undelivered messages (between steps, after
  /// every device has stopped).
  virtual void reset() = 0;
};

/// Threads of one process. A receiver whose message has not arrived spins
/// for up to `spinSeconds` before it sleeps: a sleeping thread's core may
/// be halted, and waking it (on this kind of virtual machine, an
/// interrupt to a descheduled virtual CPU) can cost more than the wait.
/// Spin only when every device thread has a core of its own.
std::unique_ptr<Transport> makeInProcessTransport(int numDevices, double spinSeconds = 200e-6);

/// The tag of a tensor instance: tensor id and micro-batch.
inline uint64_t messageTag(int32_t tensor, uint32_t microBatch) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(tensor)) << 32) | microBatch;
}

/// Kinds of the messages between the processes of a distributed run that
/// are not tensor instances (sessionTag; runtime/dist/StepExchange.h).
enum class SessionMessage : uint32_t {
  Output = 0,
  SharedWeight = 1,
  Gather = 2,
  Stats = 3,
  Trace = 4,
  ReplicaGradient = 5,
  LinkSetup = 6,  ///< NCCL channels' unique ids and GPUs (runtime/cuda/NcclLink.h)
  LinkMessage = 7 ///< a message on an emulated NCCL channel (runtime/EmulatedLink.h)
};

/// The tag of a message between the processes of a distributed run that
/// is not a tensor instance (SessionMessage): its kind
/// (below 8) and an index (below 2^26). The top bit keeps it apart from
/// every messageTag.
inline uint64_t sessionTag(uint32_t kind, uint32_t index) {
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(kind) << 32) | index;
}

} // namespace pipec::runtime
