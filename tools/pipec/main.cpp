//===- tools/pipec/main.cpp - The pipec compiler driver -------------------===//
//
// pipec MODEL.onnx -o MODEL.plan [-k K] [-m M] [-b N] [--dim name=N]...
// Imports an ONNX model (or IR text, .pir), runs the pass pipeline,
// partitions, emits a plan directory and prints the partition report.
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "codegen/Report.h"
#include "driver/AutoPlan.h"
#include "passes/TrainingPasses.h"
#include "pipeline/Schedule.h"
#include "frontend/OnnxExport.h"
#include "frontend/OnnxImporter.h"
#include "frontend/OnnxProto.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "tools/calibrate/Calibrate.h"
#include "passes/PassManager.h"
#include "pipec/Version.h"
#include "runtime/plan/PlanIO.h"
#include "samples/gen/Models.h"
#include "tools/CliCommon.h"
#include "support/FileIO.h"
#include "support/Format.h"
#include "support/Json.h"
#include "support/Npy.h"
#include "support/Parallel.h"
#include "support/PhaseTimer.h"

#include <CLI/CLI.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <set>
#include <iostream>
#include <optional>

using namespace pipec;

namespace {

struct Options {
  std::string model;
  std::string output;
  int stages = 1;
  int microBatches = 1;
  int dataParallel = 1;
  bool shardOptimizer = false;
  std::string schedule = "1f1b";
  unsigned virtualStages = 0;
  int64_t batch = 0;
  std::vector<std::string> dims;
  std::vector<std::string> freeze;
  bool trainConstants = false;
  std::string emit = "plan";
  std::string passes;
  std::vector<std::string> printAfter;
  bool verifyEach = false;
  bool timePasses = false;
  int stopAfter = -1;
  std::string irConstants = "16";
  bool train = false;
  driver::TrainOptions trainOpts;
  bool quiet = false;
  bool copyWeights = false;
  std::string arenaPlanner = "auto";
  std::string precision = "fp32";
  std::vector<std::string> keepFp32;
  // Partitioner (docs/partitioner.md).
  std::string profile;
  std::string mem;
  int devices = 0;
  bool autoPlan = false;
  int64_t globalBatch = 0;
  std::string opTimes;
  std::string recompute = "none";
  bool calibrate = false;
  bool install = false;
  std::string link;
  int calibrateThreads = 1;
  /// --device cpu|cuda|cuda-emulated: what --calibrate measures.
  std::string device = "cpu";
  /// --math exact|tf32: a GPU's products while it is measured.
  std::string math = "exact";
};

/// --calibrate --device cuda: pipec-calibrate-gpu (tools/calibrate/
/// GpuMain.cpp), beside pipec, measures the GPU through the runtime's CUDA
/// backend and prints the profile as JSON; pipec links no CUDA library.
/// Its progress goes to pipec's stderr.
Expected<partitioner::DeviceProfile> calibrateGpuTool(const std::string &device, const std::string &math) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return errorf("--calibrate --device ", device, ": cannot read pipec's own path (/proc/self/exe)");
  self[n] = '\0';
  std::string tool = self;
  tool = tool.substr(0, tool.rfind('/') + 1) + "pipec-calibrate-gpu";
  if (access(tool.c_str(), X_OK) != 0)
    return errorf("--calibrate --device ", device, ": ", tool, " is missing (it is built beside pipec)");
  int out[2];
  if (pipe(out) != 0)
    return errorf("--calibrate --device ", device, ": pipe: ", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::vector<std::string> args = {tool, "--device", device, "--math", math};
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, tool.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    return errorf("--calibrate --device ", device, ": cannot run ", tool, ": ", std::strerror(spawned));
  }
  std::string text;
  char buf[65536];
  for (ssize_t got; (got = read(out[0], buf, sizeof buf)) != 0;) {
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      break;
    text.append(buf, static_cast<size_t>(got));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string())
    return errorf(j["error"].get<std::string>());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !j.is_object())
    return errorf("--calibrate --device ", device, ": ", tool, " failed (",
                  WIFEXITED(status) ? cat("exit status ", WEXITSTATUS(status)) : std::string("killed by a signal"),
                  ")");
  return partitioner::parseProfile(j, tool);
}

