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
#include "runtime/Session.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/train/Checkpoint.h"
#include "support/FileIO.h"
#include "support/Format.h"
#include "support/Json.h"
#include "support/Npy.h"
#include "support/Parallel.h"
#include "tools/CliCommon.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
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
  /// Under mpirun: this process's rank (device) and the transport between
  /// the ranks; null otherwise.
  std::optional<runtime::MpiJob> job;
  runtime::Transport *transport = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

/// Weights saved above this many bytes go to an external data file.
constexpr uint64_t kSaveExternalFrom = uint64_t(1) << 30;

/// Writes the plan's source model (source.onnx in the plan directory, kept
/// by pipec without weight data) with the session's current weights: in the
/// model file, or, above 1 GiB of weights or with `external`, in OUT.data
/// as ONNX external data (64-byte aligned, location relative to the model),
/// written from the session's weights in place, since protobuf cannot hold
/// 2 GiB.
Status saveModel(const runtime::Session &session, const std::string &planDir, const std::string &out,
                 bool external) {
  std::string src = joinPath(planDir, "source.onnx");
  // Checked against the plan's manifest: a hand-edited source would be
  // written out with the trained weights as if pipec had compiled it.
  PIPEC_ASSIGN(std::string bytes, plan::readVerified(planDir, "source.onnx"));
  onnx::ModelProto model;
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (!model.ParseFromCodedStream(&in))
    return errorf("'", src, "' is corrupt: it does not parse as an ONNX model");
  // The session's weights in place, one per initializer to fill.
  std::vector<std::pair<onnx::TensorProto *, Tensor>> filled;
  uint64_t total = 0;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    bool stripped = !t.has_raw_data() && t.float_data_size() == 0 && t.int64_data_size() == 0 &&
                    t.int32_data_size() == 0 && t.double_data_size() == 0 && t.uint64_data_size() == 0;
    if (!stripped)
      continue;
    PIPEC_ASSIGN(Tensor w, session.weightView(t.name()));
    if (static_cast<int32_t>(w.dtype()) != t.data_type())
      return errorf("initializer '", t.name(), "' of '", src, "' has data type ", t.data_type(),
                    ", the plan holds ", dtypeName(w.dtype()));
    total += w.bytes();
    filled.emplace_back(&t, std::move(w));
  }
  external = external || total > kSaveExternalFrom;
  if (!external) {
    for (auto &[t, w] : filled)
      t->set_raw_data(std::string(static_cast<const char *>(w.raw()), w.bytes()));
  } else {
    const std::string dataPath = out + ".data";
    const std::string location = std::filesystem::path(dataPath).filename().string();
    PIPEC_TRY(writeFileAtomicStreamed(dataPath, [&](const ByteSink &sink) -> Status {
      static const char zeros[64] = {};
      uint64_t offset = 0;
      for (auto &[t, w] : filled) {
        const uint64_t pad = (64 - offset % 64) % 64;
        PIPEC_TRY(sink(zeros, pad));
        offset += pad;
        PIPEC_TRY(sink(w.raw(), w.bytes()));
        auto add = [&](const char *key, const std::string &value) {
          auto *kv = t->add_external_data();
          kv->set_key(key);
          kv->set_value(value);
        };
        add("location", location);
        add("offset", std::to_string(offset));
        add("length", std::to_string(w.bytes()));
        t->set_data_location(onnx::TensorProto::EXTERNAL);
        offset += w.bytes();
      }
      return Status::ok();
    }));
  }
  if (model.ByteSizeLong() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return errorf("the trained model is ", model.ByteSizeLong(),
                  " bytes without its weights, over protobuf's 2 GiB limit");
  std::string outBytes;
  if (!model.SerializeToString(&outBytes))
    return errorf("cannot serialize the trained model");
  return writeFileAtomic(out, outBytes);
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
              session.replicas() > 1 ? cat(", D=", session.replicas()).c_str() : "");
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

