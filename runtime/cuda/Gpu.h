//===- runtime/cuda/Gpu.h - The GPUs this process sees ---------*- C++ -*-===//
//
// Whether this build has the CUDA backend and which GPUs the CUDA runtime
// reports. Compiled into every build: without the toolkit (or on a machine
// without a GPU or driver) listGpus() says why there is none, so that
// `piperun --device cuda` gives a clear error rather than a crash.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace pipec::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t memoryBytes = 0;
  int major = 0, minor = 0; ///< compute capability
  int multiprocessors = 0;
};

/// Whether pipec was built with the CUDA backend (the toolkit was found).
bool built();

/// The GPUs the CUDA runtime reports, or an error saying why there are
/// none: the build has no CUDA, no driver, no device.
Expected<std::vector<GpuInfo>> listGpus();

/// One plan device placed on a GPU: the GPU's index, its stream, the
/// device memory it allocated (freed with it) and a pinned host buffer for
/// the copies to and from the host. The executor (runtime/Executor.h)
/// calls it from the device's thread; select() makes the GPU that thread's
/// current one.
class GpuDevice {
public:
  /// Opens GPU `gpu` (an index into listGpus()).
  static Expected<std::unique_ptr<GpuDevice>> open(int gpu);
  ~GpuDevice();
  GpuDevice(const GpuDevice &) = delete;
  GpuDevice &operator=(const GpuDevice &) = delete;

  int gpu() const { return gpu_; }
  void *stream() const { return stream_; }
  Status select() const;
  /// Device memory of `bytes` (at least 256-byte aligned), or an error
  /// naming the GPU and the size.
  Expected<void *> alloc(uint64_t bytes);
  /// Copies on the stream; they finish by the next sync().
  Status upload(void *dst, const void *src, uint64_t bytes);
  Status download(void *dst, const void *src, uint64_t bytes);
  /// Waits for everything issued on the stream; reports a kernel's error.
  Status sync();
  /// A pinned host buffer of at least `bytes`, valid until the next call.
  Expected<void *> staging(uint64_t bytes);
  /// Pinned host memory of `bytes`, freed with the device: copies to and
  /// from it are asynchronous.
  Expected<void *> pinned(uint64_t bytes);
  /// The streams of the work below: the stream (kernels and the host's
  /// copies), or the copy stream (receives that overlap the kernels; made
  /// at its first use). sync() waits for the stream alone.
  enum class On { Stream, CopyStream };
  /// The event of `slot` (made at its first use) recorded on a stream.
  Expected<void *> record(uint64_t slot, On on = On::Stream);
  /// A stream waits for an event of this or another GPU.
  Status wait(void *event, On on = On::Stream);
  /// Enqueues dst (this GPU) <- src (GPU `srcGpu`'s memory), peer to peer
  /// where the GPUs differ.
  Status copyFrom(void *dst, const void *src, int srcGpu, uint64_t bytes, On on = On::Stream);

  /// Stream capture (a CUDA graph): from beginCapture until endCapture
  /// what this thread enqueues on the stream is recorded, not run.
  /// endCapture returns the graph instantiated (freed with the device),
  /// or why it could not be made, with the stream out of capture mode
  /// and the error cleared either way.
  Status beginCapture();
  Expected<void *> endCapture();
  /// Enqueues an instantiated graph of endCapture on the stream.
  Status launchGraph(void *graph);

private:
  GpuDevice() = default;
  Expected<void *> streamOf(On on);
  int gpu_ = 0;
  void *stream_ = nullptr, *copyStream_ = nullptr;
  std::vector<void *> allocations_, pinned_;
  std::map<uint64_t, void *> events_;
  std::set<int> peers_; ///< the GPUs copyFrom has copied from (peer access asked for)
  std::vector<void *> graphs_;
  void *staging_ = nullptr;
  uint64_t stagingBytes_ = 0;
};

} // namespace pipec::cuda
