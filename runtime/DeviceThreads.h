//===- runtime/DeviceThreads.h - One long-lived thread per device -*- C++ -*-===//
//
// Each device of a multi-device plan runs its program on its own thread,
// kept for the whole session so that the thread's OpenMP team (its kernel
// threads, `--threads-per-device`) is created once, not every step.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pipec::runtime {

class DeviceThreads {
public:
  /// Starts `devices` threads, each with an OpenMP budget of
  /// `threadsPerDevice`.
  DeviceThreads(int devices, int threadsPerDevice);
  ~DeviceThreads();
  DeviceThreads(const DeviceThreads &) = delete;
  DeviceThreads &operator=(const DeviceThreads &) = delete;

  /// Runs fn(d) on device d's thread for every d at once; returns when all
  /// have returned, with each device's status.
  std::vector<Status> run(const std::function<Status(int)> &fn);

private:
  void loop(int device, int threadsPerDevice);

  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<Status(int)> *job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

} // namespace pipec::runtime
