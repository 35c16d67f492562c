//===- runtime/RunReport.cpp - What a run measured beside the prediction --===//
#include "runtime/RunReport.h"

#include "pipeline/Simulate.h"
#include "runtime/plan/Predicted.h"
#include "support/FileIO.h"
#include "support/Format.h"
#include "support/TimelineSvg.h"
#include "support/Json.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace pipec::runtime {

using nlohmann::json;

namespace {

/// "F", "B", "W", "R", "send", "recv", "opt".
const char *kindName(plan::Instruction::Kind k) { return pipeline::simOpName(plan::simOpOf(k)); }

bool isCompute(plan::Instruction::Kind k) {
  return k != plan::Instruction::SEND && k != plan::Instruction::RECV;
}

/// The plan device session device d runs (replicas run the same programs).
int planDevice(const Session &s, size_t d) {
  return static_cast<int>(d % static_cast<size_t>(s.plan().devices_size()));
}

/// Steps traced on every device: the trace of device d holds one event per
/// instruction of its program, step after step.
size_t tracedSteps(const Session &s) {
  size_t steps = SIZE_MAX;
  for (size_t d = 0; d < s.devices().size(); ++d) {
    const size_t P = static_cast<size_t>(s.plan().devices(planDevice(s, d)).program_size());
    steps = std::min(steps, P ? s.deviceTrace(static_cast<int>(d)).size() / P : SIZE_MAX);
  }
  return steps == SIZE_MAX ? 0 : steps;
}

/// Start and end of traced step k: the first device's start to the last
/// device's end.
std::pair<double, double> stepSpan(const Session &s, size_t k) {
  double start = INFINITY, end = -INFINITY;
  for (size_t d = 0; d < s.devices().size(); ++d) {
    const auto &t = s.deviceTrace(static_cast<int>(d));
    const size_t P = static_cast<size_t>(s.plan().devices(planDevice(s, d)).program_size());
    if (P == 0)
      continue;
    start = std::min(start, t[k * P].start);
    end = std::max(end, t[k * P + P - 1].end);
  }
  return {start, end};
}

json slice(const plan::Plan &p, const plan::Instruction &ins, double start, double end) {
  return {{"label", instructionLabel(p, ins)}, {"kind", kindName(ins.kind())},
          {"micro_batch", ins.micro_batch()}, {"stage", ins.stage()},
          {"start", start},                   {"end", end}};
}

std::string plainLabel(const plan::Plan &p, const plan::Instruction &ins) {
  const unsigned mb = ins.micro_batch();
  const bool stages = p.pipeline().stages_per_device() > 1;
  switch (ins.kind()) {
  case plan::Instruction::SEND:
    return cat("send ", p.tensors(ins.tensor()).name(), " mb", mb, " -> ", ins.peer());
  case plan::Instruction::RECV:
    return cat("recv ", p.tensors(ins.tensor()).name(), " mb", mb, " <- ", ins.peer());
  case plan::Instruction::OPTIMIZER: return "opt";
  default: return cat(kindName(ins.kind()), mb, stages ? cat(".", ins.stage()) : "");
  }
}

} // namespace

std::string instructionLabel(const plan::Plan &p, const plan::Instruction &ins) {
  const std::string label = plainLabel(p, ins);
  return ins.previous_step() ? label + "'" : label; // 2bw: of the step before
}

