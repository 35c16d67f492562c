//===- runtime/dist/MpiTransport.cpp - Devices as ranks of an MPI job ----------===//
//
// See runtime/dist/Mpi.h for the protocol. One thread per rank calls MPI (the
// device's; kernels' OpenMP threads never do), so MPI_THREAD_FUNNELED is
// enough. Errors of MPI calls return codes (MPI_ERRORS_RETURN) that become
// Status errors naming the call.
//
//===----------------------------------------------------------------------===//
#include "runtime/dist/BufferPool.h"
#include "runtime/dist/Mpi.h"
#include "support/Format.h"
#include "support/Parallel.h"

// The C interface only: Open MPI's mpi.h otherwise declares its deprecated
// C++ bindings, which live in another library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace pipec::runtime {

namespace {

// MPI tag ranges (Mpi.h): tensor instances below 2^30, session messages
// from 2^30, the transport's own from kAbortTag.
constexpr int kTensorBits = 19, kMicroBatchBits = 11;
constexpr int kSessionBase = 1 << 30;
constexpr int kSessionKindBits = 3, kSessionIndexBits = 26;
constexpr int kAbortTag = kSessionBase + (1 << 29);
constexpr int kCollectiveTag = kAbortTag + 1;
/// Messages are sent in pieces of at most this many bytes (MPI counts are
/// int); pieces of one message keep their order (MPI's non-overtaking rule).
constexpr size_t kPieceBytes = size_t{1} << 30;

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return cat("MPI error ", code);
  return std::string(text, static_cast<size_t>(len));
}

Status check(int code, const char *call) {
  if (code == MPI_SUCCESS)
    return Status::ok();
  return errorf(call, " failed: ", mpiError(code));
}

Expected<int> mpiTag(uint64_t tag) {
  if (tag >> 63) {
    const uint64_t kind = (tag >> 32) & 0x7fffffffu, index = tag & 0xffffffffu;
    if (kind >= (1u << kSessionKindBits) || index >= (1u << kSessionIndexBits))
      return errorf("session message kind ", kind, " index ", index, " has no MPI tag");
    return kSessionBase + static_cast<int>((kind << kSessionIndexBits) | index);
  }
  const uint64_t tensor = tag >> 32, mb = tag & 0xffffffffu;
  if (tensor >= (1u << kTensorBits) || mb >= (1u << kMicroBatchBits))
    return errorf("tensor ", tensor, " micro-batch ", mb, " has no MPI tag (the MPI transport takes ",
                  "tensor ids below ", 1u << kTensorBits, " and micro-batches below ",
                  1u << kMicroBatchBits, ")");
  return static_cast<int>((tensor << kMicroBatchBits) | mb);
}

/// A sent message's bytes, kept until its sends complete.
using Buffer = MessageBuffer;

