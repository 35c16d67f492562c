//===- codegen/Report.cpp - The partition report --------------------------===//
#include "codegen/Report.h"

#include "partitioner/CostModel.h"
#include "partitioner/PipelineSim.h"
#include "runtime/plan/Predicted.h"
#include "runtime/train/Optimizer.h"
#include "support/FileIO.h"
#include "support/FusedOps.h"
#include "support/Format.h"
#include "support/TimelineSvg.h"
#include "support/Json.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace pipec::codegen {

using nlohmann::json;
namespace pt = pipec::partitioner;

namespace {

double maxOverStages(const json &stages, const char *key) {
  double m = 0;
  for (const json &s : stages)
    m = std::max(m, s[key].get<double>());
  return m;
}

} // namespace

Expected<json> buildReport(const ir::Graph &g, const pt::Partition &part, const EmittedPlan &ep) {
  const plan::Plan &p = ep.plan;
  const pt::PartitionEstimate &est = part.estimate;
  json r;
  r["model"] = g.name();
  r["source_model"] = p.source_model();
  r["producer"] = p.producer();
  // Devices K; stages K x stages_per_device (interleaved, zbv).
  r["devices"] = p.pipeline().num_stages();
  r["stages"] = part.numStages();
  r["stages_per_device"] = std::max(1u, p.pipeline().stages_per_device());
  r["micro_batches"] = p.pipeline().num_micro_batches();
  r["micro_batch_size"] = p.pipeline().micro_batch_size();
  r["schedule"] = p.pipeline().schedule();
  r["training"] = p.pipeline().training();
  if (p.pipeline().training()) {
    r["optimizer"] = p.training().optimizer();
    r["lr_schedule"] = p.training().lr_schedule();
    r["clip_grad_norm"] = p.training().clip_grad_norm();
    if (p.training().has_loss_scaling())
      r["loss_scaling"] = {{"initial_scale", p.training().loss_scaling().initial_scale()},
                           {"window", p.training().loss_scaling().window()}};
    // 2bw keeps each parameter twice; the stages' memory counts both.
    r["weight_versions"] = est.schedule.weightVersions();
    double params = 0;
    for (const pt::StageEstimate &e : est.stages)
      params += e.parameters;
    r["second_weight_version_bytes"] = est.schedule.weightVersions() > 1 ? params * sizeof(float) : 0.0;
  }
  r["nodes"] = g.numNodes();
  // The products' operand type (pipec --precision: the mixed-precision
  // pass's 16-bit copies, docs/precision.md).
  std::string precision = "fp32";
  for (const ir::Node *n : g.nodes())
    if (n->attrs().count(kProductOutputDType) && n->numInputs() > 1 && n->input(0) && n->input(1)) {
      precision = productOperandType(n->input(0)->dtype(), n->input(1)->dtype()) == DType::BF16 ? "bf16" : "fp16";
      break;
    }
  r["precision"] = precision;
  r["recompute"] = est.recompute;
  r["partition_search"] = est.search;
  r["device_profile"] = {{"name", est.model.profile.name},
                         {"description", est.model.profile.description},
                         {"source", est.model.profile.source},
                         {"measured_at", est.model.profile.measuredAt},
                         {"measured_node_times", est.model.measured.size()}};
  r["memory_budget_bytes"] = est.memoryBudget;

  // Simulate the emitted programs; a multi-stage plan without SEND/RECV
  // cannot be timed faithfully, so the partition's ideal schedule stands in.
  const size_t K = part.stages.size();
  const bool onePerDevice = part.numDevices() == K;
  bool hasComm = false;
  for (const plan::Device &d : p.devices())
    for (const plan::Instruction &ins : d.program())
      hasComm = hasComm || ins.kind() == plan::Instruction::SEND;
  std::vector<pipeline::SimProgram> progs;
  if (part.numDevices() == 1 || hasComm) {
    progs = plan::predictedPrograms(p);
    r["timeline_source"] = "plan";
  } else {
    std::vector<pt::StageTimes> times;
    for (const pt::StageEstimate &e : est.stages)
      times.push_back(pt::timesOf(e));
    PIPEC_ASSIGN(progs, pt::idealSchedule(est.schedule, est.microBatches, est.training, times));
    r["timeline_source"] = "partition";
  }
  auto sim = pipeline::simulate(progs);
  if (!sim)
    return sim.status().withContext("simulating the emitted schedule");

  json stages = json::array();
  double totalFlops = 0, totalParams = 0;
  std::vector<size_t> nodesOnStage(K, 0);
  for (const ir::Node *n : g.nodes())
    if (int s = part.stageOf(n); s >= 0 && static_cast<size_t>(s) < K)
      ++nodesOnStage[static_cast<size_t>(s)];
  // Per stage; the memory and busy figures of a device that runs several
  // stages (arena, weights, training state, peak, busy) are the device's.
  for (size_t s = 0; s < K; ++s) {
    const pt::Stage &st = part.stages[s];
    const pt::StageEstimate &e = est.stages[s];
    const int device = part.deviceOf(static_cast<int>(s));
    const plan::Device &dev = p.devices(device);
    const size_t numNodes = nodesOnStage[s];
    double paramBytes = 0;
    for (int32_t w : dev.weights())
      if (p.tensors(w).kind() == plan::TensorInfo::WEIGHT)
        paramBytes += static_cast<double>(p.tensors(w).bytes());
    json js;
    js["index"] = s;
    js["device"] = device;
    // (A graph folded to constants has one stage with no nodes.)
    js["first_node"] = st.end > st.begin ? part.order[st.begin]->name() : "";
    js["last_node"] = st.end > st.begin ? part.order[st.end - 1]->name() : "";
    js["forward_nodes"] = st.end - st.begin;
    js["num_nodes"] = numNodes;
    js["parameters"] = e.parameters;
    js["parameter_bytes"] = paramBytes;
    js["weight_bytes"] = dev.weight_bytes();
    js["forward_flops_per_micro_batch"] = e.forwardFlops;
    js["backward_flops_per_micro_batch"] = e.backwardFlops;
    js["forward_seconds"] = e.forwardTime;
    js["backward_seconds"] = e.backwardTime;
    js["recompute_seconds"] = e.recomputeTime;
    js["send_seconds"] = e.sendForwardTime + e.sendBackwardTime;
    js["optimizer_seconds"] = e.optimizerTime;
    js["stage_seconds_per_micro_batch"] = e.time();
    js["recompute"] = e.recompute;
    js["micro_batches_in_flight"] = e.inFlight;
    js["predicted_memory"] = pt::memoryToJson(e.memory);
    js["fits_budget"] = est.memoryBudget <= 0 || e.memory.total() <= est.memoryBudget;
    // Training keeps a gradient accumulator and the optimizer's state
    // buffers per parameter, outside the arena.
    double trainState = 0;
    if (p.pipeline().training()) {
      auto oc = train::parseOptimizer(p.training().optimizer());
      auto opt = oc ? train::Optimizer::create(*oc) : Expected<train::Optimizer>(oc.status());
      size_t states = opt ? opt->stateTensors() : 0;
      trainState = paramBytes * static_cast<double>(1 + states);
    }
    js["training_state_bytes"] = trainState;
    js["arena_bytes"] = dev.arena_bytes();
    js["arena_live_lower_bound_bytes"] =
        static_cast<size_t>(device) < ep.arenaLiveBound.size() ? ep.arenaLiveBound[device] : 0;
    js["peak_memory_bytes"] =
        static_cast<double>(dev.arena_bytes() + dev.weight_bytes()) + trainState;
    // Bytes sent per micro-batch: the plan's SENDs of micro-batch 0 when it
    // has them, else the partition's cut tensors.
    double fwdBytes = 0, gradBytes = 0;
    if (hasComm && onePerDevice) {
      for (const plan::Instruction &ins : dev.program())
        if (ins.kind() == plan::Instruction::SEND && ins.micro_batch() == 0)
          (ins.peer() > static_cast<int>(s) ? fwdBytes : gradBytes) +=
              static_cast<double>(p.tensors(ins.tensor()).bytes());
      js["bytes_sent_source"] = "plan";
    } else {
      fwdBytes = s + 1 < K ? e.bytesOut : 0;
      gradBytes = est.training && s > 0 ? e.bytesIn : 0;
      js["bytes_sent_source"] = "partition";
    }
    js["bytes_sent_per_micro_batch"] = fwdBytes;
    js["gradient_bytes_sent_per_micro_batch"] = gradBytes;
    js["busy_seconds"] = sim->busy[static_cast<size_t>(device)];
    stages.push_back(js);
    totalFlops += e.forwardFlops;
    totalParams += e.parameters;
  }
  r["stage_list"] = stages;
  r["total_parameters"] = totalParams;
  // Parameters the model stored as Constant nodes (pipec --train-constants).
  double promoted = 0, promotedTensors = 0;
  for (const ir::Value *c : g.constants())
    if (c->isPromotedConstant() && ir::isParameter(*c)) {
      promoted += static_cast<double>(c->type().numel());
      ++promotedTensors;
    }
  r["parameters_from_constant_nodes"] = promoted;
  r["parameter_tensors_from_constant_nodes"] = promotedTensors;
  r["total_forward_flops_per_micro_batch"] = totalFlops;
  const double M = p.pipeline().num_micro_batches();
  const double mbSize = static_cast<double>(p.pipeline().micro_batch_size());
  const double samples = M * (mbSize > 0 ? mbSize : 1);
  r["predicted_step_seconds"] = sim->makespan;
  r["predicted_bubble_fraction"] = sim->bubbleFraction;
  r["predicted_samples_per_second"] = sim->makespan > 0 ? samples / sim->makespan : 0;
  r["single_device_step_seconds"] = est.singleDeviceStepTime;
  // A plan with nothing to run (every output a constant) is as fast as one
  // device.
  r["predicted_speedup"] = sim->makespan > 0 ? est.singleDeviceStepTime / sim->makespan : 1.0;
  r["bottleneck_stage_seconds"] = est.bottleneck;
  json timeline = json::array();
  for (size_t d = 0; d < progs.size(); ++d) {
    json dev = json::array();
    for (const pipeline::SimEvent &ev : sim->events[d]) {
      const pipeline::SimInstr &in = progs[d][ev.instr];
      dev.push_back({{"op", pipeline::simOpName(in.op)},
                     {"micro_batch", in.microBatch},
                     {"start", ev.start},
                     {"end", ev.end}});
    }
    timeline.push_back(dev);
  }
  r["timeline"] = timeline;
  return r;
}

