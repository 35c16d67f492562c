//===- runtime/InProcessTransport.cpp - Device threads of one process -----===//
//
// One mailbox per destination device: a map from (source, tag) to the
// message bytes, under a mutex, with a condition variable the receiver
// waits on after spinning for a while. A send copies the tensor into a
// buffer it owns (recycled from delivered messages), so the sender's arena
// slot is free as soon as send() returns.
//
//===----------------------------------------------------------------------===//
#include "runtime/Transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace pipec::runtime {

namespace {

/// A spin-wait hint: the core idles its pipeline (and leaves its sibling
/// hyperthread and the package's power budget to the others) for a few
/// dozen cycles.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// A message's bytes. Buffers are recycled (InProcessTransport::pool_):
/// allocating a fresh one per message costs page faults for every large
/// tensor, on the sender's critical path.
struct Buffer {
  std::unique_ptr<char[]> data;
  size_t capacity = 0, size = 0;
};

class InProcessTransport final : public Transport {
public:
  InProcessTransport(int n, double spinSeconds)
      : spin_(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(std::max(0.0, spinSeconds)))),
        boxes_(static_cast<size_t>(n)), slots_(static_cast<size_t>(n)) {}

  int numDevices() const override { return static_cast<int>(boxes_.size()); }

  Status send(int from, int to, uint64_t tag, const void *data, size_t bytes) override {
    if (to < 0 || to >= numDevices())
      return errorf("send to device ", to, " of ", numDevices());
    Buffer msg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return abortStatus_;
      msg = takeBuffer(bytes);
    }
    std::memcpy(msg.data.get(), data, bytes); // outside the lock
    Mailbox &box = boxes_[to];
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return abortStatus_;
      auto [it, fresh] = box.messages.emplace(std::make_pair(from, tag), std::move(msg));
      if (!fresh)
        return errorf("device ", from, " sent message ", tag, " to device ", to, " twice");
      box.posted.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    return Status::ok();
  }

  Status recv(int to, int from, uint64_t tag, void *data, size_t bytes) override {
    Mailbox &box = boxes_[to];
    auto key = std::make_pair(from, tag);
    std::unique_lock<std::mutex> lock(mu_);
    if (!aborted_ && !box.messages.count(key)) {
      // Spin on the mailbox's counter (without the lock) until the message
      // is there or the spin time is over, then sleep.
      const auto until = std::chrono::steady_clock::now() + spin_;
      for (;;) {
        const uint64_t seen = box.posted.load(std::memory_order_acquire);
        lock.unlock();
        while (box.posted.load(std::memory_order_acquire) == seen && !abortFlag_.load() &&
               std::chrono::steady_clock::now() < until) {
          cpuRelax();
        }
        lock.lock();
        if (aborted_ || box.messages.count(key) || std::chrono::steady_clock::now() >= until)
          break;
      }
    }
    cv_.wait(lock, [&] { return aborted_ || box.messages.count(key); });
    if (aborted_)
      return abortStatus_;
    auto it = box.messages.find(key);
    if (it->second.size != bytes)
      return errorf("device ", to, " expected ", bytes, " bytes from device ", from, ", got ",
                    it->second.size);
    Buffer msg = std::move(it->second);
    box.messages.erase(it);
    lock.unlock();
    std::memcpy(data, msg.data.get(), bytes);
    lock.lock();
    pool_.push_back(std::move(msg));
    return Status::ok();
  }

  Status allReduceSum(int device, double *data, size_t n) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_)
      return abortStatus_;
    // Two phases: everyone deposits, then everyone reads the sum; the
    // generation counter lets the next collective start safely.
    uint64_t gen = generation_;
    slots_[device].assign(data, data + n);
    if (++arrived_ == numDevices()) {
      sum_.assign(n, 0.0);
      for (const std::vector<double> &s : slots_)
        for (size_t i = 0; i < n && i < s.size(); ++i)
          sum_[i] += s[i];
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return aborted_ || generation_ != gen; });
      if (aborted_)
        return abortStatus_;
    }
    if (sum_.size() != n)
      return errorf("all-reduce: device ", device, " passed ", n, " values, others ", sum_.size());
    std::copy(sum_.begin(), sum_.end(), data);
    return Status::ok();
  }

  void abort(const Status &why) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return;
      aborted_ = true;
      abortStatus_ = why;
      abortFlag_ = true;
    }
    cv_.notify_all();
  }

  void reset() override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = false;
    abortFlag_ = false;
    abortStatus_ = Status::ok();
    for (Mailbox &b : boxes_)
      b.messages.clear();
    arrived_ = 0;
  }

private:
  /// A buffer of at least `bytes` from the pool (the smallest that fits),
  /// or a new one. Called under mu_.
  Buffer takeBuffer(size_t bytes) {
    size_t best = pool_.size();
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i].capacity >= bytes &&
          (best == pool_.size() || pool_[i].capacity < pool_[best].capacity))
        best = i;
    Buffer b;
    if (best < pool_.size()) {
      b = std::move(pool_[best]);
      pool_[best] = std::move(pool_.back());
      pool_.pop_back();
    } else {
      b.data.reset(new char[std::max<size_t>(bytes, 1)]);
      b.capacity = bytes;
    }
    b.size = bytes;
    return b;
  }

  /// How long a receiver spins before it sleeps.
  const std::chrono::nanoseconds spin_;
  struct Mailbox {
    std::map<std::pair<int, uint64_t>, Buffer> messages;
    std::atomic<uint64_t> posted{0}; ///< messages delivered so far
  };
  /// Buffers of delivered messages, for reuse.
  std::vector<Buffer> pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Mailbox> boxes_;
  bool aborted_ = false;
  std::atomic<bool> abortFlag_{false};
  Status abortStatus_ = Status::ok();
  std::vector<std::vector<double>> slots_;
  std::vector<double> sum_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

} // namespace

std::unique_ptr<Transport> makeInProcessTransport(int numDevices, double spinSeconds) {
  return std::make_unique<InProcessTransport>(numDevices, spinSeconds);
}

} // namespace pipec::runtime
