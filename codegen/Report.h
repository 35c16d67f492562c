//===- codegen/Report.h - The partition report -----------------*- C++ -*-===//
//
// What every compile tells the user before anything runs: per stage the
// node range, parameters, FLOPs, memory (weights and planned activation
// arena) and bytes sent onward. Rendered as a table for people, JSON for
// tools and HTML with SVG pictures (stage balance, pipeline timeline).
// Every number is computed from the graph and the emitted plan.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/PlanEmitter.h"
#include "ir/IR.h"
#include "partitioner/Partitioner.h"

#include <nlohmann/json.hpp>

#include <string>

namespace pipec::codegen {

/// Builds the report's data.
nlohmann::json buildReport(const ir::Graph &g, const partitioner::Partition &part,
                           const EmittedPlan &plan);
/// A fixed-width table for the terminal.
std::string renderReportText(const nlohmann::json &report);
/// A self-contained HTML page (inline SVG, no scripts fetched).
std::string renderReportHtml(const nlohmann::json &report);
/// Writes report.json, report.txt and report.html into the plan directory.
Status writeReport(const std::string &dir, const nlohmann::json &report);

/// "1.50 MiB".
std::string formatBytes(double bytes);
/// "3.2 GFLOP".
std::string formatCount(double v, const char *unit);

} // namespace pipec::codegen