json deviceReport(const Session &session) {
  const plan::Plan &p = session.plan();
  json devs = json::array();
  const double stepSec = session.meanStepSeconds();
  for (size_t d = 0; d < session.devices().size(); ++d) {
    const DeviceStats &st = session.deviceStats(static_cast<int>(d));
    const plan::Device &pd = p.devices(planDevice(session, d));
    const double n = std::max(1.0, static_cast<double>(session.measuredSteps()));
    const uint64_t train = session.trainingStateBytes(static_cast<int>(d));
    json dj;
    dj["device"] = d;
    dj["busy_seconds_per_step"] = st.busySeconds / n;
    dj["optimizer_seconds_per_step"] = st.optimizerSeconds / n;
    dj["wait_seconds_per_step"] = st.waitSeconds / n;
    dj["comm_seconds_per_step"] = st.commSeconds / n;
    // Idle: the part of the step the device spent neither computing nor
    // copying (the pipeline bubble and waits for peers).
    dj["idle_fraction"] =
        stepSec > 0
            ? std::max(0.0, 1.0 - (st.busySeconds + st.optimizerSeconds + st.commSeconds) / n / stepSec)
            : 0.0;
    dj["bytes_sent_per_step"] = static_cast<double>(st.bytesSent) / n;
    dj["instructions"] = st.instructions;
    dj["nodes_run"] = st.nodesRun;
    dj["nodes_skipped"] = st.nodesSkipped;
    // Compiled with LLVM or interpreted (runtime/cpu/ScheduleJit.h).
    if (const auto &ex = session.devices()[d])
      dj["host_schedule"] = ex->hostSchedule();
    dj["arena_bytes"] = st.arenaBytes;
    dj["peak_memory_bytes"] = st.arenaHighWater + pd.weight_bytes() + train;
    dj["planned_peak_memory_bytes"] = pd.arena_bytes() + pd.weight_bytes() + train;
    dj["predicted_busy_seconds_per_step"] = pd.predicted_busy_seconds();
    dj["predicted_memory_bytes"] = pd.predicted_memory_bytes();
    devs.push_back(dj);
  }
  return devs;
}

json opProfile(const Session &session, int64_t steps) {
  const plan::Plan &p = session.plan();
  json nodes = json::array();
  std::map<std::string, std::pair<double, double>> byOp; // measured, predicted
  double total = 0, totalPredicted = 0;
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  for (int d = 0; d < p.devices_size(); ++d) {
    const plan::Device &dev = p.devices(d);
    const std::vector<double> &sec = session.devices()[static_cast<size_t>(d)]->nodeSeconds();
    // How often each node runs per step (once per micro-batch, or once for
    // the optimizer's nodes), to scale its predicted time.
    std::vector<int> runs(static_cast<size_t>(dev.nodes_size()), 0);
    for (const plan::Instruction &ins : dev.program())
      for (int32_t ni : ins.nodes())
        ++runs[static_cast<size_t>(ni)];
    for (int i = 0; i < dev.nodes_size() && i < static_cast<int>(sec.size()); ++i) {
      const plan::Node &node = dev.nodes(i);
      const double perStep = sec[static_cast<size_t>(i)] / n;
      const double predicted = node.predicted_seconds() * runs[static_cast<size_t>(i)];
      nodes.push_back({{"device", d},
                       {"node", node.name()},
                       {"op", node.op_type()},
                       {"seconds", perStep},
                       {"predicted_seconds", predicted}});
      byOp[node.op_type()].first += perStep;
      byOp[node.op_type()].second += predicted;
      total += perStep;
      totalPredicted += predicted;
    }
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto &[op, s] : byOp)
    order.emplace_back(s.first, op);
  std::sort(order.rbegin(), order.rend());
  json ops = json::array();
  for (const auto &[seconds, op] : order)
    ops.push_back({{"op", op}, {"seconds", seconds}, {"predicted_seconds", byOp[op].second}});
  return {{"plan", p.model_name()},
          {"steps", steps},
          {"micro_batches", p.pipeline().num_micro_batches()},
          {"nodes", nodes},
          {"by_op", ops},
          {"seconds", total},
          {"predicted_seconds", totalPredicted}};
}

