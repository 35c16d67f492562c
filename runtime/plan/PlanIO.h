//===- runtime/plan/PlanIO.h - Reading and writing plan directories -*- C++ -*-===//
//
// A plan directory: plan.pb (the Plan message), weight files, and the
// partition report. Loading validates everything the runtime relies on
// (format version, indices in range, allocations inside the arena, weight
// checksums), so a corrupt or truncated plan is an error, never a crash.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/plan/plan.pb.h"
#include "support/Error.h"

#include <string>
#include <vector>

namespace pipec::plan {

/// Name of the Plan message file inside a plan directory.
inline constexpr const char *kPlanFile = "plan.pb";

/// The plan format version this build reads and writes.
uint32_t formatVersion();

/// A loaded plan with its weight files' contents.
struct LoadedPlan {
  std::string dir;
  Plan plan;
  std::vector<std::string> weightData; ///< one per Plan.weight_files
};

/// Writes plan.pb atomically into `dir` (which must exist).
Status writePlan(const std::string &dir, const Plan &p);
/// Reads and validates a plan directory, including weight checksums.
Expected<LoadedPlan> loadPlan(const std::string &dir);
/// Structural validation of a Plan message (no file access).
Status validatePlan(const Plan &p);

} // namespace pipec::plan
