//===- runtime/EmulatedGpu.cpp - A GPU emulated on the CPU -----------===//
#include "runtime/EmulatedGpu.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/Update.h"
#include "runtime/train/Optimizer.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pipec::runtime {

// runtime/cuda/ does not see runtime/train/; here the two meet.
static_assert(cuda::update::kChunk == train::kTrainChunk, "the device update cuts parameters as the CPU's does");

namespace {

/// Host memory the emulated GPUs treat as pinned (hostBuffer, the staging
/// buffer): copies to and from it run in queue order, as CUDA's
/// asynchronous copies with pinned memory do. Copies with other host
/// memory take or give the bytes at the call (CUDA stages pageable memory
/// so). One registry for the process: a buffer one device made may serve
/// another's copies.
class PinnedRanges {
public:
  static PinnedRanges &get() {
    static PinnedRanges r;
    return r;
  }
  void add(const void *p, uint64_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    ranges_[reinterpret_cast<uintptr_t>(p)] = reinterpret_cast<uintptr_t>(p) + bytes;
  }
  void remove(const void *p) {
    std::lock_guard<std::mutex> l(mu_);
    ranges_.erase(reinterpret_cast<uintptr_t>(p));
  }
  bool contains(const void *p, uint64_t bytes) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> l(mu_);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin())
      return false;
    --it;
    return a >= it->first && a + bytes <= it->second;
  }

private:
  mutable std::mutex mu_;
  std::map<uintptr_t, uintptr_t> ranges_; ///< start -> end
};

/// An event: how many times it was recorded (enqueued) and how many of
/// those records a queue has reached. A wait waits for the records made
/// before it was enqueued, as cudaStreamWaitEvent does.
struct EmulatedEvent : std::enable_shared_from_this<EmulatedEvent> {
  std::mutex mu;
  std::condition_variable reached;
  uint64_t recorded = 0, completed = 0;
};

/// A queue of work that a thread of its own runs in order (a GPU stream):
/// the host enqueues and goes on; drain() waits for what was enqueued.
/// After a piece of work fails, the queue skips the work after it until
/// the failure is reported, but still reaches its events, so that no
/// other queue waits forever.
class EmulatedQueue {
public:
  EmulatedQueue(unsigned delayUs, uint64_t seed) : delayUs_(delayUs), rng_(seed | 1) {
    thread_ = std::thread([this] { loop(); });
  }
  ~EmulatedQueue() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    more_.notify_all();
    thread_.join();
  }
  EmulatedQueue(const EmulatedQueue &) = delete;
  EmulatedQueue &operator=(const EmulatedQueue &) = delete;

  void work(std::function<Status()> f) { push({Op::Work, std::move(f), nullptr, 0}); }
  void record(EmulatedEvent &e) {
    uint64_t target;
    {
      std::lock_guard<std::mutex> l(e.mu);
      target = ++e.recorded;
    }
    push({Op::Record, nullptr, e.shared_from_this(), target});
  }
  void wait(EmulatedEvent &e) {
    uint64_t target;
    {
      std::lock_guard<std::mutex> l(e.mu);
      target = e.recorded;
    }
    if (target)
      push({Op::Wait, nullptr, e.shared_from_this(), target});
  }
  /// Waits until the queue has run what was enqueued before the call;
  /// the first error since the last drain, which it clears.
  Status drain() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t want = enqueued_;
    done_cv_.wait(l, [&] { return done_ >= want; });
    Status s = std::move(error_);
    error_ = Status::ok();
    return s;
  }

private:
  struct Op {
    enum Kind { Work, Record, Wait } kind;
    std::function<Status()> fn;
    std::shared_ptr<EmulatedEvent> event;
    uint64_t target;
  };
  void push(Op op) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(op));
      ++enqueued_;
    }
    more_.notify_one();
  }
  void loop() {
    for (;;) {
      Op op;
      bool failed;
      {
        std::unique_lock<std::mutex> l(mu_);
        more_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty())
          return; // stopping, and everything enqueued has run
        op = std::move(q_.front());
        q_.pop_front();
        failed = !error_.isOk();
      }
      switch (op.kind) {
      case Op::Work:
        if (!failed) {
          pause();
          Status s = op.fn();
          if (!s) {
            std::lock_guard<std::mutex> l(mu_);
            error_ = std::move(s);
          }
        }
        break;
      case Op::Record: {
        {
          std::lock_guard<std::mutex> l(op.event->mu);
          op.event->completed = std::max(op.event->completed, op.target);
        }
        op.event->reached.notify_all();
        break;
      }
      case Op::Wait: {
        std::unique_lock<std::mutex> l(op.event->mu);
        op.event->reached.wait(l, [&] { return op.event->completed >= op.target; });
        break;
      }
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        ++done_;
      }
      done_cv_.notify_all();
    }
  }
  /// PIPEC_EMULATED_GPU_DELAY_US: a pseudo-random pause before work.
  void pause() {
    if (!delayUs_)
      return;
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    std::this_thread::sleep_for(std::chrono::microseconds(rng_ % (delayUs_ + 1)));
  }

  std::mutex mu_;
  std::condition_variable more_, done_cv_;
  std::deque<Op> q_;
  uint64_t enqueued_ = 0, done_ = 0;
  bool stop_ = false;
  Status error_;
  const unsigned delayUs_;
  uint64_t rng_;
  std::thread thread_;
};

