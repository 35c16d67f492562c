//===- runtime/InProcessTransport.cpp - Device threads of one process -----===//
//
// One mailbox per destination device, with its own lock: the undelivered
// messages (source, tag, bytes) and a condition variable the receiver
// waits on after spinning for a while. A send copies the tensor into a
// buffer it owns (recycled from delivered messages), so the sender's arena
// slot is free as soon as send() returns.
//
//===----------------------------------------------------------------------===//
#include "runtime/Transport.h"
#include "support/Parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace pipec::runtime {

namespace {

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
    if (abortFlag_.load(std::memory_order_acquire))
      return abortStatus();
    Mailbox &box = boxes_[static_cast<size_t>(to)];
    Buffer msg = takeBuffer(bytes);
    std::memcpy(msg.data.get(), data, bytes); // outside the locks
    {
      std::lock_guard<std::mutex> lock(box.mu);
      if (box.find(from, tag) != box.messages.end())
        return errorf("device ", from, " sent message ", tag, " to device ", to, " twice");
      box.messages.push_back({from, tag, std::move(msg)});
    }
    // After the unlock: a spinning receiver that sees the count change
    // finds the lock free.
    box.posted.fetch_add(1, std::memory_order_release);
    box.cv.notify_one(); // the box has one reader: device `to`
    return Status::ok();
  }

  Status recv(int to, int from, uint64_t tag, void *data, size_t bytes) override {
    Mailbox &box = boxes_[static_cast<size_t>(to)];
    auto aborted = [&] { return abortFlag_.load(std::memory_order_acquire); };
    std::unique_lock<std::mutex> lock(box.mu);
    auto it = box.find(from, tag);
    if (it == box.messages.end() && !aborted()) {
      // Spin on the mailbox's counter (without the lock) until a message
      // arrives, the run aborts or the spin time is over, then sleep.
      const auto until = std::chrono::steady_clock::now() + spin_;
      for (;;) {
        const uint64_t seen = box.posted.load(std::memory_order_acquire);
        lock.unlock();
        while (box.posted.load(std::memory_order_acquire) == seen && !aborted() &&
               std::chrono::steady_clock::now() < until)
          cpuRelax();
        lock.lock();
        it = box.find(from, tag);
        if (it != box.messages.end() || aborted() || std::chrono::steady_clock::now() >= until)
          break;
      }
      box.cv.wait(lock, [&] {
        it = box.find(from, tag);
        return aborted() || it != box.messages.end();
      });
    }
    if (aborted()) {
      lock.unlock(); // the abort status is under mu_, which reset() takes before box locks
      return abortStatus();
    }
    if (it->buffer.size != bytes)
      return errorf("device ", to, " expected ", bytes, " bytes from device ", from, ", got ",
                    it->buffer.size);
    Buffer msg = std::move(it->buffer);
    *it = std::move(box.messages.back());
    box.messages.pop_back();
    lock.unlock();
    std::memcpy(data, msg.data.get(), bytes);
    returnBuffer(std::move(msg));
    return Status::ok();
  }

  Status allReduceSum(int device, double *data, size_t n) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (abortFlag_.load(std::memory_order_acquire))
      return abortStatus_; // under mu_
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
      cv_.wait(lock, [&] { return abortFlag_.load() || generation_ != gen; });
      if (abortFlag_.load())
        return abortStatus_; // under mu_
    }
    if (sum_.size() != n)
      return errorf("all-reduce: device ", device, " passed ", n, " values, others ", sum_.size());
    std::copy(sum_.begin(), sum_.end(), data);
    return Status::ok();
  }

  void abort(const Status &why) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abortFlag_.load())
        return;
      abortStatus_ = why;
      abortFlag_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    // Under each box's lock, so that a receiver that has just checked the
    // flag is already waiting when the notification comes.
    for (Mailbox &box : boxes_) {
      std::lock_guard<std::mutex> lock(box.mu);
      box.cv.notify_all();
    }
  }

  void reset() override {
    std::lock_guard<std::mutex> lock(mu_);
    abortFlag_ = false;
    abortStatus_ = Status::ok();
    for (Mailbox &b : boxes_) {
      std::lock_guard<std::mutex> boxLock(b.mu);
      for (Message &m : b.messages)
        returnBuffer(std::move(m.buffer));
      b.messages.clear();
    }
    arrived_ = 0;
  }

private:
  struct Message {
    int from;
    uint64_t tag;
    Buffer buffer;
  };
  /// Messages to one device. Each has its own lock, so that the traffic to
  /// one device does not wait for the traffic to another, and its own cache
  /// lines: the counter a receiver spins on apart from what senders write
  /// (sharing a line, the spinning receiver slowed every send).
  struct alignas(64) Mailbox {
    /// Messages delivered so far; receivers spin on it.
    alignas(64) std::atomic<uint64_t> posted{0};
    alignas(64) std::mutex mu;
    std::condition_variable cv;
    /// Undelivered messages (few: those in flight to this device).
    std::vector<Message> messages;
    std::vector<Message>::iterator find(int from, uint64_t tag) {
      return std::find_if(messages.begin(), messages.end(),
                          [&](const Message &m) { return m.from == from && m.tag == tag; });
    }
  };

  Status abortStatus() {
    std::lock_guard<std::mutex> lock(mu_);
    return abortStatus_;
  }

  /// A buffer of at least `bytes` from the pool (the smallest that fits),
  /// or a new one. One pool for all devices: a device's next send then
  /// reuses the buffer it has just received from, still in its cache
  /// (per-receiver pools made a round trip slower: bench/results/log.md).
  Buffer takeBuffer(size_t bytes) {
    std::lock_guard<std::mutex> lock(poolMu_);
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
  void returnBuffer(Buffer b) {
    std::lock_guard<std::mutex> lock(poolMu_);
    pool_.push_back(std::move(b));
  }

  /// How long a receiver spins before it sleeps.
  const std::chrono::nanoseconds spin_;
  std::vector<Mailbox> boxes_;
  /// Buffers of delivered messages, for reuse (poolMu_).
  std::mutex poolMu_;
  std::vector<Buffer> pool_;
  /// The abort and the collectives.
  std::mutex mu_;
  std::condition_variable cv_;
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
