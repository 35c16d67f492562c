//===- partitioner/Calibrate.h - Measuring this machine --------*- C++ -*-===//
//
// `pipec --calibrate` measures the CPU it runs on and writes a device
// profile (DeviceProfile.h): sgemm FLOP/s through OpenBLAS (cblas_sgemm on
// large square matrices, median of repeats), memory bandwidth (a large
// memcpy; read + written bytes per second, the unit the cost model uses),
// the handoff between two threads through shared memory (latency of a
// ping-pong, bandwidth of a large buffer copied by the receiving thread),
// the cost of one tiny BLAS call (the per-node overhead) and the memory
// capacity (MemTotal in /proc/meminfo).
//
// The partitioner links OpenBLAS for this (the CPU kernels already do; the
// library is in every pipec binary), so tests can calibrate with small sizes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "partitioner/DeviceProfile.h"

namespace pipec::partitioner {

struct CalibrateOptions {
  int gemmSize = 2048;          ///< n of the n x n x n sgemm
  int repeats = 7;              ///< medians over this many runs
  size_t copyBytes = 256u << 20;    ///< memcpy and thread-handoff buffer
  std::string name = "this-cpu";
  /// Kernel threads of one device (piperun --threads-per-device): the
  /// profile describes one device, so GEMM and copies run with this many.
  int threads = 1;
};

/// Measures this machine. The profile's "measured" object keeps the raw
/// medians, sizes and repeat counts.
Expected<DeviceProfile> calibrate(const CalibrateOptions &opts = {});

} // namespace pipec::partitioner
