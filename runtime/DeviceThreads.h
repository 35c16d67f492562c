//===- runtime/DeviceThreads.h - One long-lived thread per device -*- C++ -*-===//
//
// The devices of a multi-device plan run their programs at once: device 0
// on the thread that calls run(), every other device on a thread of its own,
// kept for the whole session so that the thread's OpenMP team (its kernel
// threads, `--threads-per-device`) is created once, not every step.
//
// Steps follow each other closely, and waking a sleeping thread costs tens
// of microseconds in a virtual machine (a futex and an inter-processor
// interrupt), on a step of a few milliseconds. So, given `spinSeconds`, a
// device thread that has finished a step spins for up to that long waiting
// for the next one, and the caller spins as long for the others to finish,
// before either sleeps. Spin only when every device thread has a core of
// its own (Session picks this as for the transport).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pipec::runtime {

class DeviceThreads {
public:
  /// Serves `devices` devices, starting devices - 1 threads, each with an
  /// OpenMP budget of `threadsPerDevice` (the caller's own budget is the
  /// caller's business).
  DeviceThreads(int devices, int threadsPerDevice, double spinSeconds = 0.0);
  ~DeviceThreads();
  DeviceThreads(const DeviceThreads &) = delete;
  DeviceThreads &operator=(const DeviceThreads &) = delete;

  /// Runs fn(d) for every device d at once, fn(0) on the calling thread;
  /// returns when all have returned, with each device's status.
  std::vector<Status> run(const std::function<Status(int)> &fn);

private:
  void loop(int device, int threadsPerDevice);

  const std::chrono::nanoseconds spin_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  /// Set under mu_ before generation_ moves on; read after it has.
  const std::function<Status(int)> *job_ = nullptr;
  /// Bumped (under mu_) once per run(); threads spin on it.
  std::atomic<uint64_t> generation_{0};
  /// Device threads still running the current job; the caller spins on it.
  std::atomic<int> pending_{0};
  bool stop_ = false; ///< under mu_
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

} // namespace pipec::runtime