unsigned delayFromEnvironment() {
  const char *v = std::getenv("PIPEC_EMULATED_GPU_DELAY_US");
  return v ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : 0u;
}

/// The device update, enqueued on the device's stream; its squared sums
/// reach the host at fetchSquares' place in the queue.
class EmulatedUpdater final : public kernel::ParamUpdater {
public:
  EmulatedUpdater(cuda::UpdateTable t, EmulatedQueue &q)
      : q_(q), s_(std::make_shared<State>(std::move(t))) {}
  Status squares(float scale) override {
    q_.work([s = s_, scale] {
      cuda::hostSquares(s->t, scale, s->lanes.data(), s->squares.data());
      return Status::ok();
    });
    return Status::ok();
  }
  Status decide(double clip, bool skipNonFinite) override {
    q_.work([s = s_, clip, skipNonFinite] {
      s->control = cuda::update::decide(s->squares.data(), s->t.params(), clip, skipNonFinite);
      return Status::ok();
    });
    return Status::ok();
  }
  Status setDecision(bool skip, bool scale, double coef) override {
    cuda::update::Control c{};
    c.skip = skip;
    c.scale = scale;
    c.coef = coef;
    q_.work([s = s_, c] {
      s->control = c;
      return Status::ok();
    });
    return Status::ok();
  }
  Status apply(const train::UpdateScalars &scalars, bool update) override {
    q_.work([s = s_, scalars, update] {
      cuda::hostApply(s->t, s->control, scalars, update);
      return Status::ok();
    });
    return Status::ok();
  }
  Status fetchSquares() override {
    q_.work([s = s_] {
      s->fetched = s->squares;
      return Status::ok();
    });
    return Status::ok();
  }
  const double *squaresOnHost() const override { return s_->fetched.data(); }

private:
  struct State {
    explicit State(cuda::UpdateTable table)
        : t(std::move(table)), lanes(t.chunks.size() * cuda::update::kLanes), squares(static_cast<size_t>(t.params())),
          fetched(squares.size()) {}
    cuda::UpdateTable t;
    std::vector<double> lanes, squares, fetched;
    cuda::update::Control control;
  };
  EmulatedQueue &q_;
  std::shared_ptr<State> s_;
};

class EmulatedGpu;

/// A CPU kernel on the emulated GPU: enqueued on the device's stream, or,
/// while the GPU records, kept as a call (the ExecContext and the
/// operands' addresses as they were) that replay() enqueues. The calls
/// replay with the replay's step, which the CPU kernels' host side caches
/// by; so every kernel is replayable here, and the CUDA kernels say for
/// themselves which are (runtime/cuda/kernels).
class EmulatedKernel final : public kernel::Kernel {
public:
  EmulatedKernel(kernel::KernelPtr inner, EmulatedGpu &gpu, size_t inputs, size_t outputs)
      : inner_(std::move(inner)), gpu_(gpu), inputs_(inputs), outputs_(outputs) {}
  Status run(kernel::ExecContext &ctx, const void *const *in, void *const *out) override;
  size_t workspaceBytes() const override { return inner_->workspaceBytes(); }
  size_t heldBytes() const override { return inner_->heldBytes(); }
  bool canAccumulate() const override { return inner_->canAccumulate(); }
  bool replayable() const override { return true; }
  Status runInner(kernel::ExecContext &ctx, const void *const *in, void *const *out) {
    inner_->nodeId = nodeId;
    return inner_->run(ctx, in, out);
  }

private:
  kernel::KernelPtr inner_;
  EmulatedGpu &gpu_;
  size_t inputs_, outputs_;
};

/// A kernel's call: what its run was given.
struct Call {
  EmulatedKernel *kernel;
  kernel::ExecContext ctx;
  std::vector<const void *> in;
  std::vector<void *> out;
  Status run(uint64_t step) {
    kernel::ExecContext c = ctx;
    c.step = step;
    return kernel->runInner(c, in.data(), out.data());
  }
};