/// Under mpirun: every rank must run the same piperun on the same plan (a
/// host with another build or another copy of the plan would compute
/// something else). Every rank contributes its version's and its plan's
/// checksums to an all-reduce and compares; all see the same sums, so all
/// stop with the same error.
Status checkRanksAgree(const runtime::Session &session, runtime::Transport &transport) {
  const int ranks = transport.numDevices(), me = session.rank();
  const std::string version = std::string(PIPEC_VERSION) + "/" + std::to_string(PIPEC_PLAN_FORMAT_VERSION);
  const std::string planBytes = session.plan().SerializeAsString();
  std::vector<double> v(2 * static_cast<size_t>(ranks), 0.0);
  v[2 * me] = crc32c(version.data(), version.size());
  v[2 * me + 1] = crc32c(planBytes.data(), planBytes.size());
  PIPEC_TRY(transport.allReduceSum(me, v.data(), v.size()));
  for (int r = 1; r < ranks; ++r) {
    if (v[2 * r] != v[0])
      return errorf("rank ", r, " runs another piperun than rank 0 (version checksum ",
                    static_cast<uint32_t>(v[2 * r]), " against ", static_cast<uint32_t>(v[0]),
                    "); every host needs the same build (this one is ", version, ")");
    if (v[2 * r + 1] != v[1])
      return errorf("rank ", r, " loaded another plan than rank 0 (plan checksum ",
                    static_cast<uint32_t>(v[2 * r + 1]), " against ", static_cast<uint32_t>(v[1]),
                    "): give every rank the same plan directory (a path every host sees)");
  }
  return Status::ok();
}

