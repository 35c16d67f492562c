//===- runtime/RunReport.h - What a run measured beside the prediction -*- C++ -*-===//
//
// piperun's outputs about a run, here where they can be tested:
//   - deviceReport: per device, busy, idle, communication, memory measured
//     and predicted (piperun's table and --json);
//   - writeTrace: a Chrome trace with one track per device, one slice per
//     instruction, and the plan's predicted timeline as a second process
//     ("predicted", one track per device, aligned with the first step);
//   - comparePrediction / renderRunReportHtml: the predicted and the
//     measured timeline of a step one above the other, the per-device
//     busy, idle and memory of both, and the instructions whose measured
//     time is furthest from their prediction (piperun --report).
// The prediction is the plan's own: each instruction's predicted_seconds
// (runtime/plan/Predicted.h), simulated by pipeline/Simulate.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Session.h"

#include <nlohmann/json.hpp>

#include <string>

namespace pipec::runtime {

/// "F3", "B0.2" (micro-batch 0 of stage 2 on a device running several
/// stages), "opt", "send T mb3 -> 1", "recv T mb3 <- 0".
std::string instructionLabel(const plan::Plan &p, const plan::Instruction &ins);

/// Per device of the session: measured busy, optimizer, wait and
/// communication seconds per step, idle fraction, bytes sent, instructions,
/// measured, planned and predicted peak memory, predicted busy seconds.
nlohmann::json deviceReport(const Session &session);

/// Per node of every device, its measured seconds per step (the session
/// timed nodes: DeviceExecutor::enableNodeProfile) and its predicted
/// seconds per step (Node.predicted_seconds times its runs per step):
/// {"plan", "steps", "micro_batches", "nodes": [{device, node, op, seconds,
/// predicted_seconds}], "by_op": the same summed per op type, most time
/// first, "seconds", "predicted_seconds": all nodes}. piperun
/// --profile-ops writes it; pipec --op-times reads it.
nlohmann::json opProfile(const Session &session, int64_t steps);

/// The measured trace (one track per device) and the predicted timeline as
/// a second process. Needs a session opened with tracing.
Status writeTrace(const std::string &path, const Session &session);

/// The comparison of the step whose length is the median of the traced
/// steps with the plan's prediction (JSON; renderRunReportHtml draws it):
/// "predicted" and "measured", each with step_seconds, per device
/// busy_seconds and idle_fraction, and a timeline of slices {label, kind,
/// micro_batch, stage, start, end}; "devices": per device both sides and
/// the memory (predicted by the memory model, planned, measured);
/// "largest_differences": the compute, send and optimizer instructions
/// whose measured time (the median over the traced steps) is furthest
/// from their predicted time (at most
/// `top`), with both times. Errors if the session traced nothing.
Expected<nlohmann::json> comparePrediction(const Session &session, size_t top = 12);

/// An HTML page with inline SVG, no scripts: the two timelines on one time
/// scale, the per-device table, the largest differences.
std::string renderRunReportHtml(const nlohmann::json &comparison);

} // namespace pipec::runtime
