//===- runtime/cuda/Gpu.cpp - The GPUs this process sees ------------------===//
#include "runtime/cuda/Gpu.h"

#include <algorithm>

#if PIPEC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace pipec::cuda {

bool built() { return PIPEC_HAVE_CUDA != 0; }

Expected<std::vector<GpuInfo>> listGpus() {
#if PIPEC_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return errorf("no CUDA device: ", cudaGetErrorString(e), " (cudaGetDeviceCount)");
  if (n == 0)
    return errorf("no CUDA device: the CUDA runtime reports none");
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess)
      return errorf("CUDA device ", i, ": ", cudaGetErrorString(e), " (cudaGetDeviceProperties)");
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.memoryBytes = p.totalGlobalMem;
    g.major = p.major;
    g.minor = p.minor;
    g.multiprocessors = p.multiProcessorCount;
    gpus.push_back(g);
  }
  return gpus;
#else
  return errorf("this pipec was built without CUDA (the CUDA toolkit was not found when it was configured, "
                "or the build turned the backend off: docs/cuda.md)");
#endif
}

#if PIPEC_HAVE_CUDA
namespace {
Status cudaCheck(cudaError_t e, const char *what, int gpu) {
  if (e == cudaSuccess)
    return Status::ok();
  return errorf("GPU ", gpu, ": ", what, ": ", cudaGetErrorString(e));
}
} // namespace

Expected<std::unique_ptr<GpuDevice>> GpuDevice::open(int gpu) {
  std::unique_ptr<GpuDevice> d(new GpuDevice());
  d->gpu_ = gpu;
  PIPEC_TRY(d->select());
  cudaStream_t s = nullptr;
  PIPEC_TRY(cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", gpu));
  d->stream_ = s;
  return d;
}

GpuDevice::~GpuDevice() {
  cudaSetDevice(gpu_);
  if (stream_)
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (copyStream_)
    cudaStreamSynchronize(static_cast<cudaStream_t>(copyStream_));
  for (void *p : allocations_)
    cudaFree(p);
  if (staging_)
    cudaFreeHost(staging_);
  for (void *p : pinned_)
    cudaFreeHost(p);
  for (void *g : graphs_)
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  for (auto &[slot, e] : events_)
    cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (stream_)
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (copyStream_)
    cudaStreamDestroy(static_cast<cudaStream_t>(copyStream_));
}

Status GpuDevice::select() const { return cudaCheck(cudaSetDevice(gpu_), "cudaSetDevice", gpu_); }

Expected<void *> GpuDevice::alloc(uint64_t bytes) {
  void *p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<uint64_t>(bytes, 256));
  if (e != cudaSuccess) {
    size_t freeBytes = 0, total = 0;
    cudaMemGetInfo(&freeBytes, &total);
    return errorf("GPU ", gpu_, ": cannot allocate ", bytes, " bytes (", cudaGetErrorString(e), "; ", freeBytes,
                  " of ", total, " bytes free)");
  }
  allocations_.push_back(p);
  return p;
}

Status GpuDevice::upload(void *dst, const void *src, uint64_t bytes) {
  return cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)),
                   "copy to the GPU", gpu_);
}

Status GpuDevice::download(void *dst, const void *src, uint64_t bytes) {
  return cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)),
                   "copy from the GPU", gpu_);
}

Status GpuDevice::sync() {
  return cudaCheck(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "running the stream", gpu_);
}

Expected<void *> GpuDevice::staging(uint64_t bytes) {
  if (bytes <= stagingBytes_)
    return staging_;
  if (staging_)
    cudaFreeHost(staging_);
  staging_ = nullptr;
  stagingBytes_ = 0;
  PIPEC_TRY(cudaCheck(cudaMallocHost(&staging_, std::max<uint64_t>(bytes, 4096)), "cudaMallocHost", gpu_));
  stagingBytes_ = std::max<uint64_t>(bytes, 4096);
  return staging_;
}

Expected<void *> GpuDevice::pinned(uint64_t bytes) {
  void *p = nullptr;
  PIPEC_TRY(cudaCheck(cudaMallocHost(&p, std::max<uint64_t>(bytes, 256)), "cudaMallocHost", gpu_));
  pinned_.push_back(p);
  return p;
}