class EmulatedGpu final : public kernel::Backend {
public:
  EmulatedGpu() : cpu_(cpu::makeCpuBackend()), delayUs_(delayFromEnvironment()), stream_(delayUs_, 1) {}
  ~EmulatedGpu() override {
    // What is enqueued reads and writes the memory below.
    copies_.reset();
    (void)stream_.drain();
    if (staging_)
      PinnedRanges::get().remove(staging_.get());
    for (const void *p : pinned_)
      PinnedRanges::get().remove(p);
  }
  std::string name() const override { return "an emulated GPU"; }
  bool hostAddressable() const override { return false; }
  const char *interpretedBecause() const override { return "an emulated GPU"; }
  Expected<kernel::KernelPtr> createKernel(const kernel::OpDesc &desc) override {
#if PIPEC_HAVE_CUDA
    // What the CUDA backend checks before it makes a kernel (the node's
    // op and element types against runtime/cuda/kernels/KernelTable.def):
    // a plan the GPU would refuse is refused here too.
    PIPEC_TRY(cuda::checkKernelTypes(desc));
#endif
    PIPEC_ASSIGN(kernel::KernelPtr k, cpu_->createKernel(desc));
    return kernel::KernelPtr(new EmulatedKernel(std::move(k), *this, desc.inputs.size(), desc.outputs.size()));
  }
  Expected<void *> alloc(uint64_t bytes) override { return cpu_->alloc(bytes); }
  kernel::HalfWeights *halfWeights() override { return cpu_->halfWeights(); }
  Expected<void *> residentWeight(const void *host, uint64_t bytes) override {
    PIPEC_ASSIGN(void *dev, cpu_->alloc(bytes));
    std::memcpy(dev, host, bytes); // new memory: no queued work reads it
    weights_.push_back({dev, host, bytes});
    return dev;
  }
  Status beginStep(bool weightsChanged) override {
    if (weightsChanged)
      for (const Weight &w : weights_)
        PIPEC_TRY(upload(w.device, w.host, w.bytes));
    return Status::ok();
  }
  Status sync() override {
    PIPEC_TRY(notRecording("waiting for the device"));
    return stream_.drain();
  }
  void *stream() const override { return const_cast<EmulatedQueue *>(&stream_); }
  Expected<void *> hostView(void *dev, uint64_t bytes) override {
    PIPEC_ASSIGN(void *host, staging(dev, bytes));
    PIPEC_TRY(download(host, dev, bytes));
    PIPEC_TRY(sync());
    return host;
  }
  Expected<void *> staging(void *, uint64_t bytes) override {
    if (bytes >= stagingBytes_) { // never empty: no null buffer for a 0-byte tensor
      PIPEC_TRY(sync()); // queued copies may use the old buffer
      if (staging_)
        PinnedRanges::get().remove(staging_.get());
      stagingBytes_ = bytes + 1;
      staging_.reset(new unsigned char[stagingBytes_]);
      PinnedRanges::get().add(staging_.get(), stagingBytes_);
    }
    // Poisoned, so a read of what the host did not write shows.
    std::memset(staging_.get(), 0xa5, bytes);
    return staging_.get();
  }
  Status commit(void *dev, const void *host, uint64_t bytes) override {
    PIPEC_TRY(upload(dev, host, bytes));
    return sync(); // the staging buffer is reused next
  }
  bool residentTraining() const override { return true; }
  Status upload(void *dev, const void *host, uint64_t bytes) override {
    PIPEC_TRY(notRecording("a copy"));
    if (PinnedRanges::get().contains(host, bytes)) {
      stream_.work([=] {
        std::memcpy(dev, host, bytes);
        return Status::ok();
      });
      return Status::ok();
    }
    // Pageable memory: its bytes as they are now.
    auto taken = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char *>(host),
                                                              static_cast<const unsigned char *>(host) + bytes);
    stream_.work([=] {
      std::memcpy(dev, taken->data(), bytes);
      return Status::ok();
    });
    return Status::ok();
  }
  Status download(void *host, const void *dev, uint64_t bytes) override {
    PIPEC_TRY(notRecording("a copy"));
    stream_.work([=] {
      std::memcpy(host, dev, bytes);
      return Status::ok();
    });
    // Pageable memory: the call returns with the bytes there.
    if (!PinnedRanges::get().contains(host, bytes))
      return stream_.drain();
    return Status::ok();
  }
  Expected<void *> hostBuffer(uint64_t bytes) override {
    PIPEC_ASSIGN(void *p, cpu_->alloc(bytes));
    PinnedRanges::get().add(p, bytes);
    pinned_.push_back(p);
    return p;
  }
  Status accumulate(float *dst, const float *src, int64_t n, bool first) override {
    PIPEC_TRY(notRecording("a gradient sum"));
    stream_.work([=] {
      cuda::hostAccumulate(dst, src, n, first);
      return Status::ok();
    });
    return Status::ok();
  }
  Expected<std::unique_ptr<kernel::ParamUpdater>> paramUpdater(const std::vector<kernel::ParamBuffers> &p) override {
    PIPEC_ASSIGN(cuda::UpdateTable t, cuda::makeUpdateTable(p));
    return std::unique_ptr<kernel::ParamUpdater>(new EmulatedUpdater(std::move(t), stream_));
  }
  bool deviceMessages() const override { return true; }
  int deviceIndex() const override { return 0; }
  Expected<void *> recordEvent(uint64_t slot, kernel::Queue q) override {
    PIPEC_TRY(notRecording("an event"));
    std::shared_ptr<EmulatedEvent> &e = events_[slot];
    if (!e)
      e = std::make_shared<EmulatedEvent>();
    queue(q).record(*e);
    return static_cast<void *>(e.get());
  }
  Status waitEvent(void *event, kernel::Queue q) override {
    PIPEC_TRY(notRecording("a wait"));
    if (!event)
      return errorf(name(), ": waiting for a null event");
    queue(q).wait(*static_cast<EmulatedEvent *>(event));
    return Status::ok();
  }
  Status copyFromDevice(void *dst, const void *src, int, uint64_t bytes, kernel::Queue q) override {
    PIPEC_TRY(notRecording("a copy"));
    queue(q).work([=] {
      std::memcpy(dst, src, bytes);
      return Status::ok();
    });
    return Status::ok();
  }

  // Recordings: the kernels' calls, kept (EmulatedKernel) and replayed.
  // A copy, a sum or a wait while recording is refused (the executor
  // records kernels alone), as a wait is by a CUDA stream capture.
  bool canRecord() const override { return true; }
  Status beginRecording() override {
    if (recording_)
      return errorf(name(), ": a recording is already under way");
    recording_ = std::make_unique<std::vector<Call>>();
    return Status::ok();
  }
  Expected<void *> endRecording() override {
    if (!recording_)
      return errorf(name(), ": no recording is under way");
    recordings_.push_back(std::move(recording_));
    return static_cast<void *>(recordings_.back().get());
  }
  Status replay(void *recording, uint64_t step) override {
    PIPEC_TRY(notRecording("a replay"));
    // One piece of work, as a graph's launch is.
    stream_.work([calls = static_cast<std::vector<Call> *>(recording), step] {
      for (Call &c : *calls)
        PIPEC_TRY(c.run(step));
      return Status::ok();
    });
    return Status::ok();
  }
  /// A kernel's run: kept while recording, else enqueued.
  void launch(EmulatedKernel *k, const kernel::ExecContext &ctx, const void *const *in, size_t inputs,
              void *const *out, size_t outputs) {
    Call c{k, ctx, std::vector<const void *>(in, in + inputs), std::vector<void *>(out, out + outputs)};
    if (recording_) {
      recording_->push_back(std::move(c));
      return;
    }
    stream_.work([c = std::move(c)]() mutable { return c.run(c.ctx.step); });
  }