Status trainPlan(const Options &o, runtime::Session &session) {
  if (!o.inputs.empty())
    return errorf("--input feeds inference; a training run reads --data DIR or --synthetic");
  if (!o.dataDir.empty() && o.synthetic)
    return errorf("give --data DIR or --synthetic, not both");
  if (o.checkpointEvery < 0 || (o.checkpointEvery > 0 && o.checkpoint.empty()))
    return errorf("--checkpoint-every needs --checkpoint DIR and a positive step count");
  // Under mpirun every rank runs the steps; rank 0 (the leader) reports and
  // writes what the run produces.
  const bool quiet = !session.leader();
  if (!o.checkpoint.empty() && session.leader())
    PIPEC_TRY(train::checkCheckpointTarget(o.checkpoint)); // before any step runs
  PIPEC_ASSIGN(runtime::DataFeed feed, runtime::DataFeed::open(session, o.dataDir, o.seed));
  int64_t first = 0;
  if (!o.resume.empty()) {
    PIPEC_TRY(session.loadCheckpoint(o.resume));
    first = static_cast<int64_t>(session.stepsRun());
    if (first >= o.steps)
      return errorf("checkpoint '", o.resume, "' is at step ", first, "; --steps ", o.steps,
                    " (the total to reach) leaves nothing to run");
    if (!o.json && !quiet)
      std::fprintf(stderr, "resumed from '%s' after step %lld\n", o.resume.c_str(),
                   static_cast<long long>(first));
  }
  const plan::Plan &p = session.plan();
  int64_t examples = std::max<int64_t>(p.pipeline().micro_batch_size(), 1) * session.stepMicroBatches();
  std::string metrics;
  std::vector<double> stepSeconds;
  double firstLoss = 0, lastLoss = 0;
  auto start = std::chrono::steady_clock::now();
  double lastPrint = -1;
  bool tty = isatty(STDERR_FILENO);
  // Warm-up steps are the first of the steps to run; what they measured
  // (first-call costs: oneDNN compiles a GEMM kernel per shape) is dropped.
  if (o.warmup > 0 && first + o.warmup >= o.steps)
    return errorf("--warmup ", o.warmup, " leaves none of the ", o.steps - first,
                  " training steps to time (warm-up steps are the first of --steps)");
  const int64_t timedFrom = first + o.warmup;
  int skippedSteps = 0;
  for (int64_t s = first; s < o.steps; ++s) {
    if (s == timedFrom && o.warmup > 0)
      session.resetMeasurements();
    std::vector<Tensor> inputs = feed.batch(s);
    auto t0 = std::chrono::steady_clock::now();
    PIPEC_ASSIGN(runtime::Session::TrainStep r, session.train(inputs));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= timedFrom)
      stepSeconds.push_back(dt);
    if (!r.firstNonFinite.empty() && !o.skipNonFinite)
      return errorf("step ", s + 1, ": the gradient of '", r.firstNonFinite, "' is not finite (loss ",
                    r.loss, "; the weights are now corrupt and no checkpoint was written for this "
                    "step): lower --lr, clip gradients, check the data, or --skip-nonfinite-steps");
    if (!std::isfinite(r.loss) && !r.skipped)
      return errorf("step ", s + 1, ": the loss is ", r.loss, " (diverged; lower --lr or clip gradients)");
    if (r.skipped) {
      ++skippedSteps;
      if (!quiet)
        std::fprintf(stderr, "%sstep %lld: gradient of '%s' not finite, update skipped\n",
                   tty ? "\n" : "", static_cast<long long>(s + 1), printable(r.firstNonFinite).c_str());
    }
    if (s == first)
      firstLoss = r.loss;
    lastLoss = r.loss;
    nlohmann::json m = {{"step", s + 1}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.gradNorm},
                        {"samples_per_second", examples / dt}, {"step_seconds", dt}};
    metrics += jsonText(m) + "\n";
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!o.json && !quiet && (elapsed - lastPrint >= 0.5 || s + 1 == o.steps || s == 0)) {
      lastPrint = elapsed;
      double eta = elapsed / (s + 1 - first) * (o.steps - s - 1);
      std::fprintf(stderr, "%sstep %lld/%lld  loss %.6f  lr %.3g  %.1f samples/s  ETA %.1fs%s",
                   tty ? "\r" : "", static_cast<long long>(s + 1), static_cast<long long>(o.steps),
                   r.loss, r.lr, examples / dt, eta, tty ? "   " : "\n");
    }
    if (!o.metrics.empty() && !quiet && (s + 1 == o.steps || (s + 1) % 10 == 0))
      PIPEC_TRY(writeFileAtomic(o.metrics, metrics));
    if (!o.checkpoint.empty() &&
        (s + 1 == o.steps || (o.checkpointEvery > 0 && (s + 1) % o.checkpointEvery == 0)))
      PIPEC_TRY(session.saveCheckpoint(o.checkpoint));
  }
  if (!o.json && tty && !quiet)
    std::fprintf(stderr, "\n");
  // 2bw: the last step's backward passes on the first devices and their
  // updates, so that what is saved and reported is after every step.
  PIPEC_TRY(session.flush());
  PIPEC_TRY(session.gatherStats());
  if (!o.save.empty())
    PIPEC_TRY(session.gatherTrainingState());
  if (quiet)
    return Status::ok();
  double med = median(stepSeconds);
  nlohmann::json devs = runtime::deviceReport(session);
  PIPEC_TRY(writeRunOutputs(o, session));
  if (!o.profileOps.empty())
    PIPEC_TRY(writeOpProfile(o.profileOps, session, o.steps - timedFrom, o.json));
  if (o.json) {
    const nlohmann::json summary = {
        {"steps", o.steps},
        {"first_loss", firstLoss},
        {"last_loss", lastLoss},
        {"median_step_seconds", med},
        {"samples_per_second", examples / med},
        {"predicted_step_seconds", p.pipeline().predicted_step_seconds()},
        {"mean_step_seconds", session.meanStepSeconds()},
        {"skipped_steps", skippedSteps},
        {"cpu_isa", cpu::cpuIsaName(cpu::cpuIsa())},
        {"devices", devs}};
    std::cout << jsonText(summary, 2) << "\n";
  } else {
    std::printf("trained %lld step(s)%s: loss %.6f -> %.6f, median step %.3f ms, %.1f samples/s\n",
                static_cast<long long>(o.steps - first),
                skippedSteps ? cat(", ", skippedSteps, " of them skipped (gradients not finite)").c_str()
                             : "",
                firstLoss, lastLoss, med * 1e3, examples / med);
    printDeviceTable(devs, session, med);
    if (!o.checkpoint.empty())
      std::printf("checkpoint after step %lld in %s\n", static_cast<long long>(o.steps),
                  o.checkpoint.c_str());
  }
  if (!o.save.empty()) {
    PIPEC_TRY(saveModel(session, o.plan, o.save, o.saveExternal));
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
  if (o.device != "cpu" && o.device != "cuda")
    return errorf("--device must be cpu or cuda (got '", o.device, "')");
  if (o.device == "cuda") {
    if (o.transport)
      return errorf("--device cuda under mpirun is not implemented yet (the NCCL transport: docs/cuda.md)");
    PIPEC_TRY(checkCudaDevice(o));
  }
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
    so.transport = o.transport;
  }
  PIPEC_ASSIGN(auto session, runtime::Session::open(o.plan, so));
  if (o.transport)
    PIPEC_TRY(checkRanksAgree(*session, *o.transport));
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
  std::vector<std::string> names = session->inputNames();
  std::vector<TensorDesc> descs = session->stepInputDescs();

  std::map<std::string, Tensor> given;
  for (const std::string &spec : o.inputs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return errorf("--input expects NAME=FILE.npy, got '", spec, "'");
    std::string name = spec.substr(0, eq);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string known;
      for (const auto &n : names)
        known += (known.empty() ? "" : ", ") + n;
      return errorf("--input ", name, ": the model has no input of that name (inputs: ", known, ")");
    }
    PIPEC_ASSIGN(Tensor t, readNpy(spec.substr(eq + 1)));
    given[name] = t;
  }
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = given.find(names[i]);
    if (it != given.end()) {
      inputs.push_back(it->second);
      continue;
    }
    int64_t bound = runtime::integerBound(p, p.inputs(static_cast<int>(i)));
    inputs.push_back(runtime::randomInput(descs[i], bound, o.seed * 1000003 + i));
  }

  int64_t examplesPerStep = std::max<int64_t>(p.pipeline().micro_batch_size(), 1) *
                            session->stepMicroBatches();
  std::vector<Tensor> outputs;
  std::vector<double> stepSeconds;
  const int64_t total = o.warmup + o.steps;
  auto start = std::chrono::steady_clock::now();
  const bool quiet = !session->leader();
  bool progress = total > 1 && !o.json && !quiet;
  bool tty = isatty(STDERR_FILENO);
  double lastPrint = -1;
  for (int64_t s = 0; s < total; ++s) {
    if (s == o.warmup && o.warmup > 0)
      session->resetMeasurements();
    auto t0 = std::chrono::steady_clock::now();
    PIPEC_ASSIGN(outputs, session->run(inputs));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup)
      stepSeconds.push_back(dt);
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // At most two progress lines a second, and always the last step.
    if (progress && (elapsed - lastPrint >= 0.5 || s + 1 == total)) {
      lastPrint = elapsed;
      double eta = elapsed / (s + 1) * (total - s - 1);
      std::fprintf(stderr, "%sstep %lld/%lld  %.1f samples/s  ETA %.1fs%s", tty ? "\r" : "",
                   static_cast<long long>(s + 1), static_cast<long long>(total),
                   examplesPerStep / dt, eta, tty ? "   " : "\n");
    }
  }
  if (progress && tty)
    std::fprintf(stderr, "\n");
  PIPEC_TRY(session->gatherStats());
  if (quiet)
    return Status::ok();

  if (!o.save.empty())
    PIPEC_TRY(saveModel(*session, o.plan, o.save, o.saveExternal));
  if (!o.outputsDir.empty()) {
    PIPEC_TRY(makeDirs(o.outputsDir));
    std::vector<std::string> outNames = session->outputNames();
    for (size_t i = 0; i < outputs.size(); ++i)
      PIPEC_TRY(writeNpy(joinPath(o.outputsDir, runtime::npyFileName(outNames[i])), outputs[i]));
  }

  double med = median(stepSeconds);
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
  app.add_option("--device", o.device, "cpu (the default) or cuda: device i of the plan on GPU i");
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
