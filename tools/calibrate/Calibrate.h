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
#include <memory>
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

/// The median of `v` (the mean of the middle two for an even count).
double median(std::vector<double> v);
/// Whether every input and output of `n` has a known type (a node whose
/// kernel can be made and timed).
bool typesKnown(const ir::Node &n);
/// The time now as "YYYY-MM-DD HH:MM UTC" (DeviceProfile::measuredAt).
std::string utcNow();
/// Input data for timing a kernel of `v`: a constant's own values, floats
/// in [-1, 1] from a fixed linear congruential sequence of `seed`, zeros
/// otherwise (valid indices and labels).
Tensor timingInput(const ir::Value &v, uint64_t seed);

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

/// The training graph (with its loss, compiled as pipec compiles it) of
/// the sample model "mlp", "gpt" or "cnn" (samples/gen, default sizes) at
/// `batch` examples.
Expected<std::unique_ptr<ir::Graph>> sampleTrainingGraph(const std::string &model, int64_t batch);

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

/// `pipec --calibrate --device cuda`: a GPU measured through the
/// runtime's CUDA backend (runtime/kernel/Backend.h), the kernels, copies
/// and update piperun runs there:
///   - peak_flops.fp32: the MatMul kernel (cuBLAS, in the math mode asked
///     for) on gemmSize^2 operands; gemm_curve: square MatMuls from 16 up;
///   - memory bandwidth: a device-to-device copy of copyBytes (read plus
///     written bytes per second); capacity: the GPU's memory;
///   - the link: with two GPUs or more, copyBytes from GPU gpu to the
///     next (peer to peer where the hardware has it) and the one-way time
///     of a 256-byte copy; with one, the same copies within the GPU, the
///     route between stages that share it;
///   - node overhead: a one-element Relu, launched over and over (as a
///     recording replayed, with `recorded`);
///   - op curves: every kernel of the sample models' training graphs at
///     micro-batches of `batches`, each run `runsPerNode` times back to
///     back (as one recording, with `recorded`) and waited for (what a
///     stream of launches costs: the kernel where it is longer than its
///     launch, else the launch), median of `passes` passes;
///   - the gradient sum and the device update (runtime/cuda/Update.h) per
///     element for each optimizer kind;
///   - concurrent_slowdown: with one GPU, the GPT-like sample's pass on
///     two streams of it at once against one alone (pipelines of K > 1 on
///     this machine share it); with more, 1.
/// `emulate` measures the emulated GPU (runtime/EmulatedGpu.h: the CPU's
/// kernels behind the GPU's interface) instead, for tests on machines
/// without one.
struct GpuCalibrateOptions {
  int gpu = 0;
  bool emulate = false;
  bool tf32 = false; ///< matrix products on TF32 tensor cores (piperun --math tf32)
  int gemmSize = 4096;
  int repeats = 7;
  size_t copyBytes = size_t(256) << 20;
  int64_t optimizerElements = int64_t(1) << 22;
  std::vector<int64_t> batches = {1, 4, 16, 64};
  int runsPerNode = 5;
  int passes = 5;
  /// Time the kernels as piperun runs them by default: a node's runs
  /// recorded once (CUDA graphs) and the recording replayed; false: every
  /// run launched (piperun --no-cuda-graphs).
  bool recorded = true;
  std::string name = "this-gpu";
};
Expected<DeviceProfile> calibrateGpu(const GpuCalibrateOptions &opts);

/// All pipec --calibrate measures: calibrate(), the op curves and, when
/// `linkFile` is given (read first, so that a bad one is refused before
/// the measuring), the link figures.
Expected<DeviceProfile> calibrateMachine(int threads, const std::string &linkFile);

} // namespace pipec::calibrate
