//===- codegen/Report.cpp - The partition report --------------------------===//
#include "codegen/Report.h"

#include "partitioner/CostModel.h"
#include "runtime/train/Optimizer.h"
#include "support/FileIO.h"

#include <cstdio>
#include <sstream>

namespace pipec::codegen {

using nlohmann::json;

std::string formatBytes(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string formatCount(double v, const char *unit) {
  const char *prefix[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s%s" : "%.0f %s%s", v, prefix[u], unit);
  return buf;
}

json buildReport(const ir::Graph &g, const partitioner::Partition &part, const EmittedPlan &ep) {
  const plan::Plan &p = ep.plan;
  std::vector<ir::Node *> nodes = g.nodes();
  json r;
  r["model"] = g.name();
  r["source_model"] = p.source_model();
  r["producer"] = p.producer();
  r["stages"] = p.pipeline().num_stages();
  r["micro_batches"] = p.pipeline().num_micro_batches();
  r["micro_batch_size"] = p.pipeline().micro_batch_size();
  r["schedule"] = p.pipeline().schedule();
  r["training"] = p.pipeline().training();
  r["nodes"] = nodes.size();
  json stages = json::array();
  double totalFlops = 0, totalParams = 0;
  for (size_t s = 0; s < part.stages.size(); ++s) {
    const partitioner::Stage &st = part.stages[s];
    const plan::Device &dev = p.devices(static_cast<int>(s));
    double flops = 0, bwdFlops = 0, params = 0, paramBytes = 0;
    for (size_t i = st.begin; i < st.end; ++i)
      (nodes[i]->phase() == ir::Phase::Forward ? flops : bwdFlops) +=
          partitioner::forwardCost(*nodes[i]).flops;
    for (int32_t w : dev.weights())
      if (p.tensors(w).kind() == plan::TensorInfo::WEIGHT) {
        double n = 1;
        for (int64_t d : p.tensors(w).shape())
          n *= static_cast<double>(d);
        params += n;
        paramBytes += static_cast<double>(p.tensors(w).bytes());
      }
    json js;
    js["index"] = s;
    js["first_node"] = nodes[st.begin]->name();
    js["last_node"] = nodes[st.end - 1]->name();
    js["num_nodes"] = st.end - st.begin;
    js["parameters"] = params;
    js["parameter_bytes"] = paramBytes;
    js["weight_bytes"] = dev.weight_bytes();
    js["forward_flops_per_micro_batch"] = flops;
    js["backward_flops_per_micro_batch"] = bwdFlops;
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
    js["arena_live_lower_bound_bytes"] = ep.arenaLiveBound[s];
    js["peak_memory_bytes"] = static_cast<double>(dev.arena_bytes() + dev.weight_bytes()) + trainState;
    js["bytes_sent_per_micro_batch"] = 0;
    stages.push_back(js);
    totalFlops += flops;
    totalParams += params;
  }
  r["stage_list"] = stages;
  r["total_parameters"] = totalParams;
  r["total_forward_flops_per_micro_batch"] = totalFlops;
  // With K stages the GPipe bubble is (K-1)/(M+K-1) of the step on
  // balanced stages; K = 1 has none.
  double K = part.stages.size(), M = p.pipeline().num_micro_batches();
  r["predicted_bubble_fraction"] = (K - 1) / (M + K - 1);
  return r;
}

std::string renderReportText(const json &r) {
  std::ostringstream os;
  os << "partition report: " << r["model"].get<std::string>() << " - " << r["nodes"].get<size_t>()
     << " nodes, K=" << r["stages"].get<unsigned>() << " stages, M=" << r["micro_batches"].get<unsigned>()
     << " micro-batches of " << r["micro_batch_size"].get<int64_t>() << ", schedule "
     << r["schedule"].get<std::string>() << (r["training"].get<bool>() ? ", training" : ", inference")
     << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-22s %-22s %6s %10s %14s %14s %11s %11s %11s %9s\n",
                "stage", "first node", "last node", "nodes", "params", "fwd FLOP/mb", "bwd FLOP/mb",
                "weights", "arena", "peak", "sent/mb");
  os << line;
  auto clip = [](std::string s) { return s.size() > 22 ? s.substr(0, 10) + ".." + s.substr(s.size() - 10) : s; };
  for (const json &s : r["stage_list"]) {
    std::snprintf(line, sizeof line, "%-5zu %-22s %-22s %6zu %10s %14s %14s %11s %11s %11s %9s\n",
                  s["index"].get<size_t>(), clip(s["first_node"].get<std::string>()).c_str(),
                  clip(s["last_node"].get<std::string>()).c_str(), s["num_nodes"].get<size_t>(),
                  formatCount(s["parameters"].get<double>(), "").c_str(),
                  formatCount(s["forward_flops_per_micro_batch"].get<double>(), "FLOP").c_str(),
                  formatCount(s["backward_flops_per_micro_batch"].get<double>(), "FLOP").c_str(),
                  formatBytes(s["weight_bytes"].get<double>()).c_str(),
                  formatBytes(s["arena_bytes"].get<double>()).c_str(),
                  formatBytes(s["peak_memory_bytes"].get<double>()).c_str(),
                  formatBytes(s["bytes_sent_per_micro_batch"].get<double>()).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "total: %s parameters, %s per micro-batch forward; predicted bubble %.1f%%\n",
                formatCount(r["total_parameters"].get<double>(), "").c_str(),
                formatCount(r["total_forward_flops_per_micro_batch"].get<double>(), "FLOP").c_str(),
                100.0 * r["predicted_bubble_fraction"].get<double>());
  os << line;
  return os.str();
}

namespace {
std::string escapeHtml(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

/// Bars of forward FLOPs and memory per stage.
std::string balanceSvg(const json &r) {
  std::ostringstream os;
  const json &st = r["stage_list"];
  double maxF = 1, maxM = 1;
  for (const json &s : st) {
    maxF = std::max(maxF, s["forward_flops_per_micro_batch"].get<double>());
    maxM = std::max(maxM, s["peak_memory_bytes"].get<double>());
  }
  int W = 640, rowH = 28, H = 40 + rowH * static_cast<int>(st.size());
  os << "<svg id=\"stage-balance\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
     << "\" height=\"" << H << "\">\n";
  os << "<text x=\"0\" y=\"14\" font-size=\"12\">forward FLOPs (blue) and peak memory (orange) per stage</text>\n";
  for (size_t i = 0; i < st.size(); ++i) {
    double f = st[i]["forward_flops_per_micro_batch"].get<double>() / maxF;
    double m = st[i]["peak_memory_bytes"].get<double>() / maxM;
    int y = 30 + static_cast<int>(i) * rowH;
    os << "<text x=\"0\" y=\"" << y + 14 << "\" font-size=\"12\">stage " << i << "</text>\n";
    os << "<rect class=\"flops\" x=\"60\" y=\"" << y << "\" width=\"" << static_cast<int>(f * 500)
       << "\" height=\"10\" fill=\"#4a7ebb\"><title>"
       << formatCount(st[i]["forward_flops_per_micro_batch"].get<double>(), "FLOP") << "</title></rect>\n";
    os << "<rect class=\"memory\" x=\"60\" y=\"" << y + 12 << "\" width=\"" << static_cast<int>(m * 500)
       << "\" height=\"10\" fill=\"#e8923a\"><title>"
       << formatBytes(st[i]["peak_memory_bytes"].get<double>()) << "</title></rect>\n";
  }
  os << "</svg>\n";
  return os.str();
}

/// GPipe's figure 2: forward boxes per stage and micro-batch over time, on
/// unit-time stages (the balanced-stage schedule the bubble formula assumes).
std::string timelineSvg(const json &r) {
  std::ostringstream os;
  int K = r["stages"].get<int>(), M = r["micro_batches"].get<int>();
  int slots = M + K - 1;
  int cell = std::max(8, std::min(40, 560 / std::max(1, slots)));
  int W = 60 + cell * slots + 10, H = 30 + 24 * K;
  os << "<svg id=\"pipeline-timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
     << "\" height=\"" << H << "\">\n";
  os << "<text x=\"0\" y=\"14\" font-size=\"12\">forward schedule: stage x time, F(micro-batch)</text>\n";
  for (int s = 0; s < K; ++s) {
    int y = 24 + 24 * s;
    os << "<text x=\"0\" y=\"" << y + 14 << "\" font-size=\"12\">stage " << s << "</text>\n";
    for (int mb = 0; mb < M; ++mb) {
      int x = 60 + cell * (s + mb);
      os << "<rect class=\"fwd\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell - 1
         << "\" height=\"20\" fill=\"#6aa84f\"><title>F" << mb << " on stage " << s
         << "</title></rect>\n";
      if (cell >= 16)
        os << "<text x=\"" << x + 3 << "\" y=\"" << y + 14 << "\" font-size=\"10\">F" << mb << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
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
  os << "<h2>Stage balance</h2>\n" << balanceSvg(r);
  os << "<h2>Pipeline timeline</h2>\n" << timelineSvg(r);
  os << "</body></html>\n";
  return os.str();
}

Status writeReport(const std::string &dir, const json &report) {
  PIPEC_TRY(writeFileAtomic(joinPath(dir, "report.json"), report.dump(2) + "\n"));
  PIPEC_TRY(writeFileAtomic(joinPath(dir, "report.txt"), renderReportText(report)));
  return writeFileAtomic(joinPath(dir, "report.html"), renderReportHtml(report));
}

} // namespace pipec::codegen
