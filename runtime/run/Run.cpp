//===- runtime/run/Run.cpp - Training and inference runs over a session ---===//
#include "runtime/run/Run.h"
#include "support/Half.h"

#include "pipec/Version.h"
#include "runtime/DataFeed.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/train/Checkpoint.h"
#include "support/FileIO.h"
#include "support/Format.h"
#include "support/Json.h"
#include "support/Npy.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <unistd.h>

namespace pipec::runtime {

namespace {
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
} // namespace

double medianOf(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Expected<TrainRunSummary> trainRun(Session &session, const TrainRunOptions &o) {
  if (o.checkpointEvery < 0 || (o.checkpointEvery > 0 && o.checkpoint.empty()))
    return errorf("--checkpoint-every needs --checkpoint DIR and a positive step count");
  // Under mpirun every rank runs the steps; rank 0 (the leader) reports and
  // writes what the run produces.
  const bool quiet = !session.leader();
  if (!o.checkpoint.empty() && session.leader())
    PIPEC_TRY(train::checkCheckpointTarget(o.checkpoint)); // before any step runs
  PIPEC_ASSIGN(DataFeed feed, DataFeed::open(session, o.dataDir, o.seed));
  TrainRunSummary sum;
  int64_t first = 0;
  if (!o.resume.empty()) {
    PIPEC_TRY(session.loadCheckpoint(o.resume));
    first = static_cast<int64_t>(session.stepsRun());
    if (first >= o.steps)
      return errorf("checkpoint '", o.resume, "' is at step ", first, "; --steps ", o.steps,
                    " (the total to reach) leaves nothing to run");
    if (o.progress && !quiet)
      std::fprintf(stderr, "resumed from '%s' after step %lld\n", o.resume.c_str(),
                   static_cast<long long>(first));
  }
  sum.firstStep = first;
  const plan::Plan &p = session.plan();
  sum.examplesPerStep = std::max<int64_t>(p.pipeline().micro_batch_size(), 1) * session.stepMicroBatches();
  const double examples = static_cast<double>(sum.examplesPerStep);
  std::string metrics;
  auto start = Clock::now();
  double lastPrint = -1;
  const bool tty = isatty(STDERR_FILENO);
  // Warm-up steps are the first of the steps to run; what they measured
  // (first-call costs: oneDNN compiles a GEMM kernel per shape) is dropped.
  if (o.warmup > 0 && first + o.warmup >= o.steps)
    return errorf("--warmup ", o.warmup, " leaves none of the ", o.steps - first,
                  " training steps to time (warm-up steps are the first of --steps)");
  const int64_t timedFrom = first + o.warmup;
  for (int64_t s = first; s < o.steps; ++s) {
    if (s == timedFrom && o.warmup > 0)
      session.resetMeasurements();
    std::vector<Tensor> inputs = feed.batch(s);
    auto t0 = Clock::now();
    PIPEC_ASSIGN(Session::TrainStep r, session.train(inputs));
    const double dt = secondsSince(t0);
    if (s >= timedFrom)
      sum.stepSeconds.push_back(dt);
    if (!r.firstNonFinite.empty() && !o.skipNonFinite && !r.skipped)
      return errorf("step ", s + 1, ": the gradient of '", r.firstNonFinite, "' is not finite (loss ",
                    r.loss, "; the weights are now corrupt and no checkpoint was written for this "
                    "step): lower --lr, clip gradients, check the data, or --skip-nonfinite-steps");
    if (!std::isfinite(r.loss) && !r.skipped)
      return errorf("step ", s + 1, ": the loss is ", r.loss, " (diverged; lower --lr or clip gradients)");
    if (r.skipped) {
      ++sum.skippedSteps;
      if (!quiet && r.lossScale > 0)
        std::fprintf(stderr, "%sstep %lld: gradient of '%s' not finite at loss scale %g, update skipped, "
                     "scale now %g\n", tty ? "\n" : "", static_cast<long long>(s + 1),
                     printable(r.firstNonFinite).c_str(), r.lossScale, session.lossScale());
      else if (!quiet)
        std::fprintf(stderr, "%sstep %lld: gradient of '%s' not finite, update skipped\n", tty ? "\n" : "",
                     static_cast<long long>(s + 1), printable(r.firstNonFinite).c_str());
    }
    if (s == first)
      sum.firstLoss = r.loss;
    sum.lastLoss = r.loss;
    ++sum.stepsRun;
    nlohmann::json m = {{"step", s + 1}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.gradNorm},
                        {"samples_per_second", examples / dt}, {"step_seconds", dt}};
    if (r.lossScale > 0) {
      m["loss_scale"] = r.lossScale;
      m["skipped"] = r.skipped;
    }
    metrics += jsonText(m) + "\n";
    const double elapsed = secondsSince(start);
    if (o.progress && !quiet && (elapsed - lastPrint >= 0.5 || s + 1 == o.steps || s == 0)) {
      lastPrint = elapsed;
      double eta = elapsed / static_cast<double>(s + 1 - first) * static_cast<double>(o.steps - s - 1);
      const std::string scale = r.lossScale > 0 ? cat("  scale ", session.lossScale()) : std::string();
      std::fprintf(stderr, "%sstep %lld/%lld  loss %.6f  lr %.3g%s  %.1f samples/s  ETA %.1fs%s",
                   tty ? "\r" : "", static_cast<long long>(s + 1), static_cast<long long>(o.steps), r.loss,
                   r.lr, scale.c_str(), examples / dt, eta, tty ? "   " : "\n");
    }
    if (!o.metrics.empty() && !quiet && (s + 1 == o.steps || (s + 1) % 10 == 0))
      PIPEC_TRY(writeFileAtomic(o.metrics, metrics));
    if (!o.checkpoint.empty() &&
        (s + 1 == o.steps || (o.checkpointEvery > 0 && (s + 1) % o.checkpointEvery == 0)))
      PIPEC_TRY(session.saveCheckpoint(o.checkpoint));
  }
  if (o.progress && tty && !quiet)
    std::fprintf(stderr, "\n");
  // 2bw: the last step's backward passes on the first devices and their
  // updates, so that what is saved and reported is after every step.
  PIPEC_TRY(session.flush());
  PIPEC_TRY(session.gatherStats());
  if (o.gatherState)
    PIPEC_TRY(session.gatherTrainingState());
  return sum;
}

Expected<std::vector<Tensor>> inferenceInputs(const Session &session, const std::vector<std::string> &specs,
                                              uint64_t seed) {
  const plan::Plan &p = session.plan();
  std::vector<std::string> names = session.inputNames();
  std::vector<TensorDesc> descs = session.stepInputDescs();
  std::map<std::string, Tensor> given;
  for (const std::string &spec : specs) {
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
    int64_t bound = integerBound(p, p.inputs(static_cast<int>(i)));
    inputs.push_back(randomInput(descs[i], bound, seed * 1000003 + i));
  }
  return inputs;
}

Expected<InferRunSummary> inferRun(Session &session, const std::vector<Tensor> &inputs, int64_t steps,
                                   int64_t warmup, bool progress) {
  const plan::Plan &p = session.plan();
  InferRunSummary sum;
  sum.examplesPerStep = std::max<int64_t>(p.pipeline().micro_batch_size(), 1) * session.stepMicroBatches();
  const double examples = static_cast<double>(sum.examplesPerStep);
  const int64_t total = warmup + steps;
  auto start = Clock::now();
  progress = progress && total > 1 && session.leader();
  const bool tty = isatty(STDERR_FILENO);
  double lastPrint = -1;
  for (int64_t s = 0; s < total; ++s) {
    if (s == warmup && warmup > 0)
      session.resetMeasurements();
    auto t0 = Clock::now();
    PIPEC_ASSIGN(sum.outputs, session.run(inputs));
    const double dt = secondsSince(t0);
    if (s >= warmup)
      sum.stepSeconds.push_back(dt);
    const double elapsed = secondsSince(start);
    // At most two progress lines a second, and always the last step.
    if (progress && (elapsed - lastPrint >= 0.5 || s + 1 == total)) {
      lastPrint = elapsed;
      double eta = elapsed / static_cast<double>(s + 1) * static_cast<double>(total - s - 1);
      std::fprintf(stderr, "%sstep %lld/%lld  %.1f samples/s  ETA %.1fs%s", tty ? "\r" : "",
                   static_cast<long long>(s + 1), static_cast<long long>(total), examples / dt, eta,
                   tty ? "   " : "\n");
    }
  }
  if (progress && tty)
    std::fprintf(stderr, "\n");
  PIPEC_TRY(session.gatherStats());
  return sum;
}

namespace {
/// Weights saved above this many bytes go to an external data file.
constexpr uint64_t kSaveExternalFrom = uint64_t(1) << 30;
} // namespace

Status saveTrainedModel(const Session &session, const std::string &planDir, const std::string &out,
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
    // A 16-bit model's weights train as fp32 masters (passes/PromoteHalf.cpp):
    // rounded back to the model's type, to nearest even.
    if (w.dtype() == DType::F32 &&
        (t.data_type() == static_cast<int32_t>(DType::F16) || t.data_type() == static_cast<int32_t>(DType::BF16))) {
      const bool bf = t.data_type() == static_cast<int32_t>(DType::BF16);
      Tensor h(bf ? DType::BF16 : DType::F16, w.shape());
      for (int64_t i = 0; i < w.numel(); ++i)
        h.data<uint16_t>()[i] = bf ? floatToBf16(w.data<float>()[i]) : floatToHalf(w.data<float>()[i]);
      w = std::move(h);
    }
    if (static_cast<int32_t>(w.dtype()) != t.data_type())
      return errorf("initializer '", t.name(), "' of '", src, "' has data type ", t.data_type(),
                    ", the plan holds ", dtypeName(w.dtype()));
    total += w.bytes();
    filled.emplace_back(&t, std::move(w));
  }
  // Weights a model stored as Constant nodes (pipec --train-constants):
  // their value attributes take the trained bytes, in the model file.
  for (onnx::NodeProto &n : *model.mutable_graph()->mutable_node()) {
    if (n.op_type() != "Constant" || n.output_size() != 1 || n.attribute_size() != 1 ||
        n.attribute(0).name() != "value" || !session.isTrainedWeight(n.output(0)))
      continue;
    PIPEC_ASSIGN(Tensor w, session.weightView(n.output(0)));
    onnx::TensorProto *t = n.mutable_attribute(0)->mutable_t();
    if (static_cast<int32_t>(w.dtype()) != t->data_type())
      return errorf("Constant node of '", n.output(0), "' in '", src, "' has data type ", t->data_type(),
                    ", the plan holds ", dtypeName(w.dtype()));
    t->clear_float_data();
    t->clear_double_data();
    t->set_raw_data(std::string(static_cast<const char *>(w.raw()), w.bytes()));
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

Status checkRanksAgree(const Session &session, Transport &transport) {
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

} // namespace pipec::runtime
