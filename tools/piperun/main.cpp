//===- tools/piperun/main.cpp - Runs a plan --------------------------------===//
//
// piperun MODEL.plan [--input NAME=FILE.npy]... [--outputs DIR] [--steps N]
// Loads a plan directory, feeds seeded random inputs (or .npy files), runs
// the steps, prints a summary of each output and the measured throughput.
//
//===----------------------------------------------------------------------===//
#include "pipec/Version.h"
#include "runtime/dist/Mpi.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/Gpu.h"
#include "runtime/DataFeed.h"
#include "runtime/RunReport.h"
#include "runtime/run/Run.h"
#include "runtime/Session.h"
#include "runtime/plan/PlanIO.h"
#include "support/FileIO.h"
#include "support/Format.h"
#include "support/Json.h"
#include "support/Npy.h"
#include "support/Parallel.h"
#include "tools/CliCommon.h"


#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

using namespace pipec;

namespace {

struct Options {
  std::string plan;
  std::vector<std::string> inputs;
  std::string outputsDir;
  int64_t steps = 1;
  int64_t warmup = 0;
  uint64_t seed = 0;
  int threads = 1;
  bool noCodegen = false;
  bool json = false;
  std::string profileOps;
  double spinMicroseconds = -1; ///< negative: automatic (not given)
  std::string dataDir;
  bool synthetic = false;
  std::string metrics;
  std::string checkpoint;
  int64_t checkpointEvery = 0;
  bool skipNonFinite = false;
  std::string resume;
  std::string save;
  bool saveExternal = false;
  std::string trace;
  std::string report; ///< --report FILE.html
  bool showProgram = false;
  std::string injectFailure;
  std::string device = "cpu";
  /// --host-optimizer: a GPU run keeps its training state on the host.
  bool hostOptimizer = false;
  /// --no-cuda-graphs: every kernel launched every step.
  bool noGraphs = false;
  /// --no-copy-stream: receives copy on the compute stream.
  bool noCopyStream = false;
  /// --math exact|tf32: a GPU's matrix products.
  std::string math = "exact";
  std::string gpuTransport = "host";
  /// Under mpirun: this process's rank (device) and the transport between
  /// the ranks; null otherwise.
  std::optional<runtime::MpiJob> job;
  runtime::Transport *transport = nullptr;
};

/// Writes the measured time of every node per step as JSON (runtime::opProfile:
/// the input a cost model can balance stages by) and prints the ops that took
/// the most time.
Status writeOpProfile(const std::string &path, const runtime::Session &session, int64_t steps,
                      bool quiet) {
  const nlohmann::json j = runtime::opProfile(session, steps);
  PIPEC_TRY(writeFileAtomic(path, jsonText(j, 2) + "\n"));
  if (quiet)
    return Status::ok();
  std::printf("%-30s %10s %7s %10s %10s\n", "op", "ms/step", "share", "predicted", "meas/pred");
  auto row = [](const std::string &name, double meas, double share, double pred) {
    char ratio[32] = "-";
    if (pred > 0)
      std::snprintf(ratio, sizeof ratio, "%.2f", meas / pred);
    std::printf("%-30s %10.3f %6.1f%% %10.3f %10s\n", name.c_str(), meas * 1e3, share, pred * 1e3, ratio);
  };
  const double total = j["seconds"].get<double>();
  for (size_t i = 0; i < j["by_op"].size() && i < 16; ++i) {
    const nlohmann::json &op = j["by_op"][i];
    const double meas = op["seconds"].get<double>();
    row(op["op"].get<std::string>(), meas, total > 0 ? 100 * meas / total : 0.0,
        op["predicted_seconds"].get<double>());
  }
  row("all nodes", total, 100, j["predicted_seconds"].get<double>());
  std::printf("per-node times written to %s\n", path.c_str());
  return Status::ok();
}

/// One line per device: F0 B0 W0 ... (F0.2: micro-batch 0 of stage 2, on
/// devices that run several stages), >PEER:TENSOR#MB sends, <PEER:... receives.
void printPrograms(const plan::Plan &p) {
  const bool stages = p.pipeline().stages_per_device() > 1;
  for (const plan::Device &d : p.devices()) {
    std::string line;
    for (const plan::Instruction &ins : d.program()) {
      const unsigned mb = ins.micro_batch();
      const std::string at = stages ? cat(mb, ".", ins.stage()) : cat(mb);
      switch (ins.kind()) {
      case plan::Instruction::FORWARD: line += " F" + at; break;
      case plan::Instruction::RECOMPUTE: line += " R" + at; break;
      case plan::Instruction::BACKWARD: line += " B" + at; break;
      case plan::Instruction::WEIGHT_GRAD: line += " W" + at; break;
      case plan::Instruction::OPTIMIZER: line += " OPT"; break;
      case plan::Instruction::SEND: line += cat(" >", ins.peer(), ":", p.tensors(ins.tensor()).name(), "#", mb); break;
      case plan::Instruction::RECV: line += cat(" <", ins.peer(), ":", p.tensors(ins.tensor()).name(), "#", mb); break;
      default: line += " ?"; break;
      }
      if (ins.previous_step())
        line += "'"; // 2bw: of the step before
    }
    std::printf("device %d (%d instructions):%s\n", d.index(), d.program_size(), line.c_str());
  }
}

void printDeviceTable(const nlohmann::json &devs, const runtime::Session &session,
                      double medianStep) {
  const plan::Plan &p = session.plan();
  const double stepSec = session.meanStepSeconds();
  std::printf("\n%-6s %12s %12s %8s %12s %14s %14s %14s\n", "device", "busy ms/step", "pred ms/step",
              "idle", "sent/step", "peak memory", "planned peak", "model memory");
  for (const auto &dj : devs) {
    std::printf("%-6d %12.3f %12.3f %7.1f%% %12s %14s %14s %14s\n", dj["device"].get<int>(),
                dj["busy_seconds_per_step"].get<double>() * 1e3,
                dj["predicted_busy_seconds_per_step"].get<double>() * 1e3,
                dj["idle_fraction"].get<double>() * 100,
                formatBytes(dj["bytes_sent_per_step"].get<double>()).c_str(),
                formatBytes(dj["peak_memory_bytes"].get<double>()).c_str(),
                formatBytes(dj["planned_peak_memory_bytes"].get<double>()).c_str(),
                formatBytes(dj["predicted_memory_bytes"].get<double>()).c_str());
  }
  std::printf("step %.3f ms measured (median; mean %.3f ms over %llu steps), %.3f ms predicted; "
              "schedule %s, K=%d, M=%u%s\n",
              medianStep * 1e3, stepSec * 1e3, static_cast<unsigned long long>(session.measuredSteps()),
              p.pipeline().predicted_step_seconds() * 1e3, p.pipeline().schedule().c_str(),
              p.devices_size(), p.pipeline().num_micro_batches(),
              session.replicas() > 1
                  ? cat(", D=", session.replicas(),
                        p.pipeline().shard_optimizer() ? " (optimizer sharded over the replicas)" : "")
                        .c_str()
                  : "");
  // How each device ran its program: one line when they agree.
  std::string schedules;
  for (const auto &dj : devs)
    if (dj.contains("host_schedule")) {
      const std::string h = dj["host_schedule"].get<std::string>();
      if (schedules.find(h) == std::string::npos)
        schedules += (schedules.empty() ? "" : "; ") + h;
    }
  if (!schedules.empty())
    std::printf("host schedule: %s\n", schedules.c_str());
}

/// The files a run writes about itself: the Chrome trace (measured and
/// predicted tracks) and the predicted-against-measured report.
Status writeRunOutputs(const Options &o, const runtime::Session &session) {
  if (!o.trace.empty())
    PIPEC_TRY(runtime::writeTrace(o.trace, session));
  if (o.report.empty())
    return Status::ok();
  PIPEC_ASSIGN(nlohmann::json c, runtime::comparePrediction(session));
  PIPEC_TRY(writeFileAtomic(o.report, runtime::renderRunReportHtml(c)));
  const std::string jsonPath =
      (o.report.size() > 5 && o.report.compare(o.report.size() - 5, 5, ".html") == 0
           ? o.report.substr(0, o.report.size() - 5)
           : o.report) +
      ".json";
  return writeFileAtomic(jsonPath, jsonText(c, 2) + "\n");
}

/// A training plan's run (runtime/run/Run.h) and its summary.
Status trainPlan(const Options &o, runtime::Session &session) {
  if (!o.inputs.empty())
    return errorf("--input feeds inference; a training run reads --data DIR or --synthetic");
  if (!o.dataDir.empty() && o.synthetic)
    return errorf("give --data DIR or --synthetic, not both");
  runtime::TrainRunOptions to;
  to.steps = o.steps;
  to.warmup = o.warmup;
  to.dataDir = o.dataDir;
  to.seed = o.seed;
  to.checkpoint = o.checkpoint;
  to.checkpointEvery = o.checkpointEvery;
  to.resume = o.resume;
  to.metrics = o.metrics;
  to.skipNonFinite = o.skipNonFinite;
  to.gatherState = !o.save.empty();
  to.progress = !o.json;
  PIPEC_ASSIGN(runtime::TrainRunSummary r, runtime::trainRun(session, to));
  if (!session.leader())
    return Status::ok();
  const plan::Plan &p = session.plan();
  const double med = runtime::medianOf(r.stepSeconds);
  const double examples = static_cast<double>(r.examplesPerStep);
  nlohmann::json devs = runtime::deviceReport(session);
  PIPEC_TRY(writeRunOutputs(o, session));
  if (!o.profileOps.empty())
    PIPEC_TRY(writeOpProfile(o.profileOps, session, o.steps - r.firstStep - o.warmup, o.json));
  if (o.json) {
    nlohmann::json summary = {
        {"steps", o.steps},
        {"first_loss", r.firstLoss},
        {"last_loss", r.lastLoss},
        {"median_step_seconds", med},
        {"samples_per_second", examples / med},
        {"predicted_step_seconds", p.pipeline().predicted_step_seconds()},
        {"mean_step_seconds", session.meanStepSeconds()},
        {"skipped_steps", r.skippedSteps},
        {"training_state", session.residentTraining() ? "device" : "host"},
        {"math", o.math},
        {"cpu_isa", cpu::cpuIsaName(cpu::cpuIsa())},
        {"devices", devs}};
    if (session.lossScale() > 0)
      summary["loss_scale"] = session.lossScale(); // the next step's
    std::cout << jsonText(summary, 2) << "\n";
  } else {
    std::printf("trained %lld step(s)%s: loss %.6f -> %.6f, median step %.3f ms, %.1f samples/s\n",
                static_cast<long long>(o.steps - r.firstStep),
                r.skippedSteps ? cat(", ", r.skippedSteps, " of them skipped (gradients not finite)").c_str()
                               : "",
                r.firstLoss, r.lastLoss, med * 1e3, examples / med);
    printDeviceTable(devs, session, med);
    if (session.residentTraining())
      std::printf("training state: in the devices' memory, updated there (--host-optimizer: on the host)\n");
    if (!o.checkpoint.empty())
      std::printf("checkpoint after step %lld in %s\n", static_cast<long long>(o.steps),
                  o.checkpoint.c_str());
  }
  if (!o.save.empty()) {
    PIPEC_TRY(runtime::saveTrainedModel(session, o.plan, o.save, o.saveExternal));
    if (!o.json)
      std::printf("trained model written to %s\n", o.save.c_str());
  }
  return Status::ok();
}

/// `--device cuda`: every node of the plan against the CUDA kernels, so
/// that the first missing one is named (on any machine), then the GPUs,
/// before anything is allocated (docs/cuda.md).
Status checkCudaDevice(const Options &o) {
#if PIPEC_HAVE_CUDA
  // plan.pb alone (checked against the manifest): the weights are loaded
  // once, by the session.
  PIPEC_ASSIGN(std::string bytes, plan::readVerified(o.plan, "plan.pb"));
  plan::Plan planProto;
  if (!planProto.ParseFromString(bytes))
    return errorf("plan '", o.plan, "': plan.pb does not parse");
  for (const plan::Device &d : planProto.devices())
    for (const plan::Node &n : d.nodes())
      if (!n.view() && !cuda::hasKernel(n.domain(), n.op_type()))
        return errorf("--device cuda: plan '", o.plan, "': node '", printable(n.name()), "' (op type '",
                      printable(n.op_type()), "', domain ", n.domain().empty() ? "ai.onnx" : printable(n.domain()),
                      ", opset ", n.opset(), ") has no CUDA kernel (", cuda::kernelOpNames().size(),
                      " op types have one: docs/cuda.md)");
#endif
  auto listed = cuda::listGpus();
  if (!listed)
    return listed.status().withContext("--device cuda");
  const std::vector<cuda::GpuInfo> &gpus = *listed;
  if (!o.json)
    std::fprintf(stderr, "piperun: %zu GPU(s): %s (%s), devices on GPU i modulo %zu\n", gpus.size(),
                 gpus[0].name.c_str(), formatBytes(static_cast<double>(gpus[0].memoryBytes)).c_str(),
                 gpus.size());
  return Status::ok();
}

Status runPlan(const Options &o) {
  if (o.device != "cpu" && o.device != "cuda" && o.device != "cuda-emulated")
    return errorf("--device must be cpu, cuda or cuda-emulated (got '", o.device, "')");
  if (o.hostOptimizer && o.device == "cpu")
    return errorf("--host-optimizer is for --device cuda (on the CPU the host's memory is the device's)");
  if (o.noGraphs && o.device == "cpu")
    return errorf("--no-cuda-graphs is for --device cuda (the CPU's schedule is compiled with LLVM instead)");
  if (o.noCopyStream && o.device == "cpu")
    return errorf("--no-copy-stream is for --device cuda (the CPU's devices pass messages through the host)");
  if (o.math != "exact" && o.math != "tf32")
    return errorf("--math must be exact or tf32 (got '", o.math, "')");
  if (o.math == "tf32" && o.device != "cuda")
    return errorf("--math tf32 is for --device cuda (the CPU computes in exact fp32)");
  if (o.gpuTransport != "host" && o.gpuTransport != "nccl")
    return errorf("--gpu-transport must be host or nccl (got '", o.gpuTransport, "')");
  if (o.gpuTransport == "nccl" && (o.device == "cpu" || !o.transport))
    return errorf("--gpu-transport nccl is for one rank per GPU: mpirun -np N piperun PLAN --device cuda "
                  "(or cuda-emulated)");
  if (o.device == "cuda")
    PIPEC_TRY(checkCudaDevice(o));
  // Under mpirun the GPUs' messages go through the MPI transport, staged in
  // the hosts' memory, or over NCCL.
  if (o.device != "cpu" && o.transport && o.job && o.job->rank == 0 && !o.json)
    std::fprintf(stderr, "piperun: --device %s under mpirun: messages %s\n", o.device.c_str(),
                 o.gpuTransport == "nccl" ? "between the GPUs over NCCL"
                                          : "staged through host memory over MPI");
  if (o.steps < 1)
    return errorf("--steps must be at least 1 (got ", o.steps, ")");
  if (o.warmup < 0)
    return errorf("--warmup must not be negative");
  if (o.threads < 1 || o.threads > 1024)
    return errorf("--threads-per-device must be 1 to 1024 (got ", o.threads, ")");
  // The reference path: programs and fused elementwise nodes interpreted,
  // not compiled with LLVM (read when the kernels are prepared).
  if (o.noCodegen)
    ::setenv("PIPEC_NO_CODEGEN", "1", 1);
  runtime::SessionOptions so;
  so.threadsPerDevice = o.threads;
  so.spinSeconds = o.spinMicroseconds < 0 ? -1.0 : o.spinMicroseconds * 1e-6;
  so.seed = o.seed;
  so.trace = !o.trace.empty() || !o.report.empty();
  so.skipNonFinite = o.skipNonFinite;
  so.cuda = o.device == "cuda";
  so.emulateGpu = o.device == "cuda-emulated";
  so.resident = !o.hostOptimizer;
  so.recordings = !o.noGraphs;
  so.copyStream = !o.noCopyStream;
  so.tf32 = o.math == "tf32";
  if (!o.injectFailure.empty()) {
    int dev = -1, at = -1;
    char tail = 0;
    if (std::sscanf(o.injectFailure.c_str(), "%d:%d%c", &dev, &at, &tail) != 2 || dev < 0 || at < 0)
      return errorf("--inject-failure expects DEVICE:INSTRUCTION, got '", o.injectFailure, "'");
    so.failDevice = dev;
    so.failAtInstruction = at;
  }
  if (o.transport) {
    if (!o.profileOps.empty())
      return errorf("--profile-ops times every device's nodes in one process; under mpirun run the "
                    "plan on threads (without mpirun) to profile it");
    so.rank = o.job->rank;
    so.localRank = o.job->localRank;
    so.transport = o.transport;
    so.nccl = o.gpuTransport == "nccl";
  }
  PIPEC_ASSIGN(auto session, runtime::Session::open(o.plan, so));
  if (o.transport)
    PIPEC_TRY(runtime::checkRanksAgree(*session, *o.transport));
  if (o.showProgram) {
    if (session->leader())
      printPrograms(session->plan());
    return Status::ok();
  }
  // Every device has its own threads; more than the cores share them, which
  // keeps results exact but makes timings say little about the pipeline.
  const unsigned cores = usableCores();
  const long want = static_cast<long>(session->devices().size()) * o.threads;
  if (cores > 0 && want > static_cast<long>(cores) && !o.json && !o.transport)
    std::fprintf(stderr,
                 "piperun: note: %zu devices x %d thread(s) = %ld threads on %u usable core(s); devices share "
                 "cores, so times are not those of %zu separate devices\n",
                 session->devices().size(), o.threads, want, cores, session->devices().size());
  if (!o.profileOps.empty())
    for (const auto &d : session->devices())
      d->enableNodeProfile();
  if (session->isTraining()) {
    if (!o.outputsDir.empty() || !o.inputs.empty())
      return errorf("--outputs and --input are for inference plans; a training plan takes its "
                    "batches from --data (or --synthetic)");
    return trainPlan(o, *session);
  }
  if (!o.dataDir.empty() || o.synthetic || !o.metrics.empty() || !o.checkpoint.empty() ||
      !o.resume.empty())
    return errorf("--data, --synthetic, --metrics, --checkpoint and --resume are for training plans "
                  "(pipec --train)");
  const plan::Plan &p = session->plan();
  PIPEC_ASSIGN(std::vector<Tensor> inputs, runtime::inferenceInputs(*session, o.inputs, o.seed));
  PIPEC_ASSIGN(runtime::InferRunSummary r, runtime::inferRun(*session, inputs, o.steps, o.warmup, !o.json));
  if (!session->leader())
    return Status::ok();
  const std::vector<Tensor> &outputs = r.outputs;
  const int64_t examplesPerStep = r.examplesPerStep;

  if (!o.save.empty())
    PIPEC_TRY(runtime::saveTrainedModel(*session, o.plan, o.save, o.saveExternal));
  if (!o.outputsDir.empty()) {
    PIPEC_TRY(makeDirs(o.outputsDir));
    std::vector<std::string> outNames = session->outputNames();
    for (size_t i = 0; i < outputs.size(); ++i)
      PIPEC_TRY(writeNpy(joinPath(o.outputsDir, runtime::npyFileName(outNames[i])), outputs[i]));
  }

  double med = runtime::medianOf(r.stepSeconds);
  nlohmann::json j;
  j["plan"] = o.plan;
  j["steps"] = o.steps;
  j["median_step_seconds"] = med;
  j["samples_per_second"] = examplesPerStep / med;
  j["examples_per_step"] = examplesPerStep;
  j["threads_per_device"] = o.threads;
  j["cpu_isa"] = cpu::cpuIsaName(cpu::cpuIsa());
  nlohmann::json outs = nlohmann::json::array();
  std::vector<std::string> outNames = session->outputNames();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor &t = outputs[i];
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < t.numel(); ++k) {
      double v = t.getDouble(k);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
    }
    nlohmann::json oj;
    oj["name"] = outNames[i];
    oj["type"] = t.desc().str();
    oj["min"] = mn;
    oj["max"] = mx;
    oj["mean"] = t.numel() ? sum / t.numel() : 0.0;
    nlohmann::json first = nlohmann::json::array();
    for (int64_t k = 0; k < std::min<int64_t>(t.numel(), 4); ++k)
      first.push_back(t.getDouble(k));
    oj["first"] = first;
    outs.push_back(oj);
  }
  j["outputs"] = outs;
  nlohmann::json devs = runtime::deviceReport(*session);
  j["devices"] = devs;
  j["predicted_step_seconds"] = p.pipeline().predicted_step_seconds();
  // Over the timed steps (warm-up excluded), like the per-device figures.
  j["mean_step_seconds"] = session->meanStepSeconds();
  PIPEC_TRY(writeRunOutputs(o, *session));
  if (!o.profileOps.empty())
    PIPEC_TRY(writeOpProfile(o.profileOps, *session, o.steps, o.json));
  if (o.json) {
    std::cout << jsonText(j, 2) << "\n";
    return Status::ok();
  }
  std::printf("%-24s %-20s %12s %12s %12s  %s\n", "output", "type", "min", "max", "mean", "first values");
  for (const auto &oj : outs) {
    std::string first;
    for (const auto &v : oj["first"]) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.6g", first.empty() ? "" : " ", v.get<double>());
      first += buf;
    }
    std::printf("%-24s %-20s %12.6g %12.6g %12.6g  %s\n", oj["name"].get<std::string>().c_str(),
                oj["type"].get<std::string>().c_str(), oj["min"].get<double>(), oj["max"].get<double>(),
                oj["mean"].get<double>(), first.c_str());
  }
  std::printf("%lld step(s), %lld examples/step, median step %.3f ms, %.1f samples/s (%d thread%s per device)\n",
              static_cast<long long>(o.steps), static_cast<long long>(examplesPerStep), med * 1e3, examplesPerStep / med,
              o.threads, o.threads == 1 ? "" : "s");
  printDeviceTable(devs, *session, med);
  if (!o.outputsDir.empty())
    std::printf("outputs written to %s\n", o.outputsDir.c_str());
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"piperun: run a plan compiled by pipec"};
  app.set_version_flag("--version", tools::versionLine("piperun"));
  app.add_option("plan", o.plan, "plan directory written by pipec -o")->required();
  app.add_option("--input", o.inputs,
                 "feed a graph input from a .npy file: NAME=FILE.npy (repeatable; others are "
                 "seeded random data)");
  app.add_option("--outputs", o.outputsDir, "write each graph output to DIR/NAME.npy");
  app.add_option("--steps", o.steps, "steps to run and time (default 1)");
  app.add_option("--warmup", o.warmup,
                 "untimed steps before the timed ones (default 0): run before --steps for "
                 "inference; the first of --steps for training. Their times, stats, node times and "
                 "trace are dropped");
  app.add_option("--seed", o.seed, "seed of the random inputs (default 0)");
  app.add_option("--threads-per-device", o.threads, "kernel threads of each device (default 1)");
  app.add_flag("--no-codegen", o.noCodegen,
               "interpret each device's program and the fused elementwise nodes instead of compiling them "
               "with LLVM for this CPU (the reference path; bitwise the same results)");
  app.add_option("--spin-us", o.spinMicroseconds,
                 "microseconds a device waiting for a message spins before it sleeps (default: "
                 "20000 when devices x threads fit the cores, else 0)");
  app.add_flag("--json", o.json, "print the summary as JSON");
  app.add_option("--device", o.device,
                 "cpu (the default), cuda (device i of the plan on GPU i modulo the GPUs; under mpirun the "
                 "rank's device, messages staged through host memory over MPI) or cuda-emulated (the CUDA "
                 "backend's host side, its state on the device and its messages, with the CPU's kernels: "
                 "bitwise the CPU, to check the runtime on a machine without a GPU)");
  app.add_option("--gpu-transport", o.gpuTransport,
                 "--device cuda under mpirun: host (the default: messages staged through host memory over MPI) "
                 "or nccl (between the GPUs with NCCL, one rank per GPU; on cuda-emulated, NCCL's channels and "
                 "order emulated over MPI and checked)");
  app.add_option("--math", o.math,
                 "--device cuda: exact (the default: fp32, no TF32) or tf32 (matrix products on TF32 tensor cores)");
  app.add_flag("--host-optimizer", o.hostOptimizer,
               "--device cuda training: keep the weights, gradients and optimizer state on the host and update "
               "them there, refreshing the GPUs' copies every step (as before resident training; to compare)");
  app.add_flag("--no-cuda-graphs", o.noGraphs,
               "--device cuda: launch every kernel every step instead of recording each compute instruction's "
               "launches once as a CUDA graph and replaying it (to compare; the results are the same bits)");
  app.add_flag("--no-copy-stream", o.noCopyStream,
               "--device cuda: copy the messages a device receives from the other devices of the process on "
               "its GPU's compute stream at the receive, instead of on a copy stream that overlaps the kernels "
               "before it (to compare; the results are the same bits)");
  // For tests of failure handling (tests/lit/e2e/mpi-failure.test): device
  // D fails with an error before its instruction I in every step.
  app.add_option("--inject-failure", o.injectFailure, "tests: DEVICE:INSTRUCTION fails with an error")
      ->group("");
  app.add_option("--data", o.dataDir,
                 "training: a directory of NAME.npy files, one per graph input (first axis: examples)");
  app.add_flag("--synthetic", o.synthetic, "training: seeded synthetic batches (the default without --data)");
  app.add_option("--metrics", o.metrics,
                 "training: write one JSON object per step (step, loss, lr, grad_norm, samples/s)");
  app.add_option("--save", o.save,
                 "write the source ONNX model with the current (trained) weights to this file "
                 "(the weights in FILE.data, ONNX external data, above 1 GiB)");
  app.add_flag("--save-external-data", o.saveExternal,
               "with --save: the weights in FILE.data whatever their size");
  app.add_option("--checkpoint", o.checkpoint,
                 "training: write the training state to DIR (atomically) at the end and every "
                 "--checkpoint-every steps");
  app.add_option("--checkpoint-every", o.checkpointEvery, "training: checkpoint every N steps");
  app.add_flag("--skip-nonfinite-steps", o.skipNonFinite,
               "training: drop the update of a step whose gradients hold a NaN or an infinity "
               "and go on (default: stop with an error naming the first such gradient)");
  app.add_option("--resume", o.resume,
                 "training: continue from a checkpoint; --steps is then the total to reach");
  app.add_flag("--show-program", o.showProgram,
               "print each device's instruction stream (F/R/B/W micro-batch, >peer:tensor#mb "
               "sends, <peer:tensor#mb receives, OPT; a prime marks 2bw's instructions of the "
               "step before) and exit");
  app.add_option("--trace", o.trace,
                 "write a Chrome trace (Perfetto, chrome://tracing): one track per device, one "
                 "slice per instruction, and the plan's predicted timeline as a second process");
  app.add_option("--report", o.report,
                 "write FILE.html: the predicted and the measured timeline of the median step one "
                 "above the other, busy, idle and memory per device of both, and the "
                 "instructions furthest from their prediction (and FILE.json, the same data)");
  app.add_option("--profile-ops", o.profileOps,
                 "time every node and write the per-node times (JSON) to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return tools::cliExit(app, e);
  }
  if (app.count("--spin-us") &&
      !(o.spinMicroseconds >= 0 && o.spinMicroseconds <= 10e6)) {
    std::cerr << "piperun: error: --spin-us must be 0 to 10000000 microseconds (got "
              << o.spinMicroseconds << ")\n";
    return 1;
  }
  // Under mpirun each rank runs one device of the plan (runtime/dist/Mpi.h).
  std::unique_ptr<runtime::Transport> transport;
  Status s = tools::guarded([&]() -> Status {
    PIPEC_TRY(cpu::checkCpuIsaEnvironment());
    if (o.saveExternal && o.save.empty())
      return errorf("--save-external-data goes with --save FILE");
    PIPEC_ASSIGN(o.job, runtime::initMpi());
    if (o.job && o.job->size > 1) {
      // Spin while waiting only when the ranks on this host and their
      // threads fit its cores, as for device threads. The host's cores,
      // not this process's: mpirun binds each rank to a core of its own.
      const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      const long perHost = local ? std::max(1L, std::atol(local)) : o.job->size;
      const long online = sysconf(_SC_NPROCESSORS_ONLN);
      const unsigned cores = online > 0 ? static_cast<unsigned>(online) : 0;
      double spin = o.spinMicroseconds >= 0 ? o.spinMicroseconds * 1e-6
                    : cores > 0 && perHost * o.threads <= static_cast<long>(cores)
                        ? runtime::kAutoSpinSeconds
                        : 0.0;
      transport = runtime::makeMpiTransport(*o.job, spin);
      o.transport = transport.get();
    }
    return runPlan(o);
  });
  if (!s) {
    // Every rank's error reaches the user, with its rank; the others stop
    // (their waits fail with this error) and the job ends.
    tools::writeStderrLine(cat("piperun: error: ", o.transport ? cat("rank ", o.job->rank, ": ") : "",
                               printable(s.message()), "\n"));
    if (o.job) {
      std::cerr.flush();
      if (o.transport)
        o.transport->abort(s);
      runtime::abortMpi(o.transport, 1, o.transport ? 1.0 : 0.0);
    }
    return 1;
  }
  transport.reset(); // its sends complete before MPI ends
  if (o.job)
    runtime::finalizeMpi();
  return 0;
}