Expected<void *> GpuDevice::streamOf(On on) {
  if (on == On::Stream)
    return stream_;
  if (!copyStream_) {
    cudaStream_t s = nullptr;
    PIPEC_TRY(cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (copies)", gpu_));
    copyStream_ = s;
  }
  return copyStream_;
}

Expected<void *> GpuDevice::record(uint64_t slot, On on) {
  PIPEC_ASSIGN(void *stream, streamOf(on));
  void *&e = events_[slot];
  if (!e) {
    cudaEvent_t made = nullptr;
    PIPEC_TRY(cudaCheck(cudaEventCreateWithFlags(&made, cudaEventDisableTiming), "cudaEventCreate", gpu_));
    e = made;
  }
  PIPEC_TRY(cudaCheck(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(stream)),
                      "cudaEventRecord", gpu_));
  return e;
}

Status GpuDevice::wait(void *event, On on) {
  PIPEC_ASSIGN(void *stream, streamOf(on));
  return cudaCheck(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
                   "cudaStreamWaitEvent", gpu_);
}

Status GpuDevice::copyFrom(void *dst, const void *src, int srcGpu, uint64_t bytes, On on) {
  PIPEC_ASSIGN(void *stream, streamOf(on));
  auto s = static_cast<cudaStream_t>(stream);
  if (srcGpu == gpu_)
    return cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copy on the GPU", gpu_);
  // The first copy from a GPU opens peer access to it where the hardware
  // allows (else cudaMemcpyPeerAsync stages the bytes itself): only the
  // pairs that exchange, so that no process makes contexts on GPUs it
  // does not use (one rank per GPU under mpirun never copies here).
  if (peers_.insert(srcGpu).second) {
    PIPEC_TRY(select());
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, gpu_, srcGpu) == cudaSuccess && can)
      cudaDeviceEnablePeerAccess(srcGpu, 0); // already enabled: fine
    cudaGetLastError();
  }
  return cudaCheck(cudaMemcpyPeerAsync(dst, gpu_, src, srcGpu, bytes, s), "copy between GPUs", gpu_);
}

Status GpuDevice::beginCapture() {
  // Thread-local: another device's thread may allocate (a first step's
  // mailbox) while this one records.
  return cudaCheck(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream_), cudaStreamCaptureModeThreadLocal),
                   "cudaStreamBeginCapture", gpu_);
}

Expected<void *> GpuDevice::endCapture() {
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &graph);
  if (e != cudaSuccess || !graph) {
    // A call the capture could not take invalidates it; its error is not
    // the next call's.
    (void)cudaGetLastError();
    if (graph)
      cudaGraphDestroy(graph);
    return errorf("GPU ", gpu_, ": cudaStreamEndCapture: ", cudaGetErrorString(e));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    (void)cudaGetLastError();
    return errorf("GPU ", gpu_, ": cudaGraphInstantiate: ", cudaGetErrorString(made));
  }
  graphs_.push_back(exec);
  return static_cast<void *>(exec);
}

Status GpuDevice::launchGraph(void *graph) {
  return cudaCheck(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream_)),
                   "cudaGraphLaunch", gpu_);
}
#else
Expected<std::unique_ptr<GpuDevice>> GpuDevice::open(int) {
  return errorf("this pipec was built without CUDA");
}
GpuDevice::~GpuDevice() = default;
Status GpuDevice::select() const { return errorf("built without CUDA"); }
Expected<void *> GpuDevice::alloc(uint64_t) { return errorf("built without CUDA"); }
Status GpuDevice::upload(void *, const void *, uint64_t) { return errorf("built without CUDA"); }
Status GpuDevice::download(void *, const void *, uint64_t) { return errorf("built without CUDA"); }
Status GpuDevice::sync() { return errorf("built without CUDA"); }
Expected<void *> GpuDevice::staging(uint64_t) { return errorf("built without CUDA"); }
Expected<void *> GpuDevice::pinned(uint64_t) { return errorf("built without CUDA"); }
Expected<void *> GpuDevice::record(uint64_t, On) { return errorf("built without CUDA"); }
Status GpuDevice::wait(void *, On) { return errorf("built without CUDA"); }
Status GpuDevice::copyFrom(void *, const void *, int, uint64_t, On) { return errorf("built without CUDA"); }
Status GpuDevice::beginCapture() { return errorf("built without CUDA"); }
Expected<void *> GpuDevice::endCapture() { return errorf("built without CUDA"); }
Status GpuDevice::launchGraph(void *) { return errorf("built without CUDA"); }
#endif

} // namespace pipec::cuda
