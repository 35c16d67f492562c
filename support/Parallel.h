//===- support/Parallel.h - Kernel loops on the device's threads -*- C++ -*-===//
//
// A kernel's parallel loop runs on the OpenMP budget of the device thread
// that calls it (piperun --threads-per-device). With a budget of one, an
// OpenMP region is pure cost: libgomp still builds a team of one and ends
// it with a futex system call, whether or not an `if` clause disabled the
// region, and a training step opens hundreds of them (bench/results/log.md).
// parallelFor opens a region only when the budget has more than one thread
// and the caller says the work is worth it.
//
// Iterations must be independent: results are then the same on any number
// of threads. usableCores() tells how many cores the process may use, and
// cpuRelax() is the pause of a spin-wait loop.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace pipec {

/// Cores this process may run on: its CPU affinity mask (taskset, cgroup
/// cpusets), not the machine's core count. Device threads that spin while
/// they wait only pay off when each has one of these to itself.
inline unsigned usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0)
      return static_cast<unsigned>(n);
  }
  return std::thread::hardware_concurrency();
}

/// A spin-wait hint: the core idles its pipeline (and leaves its sibling
/// hyperthread and the package's power budget to the others) for a few
/// dozen cycles.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Whether the calling thread's OpenMP budget has more than one thread.
inline bool threadsAvailable() { return omp_get_max_threads() > 1; }

/// Runs body(i) for i in [0, n): in an OpenMP region (static schedule) when
/// `worthThreads`, n > 1 and the budget allows, else in a plain loop.
template <typename F> void parallelFor(int64_t n, bool worthThreads, F &&body) {
  if (n > 1 && worthThreads && threadsAvailable()) {
#ifdef _OPENMP // tools that only read usableCores() build without OpenMP
#pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < n; ++i)
      body(i);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    body(i);
}

/// Runs body(i) for i in [0, n) on plain threads, one per usable core (at
/// most n): thread t takes t, t + threads, ..., so which thread runs an
/// item does not depend on timing, and results written per item do not
/// depend on the thread count. For the compiler's independent per-device
/// work (arenas, checks, node tables). The first exception (running out
/// of memory) is rethrown after every thread has finished.
template <typename F> void forEachOnCores(size_t n, F &&body) {
  const unsigned threads = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(n, usableCores())));
  std::vector<std::exception_ptr> failed(threads);
  auto some = [&](unsigned t) {
    try {
      for (size_t i = t; i < n; i += threads)
        body(i);
    } catch (...) {
      failed[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(some, t);
  some(0);
  for (std::thread &th : pool)
    th.join();
  for (const std::exception_ptr &e : failed)
    if (e)
      std::rethrow_exception(e);
}

} // namespace pipec