/// --calibrate [-o FILE.json | --install]: measure this machine, print or
/// write a profile, or install it as this machine's default.
Status runCalibrate(const Options &o) {
  partitioner::DeviceProfile p;
  if (o.device == "cpu") {
    PIPEC_ASSIGN(p, calibrate::calibrateMachine(o.calibrateThreads, o.link));
  } else {
    PIPEC_ASSIGN(p, calibrateGpuTool(o.device, o.math));
  }
  std::string text = jsonText(partitioner::profileToJson(p), 2) + "\n";
  if (o.install) {
    const std::string dir = partitioner::userProfileDirectory();
    if (dir.empty())
      return errorf("--install: no directory for this machine's profiles (set HOME, "
                    "XDG_CONFIG_HOME or PIPEC_USER_PROFILE_DIR)");
    PIPEC_TRY(makeDirs(dir));
    const std::string file = joinPath(dir, p.name + ".json");
    PIPEC_TRY(writeFileAtomic(file, text));
    if (o.device == "cpu")
      std::cerr << "profile written to " << file << " (pipec's default profile '" << p.name
                << "' on this machine from now on)\n";
    else
      std::cerr << "profile written to " << file << " (compile for this GPU with --profile " << p.name << ")\n";
    return Status::ok();
  }
  if (o.output.empty()) {
    std::cout << text;
    return Status::ok();
  }
  PIPEC_TRY(writeFileAtomic(o.output, text));
  std::cerr << "profile written to " << o.output << "\n";
  return Status::ok();
}

Expected<std::pair<std::string, int64_t>> parseDim(const std::string &s) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    return errorf("--dim expects name=value, got '", s, "'");
  try {
    size_t used = 0;
    int64_t v = std::stoll(s.substr(eq + 1), &used);
    if (used != s.size() - eq - 1 || v < 1)
      throw std::invalid_argument("bad");
    return std::make_pair(s.substr(0, eq), v);
  } catch (const std::exception &) {
    return errorf("--dim ", s, ": the value must be a positive integer");
  }
}

bool isIrText(const std::string &path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".pir") == 0;
}

Expected<std::unique_ptr<ir::Graph>> loadModel(const Options &o) {
  if (isIrText(o.model)) {
    PIPEC_ASSIGN(std::string text, readFile(o.model));
    PIPEC_ASSIGN(auto g, ir::parseGraph(text, o.model));
    ir::VerifyOptions vo;
    vo.requireTypes = false;
    PIPEC_TRY(ir::verifyGraph(*g, vo).withContext(o.model));
    return g;
  }
  frontend::ImportOptions io;
  if (o.batch > 0)
    io.batch = o.batch;
  for (const std::string &d : o.dims) {
    PIPEC_ASSIGN(auto kv, parseDim(d));
    io.dims[kv.first] = kv.second;
  }
  io.trainableConstants = o.trainConstants;
  for (const std::string &f : o.freeze) {
    size_t eq = f.find('=');
    if (eq == std::string::npos)
      return errorf("--freeze-input expects NAME=FILE.npy, got '", f, "'");
    PIPEC_ASSIGN(Tensor t, readNpy(f.substr(eq + 1)));
    io.freezeInputs[f.substr(0, eq)] = t;
  }
  return frontend::importOnnxFile(o.model, io);
}

/// The plan is written: exit without destroying the graph, the plan and
/// the report, as compilers do (clang -disable-free): freeing the millions
/// of nodes, tensors and allocations of a large compile takes a noticeable
/// part of it (bench/results/log.md). Under AddressSanitizer the objects
/// are destroyed as usual, so that LeakSanitizer still checks them.
void exitWithoutTeardown() {
#if !defined(__SANITIZE_ADDRESS__)
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(0);
#endif
}