Status writeTrace(const std::string &path, const Session &session) {
  const plan::Plan &p = session.plan();
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "measured"}}}});
  for (size_t d = 0; d < session.devices().size(); ++d) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", d},
                      {"args", {{"name", session.distributed() ? cat("device ", d, " (rank ", d, ")")
                                                               : cat("device ", d)}}}});
    const plan::Device &pd = p.devices(planDevice(session, d));
    const auto &trace = session.deviceTrace(static_cast<int>(d));
    for (size_t i = 0; i < trace.size(); ++i) {
      const TraceEvent &e = trace[i];
      const auto kind = static_cast<plan::Instruction::Kind>(e.kind);
      // The i-th event is instruction i mod P of the device's program; a
      // transfer names its peer device of the session (replicas offset).
      const plan::Instruction &ins =
          pd.program(static_cast<int>(i % static_cast<size_t>(pd.program_size())));
      const bool send = kind == plan::Instruction::SEND;
      const std::string name =
          kind == plan::Instruction::OPTIMIZER ? "optimizer"
          : send || kind == plan::Instruction::RECV
              ? cat(send ? "send " : "recv ", p.tensors(e.tensor).name(), " mb", e.microBatch,
                    send ? " -> " : " <- ", e.peer)
              : instructionLabel(p, ins);
      json args = {{"micro_batch", e.microBatch}};
      if (e.updateSeconds > 0)
        args["parameter_updates_ms"] = e.updateSeconds * 1e3; // made inside the step
      events.push_back({{"name", name}, {"cat", plan::Instruction::Kind_Name(kind)}, {"ph", "X"},
                        {"pid", 0}, {"tid", d}, {"ts", e.start * 1e6},
                        {"dur", std::max(0.0, (e.end - e.start) * 1e6)},
                        {"args", args}});
    }
  }
  // The prediction, once, from the first traced step's start.
  if (tracedSteps(session) > 0) {
    auto sim = pipeline::simulate(plan::predictedPrograms(p));
    if (!sim)
      return sim.status().withContext("simulating the plan's predicted programs");
    const double t0 = stepSpan(session, 0).first;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1},
                      {"args", {{"name", "predicted"}}}});
    for (size_t d = 0; d < session.devices().size(); ++d) {
      const int pdi = planDevice(session, d);
      const plan::Device &pd = p.devices(pdi);
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", d},
                        {"args", {{"name", cat("device ", d, " predicted")}}}});
      for (const pipeline::SimEvent &ev : sim->events[static_cast<size_t>(pdi)]) {
        const plan::Instruction &ins = pd.program(static_cast<int>(ev.instr));
        events.push_back({{"name", instructionLabel(p, ins)},
                          {"cat", plan::Instruction::Kind_Name(ins.kind())},
                          {"ph", "X"},
                          {"pid", 1},
                          {"tid", d},
                          {"ts", (t0 + ev.start) * 1e6},
                          {"dur", std::max(0.0, (ev.end - ev.start) * 1e6)},
                          {"args", {{"micro_batch", ins.micro_batch()}}}});
      }
    }
  }
  json j = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return writeFileAtomic(path, jsonText(j));
}

