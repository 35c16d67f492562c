//===- tests/fuzz/FuzzPlan.cpp - libFuzzer: plan.pb bytes -> validated plan ---===//
//
// What piperun does with a plan.pb that passed its manifest: parse, then
// validatePlan (indices, sizes, offsets, the schedule).
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanIO.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pipec::plan::Plan p;
  if (size == 0 || !p.ParseFromArray(data, static_cast<int>(size)))
    return 0;
  (void)pipec::plan::validatePlan(p);
  return 0;
}
