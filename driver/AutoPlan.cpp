//===- driver/AutoPlan.cpp - Choosing K, M, schedule and recompute -------===//
#include "driver/AutoPlan.h"

#include "support/Format.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

namespace pipec::driver {

using namespace pipec::codegen;

namespace {

/// The schedules tried on K >= 2 devices: name and virtual stages. Not
/// 2bw: it changes what training computes (updates one step late), which
/// is the user's choice, not the planner's.
struct Variant {
  const char *name;
  unsigned v;
};
constexpr Variant kVariants[] = {{"gpipe", 0}, {"1f1b", 0},        {"zbh1", 0},       {"zbh2", 0},
                                 {"zbv", 0},   {"interleaved", 2}, {"interleaved", 4}};

/// A short reason class for the rejection table.
std::string reasonClass(const std::string &why) {
  if (why.find("memory budget") != std::string::npos)
    return "over the memory budget";
  if (why.find("cannot cut") != std::string::npos)
    return "more stages than forward nodes";
  if (why.find("multiple of K") != std::string::npos)
    return "interleaved needs M a multiple of K";
  return "other";
}

/// The first line of an error, for a table.
std::string firstLine(const std::string &s) { return s.substr(0, s.find('\n')); }

} // namespace

std::string AutoCandidate::label() const {
  std::string s = cat("K=", devices, " b=", microBatchSize, " M=", microBatches, " ", schedule.name());
  if (schedule.kind() == pipeline::ScheduleKind::Interleaved)
    s += cat(" v=", schedule.stagesPerDevice());
  return s;
}

Expected<AutoPlan> autoPlan(const GraphLoader &load, const CompileOptions &base,
                            const AutoPlanOptions &opts) {
  const auto t0 = std::chrono::steady_clock::now();
  if (opts.devices < 1)
    return errorf("--auto needs --devices N with N >= 1 (got ", opts.devices, ")");
  if (opts.globalBatch < 1)
    return errorf("--auto needs --global-batch B with B >= 1 (got ", opts.globalBatch, ")");
  // K: every count up to 16 devices, then powers of two and N.
  std::vector<int> Ks;
  for (int K = 1; K <= opts.devices; ++K)
    if (K <= 16 || (K & (K - 1)) == 0 || K == opts.devices)
      Ks.push_back(K);
  const bool training = base.emit.training;
  AutoPlan plan;
  for (int64_t b = 1; b <= opts.globalBatch; ++b) {
    if (opts.globalBatch % b != 0)
      continue;
    const int M = static_cast<int>(opts.globalBatch / b);
    AutoCandidate proto;
    proto.microBatchSize = b;
    proto.microBatches = M;
    auto g = load(b);
    if (!g) {
      proto.devices = 0;
      proto.rejected = firstLine(g.status().message());
      plan.rejected.push_back(proto);
      continue;
    }
    PhaseTimer phases;
    auto emit = prepareGraph(**g, base, phases);
    if (!emit) {
      proto.devices = 0;
      proto.rejected = firstLine(emit.status().message());
      plan.rejected.push_back(proto);
      continue;
    }
    for (int K : Ks)
      for (const Variant &v : kVariants) {
        // On one device every schedule runs the same work in the same time.
        if (K == 1 && std::string(v.name) != "1f1b")
          continue;
        AutoCandidate c = proto;
        c.devices = K;
        PIPEC_ASSIGN(c.schedule, pipeline::Schedule::parse(v.name, v.v));
        CompileOptions co = base;
        co.partition.numStages = K;
        co.partition.maxDevices = 0;
        co.partition.recompute = training ? "auto" : "none";
        co.emit.microBatches = M;
        co.emit.schedule = c.schedule;
        PIPEC_ASSIGN(partitioner::PartitionOptions po, partitionOptionsFor(co, *emit));
        auto part = partitioner::partitionGraph(**g, po);
        if (!part) {
          c.rejected = firstLine(part.status().message());
          plan.rejected.push_back(c);
          continue;
        }
        const partitioner::PartitionEstimate &est = part->estimate;
        c.stepSeconds = est.stepTime;
        c.bubbleFraction = est.bubbleFraction;
        std::vector<double> mem(part->numDevices(), 0.0);
        for (size_t s = 0; s < est.stages.size(); ++s) {
          mem[static_cast<size_t>(part->deviceOf(static_cast<int>(s)))] += est.stages[s].memory.total();
          c.recompute.push_back(est.stages[s].recompute);
        }
        c.peakMemoryBytes = *std::max_element(mem.begin(), mem.end());
        plan.feasible.push_back(c);
      }
  }
  std::stable_sort(plan.feasible.begin(), plan.feasible.end(),
                   [](const AutoCandidate &a, const AutoCandidate &b) {
                     if (a.stepSeconds != b.stepSeconds)
                       return a.stepSeconds < b.stepSeconds;
                     if (a.devices != b.devices)
                       return a.devices < b.devices;
                     return a.peakMemoryBytes < b.peakMemoryBytes;
                   });
  plan.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (plan.feasible.empty()) {
    std::string why;
    for (size_t i = 0; i < plan.rejected.size() && i < 3; ++i)
      why += cat(i ? "; " : "", plan.rejected[i].label(), ": ", plan.rejected[i].rejected);
    return errorf("--auto found no pipeline for ", opts.devices, " device(s) and a global batch of ",
                  opts.globalBatch, " within the memory budget (", plan.rejected.size(),
                  " candidates rejected; ", why, ")");
  }
  return plan;
}

nlohmann::json autoPlanToJson(const AutoPlan &plan, size_t show) {
  auto row = [](const AutoCandidate &c) {
    nlohmann::json j = {{"devices", c.devices},
                        {"micro_batch_size", c.microBatchSize},
                        {"micro_batches", c.microBatches},
                        {"schedule", c.schedule.name()},
                        {"stages_per_device", c.schedule.stagesPerDevice()},
                        {"label", c.label()}};
    if (c.rejected.empty()) {
      j["predicted_step_seconds"] = c.stepSeconds;
      j["predicted_bubble_fraction"] = c.bubbleFraction;
      j["peak_memory_bytes"] = c.peakMemoryBytes;
      j["recompute"] = c.recompute;
    } else {
      j["rejected"] = c.rejected;
    }
    return j;
  };
  nlohmann::json best = nlohmann::json::array(), reasons = nlohmann::json::object(),
                 examples = nlohmann::json::array();
  for (size_t i = 0; i < plan.feasible.size() && i < show; ++i)
    best.push_back(row(plan.feasible[i]));
  std::map<std::string, int> counts;
  for (const AutoCandidate &c : plan.rejected)
    if (counts[reasonClass(c.rejected)]++ == 0)
      examples.push_back(row(c));
  for (const auto &[k, n] : counts)
    reasons[k] = n;
  return {{"search_seconds", plan.searchSeconds},
          {"feasible", plan.feasible.size()},
          {"rejected", plan.rejected.size()},
          {"best", best},
          {"rejected_by_reason", reasons},
          {"rejected_examples", examples}};
}

std::string renderAutoPlanText(const AutoPlan &plan, size_t show) {
  std::ostringstream os;
  os << "auto plan: " << plan.feasible.size() + plan.rejected.size() << " candidates in "
     << formatSeconds(plan.searchSeconds) << ", " << plan.feasible.size() << " feasible; the best:\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-34s %12s %8s %12s  %s\n", "candidate", "step", "bubble",
                "peak memory", "recompute per stage");
  os << line;
  for (size_t i = 0; i < plan.feasible.size() && i < show; ++i) {
    const AutoCandidate &c = plan.feasible[i];
    std::string rec;
    for (size_t s = 0; s < c.recompute.size(); ++s)
      rec += (s ? " " : "") + c.recompute[s];
    std::snprintf(line, sizeof line, "  %-34s %12s %7.1f%% %12s  %s\n", c.label().c_str(),
                  formatSeconds(c.stepSeconds).c_str(), 100 * c.bubbleFraction,
                  formatBytes(c.peakMemoryBytes).c_str(), rec.c_str());
    os << line;
  }
  std::map<std::string, std::pair<int, const AutoCandidate *>> counts;
  for (const AutoCandidate &c : plan.rejected) {
    auto &e = counts[reasonClass(c.rejected)];
    if (e.first++ == 0)
      e.second = &c;
  }
  for (const auto &[why, e] : counts)
    os << "  rejected: " << e.first << " " << why << " (e.g. "
       << (e.second->devices > 0 ? e.second->label() : cat("b=", e.second->microBatchSize)) << ": "
       << e.second->rejected << ")\n";
  return os.str();
}

} // namespace pipec::driver