class MpiTransport final : public Transport {
public:
  MpiTransport(const MpiJob &job, double spinSeconds)
      : rank_(job.rank), size_(job.size),
        spin_(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(std::max(0.0, spinSeconds)))) {}

  ~MpiTransport() override {
    // Every send of a run that succeeded has a matching receive: wait for
    // them before MPI_Finalize. After an abort the job ends with MPI_Abort.
    if (!aborted_)
      for (Pending &p : pending_)
        MPI_Waitall(static_cast<int>(p.requests.size()), p.requests.data(), MPI_STATUSES_IGNORE);
  }

  int numDevices() const override { return size_; }

  Status send(int from, int to, uint64_t tag, const void *data, size_t bytes) override {
    if (aborted_)
      return abortStatus_;
    if (from != rank_)
      return errorf("rank ", rank_, " cannot send for device ", from);
    if (to < 0 || to >= size_)
      return errorf("send to device ", to, " of ", size_);
    PIPEC_ASSIGN(int mtag, mpiTag(tag));
    return sendRaw(data, bytes, to, mtag);
  }

  Status recv(int to, int from, uint64_t tag, void *data, size_t bytes) override {
    if (aborted_)
      return abortStatus_;
    if (to != rank_)
      return errorf("rank ", rank_, " cannot receive for device ", to);
    if (from < 0 || from >= size_)
      return errorf("receive from device ", from, " of ", size_);
    PIPEC_ASSIGN(int mtag, mpiTag(tag));
    return recvRaw(data, bytes, from, mtag);
  }

  Status allReduceSum(int device, double *data, size_t n) override {
    if (aborted_)
      return abortStatus_;
    if (device != rank_)
      return errorf("rank ", rank_, " cannot take part for device ", device);
    const size_t bytes = n * sizeof(double);
    if (rank_ != 0) {
      PIPEC_TRY(sendRaw(data, bytes, 0, kCollectiveTag));
      return recvRaw(data, bytes, 0, kCollectiveTag);
    }
    // Device order from 0.0, as InProcessTransport adds.
    std::vector<double> sum(n, 0.0), slot(n);
    for (size_t i = 0; i < n; ++i)
      sum[i] += data[i];
    for (int r = 1; r < size_; ++r) {
      Status s = recvRaw(slot.data(), bytes, r, kCollectiveTag);
      if (!s)
        return aborted_ ? s : s.withContext(cat("all-reduce: rank ", r, " passed another number of values"));
      for (size_t i = 0; i < n; ++i)
        sum[i] += slot[i];
    }
    for (int r = 1; r < size_; ++r)
      PIPEC_TRY(sendRaw(sum.data(), bytes, r, kCollectiveTag));
    std::copy(sum.begin(), sum.end(), data);
    return Status::ok();
  }

  void abort(const Status &why) override {
    if (aborted_)
      return;
    aborted_ = true;
    abortStatus_ = why;
    // A notice that itself came from another rank is not passed on: that
    // rank has told everyone.
    if (notified_)
      return;
    noticeText_ = why.message();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_)
        continue;
      MPI_Request req;
      if (MPI_Isend(noticeText_.data(), static_cast<int>(std::min<size_t>(noticeText_.size(), INT_MAX)),
                    MPI_BYTE, r, kAbortTag, MPI_COMM_WORLD, &req) == MPI_SUCCESS)
        notices_.push_back(req);
    }
  }

  void reset() override {
    // A job whose step failed ends (abortMpi); nothing to clear between
    // steps that succeeded.
  }

  /// Whether this rank stopped because another rank failed.
  bool notified() const { return notified_; }

  /// Waits up to `seconds` for this rank's abort notices to be delivered.
  void flushNotices(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!notices_.empty() && std::chrono::steady_clock::now() < until) {
      int done = 0;
      MPI_Testall(static_cast<int>(notices_.size()), notices_.data(), &done, MPI_STATUSES_IGNORE);
      if (done)
        break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

private:
  struct Pending {
    std::vector<MPI_Request> requests;
    Buffer buffer;
  };

  /// Starts the sends or receives of a message, in pieces of kPieceBytes.
  Status post(bool isSend, void *data, size_t bytes, int peer, int tag, std::vector<MPI_Request> &reqs) {
    size_t off = 0;
    do {
      const size_t piece = std::min(kPieceBytes, bytes - off);
      MPI_Request req;
      char *at = static_cast<char *>(data) + off;
      int rc = isSend ? MPI_Isend(at, static_cast<int>(piece), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req)
                      : MPI_Irecv(at, static_cast<int>(piece), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
      PIPEC_TRY(check(rc, isSend ? "MPI_Isend" : "MPI_Irecv"));
      reqs.push_back(req);
      off += piece;
    } while (off < bytes);
    return Status::ok();
  }

  /// A copy of the bytes leaves by MPI_Isend; the buffer is reused once the
  /// send completes.
  Status sendRaw(const void *data, size_t bytes, int to, int tag) {
    reapSends();
    Buffer b = takeBuffer(bytes);
    std::memcpy(b.data.get(), data, bytes);
    Pending p;
    PIPEC_TRY(post(true, b.data.get(), bytes, to, tag, p.requests));
    p.buffer = std::move(b);
    pending_.push_back(std::move(p));
    return Status::ok();
  }

  /// Waits for the message; each piece must have filled its part (a
  /// shorter message means the ranks disagree about it).
  Status recvRaw(void *data, size_t bytes, int from, int tag) {
    std::vector<MPI_Request> reqs;
    PIPEC_TRY(post(false, data, bytes, from, tag, reqs));
    std::vector<MPI_Status> st(reqs.size());
    PIPEC_TRY(wait(reqs, st));
    size_t got = 0;
    for (MPI_Status &s : st) {
      int n = 0;
      MPI_Get_count(&s, MPI_BYTE, &n);
      got += static_cast<size_t>(n);
    }
    if (got != bytes)
      return errorf("rank ", rank_, " expected ", bytes, " bytes from rank ", from, ", got ", got);
    return Status::ok();
  }

  /// Polls `reqs` until all complete or another rank's abort notice comes:
  /// spins for spin_, then yields the core between polls for 2 ms (another
  /// rank that shares it runs; alone, the poll goes on at once), then
  /// sleeps in pauses growing to 200 us. (Sleeping at once made a 1F1B
  /// step of the GPT-like sample many times longer: every message waited
  /// for the end of a pause; bench/results/log.md.)
  Status wait(std::vector<MPI_Request> &reqs, std::vector<MPI_Status> &st) {
    const auto start = std::chrono::steady_clock::now();
    int pauseUs = 0;
    for (;;) {
      int done = 0;
      int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, st.data());
      if (rc != MPI_SUCCESS) {
        for (MPI_Status &s : st)
          if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING)
            rc = s.MPI_ERROR;
        return errorf("rank ", rank_, ": a message from rank ", st.empty() ? -1 : st[0].MPI_SOURCE,
                      " did not arrive whole: ", mpiError(rc));
      }
      if (done)
        return Status::ok();
      if (takeNotice()) {
        for (MPI_Request &r : reqs)
          if (r != MPI_REQUEST_NULL) {
            MPI_Cancel(&r);
            MPI_Request_free(&r);
          }
        return abortStatus_;
      }
      reapSends();
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited < spin_) {
        cpuRelax();
        continue;
      }
      if (waited < spin_ + std::chrono::milliseconds(2)) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(pauseUs));
      pauseUs = std::min(200, pauseUs * 2 + 10);
    }
  }

  /// Takes another rank's abort notice if one has come.
  bool takeNotice() {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag)
      return false;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::string text(static_cast<size_t>(std::max(n, 0)), '\0');
    MPI_Recv(text.data(), n, MPI_BYTE, st.MPI_SOURCE, kAbortTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    notified_ = true;
    abort(errorf("stopped because rank ", st.MPI_SOURCE, " failed: ", text));
    return true;
  }

  /// Returns the buffers of completed sends to the pool.
  void reapSends() {
    for (size_t i = 0; i < pending_.size();) {
      int done = 0;
      MPI_Testall(static_cast<int>(pending_[i].requests.size()), pending_[i].requests.data(), &done,
                  MPI_STATUSES_IGNORE);
      if (!done) {
        ++i;
        continue;
      }
      pool_.give(std::move(pending_[i].buffer));
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    }
  }

  Buffer takeBuffer(size_t bytes) { return pool_.take(bytes); }

  const int rank_, size_;
  const std::chrono::nanoseconds spin_;
  std::vector<Pending> pending_;
  BufferPool pool_;
  bool aborted_ = false, notified_ = false;
  Status abortStatus_ = Status::ok();
  std::string noticeText_;
  std::vector<MPI_Request> notices_;
};

} // namespace