Status compile(const Options &o, const std::string &commandLine) {
  bool trainFlags = !o.trainOpts.lossOutput.empty() || !o.trainOpts.lossKind.empty() ||
                    !o.trainOpts.lrSchedule.empty() || o.trainOpts.lr != 0 ||
                    o.trainOpts.clipGradNorm != 0 || o.trainOpts.optimizer != "adam" ||
                    o.trainOpts.lossScale != 0;
  if (trainFlags && !o.train)
    return errorf("--loss, --loss-output, --optimizer, --lr, --lr-schedule, --clip-grad-norm and --loss-scale "
                  "need --train");
  if (o.trainConstants && !o.train)
    return errorf("--train-constants needs --train");
  auto schedule = pipeline::Schedule::parse(o.schedule, o.virtualStages);
  if (!schedule)
    return schedule.status();
  if (o.microBatches < 1)
    return errorf("-m/--micro-batches must be at least 1 (got ", o.microBatches, ")");
  if (o.stages < 1)
    return errorf("-k/--stages must be at least 1 (got ", o.stages, ")");
  if (o.dataParallel < 1 || o.dataParallel > 4096)
    return errorf("--data-parallel must be 1 to 4096 replicas (got ", o.dataParallel, ")");
  if (o.emit != "plan" && o.emit != "ir" && o.emit != "report")
    return errorf("--emit must be plan, ir or report (got '", o.emit, "')");
  if (o.emit == "plan" && o.output.empty())
    return errorf("no output given: pass -o MODEL.plan (or --emit=ir / --emit=report)");
  int64_t irConstants = -1;
  if (o.irConstants != "all") {
    try {
      size_t used = 0;
      irConstants = std::stoll(o.irConstants, &used);
      if (used != o.irConstants.size() || irConstants < 0)
        throw std::invalid_argument(o.irConstants);
    } catch (const std::exception &) {
      return errorf("--ir-constants must be a number >= 0 or 'all' (got '", o.irConstants, "')");
    }
  }

  if (o.autoPlan && o.emit == "ir")
    return errorf("--auto chooses a pipeline; --emit=ir prints the graph before any");
  std::unique_ptr<ir::Graph> g;
  if (!o.autoPlan) {
    PIPEC_ASSIGN(g, loadModel(o));
  }

  driver::CompileOptions co;
  PIPEC_ASSIGN(co.precision.precision, passes::parsePrecision(o.precision));
  co.precision.keepFp32 = o.keepFp32;
  if (!o.keepFp32.empty() && co.precision.precision == passes::Precision::Fp32)
    return errorf("--keep-fp32 needs --precision bf16 or fp16");
  co.passManager.verifyEach = o.verifyEach;
  co.passManager.printAfter = o.printAfter;
  co.passManager.timePasses = o.timePasses;
  co.passManager.stopAfter = o.stopAfter;
  co.passManager.out = &std::cerr;
  if (o.passes == "none") {
    co.noPasses = true;
  } else {
    std::stringstream ss(o.passes);
    std::string p;
    while (std::getline(ss, p, ','))
      if (!p.empty())
        co.passes.push_back(p);
  }
  co.partition.numStages = o.stages;
  co.partition.profile = o.profile;
  co.partition.recompute = o.recompute;
  if (!o.mem.empty()) {
    PIPEC_ASSIGN(co.partition.memoryBudget, partitioner::parseByteSize(o.mem));
  }
  if (o.devices < 0)
    return errorf("--devices must be at least 1 (got ", o.devices, ")");
  co.partition.maxDevices = o.devices;
  if (!o.opTimes.empty()) {
    PIPEC_ASSIGN(co.partition.opTimes, partitioner::loadOpTimes(o.opTimes));
  }
  co.emit.schedule = *schedule;
  co.emit.microBatches = o.microBatches;
  co.emit.dataParallel = o.dataParallel;
  co.emit.shardOptimizer = o.shardOptimizer;
  co.emit.training = o.train;
  if (o.arenaPlanner == "greedy")
    co.emit.arenaPlanner = codegen::PlanMethod::Tree;
  else if (o.arenaPlanner == "sweep")
    co.emit.arenaPlanner = codegen::PlanMethod::Sweep;
  else if (o.arenaPlanner != "auto")
    return errorf("--arena-planner must be auto, greedy or sweep (got '", o.arenaPlanner, "')");
  if (o.copyWeights && o.emit != "plan")
    return errorf("--copy-weights needs a plan to copy them into (--emit=plan)");
  co.emit.weights = o.emit == "report" ? codegen::WeightMode::Describe
                    : o.copyWeights    ? codegen::WeightMode::Copy
                                       : codegen::WeightMode::Reference;
  co.train = o.trainOpts;
  co.emit.sourceModel = std::filesystem::path(o.model).filename().string();
  co.emit.compileOptions = commandLine;
  // The plan keeps the model's graph (not its weights) for piperun --save:
  // parsed on the other core while the compile's single-threaded passes run.
  // Checksum and parse read the file in pieces: no copy of it is held
  // through the compile.
  PIPEC_ASSIGN(uint64_t modelSize, regularFileSize(o.model));
  PIPEC_ASSIGN(co.emit.sourceCrc32c, crc32cOfFileRegion(o.model, 0, modelSize));
  std::future<Expected<onnx::ModelProto>> parsedSource;
  if (o.emit == "plan" && !isIrText(o.model))
    parsedSource = std::async(std::launch::async, [&o] {
      return tools::guardedValue([&] { return frontend::parseModelProtoFile(o.model); });
    });
  if (o.emit == "ir") {
    // The graph after the passes; with --train after the training passes,
    // and with --recompute after partitioning and the recompute pass.
    if (o.train) {
      PhaseTimer phases;
      PIPEC_ASSIGN(codegen::EmitOptions emit, driver::prepareGraph(*g, co, phases));
      if (co.partition.recompute != "none" && co.passManager.stopAfter < 0) {
        PIPEC_ASSIGN(partitioner::PartitionOptions po, driver::partitionOptionsFor(co, emit));
        PIPEC_TRY(driver::partitionAndRecompute(*g, co, emit, po).status());
      }
    } else {
      PIPEC_TRY(driver::runPasses(*g, co));
    }
    ir::PrintOptions po;
    po.maxConstantElements = irConstants;
    ir::printGraph(*g, std::cout, po);
    return Status::ok();
  }
  std::optional<driver::AutoPlan> chosen;
  if (o.autoPlan) {
    driver::AutoPlanOptions ao;
    ao.devices = o.devices;
    ao.globalBatch = o.globalBatch;
    auto load = [&](int64_t b) {
      Options ob = o;
      ob.batch = b;
      return loadModel(ob);
    };
    PIPEC_ASSIGN(chosen, driver::autoPlan(load, co, ao));
    const driver::AutoCandidate &best = chosen->feasible.front();
    co.partition.numStages = best.devices;
    co.partition.maxDevices = 0;
    co.partition.recompute = o.train ? "auto" : "none";
    co.emit.microBatches = best.microBatches;
    co.emit.schedule = best.schedule;
    PIPEC_ASSIGN(g, load(best.microBatchSize));
    if (!o.quiet && o.emit != "report")
      std::cout << driver::renderAutoPlanText(*chosen, 5) << "chosen: " << best.label() << "\n";
  }
  auto compiled = driver::compileGraph(*g, co);
  if (!compiled) {
    if (parsedSource.valid())
      parsedSource.wait();
    return compiled.status();
  }
  driver::Compiled c = compiled.take();
  if (chosen)
    c.report["auto_plan"] = driver::autoPlanToJson(*chosen, 5);
  if (o.emit == "report") {
    std::cout << jsonText(c.report, 2) << "\n";
    return Status::ok();
  }
  // The plan goes into a sibling directory that replaces -o's in one rename
  // once complete: an error (a full disk) leaves the old plan, if any, and
  // no partial one.
  if (isDirectory(o.output) && !std::filesystem::is_empty(o.output) &&
      !fileExists(joinPath(o.output, plan::kPlanFile)))
    return errorf("refusing to overwrite '", o.output,
                  "': it is a non-empty directory that holds no plan");
  if (fileExists(o.output) && !isDirectory(o.output))
    return errorf("cannot write the plan to '", o.output, "': it exists and is not a directory");
  std::string out = o.output;
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  const std::string tmp = out + ".tmp-" + uniqueSuffix();
  PhaseTimer phases;
  Status written = [&]() -> Status {
    PIPEC_TRY(codegen::writePlanDirectory(tmp, c.plan, /*manifest=*/false));
    phases.done("write: plan.pb and weights");
    PIPEC_TRY(codegen::writeReport(tmp, c.report));
    phases.done("write: report");
    if (!isIrText(o.model)) {
      // Keep the model's graph (not its weights) for piperun --save.
      std::set<std::string> stored;
      for (const plan::TensorInfo &t : c.plan.plan.tensors())
        if (!t.onnx_name().empty() &&
            (t.kind() == plan::TensorInfo::WEIGHT || t.kind() == plan::TensorInfo::CONSTANT))
          stored.insert(t.onnx_name());
      PIPEC_ASSIGN(onnx::ModelProto source, parsedSource.get());
      PIPEC_ASSIGN(std::string stripped, frontend::stripInitializers(std::move(source), o.model, stored));
      PIPEC_TRY(writeFileAtomic(joinPath(tmp, frontend::kSourceModelFile), stripped));
      phases.done("write: source.onnx");
    }
    PIPEC_TRY(plan::writeManifest(tmp));
    phases.done("write: manifest");
    return replaceDirectory(tmp, out);
  }();
  if (o.timePasses)
    phases.print(std::cerr, "writing", false);
  if (!written.isOk()) {
    (void)removeTree(tmp);
    return written;
  }
  if (!o.quiet)
    std::cout << codegen::renderReportText(c.report) << "plan written to " << o.output << "\n";
  exitWithoutTeardown();
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  std::string passHelp = "passes to run (comma-separated, or 'none') instead of the default pipeline:";
  for (const auto &p : passes::registeredPasses())
    passHelp += "\n  " + p.flag + ": " + p.description;
  passHelp += "\nwith --train the driver adds, after them:";
  for (const auto &p : passes::trainingPasses())
    passHelp += "\n  " + p.flag + ": " + p.description;
  CLI::App app{"pipec: compile an ONNX model into a pipeline-parallel execution plan"};
  app.set_version_flag("--version", tools::versionLine("pipec"));
  app.add_option("model", o.model, "ONNX model (.onnx) or pipec IR text (.pir)");
  app.add_option("-o,--output", o.output, "plan directory to write");
  app.add_option("-k,--stages", o.stages,
                 "number of devices K of the pipeline (one stage each, or --virtual-stages "
                 "of them under the interleaved schedule, two under zbv)");
  app.add_option("--data-parallel", o.dataParallel,
                 "replicas D of the pipeline (data parallelism): D x K devices, D x M micro-batches a "
                 "step, each gradient summed over the replicas in replica order (default 1)");
  app.add_flag("--shard-optimizer", o.shardOptimizer,
               "with --data-parallel: shard the optimizer's state over the replicas (ZeRO-1): each "
               "parameter is updated by one replica's device, which alone keeps its state and sends the "
               "others the new weight; the same results, 1/D of the state per device");
  app.add_option("-m,--micro-batches", o.microBatches, "micro-batches M per step");
  app.add_option("--schedule", o.schedule,
                 "pipeline schedule: gpipe (all forwards, then all backwards), 1f1b "
                 "(PipeDream-Flush: one forward, one backward; default), zbh1 (1F1B whose "
                 "later stages defer weight gradients: a shorter drain) or zbh2 (zbh1 with "
                 "K - i - 1 more warm-up forwards on stage i: more memory, a stage slowed "
                 "for a moment stalls the next less), interleaved (interleaved 1F1B: "
                 "--virtual-stages v stages per device, round robin, bubble (K-1)/(vM); M a "
                 "multiple of K), zbv (zero-bubble V: two stages per device in a V, weight "
                 "gradients deferred, 1F1B's activation memory) or 2bw (PipeDream-2BW, training: "
                 "1F1B without a flush between steps, two weight versions, each step's update "
                 "applied one step late; M >= K; docs/training.md)");
  app.add_option("--virtual-stages", o.virtualStages,
                 "stages per device v of the interleaved schedule (default 2)");
  app.add_option("-b,--batch", o.batch,
                 "bind the leading symbolic dimension of every input (the micro-batch size)");
  app.add_option("--dim", o.dims,
                 "bind a symbolic dimension: name=value, or INPUT:AXIS=value for dimension AXIS of "
                 "graph input INPUT, named or not (repeatable)");
  app.add_flag("--train-constants", o.trainConstants,
               "with --train: train the float values of Constant nodes (two elements or more) as "
               "parameters, as initializers are; for models that store their weights as Constant "
               "nodes (paddle2onnx)");
  app.add_option("--freeze-input", o.freeze,
                 "make a graph input a constant: NAME=FILE.npy (repeatable)");
  app.add_option("--emit", o.emit, "what to produce: plan (default), ir (print the IR after the passes; with --train after the training passes, with --recompute after partitioning and recompute), report (JSON)");
  app.add_option("--passes", o.passes, passHelp);
  app.add_option("--print-ir-after", o.printAfter, "print the IR to stderr after this pass ('all')");
  app.add_flag("--verify-each", o.verifyEach, "verify the IR after every pass");
  app.add_flag("--time-passes", o.timePasses, "print the time each pass took");
  app.add_option("--stop-after", o.stopAfter, "run only the first N passes");
  app.add_option("--ir-constants", o.irConstants,
                 "with --emit=ir: print constants up to this many elements, 'all' for every one");
  app.add_option("--precision", o.precision,
                 "fp32 (default), bf16 or fp16: matrix products and convolutions read their operands "
                 "through bf16 (fp16) copies and accumulate in fp32; master weights, gradients, optimizer "
                 "state, normalizations, softmax and losses stay fp32 (docs/precision.md). fp16 is for "
                 "inference (training needs loss scaling, not implemented)");
  app.add_option("--keep-fp32", o.keepFp32,
                 "with --precision: nodes whose operands stay fp32 (names as --emit=ir prints them; "
                 "repeatable, or comma-separated)")
      ->delimiter(',');
  app.add_option("--arena-planner", o.arenaPlanner,
                 "how each device's arena is planned: greedy (by size, the tightest), sweep (best "
                 "fit in time order, 10x faster on large stages) or auto (greedy below 131,072 "
                 "buffers a device, sweep from there; the default)");
  app.add_flag("--copy-weights", o.copyWeights,
               "copy the weights of the model's external data files into the plan (a "
               "self-contained plan); by default the plan refers to those files, checked by "
               "CRC-32C when piperun loads them");
  app.add_flag("--train", o.train, "compile for training: loss, backward pass and optimizer");
  app.add_option("--loss-output", o.trainOpts.lossOutput,
                 "with --train: the scalar graph output to minimise (when the model has several)");
  app.add_option("--loss", o.trainOpts.lossKind,
                 "with --train: attach a loss: cross-entropy (int64 labels) or mse");
  app.add_option("--logits", o.trainOpts.logits, "with --loss: the graph output the loss reads");
  app.add_option("--labels", o.trainOpts.labels,
                 "with --loss: name of the new labels/target input (default labels)");
  app.add_option("--optimizer", o.trainOpts.optimizer,
                 "with --train: sgd, adam (default), adamw or rmsprop, with options as in "
                 "'sgd:lr=0.1,momentum=0.9,nesterov=true' (docs/training.md); torch.optim defaults");
  app.add_option("--lr", o.trainOpts.lr, "with --train: learning rate (overrides the optimizer's)");
  app.add_option("--lr-schedule", o.trainOpts.lrSchedule,
                 "with --train: e.g. 'cosine:T=1000,min=1e-5,warmup=100' (docs/training.md)");
  app.add_option("--clip-grad-norm", o.trainOpts.clipGradNorm,
                 "with --train: clip gradients to this global L2 norm");
  app.add_option("--loss-scale", o.trainOpts.lossScale,
                 "with --train: dynamic loss scaling from this scale, a power of two (default: none; "
                 "65536 with --precision fp16): a step with non-finite gradients is skipped and halves it");
  app.add_option("--loss-scale-window", o.trainOpts.lossScaleWindow,
                 "with --loss-scale: finite steps in a row that double the scale (default 2000)");
  app.add_flag("-q,--quiet", o.quiet, "do not print the partition report");
  app.add_option("--profile", o.profile,
                 "device profile for the cost model: a name in partitioner/profiles/ (this-cpu "
                 "(default), v100-sxm2-16gb, a100-sxm-80gb, h100-sxm, tpu-v3-core, accel-8gb, ...) "
                 "or a FILE.json");
  app.add_option("--mem", o.mem,
                 "memory budget per device, e.g. 16GiB (default: the profile's capacity)");
  app.add_option("--devices", o.devices,
                 "use the fewest stages K <= N whose memory fits the budget (instead of -k); "
                 "with --auto, the devices there are");
  app.add_flag("--auto", o.autoPlan,
               "choose K <= --devices, the micro-batch size (a divisor of --global-batch), "
               "the schedule, its virtual stages and the recompute policy per stage from the "
               "cost model: the fastest predicted step within --mem (prints the best candidates "
               "and why others were rejected)");
  app.add_option("--global-batch", o.globalBatch, "samples per step B, for --auto");
  app.add_option("--op-times", o.opTimes,
                 "balance by measured per-node times: JSON from piperun --profile-ops");
  app.add_option("--recompute", o.recompute,
                 "with --train: rematerialization per stage: none (default), full (GPipe: keep "
                 "stage inputs, recompute the stage's forward before its backward), selective "
                 "(keep GEMM/conv outputs, recompute the cheap ops), auto (the least recompute "
                 "that fits each stage's memory budget)");
  app.add_option("--calibrate-threads", o.calibrateThreads,
                 "with --calibrate: kernel threads of one device (piperun --threads-per-device; "
                 "default 1)");
  app.add_flag("--calibrate", o.calibrate,
               "measure this machine (sgemm, memcpy, thread handoff, the kernels of the sample "
               "models) and print its device profile, or write it to -o FILE.json");
  app.add_option("--device", o.device,
                 "with --calibrate: cpu (the default: this machine's CPU), cuda (GPU 0 through piperun's CUDA "
                 "backend: its kernels, copies and update; profile this-gpu) or cuda-emulated (the emulated GPU, "
                 "small sizes: tests)");
  app.add_option("--math", o.math,
                 "with --calibrate --device cuda: exact (the default) or tf32, the products piperun --math runs "
                 "(profile this-gpu-tf32)");
  app.add_option("--link", o.link,
                 "with --calibrate: take the link latency and bandwidth from FILE.json, "
                 "`pipec-bench-transport --json` (under mpirun: the MPI transport)");
  app.add_flag("--install", o.install,
               "with --calibrate: save the profile as this machine's this-cpu "
               "(~/.config/pipec/profiles, or $XDG_CONFIG_HOME/pipec/profiles or "
               "$PIPEC_USER_PROFILE_DIR), which compiles here then use by default");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return tools::cliExit(app, e);
  }
  std::string commandLine;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o" || a == "--output") {
      ++i; // the output path does not change the plan
      continue;
    }
    if (a.rfind("--output=", 0) == 0 || a == o.model)
      continue;
    commandLine += (commandLine.empty() ? "" : " ") + a;
  }
  Status s = tools::guarded([&]() -> Status {
    PIPEC_TRY(cpu::checkCpuIsaEnvironment());
    // Values whose default means "not given" are checked only when given.
    if (app.count("--batch") && o.batch < 1)
      return errorf("-b/--batch must be at least 1 (got ", o.batch, ")");
    if (app.count("--stop-after") && o.stopAfter < 0)
      return errorf("--stop-after must not be negative (got ", o.stopAfter, ")");
    if (app.count("--devices") && o.devices < 1)
      return errorf("--devices must be at least 1 (got ", o.devices, ")");
    if (o.autoPlan) {
      for (const char *chosen : {"-k", "-m", "-b", "--schedule", "--virtual-stages", "--recompute",
                                 "--data-parallel"})
        if (app.count(chosen))
          return errorf("--auto chooses ", chosen, " itself: leave it out (--auto supports one "
                        "pipeline, no data parallelism)");
      if (!app.count("--devices") || !app.count("--global-batch"))
        return errorf("--auto needs --devices N and --global-batch B");
    } else if (app.count("--global-batch")) {
      return errorf("--global-batch goes with --auto");
    }
    if (app.count("--ir-constants") && o.emit != "ir")
      return errorf("--ir-constants goes with --emit=ir");
    if (app.count("--calibrate-threads") && !o.calibrate)
      return errorf("--calibrate-threads goes with --calibrate");
    if (o.install && !o.calibrate)
      return errorf("--install goes with --calibrate");
    if (!o.link.empty() && !o.calibrate)
      return errorf("--link goes with --calibrate");
    if (o.install && !o.output.empty())
      return errorf("--calibrate writes to -o FILE or installs (--install), not both");
    if (app.count("--device") && !o.calibrate)
      return errorf("--device goes with --calibrate (piperun --device chooses where a plan runs)");
    if (o.device != "cpu" && o.device != "cuda" && o.device != "cuda-emulated")
      return errorf("--device must be cpu, cuda or cuda-emulated (got '", o.device, "')");
    if (o.math != "exact" && o.math != "tf32")
      return errorf("--math must be exact or tf32 (got '", o.math, "')");
    if (app.count("--math") && o.device != "cuda")
      return errorf("--math goes with --calibrate --device cuda");
    if (o.device != "cpu" && (app.count("--calibrate-threads") || !o.link.empty()))
      return errorf("--calibrate-threads and --link measure a CPU; --device ", o.device, " measures a GPU");
    if (o.calibrate)
      return runCalibrate(o);
    if (o.model.empty())
      return errorf("no model given (pipec MODEL.onnx -o MODEL.plan)");
    return compile(o, commandLine);
  });
  if (!s) {
    std::cerr << "pipec: error: " << printable(s.message()) << "\n";
    return 1;
  }
  return 0;
}
