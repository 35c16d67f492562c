//===- codegen/Report.h - The partition report -----------------*- C++ -*-===//
//
// What every compile tells the user before anything runs: per stage the
// node range, parameters, FLOPs, predicted forward/backward/recompute time,
// the memory model's breakdown against the budget, the planned arena and
// the bytes sent per micro-batch; for the pipeline the simulated step time,
// bubble fraction, throughput and speed-up over one device. Rendered as a
// table for people, JSON for tools and HTML with inline SVG (stage balance,
// pipeline timeline). Every number is computed from the graph, the
// partition's cost model and the emitted plan: the timeline simulates the
// plan's per-device programs (partitioner/PipelineSim.h), each instruction
// taking its predicted time and each RECV waiting for its SEND.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/PlanEmitter.h"
#include "ir/IR.h"
#include "partitioner/Partitioner.h"

#include "support/Format.h"

#include <nlohmann/json.hpp>

#include <string>

namespace pipec::codegen {

/// Builds the report's data. Fails when the plan's programs deadlock.
Expected<nlohmann::json> buildReport(const ir::Graph &g, const partitioner::Partition &part,
                                     const EmittedPlan &plan);
/// A fixed-width table for the terminal.
std::string renderReportText(const nlohmann::json &report);
/// A self-contained HTML page (inline SVG, no scripts fetched).
std::string renderReportHtml(const nlohmann::json &report);
/// Writes report.json, report.txt and report.html into the plan directory.
Status writeReport(const std::string &dir, const nlohmann::json &report);

} // namespace pipec::codegen