bool launchedByMpi() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v))
      return true;
  return false;
}

Expected<std::optional<MpiJob>> initMpi() {
  if (!launchedByMpi())
    return std::optional<MpiJob>();
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return errorf("MPI_Init_thread failed");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MpiJob job;
  MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, job.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_rank(local, &job.localRank);
    MPI_Comm_free(&local);
  }
  if (provided < MPI_THREAD_FUNNELED)
    return errorf("this MPI gives thread support level ", provided, "; piperun needs MPI_THREAD_FUNNELED");
  void *ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && *static_cast<int *>(ub) < kCollectiveTag)
    return errorf("this MPI's largest message tag is ", *static_cast<int *>(ub), "; piperun needs ",
                  kCollectiveTag);
  return std::optional<MpiJob>(job);
}

void finalizeMpi() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin)
    MPI_Finalize();
}

void abortMpi(Transport *transport, int code, double graceSeconds) {
  if (auto *t = dynamic_cast<MpiTransport *>(transport)) {
    const auto start = std::chrono::steady_clock::now();
    // Stopped by another rank's failure: that rank ends the job (one
    // launcher message, not one per rank); MPI_Abort here only if it has
    // not within a few seconds.
    if (t->notified())
      std::this_thread::sleep_until(start + std::chrono::seconds(5));
    t->flushNotices(graceSeconds);
    // The others stop at their next wait; let them say so before the
    // launcher ends them.
    std::this_thread::sleep_until(start + std::chrono::duration<double>(graceSeconds));
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code); // MPI_Abort does not return
}

std::unique_ptr<Transport> makeMpiTransport(const MpiJob &job, double spinSeconds) {
  return std::make_unique<MpiTransport>(job, spinSeconds);
}

} // namespace pipec::runtime
