//===- runtime/plan/ScheduleCheck.h - Proving a plan's programs -*- C++ -*-===//
//
// The schedule validator, run by pipec on every plan it emits and by the
// runtime on every plan it loads. It proves, by looking only at the plan:
//
//  - the schedule: a named one is pipeline/Schedule.h's, with its stages
//    per device; each parameter's gradient is computed in ascending
//    micro-batch order (what keeps training independent of K and the
//    schedule);
//  - pairing: every SEND of (tensor, micro-batch) from device a to b has
//    exactly one RECV of the same tensor and micro-batch on b from a, and
//    the reverse; a device never receives a tensor it also computes;
//  - progress: simulating the devices' programs (a SEND completes at once,
//    as the transports buffer it; a RECV waits for its SEND; OPTIMIZER is a
//    collective every device must reach) runs every program to its end, so
//    the devices cannot deadlock; a stuck simulation names each device's
//    blocked instruction;
//  - dataflow: on each device, every tensor instance an instruction reads
//    (node inputs, SEND) was written before (node output, RECV, graph
//    input feed, resident weight);
//  - memory: every instance touched has an arena allocation, and two
//    instances whose lifetimes (first write to last read) overlap never
//    share bytes; a view node's output and input are one instance, at one
//    offset, of one size;
//  - updates: each device's n-th OPTIMIZER follows every gradient it
//    computes for step n and precedes those of step n+1.
//
// A no-flush plan (2bw: instructions marked previous_step) is proven over
// three steps run back to back, as one plan (unrolledSteps), and its
// OPTIMIZER is not a collective.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/plan/plan.pb.h"
#include "support/Error.h"

namespace pipec::plan {

/// Checks the programs of a structurally valid plan (see validatePlan).
Status checkSchedule(const Plan &p);

/// A no-flush plan's programs for `steps` steps back to back, as one plan
/// (its previous-step instructions dropped from the first, run alone after
/// the last; micro-batch mb of step s numbered s * M + mb).
Plan unrolledSteps(const Plan &p, unsigned steps);

} // namespace pipec::plan
