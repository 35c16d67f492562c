//===- tools/capacity/main.cpp - Largest trainable GPT per configuration ---===//
//
// pipec-capacity [--profile accel-8gb] [--dmodel D] [--heads H] [--seq S]
//                [--vocab V] [--micro-batch-size B] [-m M] [--json]
// GPipe's Table 1 for the GPT sample family: the most blocks (and
// parameters) that fit the profile's device memory for
//   Naive-1     K = 1, one batch of M x B samples, no recompute
//   Pipeline-1  K = 1, M micro-batches of B, recompute full
//   Pipeline-K  K = 2, 4, ... --max-devices, recompute full
// with pipec's memory model (tools/capacity/Capacity.h).
//
//===----------------------------------------------------------------------===//
#include "tools/capacity/Capacity.h"
#include "partitioner/DeviceProfile.h"
#include "support/Format.h"
#include "support/Json.h"
#include "tools/CliCommon.h"
#include "tools/capacity/GptFamily.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

using namespace pipec;

namespace {

struct Options {
  std::string profile = "accel-8gb";
  std::string mem;
  samples::GptOptions gpt{2, 1024, 16, 512, 8192, false};
  int64_t microBatchSize = 1;
  int microBatches = 8;
  std::string schedule = "gpipe";
  int optimizerStates = 2;
  int maxDevices = 8;
  std::string precision = "fp32";
  bool json = false;
};

std::vector<partitioner::CapacityQuery> configurations(const Options &o, double budget) {
  std::vector<partitioner::CapacityQuery> qs;
  // Checked in main.
  const pipeline::Schedule schedule = pipeline::Schedule::parse(o.schedule).take();
  auto add = [&](std::string label, int K, int M, int64_t B, std::string rec) {
    partitioner::CapacityQuery q;
    q.label = std::move(label);
    q.numStages = K;
    q.microBatches = M;
    q.microBatchSize = B;
    q.schedule = schedule;
    q.recompute = std::move(rec);
    q.optimizerStates = o.optimizerStates;
    q.profile = o.profile;
    q.memoryBudget = budget;
    qs.push_back(std::move(q));
  };
  add("Naive-1", 1, 1, o.microBatchSize * o.microBatches, "none");
  for (int K = 1; K <= o.maxDevices; K *= 2)
    add(cat("Pipeline-", K), K, o.microBatches, o.microBatchSize, "full");
  return qs;
}

void printTable(const Options &o, const partitioner::LayerFamily &f,
                const std::vector<partitioner::CapacityResult> &rs) {
  std::printf("%s, %s; budget %s per device, schedule %s, optimizer states %d\n",
              f.name.c_str(), o.profile.c_str(), formatBytes(rs[0].memoryBudget).c_str(),
              o.schedule.c_str(), o.optimizerStates);
  std::printf("parameters = %s + %s per block\n",
              formatCount(rs[0].fixedParameters, "").c_str(),
              formatCount(rs[0].parametersPerBlock, "").c_str());
  std::printf("%-11s %3s %3s %6s %9s %7s %12s %8s %9s %11s %11s %11s %11s\n", "config", "K", "M",
              "batch", "recompute", "blocks", "parameters", "x naive", "bind", "w+g+opt",
              "activations", "other", "total");
  const double naive = rs[0].parameters;
  for (const partitioner::CapacityResult &r : rs) {
    const partitioner::MemoryBreakdown &m = r.binding();
    std::string ratio = naive > 0 ? cat(static_cast<int>(r.parameters / naive * 10 + 0.5) / 10.0)
                                  : std::string("-");
    std::string bind = cat(r.bindingStage, " (", r.blocksPerStage[r.bindingStage], ")");
    std::printf("%-11s %3d %3d %6lld %9s %7lld %12s %8s %9s %11s %11s %11s %11s\n",
                r.query.label.c_str(), r.query.numStages, r.query.microBatches,
                static_cast<long long>(r.query.microBatchSize * r.query.microBatches),
                r.query.recompute.c_str(), static_cast<long long>(r.blocks),
                formatCount(r.parameters, "").c_str(), ratio.c_str(), bind.c_str(),
                formatBytes(m.weights + m.gradients + m.optimizerState).c_str(),
                formatBytes(m.activations).c_str(),
                formatBytes(m.communication + m.workspace).c_str(),
                formatBytes(m.total()).c_str());
  }
  double fitError = 0;
  for (const partitioner::CapacityResult &r : rs)
    fitError = std::max(fitError, r.fitError);
  std::printf("bind: the stage with the least room (its blocks); memory of that stage. "
              "Affine fit on %d and %d blocks per stage, checked on %d: largest relative "
              "error %.2g\n",
              partitioner::kDefaultProbe[0], partitioner::kDefaultProbe[1],
              partitioner::kDefaultProbe[2], fitError);
}

Status run(const Options &o) {
  double budget = 0;
  if (!o.mem.empty()) {
    PIPEC_ASSIGN(budget, partitioner::parseByteSize(o.mem));
  }
  if (o.maxDevices < 1)
    return errorf("--max-devices must be at least 1 (got ", o.maxDevices, ")");
  PIPEC_TRY(pipeline::Schedule::parse(o.schedule).status());
  PIPEC_ASSIGN(passes::Precision precision, passes::parsePrecision(o.precision));
  partitioner::LayerFamily f = capacity::gptFamily(o.gpt, precision);
  PIPEC_ASSIGN(std::vector<partitioner::CapacityResult> rs,
               partitioner::maxTrainableBlocks(f, configurations(o, budget)));
  if (o.json) {
    nlohmann::json j = {{"family", f.name}, {"configurations", nlohmann::json::array()}};
    for (const partitioner::CapacityResult &r : rs)
      j["configurations"].push_back(partitioner::capacityToJson(r));
    std::cout << jsonText(j, 2) << "\n";
  } else {
    printTable(o, f, rs);
  }
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"pipec-capacity: the largest GPT each pipeline configuration can train "
               "(GPipe's Table 1, with pipec's memory model)"};
  app.add_option("--profile", o.profile, "device profile (name or FILE.json)")
      ->capture_default_str();
  app.add_option("--mem", o.mem, "memory budget per device, e.g. 8GiB (default: the profile's)");
  app.add_option("--dmodel", o.gpt.dmodel, "model width")->capture_default_str();
  app.add_option("--heads", o.gpt.heads, "attention heads")->capture_default_str();
  app.add_option("--seq", o.gpt.seq, "sequence length")->capture_default_str();
  app.add_option("--vocab", o.gpt.vocab, "vocabulary")->capture_default_str();
  app.add_option("--micro-batch-size", o.microBatchSize, "sequences per micro-batch")
      ->capture_default_str();
  app.add_option("-m,--micro-batches", o.microBatches,
                 "micro-batches M (Naive-1 runs the M x B mini-batch at once)")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule,
                 "pipeline schedule with one stage per device: gpipe (the default: the schedule "
                 "of GPipe's table this tool reproduces), 1f1b, zbh1 or zbh2")
      ->capture_default_str();
  app.add_option("--optimizer-states", o.optimizerStates,
                 "state tensors per parameter (adam 2)")
      ->capture_default_str();
  app.add_option("--max-devices", o.maxDevices, "Pipeline-K for K = 1, 2, 4, ... up to this")
      ->capture_default_str();
  app.add_option("--precision", o.precision,
                 "fp32, bf16 or fp16: the products' operands and what the backward keeps, as pipec "
                 "--precision compiles them")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print JSON instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return tools::cliExit(app, e);
  }
  Status s = tools::guarded([&] { return run(o); });
  if (!s.isOk()) {
    std::fprintf(stderr, "pipec-capacity: error: %s\n", printable(s.message()).c_str());
    return 1;
  }
  return 0;
}