std::string renderReportText(const json &r) {
  std::ostringstream os;
  os << "partition report: " << printable(r["model"].get<std::string>()) << " - " << r["nodes"].get<size_t>()
     << " nodes, K=" << r["devices"].get<unsigned>()
     << (r["stages_per_device"].get<unsigned>() > 1
             ? cat(" devices x ", r["stages_per_device"].get<unsigned>(), " = ",
                   r["stages"].get<unsigned>())
             : std::string())
     << " stages, M=" << r["micro_batches"].get<unsigned>()
     << " micro-batches of " << r["micro_batch_size"].get<int64_t>() << ", schedule "
     << r["schedule"].get<std::string>() << (r["training"].get<bool>() ? ", training" : ", inference")
     << "\n";
  if (r.contains("optimizer"))
    os << "optimizer " << r["optimizer"].get<std::string>()
       << (r["lr_schedule"].get<std::string>().empty()
               ? ""
               : ", lr schedule " + r["lr_schedule"].get<std::string>())
       << (r["clip_grad_norm"].get<double>() > 0
               ? cat(", gradients clipped to norm ", r["clip_grad_norm"].get<double>())
               : "")
       << (r["precision"].get<std::string>() != "fp32" ? ", products in " + r["precision"].get<std::string>() : "")
       << (r.contains("loss_scaling")
               ? cat(", loss scaling from ", r["loss_scaling"]["initial_scale"].get<double>(), " (window ",
                     r["loss_scaling"]["window"].get<int64_t>(), ")")
               : "")
       << (r["weight_versions"].get<unsigned>() > 1
               ? cat(", ", r["weight_versions"].get<unsigned>(),
                     " weight versions (step t runs on W(t-1); the second copy: ",
                     formatBytes(r["second_weight_version_bytes"].get<double>()), ")")
               : "")
       << "\n";
  const double budget = r["memory_budget_bytes"].get<double>();
  const std::string measuredAt = r["device_profile"]["measured_at"].get<std::string>();
  os << "device profile " << r["device_profile"]["name"].get<std::string>()
     << (measuredAt.empty() ? "" : " (measured " + measuredAt + ")") << ", memory budget "
     << formatBytes(budget) << " per device, recompute " << r["recompute"].get<std::string>()
     << "\n";
  char line[640];
  std::snprintf(line, sizeof line, "%-5s %-22s %-22s %6s %10s %12s %10s %10s %10s %11s %11s %10s\n",
                "stage", "first node", "last node", "nodes", "params", "fwd FLOP/mb", "fwd/mb",
                "bwd/mb", "send/mb", "memory", "arena", "sent/mb");
  os << line;
  auto clip = [](std::string s) { return s.size() > 22 ? s.substr(0, 10) + ".." + s.substr(s.size() - 10) : s; };
  for (const json &s : r["stage_list"]) {
    std::string mem = formatBytes(s["predicted_memory"]["total"].get<double>());
    if (!s["fits_budget"].get<bool>())
      mem += "!";
    // Several stages per device: "stage@device"; the arena is the device's.
    const std::string index = r["stages_per_device"].get<unsigned>() > 1
                                  ? cat(s["index"].get<size_t>(), "@", s["device"].get<int>())
                                  : cat(s["index"].get<size_t>());
    std::snprintf(line, sizeof line, "%-5s %-22s %-22s %6zu %10s %12s %10s %10s %10s %11s %11s %10s\n",
                  index.c_str(), clip(printable(s["first_node"].get<std::string>())).c_str(),
                  clip(printable(s["last_node"].get<std::string>())).c_str(), s["num_nodes"].get<size_t>(),
                  formatCount(s["parameters"].get<double>(), "").c_str(),
                  formatCount(s["forward_flops_per_micro_batch"].get<double>(), "FLOP").c_str(),
                  formatSeconds(s["forward_seconds"].get<double>()).c_str(),
                  formatSeconds(s["backward_seconds"].get<double>() +
                                s["recompute_seconds"].get<double>()).c_str(),
                  formatSeconds(s["send_seconds"].get<double>()).c_str(), mem.c_str(),
                  formatBytes(s["arena_bytes"].get<double>()).c_str(),
                  formatBytes(s["bytes_sent_per_micro_batch"].get<double>()).c_str());
    os << line;
  }
  std::string promoted;
  if (r.value("parameter_tensors_from_constant_nodes", 0.0) > 0)
    promoted = cat(" (", formatCount(r["parameters_from_constant_nodes"].get<double>(), ""),
                   " of them in ", r["parameter_tensors_from_constant_nodes"].get<double>(),
                   " Constant nodes, trained by --train-constants)");
  std::snprintf(line, sizeof line, "total: %s parameters%s, %s per micro-batch forward\n",
                formatCount(r["total_parameters"].get<double>(), "").c_str(), promoted.c_str(),
                formatCount(r["total_forward_flops_per_micro_batch"].get<double>(), "FLOP").c_str());
  os << line;
  if (r.contains("data_parallel")) {
    const unsigned D = r["data_parallel"].get<unsigned>();
    std::snprintf(line, sizeof line,
                  "data parallel: %u replicas of the %u stages on %u devices, %u micro-batches a step; "
                  "gradients summed over the replicas at %s: %s moved per step, predicted %s\n",
                  D, r["devices"].get<unsigned>(), D * r["devices"].get<unsigned>(),
                  D * r["micro_batches"].get<unsigned>(),
                  r.value("optimizer_sharded", false) ? "each parameter's updating replica" : "replica 0",
                  formatBytes(r["replica_exchange_bytes_per_step"].get<double>()).c_str(),
                  formatSeconds(r["predicted_replica_exchange_seconds"].get<double>()).c_str());
    os << line;
    if (r.value("optimizer_sharded", false)) {
      std::snprintf(line, sizeof line,
                    "sharded optimizer (ZeRO-1): each parameter updated by one replica's device, which keeps "
                    "its optimizer state: at most %s of state per device (%s unsharded)\n",
                    formatBytes(r["optimizer_state_bytes_largest_shard"].get<double>()).c_str(),
                    formatBytes(r["optimizer_state_bytes_unsharded"].get<double>()).c_str());
      os << line;
    }
  }
  if (r["predicted_step_seconds"].get<double>() <= 0) {
    os << "predicted: nothing to compute (every output is a constant or an input)\n";
    return os.str();
  }
  std::snprintf(line, sizeof line,
                "predicted: step %s, bubble %.1f%%, %.4g samples/s, speed-up %.2fx over one device "
                "(%s)\n",
                formatSeconds(r["predicted_step_seconds"].get<double>()).c_str(),
                100.0 * r["predicted_bubble_fraction"].get<double>(),
                r["predicted_samples_per_second"].get<double>(),
                r["predicted_speedup"].get<double>(),
                formatSeconds(r["single_device_step_seconds"].get<double>()).c_str());
  os << line;
  return os.str();
}

