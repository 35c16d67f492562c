//===- runtime/kernel/Backend.h - Where a device's memory and kernels live -*- C++ -*-===//
//
// A plan device runs on a backend: the CPU (runtime/cpu/CpuBackend.cpp) or
// a GPU (runtime/cuda/CudaBackend.cpp). The executor (runtime/Executor.h)
// asks its backend for the device's kernels and memory and moves every
// byte between the host and the device through it; it has no branch on
// the kind of device. A new backend (another accelerator) is a folder with
// its kernels, their table and one class implementing this interface.
//
// The host side of a step (feeds, collects, messages, the optimizer) works
// on host memory. For a backend whose memory the host can address
// (hostAddressable), hostView and staging return the device address
// itself and commit does nothing, so the CPU runs without copies.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Kernel.h"

#include <cstdint>
#include <memory>
#include <string>

namespace pipec::kernel {

class Backend {
public:
  virtual ~Backend() = default;
  /// "the CPU", "GPU 0": for messages.
  virtual std::string name() const = 0;
  /// Whether the host reads and writes the device's memory directly.
  virtual bool hostAddressable() const = 0;
  /// Why the device's program must be interpreted rather than compiled
  /// for the host (runtime/cpu/ScheduleJit.h), or null.
  virtual const char *interpretedBecause() const { return nullptr; }

  /// The kernel of a node, prepared for this backend.
  virtual Expected<KernelPtr> createKernel(const OpDesc &desc) = 0;
  /// Device memory of `bytes`, owned by the backend (freed with it).
  virtual Expected<void *> alloc(uint64_t bytes) = 0;
  /// A weight or constant the device reads, whose bytes are at `host`
  /// (the loaded weight file): its address on the device. The CPU reads
  /// it in place; a GPU keeps a copy (refreshed by beginStep).
  virtual Expected<void *> residentWeight(const void *host, uint64_t bytes) = 0;

  /// At the start of a step, on the device's thread: make the device
  /// current and, when `weightsChanged` (the host's optimizer updated the
  /// weights since the last step), bring the device's copies up to date.
  virtual Status beginStep(bool weightsChanged) = 0;
  /// Waits for the device's outstanding work; reports its errors.
  virtual Status sync() = 0;
  /// The stream the kernels launch on (ExecContext::stream), or null.
  virtual void *stream() const { return nullptr; }

  /// `bytes` at device address `dev` readable by the host: `dev` itself,
  /// or a host buffer holding a copy (valid until the next call).
  virtual Expected<void *> hostView(void *dev, uint64_t bytes) = 0;
  /// Host memory the host fills for device address `dev` before commit:
  /// `dev` itself, or a host buffer (valid until the next call).
  virtual Expected<void *> staging(void *dev, uint64_t bytes) = 0;
  /// Makes the `bytes` at `host` (from staging) the device's at `dev`.
  virtual Status commit(void *dev, const void *host, uint64_t bytes) = 0;
};

using BackendPtr = std::unique_ptr<Backend>;

} // namespace pipec::kernel
