//===- runtime/cuda/NcclLink.cpp - GPU messages of an MPI job over NCCL ---===//
#include "runtime/cuda/NcclLink.h"
#include "runtime/dist/LinkSetup.h"

#include "support/Format.h"

#if PIPEC_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#endif

namespace pipec::cuda {

#if PIPEC_HAVE_CUDA
namespace {

class NcclLink final : public runtime::DeviceLink {
public:
  NcclLink(int rank, int gpu) : rank_(rank), gpu_(gpu) {}
  ~NcclLink() override;

  Status setUp(const plan::RankLinks &links, runtime::Transport &transport);
  Status send(int instruction, const void *src, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t c, ofInstruction(instruction, true));
    return enqueue(c, const_cast<void *>(src), bytes, stream, true);
  }
  Status recv(int instruction, void *dst, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t c, ofInstruction(instruction, false));
    return enqueue(c, dst, bytes, stream, false);
  }
  Status sendTo(int peer, uint64_t, const void *src, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t c, ofPeer(peer, true));
    return enqueue(c, const_cast<void *>(src), bytes, stream, true);
  }
  Status recvFrom(int peer, uint64_t, void *dst, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t c, ofPeer(peer, false));
    return enqueue(c, dst, bytes, stream, false);
  }
  Status finishStep() override;
  void abort(const Status &why) override;

private:
  struct Channel {
    plan::RankChannel info;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t in = nullptr, out = nullptr;
  };

  /// The channel of a message instruction, or of the replica channel to
  /// or from `peer`.
  Expected<size_t> ofInstruction(int instruction, bool sending) const;
  Expected<size_t> ofPeer(int peer, bool sending) const;
  Status enqueue(size_t channel, void *data, uint64_t bytes, void *stream, bool sending);
  Status cuda(cudaError_t e, const char *what) const {
    return e == cudaSuccess ? Status::ok() : errorf("rank ", rank_, " GPU ", gpu_, ": ", what, ": ", cudaGetErrorString(e));
  }
  Status nccl(ncclResult_t r, const Channel &c, const char *what) const {
    if (r == ncclSuccess || r == ncclInProgress)
      return Status::ok();
    const char *last = c.comm ? ncclGetLastError(c.comm) : ncclGetLastError(nullptr);
    return errorf("rank ", rank_, ": NCCL ", what, " on the channel ", c.info.sender ? "to" : "from", " rank ",
                  c.info.peer, " (stage ", c.info.stage, "): ", ncclGetErrorString(r),
                  last && *last ? cat(" (", last, ")") : std::string());
  }
  /// Aborts every communicator once (mu_ held).
  void abortLocked(const Status &why);
  void watch();

  const int rank_, gpu_;
  std::vector<Channel> channels_;
  plan::RankLinks links_; ///< which channel each message takes
  void *scratch_ = nullptr; ///< the warm-up's byte
  std::mutex mu_;           ///< the communicators, failed_, aborted_
  Status failed_;
  bool aborted_ = false;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

NcclLink::~NcclLink() {
  stop_ = true;
  if (watchdog_.joinable())
    watchdog_.join();
  cudaSetDevice(gpu_);
  // A channel with work still queued (a step that failed here or at a
  // peer) may wait forever for a peer that is gone, and the watchdog is
  // stopped: abort the communicators, which ends their kernels, rather
  // than wait for them (and ncclCommDestroy, which needs the peer).
  bool busy = false;
  for (Channel &c : channels_)
    busy = busy || (c.stream && cudaStreamQuery(c.stream) == cudaErrorNotReady);
  if (busy && !aborted_) {
    for (Channel &c : channels_)
      if (c.comm)
        ncclCommAbort(c.comm);
    aborted_ = true;
  }
  cudaGetLastError();
  for (Channel &c : channels_) {
    if (c.stream)
      cudaStreamSynchronize(c.stream);
    if (c.comm && !aborted_)
      ncclCommDestroy(c.comm);
    if (c.in)
      cudaEventDestroy(c.in);
    if (c.out)
      cudaEventDestroy(c.out);
    if (c.stream)
      cudaStreamDestroy(c.stream);
  }
  if (scratch_)
    cudaFree(scratch_);
}

