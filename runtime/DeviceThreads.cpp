//===- runtime/DeviceThreads.cpp - One long-lived thread per device -------===//
#include "runtime/DeviceThreads.h"

#include "support/Parallel.h"

#include <omp.h>

namespace pipec::runtime {

namespace {
/// Spins until done() or `spin` has passed; true when done() held.
template <typename Done> bool spinUntil(std::chrono::nanoseconds spin, Done done) {
  if (spin.count() <= 0)
    return done();
  const auto until = std::chrono::steady_clock::now() + spin;
  for (unsigned i = 0;; ++i) {
    if (done())
      return true;
    // Read the clock only now and then: it costs more than a check.
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until)
      return false;
    cpuRelax();
  }
}
} // namespace

DeviceThreads::DeviceThreads(int devices, int threadsPerDevice, double spinSeconds)
    : spin_(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(spinSeconds > 0 ? spinSeconds : 0.0))),
      results_(static_cast<size_t>(devices > 0 ? devices : 0)) {
  for (int d = 1; d < devices; ++d)
    threads_.emplace_back([this, d, threadsPerDevice] { loop(d, threadsPerDevice); });
}

DeviceThreads::~DeviceThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  for (std::thread &t : threads_)
    t.join();
}

std::vector<Status> DeviceThreads::run(const std::function<Status(int)> &fn) {
  pending_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  results_[0] = fn(0);
  auto allDone = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spinUntil(spin_, allDone)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, allDone);
  }
  return results_;
}

void DeviceThreads::loop(int device, int threadsPerDevice) {
  // The OpenMP budget is per thread: kernels this device runs use it.
  omp_set_num_threads(threadsPerDevice);
  uint64_t seen = 0;
  for (;;) {
    auto started = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    const std::function<Status(int)> *job;
    if (!spinUntil(spin_, started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, started);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_)
        return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    results_[static_cast<size_t>(device)] = (*job)(device);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the lock: a caller that has checked pending_ under it is
      // then waiting and gets the notification.
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_all();
    }
  }
}

} // namespace pipec::runtime
