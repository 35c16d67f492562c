//===- partitioner/DeviceProfile.h - What a device can do ------*- C++ -*-===//
//
// A device profile: peak FLOP/s per precision, memory bandwidth and capacity,
// the link to the next device (bandwidth, latency) and a fixed cost per node
// (kernel launch, dispatch). The cost model times nodes with it; the memory
// model checks stages against its capacity.
//
// Profiles are JSON files in partitioner/profiles/ (NAME.json, found through
// the compile definition PIPEC_PROFILE_DIR or the environment variable of
// the same name), or any file given by path. Each file cites its data sheet
// in "source"; figures that no data sheet gives are listed in "assumptions".
// `pipec --calibrate` writes a profile of the machine it runs on.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"
#include "support/Error.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace pipec::partitioner {

struct DeviceProfile {
  std::string name;        ///< "v100-sxm2-16gb"
  std::string description; ///< "NVIDIA Tesla V100 SXM2 16 GB"
  std::string kind;        ///< "gpu", "tpu", "cpu"
  /// Peak FLOP/s per precision: "fp32", "fp16", "bf16" (those the device has).
  std::map<std::string, double> peakFlops;
  /// Precision a float32 graph runs in (TPUs run f32 matmuls as bf16 passes).
  std::string defaultPrecision = "fp32";
  double memoryBandwidth = 0; ///< bytes/s
  double memoryCapacity = 0;  ///< bytes
  double linkBandwidth = 0;   ///< bytes/s, one direction, to a neighbour device
  double linkLatency = 0;     ///< seconds per transfer
  double nodeOverhead = 0;    ///< seconds per node run (launch, dispatch)
  /// Measured GEMM rates by size (optional, "gemm_curve": [[FLOPs, FLOP/s],
  /// ...] ascending): small GEMMs run far below peak, and a pipeline stage
  /// of small layers is made of them.
  std::vector<std::pair<double, double>> gemmCurve;
  /// Measured kernel times by op (optional, "op_curves": {KEY: [[size,
  /// seconds], ...] ascending}; KEY is the op type, "domain.Op" outside
  /// ai.onnx; size is opCurveSize() of CostModel.h: bytes read plus written,
  /// or for GEMM-like ops FLOPs per GEMM call with seconds per call).
  /// `pipec --calibrate` times this CPU's kernels on the training graphs of
  /// the sample models: small GEMMs, elementwise, normalisation and
  /// data-movement kernels run far from the roofline at the sizes of a
  /// micro-batch, each in its own way, and a GEMM's shape matters as well as
  /// its FLOPs.
  std::map<std::string, std::vector<std::pair<double, double>>> opCurves;
  /// Measured seconds per parameter element of the runtime's work around an
  /// update (optional): adding one micro-batch's gradient into the
  /// accumulator ("gradient_accumulate_seconds_per_element"), and per
  /// optimizer kind the step: 1/M scaling, the squared sum for the norm and
  /// the update ("optimizer_step_seconds_per_element": {"adam": s, ...}).
  double accumulateSecondsPerElement = 0;
  std::map<std::string, double> optimizerStepSeconds;
  /// How much longer a kernel takes while every other device of a pipeline
  /// computes too ("concurrent_slowdown", optional, default 1): cores share
  /// power, caches and memory. Stage times of K > 1 pipelines are scaled by
  /// it; a single device's are not.
  double concurrentSlowdown = 1;
  std::string source;         ///< data sheet or measurement
  /// When a measured profile was measured ("YYYY-MM-DD HH:MM UTC"); empty
  /// for data sheets. The machine's speed drifts: a profile is a snapshot.
  std::string measuredAt;
  std::string assumptions;    ///< figures no data sheet gives, and why
  /// The JSON it was read from (the report shows it).
  nlohmann::json raw;

  /// Peak FLOP/s for a node computing in `dtype` (f16 -> fp16, bf16 -> bf16,
  /// anything else -> the default precision); falls back to fp32.
  double flopsFor(DType dtype) const;
  /// FLOP/s of a GEMM-like node of `flops` in `dtype`: the gemm curve
  /// interpolated in log(FLOPs) (clamped to its ends) for the default
  /// precision when the profile has one, else flopsFor(dtype).
  double gemmRate(double flops, DType dtype) const;
  /// Seconds of a node (or GEMM call) of op `key` and curve size `size`:
  /// interpolated in log(size) and log(seconds) between measured sizes, the
  /// smallest size's time below them (a fixed cost dominates), proportional
  /// to size above them; or, with `marginalRate` (size units per second,
  /// for a GEMM-like op whose size is FLOPs a call), the largest size's
  /// time plus the rest at that rate: a curve measured only at small calls
  /// (the samples' attention runs one size whatever the batch) carries
  /// their fixed cost, which scaling would multiply. Negative when `key`
  /// has no curve.
  double opCurveTime(const std::string &key, double size, double marginalRate = 0) const;
  /// Seconds per parameter element of one step of the optimizer `kind`
  /// with `states` state tensors, and of the runtime adding one
  /// micro-batch's gradient to the sum: measured when the profile has the
  /// figures, else the bytes they move at the memory bandwidth.
  double optimizerStepSecondsPerParameter(const std::string &kind, int states) const;
  double gradientAccumulateSecondsPerElement() const;
};

/// Name of the profile used when none is given: this machine, as
/// `pipec --calibrate --install` measured it (userProfileDirectory()), else
/// the checked-in measurement of the development machine
/// (partitioner/profiles/this-cpu.json).
inline constexpr const char *kDefaultProfile = "this-cpu";

/// Directory of the checked-in profiles.
std::string profileDirectory();
/// Directory of the profiles measured on this machine: $PIPEC_USER_PROFILE_DIR,
/// else $XDG_CONFIG_HOME/pipec/profiles, else $HOME/.config/pipec/profiles;
/// empty when none of these is set.
std::string userProfileDirectory();
/// Names of the checked-in profiles, sorted.
std::vector<std::string> listProfiles();
/// Loads a profile by name (a file NAME.json in userProfileDirectory(), else
/// in profileDirectory(), else a checked-in profile whose "aliases" list the
/// name) or by path (anything ending in .json or containing '/').
Expected<DeviceProfile> loadProfile(const std::string &nameOrPath);
/// Where loadProfile finds a name ("" for a path or an alias).
std::string profileFile(const std::string &name);
/// Parses and validates a profile (every figure positive, a source given).
Expected<DeviceProfile> parseProfile(const nlohmann::json &j, const std::string &what);
/// The JSON form (parses back with parseProfile).
nlohmann::json profileToJson(const DeviceProfile &p);

/// Parses a byte size: "16GiB", "16 GB", "512MiB", "1.5e9" (bytes).
/// GB/MB/KB are decimal, GiB/MiB/KiB binary.
Expected<double> parseByteSize(const std::string &s);

} // namespace pipec::partitioner