Expected<json> comparePrediction(const Session &session, size_t top) {
  const plan::Plan &p = session.plan();
  const size_t steps = tracedSteps(session);
  if (steps == 0)
    return errorf("no traced step to compare with the prediction (the session was opened "
                  "without tracing, or ran no step)");
  auto sim = pipeline::simulate(plan::predictedPrograms(p));
  if (!sim)
    return sim.status().withContext("simulating the plan's predicted programs");
  const size_t N = session.devices().size();

  // The traced step of median length.
  std::vector<std::pair<double, size_t>> lengths;
  for (size_t k = 0; k < steps; ++k) {
    auto [s, e] = stepSpan(session, k);
    lengths.push_back({e - s, k});
  }
  std::sort(lengths.begin(), lengths.end());
  const size_t chosen = lengths[(lengths.size() - 1) / 2].second;
  const double t0 = stepSpan(session, chosen).first;

  json pred = {{"step_seconds", sim->makespan}, {"timeline", json::array()}};
  json meas = {{"step_seconds", lengths[(lengths.size() - 1) / 2].first},
               {"step_index", chosen},
               {"steps", steps},
               {"timeline", json::array()}};
  json devices = json::array();
  json diffs = json::array();
  const json measuredDevices = deviceReport(session);
  struct Diff {
    double by;
    json row;
  };
  std::vector<Diff> all;
  for (size_t d = 0; d < N; ++d) {
    const int pdi = planDevice(session, d);
    const plan::Device &pd = p.devices(pdi);
    const size_t P = static_cast<size_t>(pd.program_size());
    const auto &trace = session.deviceTrace(static_cast<int>(d));
    json pt = json::array(), mt = json::array();
    double predBusy = 0;
    for (const pipeline::SimEvent &ev : sim->events[static_cast<size_t>(pdi)]) {
      const plan::Instruction &ins = pd.program(static_cast<int>(ev.instr));
      pt.push_back(slice(p, ins, ev.start, ev.end));
      if (isCompute(ins.kind()))
        predBusy += ev.end - ev.start;
    }
    for (size_t i = 0; i < P; ++i) {
      const TraceEvent &e = trace[chosen * P + i];
      mt.push_back(slice(p, pd.program(static_cast<int>(i)), e.start - t0, e.end - t0));
      const plan::Instruction &ins = pd.program(static_cast<int>(i));
      if (ins.kind() == plan::Instruction::RECV)
        continue;
      // The median over the traced steps: one stalled step does not make
      // an instruction look slow. Parameter updates made inside the step
      // count where the plan predicts them, at the OPTIMIZER.
      std::vector<double> times(steps);
      for (size_t k = 0; k < steps; ++k) {
        const TraceEvent &ev = trace[k * P + i];
        times[k] = ev.end - ev.start - ev.updateSeconds;
        if (ins.kind() == plan::Instruction::OPTIMIZER)
          for (size_t j = 0; j < P; ++j)
            times[k] += trace[k * P + j].updateSeconds;
      }
      std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(steps / 2), times.end());
      const double measured = times[steps / 2];
      const double predicted = plan::predictedSeconds(pd, ins);
      all.push_back({std::abs(measured - predicted),
                     {{"device", d},
                      {"instruction", i},
                      {"label", instructionLabel(p, ins)},
                      {"kind", kindName(ins.kind())},
                      {"predicted_seconds", predicted},
                      {"measured_seconds", measured},
                      {"measured_over_predicted", predicted > 0 ? measured / predicted : 0.0}}});
    }
    pred["timeline"].push_back(pt);
    meas["timeline"].push_back(mt);
    const json &md = measuredDevices[d];
    const double measuredBusy =
        md["busy_seconds_per_step"].get<double>() + md["optimizer_seconds_per_step"].get<double>();
    devices.push_back(
        {{"device", d},
         {"predicted_busy_seconds", predBusy},
         {"measured_busy_seconds", measuredBusy},
         {"predicted_idle_fraction", sim->makespan > 0 ? 1.0 - predBusy / sim->makespan : 0.0},
         {"measured_idle_fraction", md["idle_fraction"].get<double>()},
         {"predicted_memory_bytes", md["predicted_memory_bytes"]},
         {"planned_peak_memory_bytes", md["planned_peak_memory_bytes"]},
         {"measured_peak_memory_bytes", md["peak_memory_bytes"]}});
  }
  std::stable_sort(all.begin(), all.end(), [](const Diff &a, const Diff &b) { return a.by > b.by; });
  for (size_t i = 0; i < all.size() && i < top; ++i)
    diffs.push_back(all[i].row);
  return json{{"model", p.model_name()},
              {"schedule", p.pipeline().schedule()},
              {"devices_in_plan", p.devices_size()},
              {"micro_batches", p.pipeline().num_micro_batches()},
              {"predicted", pred},
              {"measured", meas},
              {"devices", devices},
              {"largest_differences", diffs}};
}