private:
  Status notRecording(const char *what) const {
    return recording_ ? errorf(name(), ": ", what, " while recording (only kernels are recorded)") : Status::ok();
  }
  EmulatedQueue &queue(kernel::Queue q) {
    if (q == kernel::Queue::Compute)
      return stream_;
    if (!copies_)
      copies_ = std::make_unique<EmulatedQueue>(delayUs_, 2);
    return *copies_;
  }
  std::unique_ptr<std::vector<Call>> recording_;
  std::vector<std::unique_ptr<std::vector<Call>>> recordings_;

  struct Weight {
    void *device;
    const void *host;
    uint64_t bytes;
  };
  kernel::BackendPtr cpu_;
  std::vector<Weight> weights_;
  std::unique_ptr<unsigned char[]> staging_;
  uint64_t stagingBytes_ = 0;
  std::vector<const void *> pinned_;
  std::map<uint64_t, std::shared_ptr<EmulatedEvent>> events_;
  const unsigned delayUs_;
  // Last, so that they stop first: their work uses the members above.
  EmulatedQueue stream_;
  std::unique_ptr<EmulatedQueue> copies_;
};

Status EmulatedKernel::run(kernel::ExecContext &ctx, const void *const *in, void *const *out) {
  gpu_.launch(this, ctx, in, inputs_, out, outputs_);
  return Status::ok();
}

} // namespace

kernel::BackendPtr makeEmulatedGpuBackend() { return std::make_unique<EmulatedGpu>(); }

Status drainEmulatedStream(void *stream) {
  return stream ? static_cast<EmulatedQueue *>(stream)->drain() : Status::ok();
}

} // namespace pipec::runtime
