//===- runtime/EmulatedGpu.h - A GPU emulated on the CPU --*- C++ -*-===//
//
// A backend that behaves as the CUDA backend does towards the executor and
// the session, on the CPU: its memory is apart from the host's (weights
// are copies; the host reads and writes it only through hostView,
// staging, commit and the copies), and its work runs asynchronously, as a
// GPU's does: each of its queues (kernel::Queue: the stream and the copy
// stream) is a thread of its own that runs what the host enqueued, in
// order, while the host goes on; events order the queues of every
// emulated GPU of the process against each other; copies to and from host
// memory behave as CUDA's asynchronous copies do (in queue order with
// pinned memory, hostBuffer's; at the call with other memory). So a
// missing wait for an event or for the device shows here as a wrong
// result, not only on a GPU. The kernels are the CPU's (so it lives here,
// where the runtime joins the CPU and CUDA backends, not in
// runtime/cuda/); it trains residently with the device update's host run
// (runtime/cuda/Update.h). Tests run the GPU path's host side with it on
// machines without a GPU (SessionOptions::emulateGpu); results are
// bitwise the CPU backend's.
//
// PIPEC_EMULATED_GPU_DELAY_US=N makes each queue wait a pseudo-random
// 0..N microseconds before each piece of work, which widens the windows in
// which a missing wait shows (tests of the ordering).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Backend.h"

namespace pipec::runtime {

kernel::BackendPtr makeEmulatedGpuBackend();

/// Waits until an emulated GPU's stream (its Backend::stream()) has run
/// what was enqueued on it, and reports its first error since the last
/// wait: the emulated NCCL link (runtime/EmulatedLink.h) orders its host
/// copies after the device's work this way, where NCCL orders its
/// streams by events.
Status drainEmulatedStream(void *stream);

} // namespace pipec::runtime