namespace {

/// A timeline of comparePrediction's (devices as rows) on the time scale
/// [0, T].
std::string timeline(const json &timeline, double T, const std::string &title) {
  std::vector<std::vector<TimelineBox>> devices(timeline.size());
  for (size_t d = 0; d < timeline.size(); ++d)
    for (const json &ev : timeline[d])
      devices[d].push_back({ev["kind"].get<std::string>(), ev["label"].get<std::string>(),
                            ev["start"].get<double>(), ev["end"].get<double>()});
  TimelineSvgOptions o;
  o.attributes = "class=\"timeline\"";
  o.captionHtml = escapeHtml(title);
  o.axisX = 90;
  return timelineSvg(devices, T, o);
}

} // namespace

std::string renderRunReportHtml(const json &c) {
  std::ostringstream os;
  const double predStep = c["predicted"]["step_seconds"].get<double>();
  const double measStep = c["measured"]["step_seconds"].get<double>();
  const double T = std::max(predStep, measStep);
  os << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>piperun: "
     << escapeHtml(c["model"].get<std::string>()) << ", predicted and measured</title>\n"
     << "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>\n";
  os << "<h1>" << escapeHtml(c["model"].get<std::string>()) << ": predicted and measured</h1>\n";
  os << "<p>Schedule " << escapeHtml(c["schedule"].get<std::string>()) << ", "
     << c["micro_batches"].get<unsigned>() << " micro-batches. Predicted step "
     << escapeHtml(formatSeconds(predStep)) << "; measured step " << escapeHtml(formatSeconds(measStep))
     << " (step " << c["measured"]["step_index"].get<size_t>() << " of "
     << c["measured"]["steps"].get<size_t>() << " traced, the median length). Both on one time scale.</p>\n";
  os << "<h2>Timelines</h2>\n";
  os << timeline(c["predicted"]["timeline"], T, "predicted (the plan's times, simulated)");
  os << timeline(c["measured"]["timeline"], T, "measured");
  os << "<h2>Devices</h2>\n<table id=\"devices\"><tr><th>device</th><th>busy predicted</th>"
        "<th>busy measured</th><th>idle predicted</th><th>idle measured</th>"
        "<th>memory model</th><th>planned peak</th><th>measured peak</th></tr>\n";
  char pct[32];
  for (const json &d : c["devices"]) {
    os << "<tr><td>" << d["device"].get<size_t>() << "</td><td>"
       << escapeHtml(formatSeconds(d["predicted_busy_seconds"].get<double>())) << "</td><td>"
       << escapeHtml(formatSeconds(d["measured_busy_seconds"].get<double>())) << "</td>";
    for (const char *k : {"predicted_idle_fraction", "measured_idle_fraction"}) {
      std::snprintf(pct, sizeof pct, "%.1f%%", 100 * d[k].get<double>());
      os << "<td>" << pct << "</td>";
    }
    for (const char *k : {"predicted_memory_bytes", "planned_peak_memory_bytes", "measured_peak_memory_bytes"})
      os << "<td>" << escapeHtml(formatBytes(d[k].get<double>())) << "</td>";
    os << "</tr>\n";
  }
  os << "</table>\n<h2>Where prediction and measurement differ most</h2>\n"
        "<table id=\"differences\"><tr><th>device</th><th>instruction</th><th>predicted</th>"
        "<th>measured (median over steps)</th><th>measured / predicted</th></tr>\n";
  char ratio[32];
  for (const json &r : c["largest_differences"]) {
    std::snprintf(ratio, sizeof ratio, "%.2f", r["measured_over_predicted"].get<double>());
    os << "<tr><td>" << r["device"].get<size_t>() << "</td><td style=\"text-align:left\">#"
       << r["instruction"].get<size_t>() << " " << escapeHtml(r["label"].get<std::string>())
       << "</td><td>" << escapeHtml(formatSeconds(r["predicted_seconds"].get<double>()))
       << "</td><td>" << escapeHtml(formatSeconds(r["measured_seconds"].get<double>()))
       << "</td><td>" << ratio << "</td></tr>\n";
  }
  os << "</table>\n</body></html>\n";
  return os.str();
}

} // namespace pipec::runtime