namespace {
/// Per stage: predicted time per micro-batch (stacked forward, backward,
/// recompute, send), forward FLOPs, and the memory breakdown against the
/// budget (a red line).
std::string balanceSvg(const json &r) {
  std::ostringstream os;
  const json &st = r["stage_list"];
  const double budget = r["memory_budget_bytes"].get<double>();
  double maxT = maxOverStages(st, "stage_seconds_per_micro_batch");
  double maxF = maxOverStages(st, "forward_flops_per_micro_batch");
  double maxM = 0;
  for (const json &s : st)
    maxM = std::max(maxM, s["predicted_memory"]["total"].get<double>());
  // The budget line is drawn when it is on the scale of the stages (a 24 GiB
  // host next to 3 MiB stages would flatten every bar).
  bool budgetShown = budget > 0 && budget <= 4 * maxM;
  if (budgetShown)
    maxM = std::max(maxM, budget);
  const int x0 = 70, barW = 480, rowH = 46;
  int W = x0 + barW + 200, H = 48 + rowH * static_cast<int>(st.size());
  os << "<svg id=\"stage-balance\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
     << "\" height=\"" << H << "\">\n";
  os << "<text x=\"0\" y=\"12\" font-size=\"12\">per stage: time per micro-batch (forward green, "
        "backward blue, recompute purple, send grey), forward FLOPs (dark blue),</text>\n"
     << "<text x=\"0\" y=\"26\" font-size=\"12\">memory (weights, gradients, optimizer state, "
        "activations, communication, workspace; budget "
     << escapeHtml(formatBytes(budget)) << (budgetShown ? ": red line" : ", off this scale")
     << ")</text>\n";
  static const std::pair<const char *, const char *> kTime[] = {
      {"forward_seconds", "#6aa84f"}, {"backward_seconds", "#3d85c6"},
      {"recompute_seconds", "#8e7cc3"}, {"send_seconds", "#999999"}};
  static const std::pair<const char *, const char *> kMem[] = {
      {"weights", "#e69138"}, {"gradients", "#f6b26b"}, {"optimizer_state", "#ffd966"},
      {"activations", "#cc4125"}, {"communication", "#999999"}, {"workspace", "#b4a7d6"}};
  for (size_t i = 0; i < st.size(); ++i) {
    const json &s = st[i];
    int y = 36 + static_cast<int>(i) * rowH;
    os << "<text x=\"0\" y=\"" << y + 18 << "\" font-size=\"12\">stage " << i << "</text>\n";
    int x = x0;
    for (const auto &[key, color] : kTime) {
      int w = scalePixels(s[key].get<double>(), maxT, barW);
      os << "<rect class=\"time\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << w
         << "\" height=\"12\" fill=\"" << color << "\"><title>" << key << " "
         << formatSeconds(s[key].get<double>()) << "</title></rect>\n";
      x += w;
    }
    os << "<text x=\"" << x + 4 << "\" y=\"" << y + 10 << "\" font-size=\"10\">"
       << formatSeconds(s["stage_seconds_per_micro_batch"].get<double>()) << "</text>\n";
    int wf = scalePixels(s["forward_flops_per_micro_batch"].get<double>(), maxF, barW);
    os << "<rect class=\"flops\" x=\"" << x0 << "\" y=\"" << y + 14 << "\" width=\"" << wf
       << "\" height=\"8\" fill=\"#1f3f77\"><title>"
       << formatCount(s["forward_flops_per_micro_batch"].get<double>(), "FLOP") << "</title></rect>\n";
    x = x0;
    for (const auto &[key, color] : kMem) {
      double v = s["predicted_memory"][key].get<double>();
      int w = scalePixels(v, maxM, barW);
      os << "<rect class=\"memory\" x=\"" << x << "\" y=\"" << y + 24 << "\" width=\"" << w
         << "\" height=\"12\" fill=\"" << color << "\"><title>" << key << " " << formatBytes(v)
         << "</title></rect>\n";
      x += w;
    }
    os << "<text x=\"" << x0 + barW + 6 << "\" y=\"" << y + 34 << "\" font-size=\"10\">"
       << formatBytes(s["predicted_memory"]["total"].get<double>()) << "</text>\n";
  }
  if (budgetShown) {
    int bx = x0 + scalePixels(budget, maxM, barW);
    os << "<line class=\"budget\" x1=\"" << bx << "\" y1=\"32\" x2=\"" << bx << "\" y2=\"" << H - 4
       << "\" stroke=\"#cc0000\" stroke-width=\"2\"/>\n";
  }
  os << "</svg>\n";
  return os.str();
}

/// GPipe's figure 2 from the simulation: per device, boxes F(mb), B(mb),
/// W(mb), R(mb) and the optimizer over predicted time.
std::string timelineSvg(const json &r) {
  const json &tl = r["timeline"];
  const double T = r["predicted_step_seconds"].get<double>();
  std::vector<std::vector<TimelineBox>> devices(tl.size());
  for (size_t d = 0; d < tl.size(); ++d)
    for (const json &ev : tl[d]) {
      const std::string op = ev["op"].get<std::string>();
      const int mb = ev["micro_batch"].get<int>();
      devices[d].push_back({op, op == "opt" || op == "send" ? op : op + std::to_string(mb),
                            ev["start"].get<double>(), ev["end"].get<double>()});
    }
  TimelineSvgOptions o;
  o.attributes = "id=\"pipeline-timeline\"";
  o.captionHtml = "simulated step (" + escapeHtml(formatSeconds(T)) + ", " + r["timeline_source"].get<std::string>() +
                  " programs): F forward, B backward, W weight gradient, R recompute, opt optimizer; "
                  "gaps are the bubble";
  o.axisX = 70;
  return pipec::timelineSvg(devices, T, o);
}
} // namespace

std::string renderReportHtml(const json &r) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pipec partition report: "
     << escapeHtml(r["model"].get<std::string>())
     << "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>\n";
  os << "<h1>Partition report: " << escapeHtml(r["model"].get<std::string>()) << "</h1>\n<pre>"
     << escapeHtml(renderReportText(r)) << "</pre>\n";
  os << "<p>Device profile: " << escapeHtml(r["device_profile"]["description"].get<std::string>())
     << " (source: " << escapeHtml(r["device_profile"]["source"].get<std::string>()) << ")</p>\n";
  os << "<h2>Stage balance</h2>\n" << balanceSvg(r);
  os << "<h2>Pipeline timeline</h2>\n" << timelineSvg(r);
  os << "</body></html>\n";
  return os.str();
}

Status writeReport(const std::string &dir, const json &report) {
  PIPEC_TRY(writeFileAtomic(joinPath(dir, "report.json"), jsonText(report, 2) + "\n"));
  PIPEC_TRY(writeFileAtomic(joinPath(dir, "report.txt"), renderReportText(report)));
  return writeFileAtomic(joinPath(dir, "report.html"), renderReportHtml(report));
}

} // namespace pipec::codegen
