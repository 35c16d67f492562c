//===- runtime/DeviceThreads.cpp - One long-lived thread per device -------===//
#include "runtime/DeviceThreads.h"

#include <omp.h>

namespace pipec::runtime {

DeviceThreads::DeviceThreads(int devices, int threadsPerDevice)
    : results_(static_cast<size_t>(devices)) {
  for (int d = 0; d < devices; ++d)
    threads_.emplace_back([this, d, threadsPerDevice] { loop(d, threadsPerDevice); });
}

DeviceThreads::~DeviceThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread &t : threads_)
    t.join();
}

std::vector<Status> DeviceThreads::run(const std::function<Status(int)> &fn) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  pending_ = static_cast<int>(threads_.size());
  ++generation_;
  start_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  return results_;
}

void DeviceThreads::loop(int device, int threadsPerDevice) {
  // The OpenMP budget is per thread: kernels this device runs use it.
  omp_set_num_threads(threadsPerDevice);
  uint64_t seen = 0;
  for (;;) {
    const std::function<Status(int)> *job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
      job = job_;
    }
    Status s = (*job)(device);
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_[device] = std::move(s);
      if (--pending_ == 0)
        done_.notify_all();
    }
  }
}

} // namespace pipec::runtime
