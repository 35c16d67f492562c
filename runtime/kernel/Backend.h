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
// A backend with residentTraining (a GPU) keeps a training run's state in
// its own memory: the weights, the gradients summed over micro-batches
// (accumulate) and the optimizer's state, updated by a ParamUpdater; the
// host enqueues a step's work, copies asynchronously (upload, download)
// and waits once at the step's end (runtime/Session.h, "resident
// training").
//
// A backend that canRecord (a GPU: CUDA graphs) records the launches of a
// compute instruction's kernels once and replays them at later steps
// (DeviceExecutor, "recorded instructions"), so the host makes one call
// where it made one per kernel.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Kernel.h"
#include "support/UpdateScalars.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipec::kernel {

/// A device's queues of work (Backend, "messages between the devices").
enum class Queue { Compute, Copy };

/// One trained parameter of a device, in the device's memory: the weight,
/// the step's gradient summed over micro-batches, and the optimizer's
/// state buffers (train::Optimizer::stateNames order), each `n` floats.
struct ParamBuffers {
  float *param = nullptr;
  float *grad = nullptr;
  float *state[3] = {};
  int64_t n = 0;
};

/// A device's parameter update where the parameters live: the steps of
/// train::StepUpdate, enqueued on the device's stream without waiting
/// (runtime/cuda/UpdateBodies.h has the arithmetic; bitwise the CPU's).
class ParamUpdater {
public:
  virtual ~ParamUpdater() = default;
  /// Multiplies the gradients by `scale` (the mean over micro-batches;
  /// not at 1) and computes each parameter's squared sum on the device.
  virtual Status squares(float scale) = 0;
  /// The step's decision from this device's squared sums alone: skip a
  /// non-finite step when `skipNonFinite`, else clip to `clip` (> 0).
  virtual Status decide(double clip, bool skipNonFinite) = 0;
  /// The decision made on the host instead (the devices' all-reduced
  /// squared sums): skip, or scale the gradients by `coef` when `scale`.
  virtual Status setDecision(bool skip, bool scale, double coef) = 0;
  /// The decided clipping, then (when `update`) the optimizer step.
  virtual Status apply(const train::UpdateScalars &s, bool update) = 0;
  /// Enqueues the copy of the parameters' squared sums to the host; after
  /// Backend::sync(), squaresOnHost() holds them.
  virtual Status fetchSquares() = 0;
  virtual const double *squaresOnHost() const = 0;
};

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
  /// Waits for the device's outstanding work on its Compute queue (work
  /// on the Copy queue that the Compute queue waited for included);
  /// reports its errors.
  virtual Status sync() = 0;
  /// The stream the kernels launch on (ExecContext::stream), or null.
  virtual void *stream() const { return nullptr; }
  /// The device's shared weight roundings (ExecContext::halfWeights), or
  /// null where its kernels keep none.
  virtual HalfWeights *halfWeights() { return nullptr; }

  /// `bytes` at device address `dev` readable by the host: `dev` itself,
  /// or a host buffer holding a copy (valid until the next call).
  virtual Expected<void *> hostView(void *dev, uint64_t bytes) = 0;
  /// Host memory the host fills for device address `dev` before commit:
  /// `dev` itself, or a host buffer (valid until the next call).
  virtual Expected<void *> staging(void *dev, uint64_t bytes) = 0;
  /// Makes the `bytes` at `host` (from staging) the device's at `dev`.
  virtual Status commit(void *dev, const void *host, uint64_t bytes) = 0;

  // ---- Resident training and asynchronous steps.

  /// Whether a training run keeps its state in this backend's memory and
  /// the methods below are implemented.
  virtual bool residentTraining() const { return false; }
  /// Copies ordered on the device's stream: `host` must stay valid (and,
  /// for download, unread) until sync(). Host memory from hostBuffer()
  /// makes them asynchronous.
  virtual Status upload(void *, const void *, uint64_t) { return unsupported("asynchronous copies"); }
  virtual Status download(void *, const void *, uint64_t) { return unsupported("asynchronous copies"); }
  /// Host memory of `bytes` for asynchronous copies (pinned on a GPU),
  /// owned by the backend.
  virtual Expected<void *> hostBuffer(uint64_t) { return unsupported("host buffers"); }
  /// dst = src (first) or dst + src, n floats of device memory, enqueued.
  virtual Status accumulate(float *, const float *, int64_t, bool) { return unsupported("gradient sums"); }
  /// An updater of these parameters (device memory; the table is fixed).
  virtual Expected<std::unique_ptr<ParamUpdater>> paramUpdater(const std::vector<ParamBuffers> &) {
    return unsupported("parameter updates");
  }

  // ---- Messages between the devices of one process, not through the host.
  //
  // A device has two queues of work, run in order each (a GPU's streams):
  // Compute, where its kernels and its other copies run, and Copy, where
  // the plan's receives copy from another device's memory while kernels
  // run (DeviceExecutor: "receives on the copy queue"). An event orders
  // work of one queue, or of another device's, before work of another.

  /// Whether the methods below are implemented.
  virtual bool deviceMessages() const { return false; }
  /// The device's GPU, for copies between devices (-1: none).
  virtual int deviceIndex() const { return -1; }
  /// Records an event on queue `q` now: the handle of `slot` (one per
  /// slot, owned by the backend, recorded again at the slot's next use;
  /// a slot belongs to one queue).
  virtual Expected<void *> recordEvent(uint64_t, Queue) { return unsupported("events"); }
  /// What queue `q` runs next waits for `event` as last recorded before
  /// this call (by this or another device of the process).
  virtual Status waitEvent(void *, Queue) { return unsupported("events"); }
  /// Enqueues on queue `q` a copy of `bytes` to `dst` (this device's
  /// memory) from `src` in the memory of device `srcDevice` (this one or
  /// another).
  virtual Status copyFromDevice(void *, const void *, int, uint64_t, Queue) { return unsupported("device copies"); }

  // ---- Recordings (CUDA graphs): a device's launches made once, replayed.

  /// Whether the methods below are implemented.
  virtual bool canRecord() const { return false; }
  /// From now until endRecording, what the device's thread enqueues on
  /// the stream (its kernels' launches) is recorded instead of run.
  virtual Status beginRecording() { return unsupported("recordings"); }
  /// Ends the recording begun last: its handle (owned by the backend), or
  /// why none could be made (a call that cannot be recorded, such as one
  /// that waits for the device). Either way nothing recorded has run and
  /// the stream runs what it is given again.
  virtual Expected<void *> endRecording() { return unsupported("recordings"); }
  /// Enqueues the work of a recording on the stream. `step`: the run's
  /// (ExecContext::step), which a recording of device work ignores; the
  /// emulated GPU replays CPU kernels, whose host side caches by step.
  virtual Status replay(void *, uint64_t) { return unsupported("recordings"); }

protected:
  Status unsupported(const char *what) const {
    return errorf(name(), ": this backend has no resident training (", what, ")");
  }
};

using BackendPtr = std::unique_ptr<Backend>;

} // namespace pipec::kernel