Status NcclLink::setUp(const plan::RankLinks &links, runtime::Transport &transport) {
  PIPEC_TRY(cuda(cudaSetDevice(gpu_), "cudaSetDevice"));
  cudaDeviceProp prop{};
  PIPEC_TRY(cuda(cudaGetDeviceProperties(&prop, gpu_), "cudaGetDeviceProperties"));
  PIPEC_TRY(cuda(cudaMalloc(&scratch_, 256), "cudaMalloc"));
  links_ = links;
  channels_.resize(links.channels.size());
  runtime::GpuIdentity mine{};
  std::memcpy(mine.data(), &prop.uuid, mine.size());
  static_assert(sizeof(ncclUniqueId) == sizeof(runtime::LinkToken), "NCCL's unique id is 128 bytes");
  runtime::LinkEnds ends;
  ends.makeToken = [&]() -> Expected<runtime::LinkToken> {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      return errorf("rank ", rank_, ": ncclGetUniqueId: ", ncclGetErrorString(r));
    runtime::LinkToken t;
    std::memcpy(t.data(), &id, t.size());
    return t;
  };
  ends.join = [&](size_t k, const runtime::LinkToken &token, int commRank) -> Status {
    Channel &c = channels_[k];
    c.info = links.channels[k];
    PIPEC_TRY(cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    PIPEC_TRY(cuda(cudaEventCreateWithFlags(&c.in, cudaEventDisableTiming), "cudaEventCreate"));
    PIPEC_TRY(cuda(cudaEventCreateWithFlags(&c.out, cudaEventDisableTiming), "cudaEventCreate"));
    ncclUniqueId id;
    std::memcpy(&id, token.data(), sizeof id);
    return nccl(ncclCommInitRank(&c.comm, 2, id, commRank), c, "ncclCommInitRank");
  };
  PIPEC_TRY(runtime::setUpChannels(links, rank_, transport, mine, gpu_, ends));
  // The warm-up: one byte on every channel, so that NCCL connects the
  // peers now rather than in the first step.
  for (Channel &c : channels_)
    PIPEC_TRY(nccl(c.info.sender ? ncclSend(scratch_, 1, ncclUint8, 1, c.comm, c.stream)
                                 : ncclRecv(scratch_, 1, ncclUint8, 0, c.comm, c.stream),
                   c, "the warm-up message"));
  for (Channel &c : channels_)
    PIPEC_TRY(cuda(cudaStreamSynchronize(c.stream), "the NCCL warm-up"));
  watchdog_ = std::thread([this] { watch(); });
  return Status::ok();
}

Expected<size_t> NcclLink::ofInstruction(int instruction, bool sending) const {
  return plan::channelOfInstruction(links_, rank_, instruction, sending);
}

Expected<size_t> NcclLink::ofPeer(int peer, bool sending) const {
  return plan::channelOfPeer(links_, rank_, peer, sending);
}

Status NcclLink::enqueue(size_t channel, void *data, uint64_t bytes, void *stream, bool sending) {
  Channel &c = channels_[channel];
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.isOk())
    return failed_;
  auto *compute = static_cast<cudaStream_t>(stream);
  // The channel's stream after what the device's has enqueued: the tensor
  // is there (a send), the arena's bytes are free (a receive).
  PIPEC_TRY(cuda(cudaEventRecord(c.in, compute), "cudaEventRecord"));
  PIPEC_TRY(cuda(cudaStreamWaitEvent(c.stream, c.in, 0), "cudaStreamWaitEvent"));
  if (sending) {
    PIPEC_TRY(nccl(ncclSend(data, bytes, ncclUint8, 1, c.comm, c.stream), c, "ncclSend"));
  } else {
    PIPEC_TRY(nccl(ncclRecv(data, bytes, ncclUint8, 0, c.comm, c.stream), c, "ncclRecv"));
    // What the device enqueues next reads the tensor.
    PIPEC_TRY(cuda(cudaEventRecord(c.out, c.stream), "cudaEventRecord"));
    PIPEC_TRY(cuda(cudaStreamWaitEvent(compute, c.out, 0), "cudaStreamWaitEvent"));
  }
  return Status::ok();
}

Status NcclLink::finishStep() {
  // Not under mu_: the watchdog may have to abort a communicator whose
  // operation this waits for.
  for (Channel &c : channels_) {
    const cudaError_t e = cudaStreamSynchronize(c.stream);
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.isOk())
      return failed_;
    PIPEC_TRY(cuda(e, "waiting for the step's NCCL messages"));
  }
  return Status::ok();
}

void NcclLink::abortLocked(const Status &why) {
  if (failed_.isOk())
    failed_ = why;
  if (aborted_)
    return;
  aborted_ = true;
  for (Channel &c : channels_)
    if (c.comm)
      ncclCommAbort(c.comm);
}

void NcclLink::abort(const Status &why) {
  std::lock_guard<std::mutex> lock(mu_);
  abortLocked(why);
}

void NcclLink::watch() {
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return;
      for (Channel &c : channels_) {
        ncclResult_t r = ncclSuccess;
        if (ncclCommGetAsyncError(c.comm, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress) {
          abortLocked(nccl(r, c, "asynchronous error"));
          return;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace
#endif

Expected<std::unique_ptr<runtime::DeviceLink>> makeNcclLink(const plan::RankLinks &links, int rank,
                                                            runtime::Transport &transport, int gpu) {
#if PIPEC_HAVE_CUDA
  auto link = std::make_unique<NcclLink>(rank, gpu);
  PIPEC_TRY(link->setUp(links, transport));
  return std::unique_ptr<runtime::DeviceLink>(std::move(link));
#else
  (void)links;
  (void)rank;
  (void)transport;
  (void)gpu;
  return errorf("this piperun was built without CUDA and NCCL (docs/cuda.md): --gpu-transport nccl needs them");
#endif
}

} // namespace pipec::cuda
