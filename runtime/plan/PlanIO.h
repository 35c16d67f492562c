//===- runtime/plan/PlanIO.h - Reading and writing plan directories -*- C++ -*-===//
//
// A plan directory: plan.pb (the Plan message), weight files, the source
// model's graph, the partition report, and MANIFEST (every file's size and
// CRC-32C). Loading checks the files against the manifest, then validates
// everything the runtime relies on (format version, indices, sizes and
// offsets in range, the schedule), so a corrupt or truncated plan is an
// error, never a crash or a different result.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/plan/plan.pb.h"
#include "support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace pipec::plan {

/// Name of the Plan message file inside a plan directory.
inline constexpr const char *kPlanFile = "plan.pb";

/// The plan format version this build reads and writes.
uint32_t formatVersion();

/// A loaded plan with its weights: the plan directory's weight files whole,
/// and each region of a referenced file (the model's external data) in a
/// buffer of its own.
struct LoadedPlan {
  std::string dir;
  Plan plan;
  /// One per Plan.weight_files (null if referenced), in buffers of
  /// support/LargeAlloc.h.
  std::vector<std::shared_ptr<char>> weightData;
  std::vector<std::shared_ptr<char>> regionData; ///< per tensor, for referenced files

  /// The loaded bytes of a WEIGHT/CONSTANT tensor (training updates them in
  /// place); null for other tensors.
  char *weightAddress(int32_t tensor) const;
};

/// Name of the checksum manifest inside a plan directory.
inline constexpr const char *kManifestFile = "MANIFEST";

/// Writes plan.pb atomically into `dir` (which must exist).
Status writePlan(const std::string &dir, const Plan &p);
/// Writes MANIFEST: the size and CRC-32C of every other regular file of the
/// plan directory, then a checksum of the manifest's own lines. pipec
/// writes it last; loadPlan checks plan.pb and the weight files against it,
/// and piperun --save checks source.onnx.
Status writeManifest(const std::string &dir);
/// Reads `name` from the plan directory and checks it against MANIFEST.
Expected<std::string> readVerified(const std::string &dir, const std::string &name);
enum class LoadWeights { Yes, No };
/// Reads and validates a plan directory and, unless told not to, its
/// weights with their checksums (loadWeights).
Expected<LoadedPlan> loadPlan(const std::string &dir, LoadWeights weights = LoadWeights::Yes);
/// Reads the weights of a plan loaded without them: the plan directory's
/// weight files whole, each region of a referenced file into a buffer of
/// its own, every one checked against its CRC-32C. piperun calls it once
/// it knows the machine can hold them.
Status loadWeights(LoadedPlan &lp);
/// Structural validation of a Plan message (no file access).
Status validatePlan(const Plan &p);

} // namespace pipec::plan
