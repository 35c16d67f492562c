//===- bench/TransportBench.cpp - Message cost of the transports ----------===//
//
// pipec-bench-transport [--sizes 8,1024,...] [--seconds S] [--json]
// A ping-pong of one message between devices 0 and 1 over runtime/dist/Transport.h
// for each size: run alone, the in-process transport between two threads;
// under `mpirun -np 2`, the MPI transport between the two ranks. Reports
// the median one-way time of repeated round trips (half a round trip) and
// the bandwidth it gives (bytes / one-way time): the link latency and
// bandwidth a cost-model profile takes (partitioner/DeviceProfile.h).
// Receivers spin while waiting (each device has a core here), as piperun's
// do when devices fit the cores.
//
//===----------------------------------------------------------------------===//
#include "runtime/dist/Mpi.h"
#include "runtime/dist/Transport.h"
#include "support/Format.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

using namespace pipec;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Device `me` of a ping-pong: device 0 sends and waits for the echo.
/// Returns the one-way times (seconds) of the timed round trips on device 0.
Expected<std::vector<double>> pingPong(runtime::Transport &t, int me, size_t bytes, int rounds) {
  std::vector<char> buf(std::max<size_t>(bytes, 1), 1);
  std::vector<double> oneWay;
  const int warm = std::max(2, rounds / 10);
  for (int i = 0; i < warm + rounds; ++i) {
    const uint64_t tag = runtime::messageTag(1, static_cast<uint32_t>(i % 2048));
    const auto t0 = Clock::now();
    if (me == 0) {
      PIPEC_TRY(t.send(0, 1, tag, buf.data(), bytes));
      PIPEC_TRY(t.recv(0, 1, tag, buf.data(), bytes));
    } else {
      PIPEC_TRY(t.recv(1, 0, tag, buf.data(), bytes));
      PIPEC_TRY(t.send(1, 0, tag, buf.data(), bytes));
    }
    if (i >= warm && me == 0)
      oneWay.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / 2);
  }
  return oneWay;
}

/// Round trips in about `seconds` for a message of `bytes` (estimated from
/// a bandwidth of a few GB/s and a latency of a few microseconds), at least
/// 5 and at most 20000.
int roundsFor(size_t bytes, double seconds) {
  const double guess = 2 * (5e-6 + static_cast<double>(bytes) / 3e9);
  return static_cast<int>(std::clamp(seconds / guess, 5.0, 20000.0));
}

} // namespace

int main(int argc, char **argv) {
  std::string sizesArg = "8,64,1024,8192,65536,262144,1048576,4194304,16777216,67108864";
  double seconds = 0.5;
  bool json = false;
  CLI::App app{"pipec-bench-transport: latency and bandwidth of the transports"};
  app.add_option("--sizes", sizesArg, "message sizes in bytes, comma-separated");
  app.add_option("--seconds", seconds, "time per size (default 0.5)");
  app.add_flag("--json", json, "print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  std::vector<size_t> sizes;
  std::stringstream ss(sizesArg);
  for (std::string s; std::getline(ss, s, ',');)
    sizes.push_back(std::stoull(s));
  auto jobOr = runtime::initMpi();
  if (!jobOr) {
    std::cerr << "error: " << jobOr.status().message() << "\n";
    return 1;
  }
  std::optional<runtime::MpiJob> job = *jobOr;
  if (job && job->size != 2) {
    std::cerr << "error: run it on 2 ranks (mpirun -np 2), not " << job->size << "\n";
    runtime::abortMpi(nullptr, 1, 0);
  }
  nlohmann::json rows = nlohmann::json::array();
  std::unique_ptr<runtime::Transport> t =
      job ? runtime::makeMpiTransport(*job, 1.0) : runtime::makeInProcessTransport(2, 1.0);
  const std::string kind = job ? "mpi" : "in-process";
  for (size_t bytes : sizes) {
    const int rounds = roundsFor(bytes, seconds);
    std::vector<double> times;
    if (job) {
      auto r = pingPong(*t, job->rank, bytes, rounds);
      if (!r) {
        std::cerr << "error: " << r.status().message() << "\n";
        runtime::abortMpi(t.get(), 1, 1.0);
      }
      times = *r;
    } else {
      Status other = Status::ok();
      std::thread peer([&] {
        auto r = pingPong(*t, 1, bytes, rounds);
        if (!r)
          other = r.status();
      });
      auto r = pingPong(*t, 0, bytes, rounds);
      peer.join();
      if (!r || !other) {
        std::cerr << "error: " << (!r ? r.status().message() : other.message()) << "\n";
        return 1;
      }
      times = *r;
    }
    if (job && job->rank != 0)
      continue;
    const double oneWay = median(times);
    rows.push_back({{"transport", kind},
                    {"bytes", bytes},
                    {"round_trips", rounds},
                    {"one_way_seconds", oneWay},
                    {"bandwidth_bytes_per_second", oneWay > 0 ? static_cast<double>(bytes) / oneWay : 0}});
  }
  if (!job || job->rank == 0) {
    if (json) {
      std::cout << rows.dump(1) << "\n";
    } else {
      std::printf("%-11s %12s %12s %14s\n", "transport", "bytes", "one-way", "bandwidth");
      for (const auto &r : rows)
        std::printf("%-11s %12s %12s %12s/s\n", r["transport"].get<std::string>().c_str(),
                    formatBytes(r["bytes"].get<double>()).c_str(),
                    cat(r["one_way_seconds"].get<double>() * 1e6, " us").c_str(),
                    formatBytes(r["bandwidth_bytes_per_second"].get<double>()).c_str());
    }
  }
  t.reset();
  if (job)
    runtime::finalizeMpi();
  return 0;
}
