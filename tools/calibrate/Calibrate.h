//===- tools/calibrate/Calibrate.h - Measuring this machine --------*- C++ -*-===//
//
// `pipec --calibrate` measures the CPU it runs on and writes a device
// profile (DeviceProfile.h): sgemm FLOP/s of the kernels' GEMM (cpu::sgemm
// on large square matrices, median of repeats), memory bandwidth (a large
// memcpy; read + written bytes per second, the unit the cost model uses),
// the handoff between two threads through shared memory (latency of a
// ping-pong, bandwidth of a large buffer copied by the receiving thread),
// the cost of one tiny BLAS call (the per-node overhead) and the memory
// capacity (MemTotal in /proc/meminfo, or a lower cgroup limit: usableMemoryBytes).
//
// Op curves (DeviceProfile::opCurves) come from timing the CPU kernels of
// whole graphs node by node: timeGraphNodes() runs the graph's kernels in
// order, pass after pass, each reading its producers' outputs, and times
// every kernel in every pass; fitOpCurves() turns the timings into
// one curve of seconds against size per op. `pipec --calibrate` feeds it the
// training graphs of the sample models at several batch sizes.
//
// GEMMs are timed through cpu::sgemm (runtime/cpu/Gemm.h), the call the
// kernels make; the partitioner links the CPU kernels for this (they are in
// every pipec binary), so tests can calibrate with small sizes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "partitioner/DeviceProfile.h"

#include <map>
#include <string>
#include <vector>

namespace pipec::calibrate {

using partitioner::DeviceProfile;

struct CalibrateOptions {
  int gemmSize = 2048;          ///< n of the n x n x n sgemm
  int repeats = 7;              ///< medians over this many runs
  size_t copyBytes = 256u << 20;    ///< memcpy and thread-handoff buffer
  /// Parameter elements of the optimizer measurements (1 MiB per array: a
  /// mid-sized model's parameters per device spread over layers of that
  /// order).
  int64_t optimizerElements = int64_t(1) << 18;
  std::string name = "this-cpu";
  /// Kernel threads of one device (piperun --threads-per-device): the
  /// profile describes one device, so GEMM and copies run with this many.
  int threads = 1;
};

/// One node's kernel time.
struct NodeTiming {
  std::string key;    ///< opCurveKey() of the node (CostModel.h)
  double size = 0;    ///< opCurveSize() (bytes; FLOPs per call for GEMMs)
  double seconds = 0; ///< median of the runs (per GEMM call for GEMMs)
};

struct NodeTimingOptions {
  int threads = 1;           ///< OpenMP threads of the kernels
  double minSeconds = 1e-3;  ///< time each node at least this long in all
  int minRuns = 5;           ///< and at least this many runs
};

/// Times the kernel of every node of `g` that has a CPU kernel (views
/// excepted: plans run none), in graph order, reading its producers'
/// outputs. Values no timed node produces: constants as they are, other
/// float inputs uniform in [-1, 1], integer and bool inputs zero (valid
/// indices and labels). A node whose kernel refuses its data is left out.
/// Medians over at least `minRuns` passes after a warm-up pass, and passes
/// until the nodes took `minSeconds` each on average.
Expected<std::vector<NodeTiming>> timeGraphNodes(const ir::Graph &g,
                                                 const NodeTimingOptions &opts = {});

/// What a device's kernels lose while the other devices of a pipeline
/// compute: the in-order pass of `g` (timeGraphNodes) run on `devices`
/// threads at once against one thread alone, the mean of the concurrent
/// totals over the lone one, median of `trials` interleaved trials; 1 when
/// `devices` < 2. A pass's total is the sum of its NodeTiming seconds (per
/// GEMM call for GEMM-like nodes), the same measure on both sides.
Expected<double> measureConcurrentSlowdown(const ir::Graph &g, int devices,
                                           const NodeTimingOptions &opts = {}, int trials = 3);

/// Per key, the timings in half-octave bins of size, each bin the median of
/// its sizes and of its seconds, ascending (DeviceProfile::opCurves).
std::map<std::string, std::vector<std::pair<double, double>>>
fitOpCurves(const std::vector<NodeTiming> &timings);

/// Measures this machine. The profile's "measured" object keeps the raw
/// medians, sizes and repeat counts.
Expected<DeviceProfile> calibrate(const CalibrateOptions &opts = {});

/// The profile's op curves (DeviceProfile::opCurves): every kernel of the
/// sample models' training graphs (samples/gen: MLP, GPT-like and CNN with
/// their losses, default sizes) timed at micro-batches of 1, 4, 16 and 64
/// examples; and the concurrent slowdown of as many devices of `threads`
/// threads as fit the cores.
Status addOpCurves(DeviceProfile &p, int threads);

/// The link figures from the transport that will run the plans, as
/// `pipec-bench-transport --json` measured it into `file` (under mpirun:
/// the MPI transport between two ranks): the latency is the one-way time
/// of the smallest message, the bandwidth the bytes over the one-way time
/// of the largest.
Status linkFromTransport(DeviceProfile &p, const std::string &file);

/// All pipec --calibrate measures: calibrate(), the op curves and, when
/// `linkFile` is given (read first, so that a bad one is refused before
/// the measuring), the link figures.
Expected<DeviceProfile> calibrateMachine(int threads, const std::string &linkFile);

} // namespace pipec::calibrate
