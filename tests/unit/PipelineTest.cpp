//===- tests/unit/PipelineTest.cpp - K devices give one device's results ===//
//
// The sample models (MLP, GPT-like with dropout, CNN with BatchNorm) are
// compiled for K = 1, 2 and 4 stages with both schedules and the same M,
// trained for several steps on the same data, and every weight must be
// bitwise equal to the K = 1 run; inference outputs likewise. Also: M < K
// runs, an error on one device stops every device with that error, the
// schedule validator rejects hand-broken plans, and the in-process
// transport delivers, refuses and aborts.
// Over 700 lines: every schedule and sample against K = 1 shares one
// compile-and-train harness; the TESTs are independent.
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "driver/AutoPlan.h"
#include "pipeline/Schedule.h"
#include "pipeline/Simulate.h"
#include "runtime/DataFeed.h"
#include "runtime/RunReport.h"
#include "support/Npy.h"
#include "runtime/plan/Predicted.h"
#include "frontend/OnnxImporter.h"
#include "runtime/DeviceThreads.h"
#include "runtime/Session.h"
#include "runtime/dist/LinkSetup.h"
#include "runtime/dist/Transport.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/Rendezvous.h"
#include "runtime/plan/ScheduleCheck.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/Optimizer.h"
#include "support/FileIO.h"
#include "support/Parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <map>
#include <condition_variable>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <regex>
#include <sched.h>
#include <thread>

using namespace pipec;

namespace {

std::string samplePath(const std::string &name) {
  return std::string(PIPEC_BINARY_DIR) + "/samples/" + name + ".onnx";
}

/// Plan directories made by this run, removed when the tests end.
class TempDirs : public ::testing::Environment {
public:
  std::vector<std::string> dirs;
  void TearDown() override {
    for (const std::string &d : dirs)
      std::filesystem::remove_all(d);
  }
};
TempDirs *gTempDirs =
    static_cast<TempDirs *>(::testing::AddGlobalTestEnvironment(new TempDirs));

std::string tempDir(const std::string &name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("pipec-pipeline-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  gTempDirs->dirs.push_back(dir.string());
  return dir.string();
}

struct Config {
  int K = 1;
  int M = 4;
  std::string schedule = "1f1b";
  unsigned virtualStages = 0; ///< interleaved's v
  bool train = true;
  std::string recompute = "none";
  std::string optimizer = "adam";
  double lr = 1e-3;
  double clip = 0;
  int D = 1;          ///< data-parallel replicas
  bool shard = false; ///< the optimizer sharded over them (ZeRO-1)
};

/// Compiles `model` (batch b per micro-batch) and writes the plan.
std::string compile(const std::string &model, int64_t b, const Config &c) {
  frontend::ImportOptions io;
  io.batch = b;
  auto g = frontend::importOnnxFile(samplePath(model), io);
  EXPECT_TRUE(g.isOk()) << g.status().message();
  if (!g.isOk())
    return "";
  auto schedule = pipeline::Schedule::parse(c.schedule, c.virtualStages);
  EXPECT_TRUE(schedule.isOk()) << schedule.status().message();
  if (!schedule.isOk())
    return "";
  driver::CompileOptions co;
  co.partition.numStages = c.K;
  co.partition.schedule = *schedule;
  co.partition.training = c.train;
  co.partition.recompute = c.recompute;
  co.emit.microBatches = c.M;
  co.emit.schedule = *schedule;
  co.emit.training = c.train;
  co.train.optimizer = c.optimizer;
  co.train.lr = c.lr;
  co.train.clipGradNorm = c.clip;
  co.emit.dataParallel = c.D;
  co.emit.shardOptimizer = c.shard;
  auto compiled = driver::compileGraph(**g, co);
  EXPECT_TRUE(compiled.isOk()) << compiled.status().message();
  if (!compiled.isOk())
    return "";
  EXPECT_EQ(compiled->plan.plan.devices_size(), c.K);
  std::string dir = tempDir(cat(model, "-k", c.K, "-m", c.M, "-", c.schedule, c.virtualStages,
                                c.train ? "-t" : "", "-", c.recompute, "-d", c.D, c.shard ? "z" : "", "-",
                                std::hash<std::string>()(cat(c.optimizer, c.lr, c.clip))));
  Status s = codegen::writePlanDirectory(dir, compiled->plan);
  EXPECT_TRUE(s.isOk()) << s.message();
  return dir;
}

/// Deterministic step inputs: floats in [-1, 1], integers in [0, 4).
std::vector<Tensor> makeInputs(const runtime::Session &s, uint64_t step) {
  std::vector<Tensor> r;
  std::mt19937_64 rng(1234 + step);
  for (const TensorDesc &d : s.stepInputDescs()) {
    Tensor t(d);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (d.dtype == DType::F32)
        t.data<float>()[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
      else if (d.dtype == DType::I64)
        t.data<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
      else
        ADD_FAILURE() << "unexpected input type " << d.str();
    }
    r.push_back(std::move(t));
  }
  return r;
}

struct RunResult {
  /// Every trained parameter after the steps, then every updated state.
  std::vector<Tensor> weights;
  std::vector<Tensor> outputs; ///< the last step's outputs
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<char> skipped;
};

/// The session's options beside the seed, and what it chose.
struct RunOptions {
  bool inPlace = true;
  bool updateInStep = true;
  bool skipNonFinite = false;
  bool emulateGpu = false;           ///< SessionOptions::emulateGpu
  bool resident = true;              ///< SessionOptions::resident
  bool deviceMessages = true;        ///< SessionOptions::deviceMessages
  int *accumulatedInPlace = nullptr; ///< Session::gradientsAccumulatedInPlace
  int *updatedInStep = nullptr;      ///< Session::paramsUpdatedInStep
  bool *residentTraining = nullptr;  ///< Session::residentTraining
  bool recordings = true;            ///< SessionOptions::recordings
  bool copyStream = true;            ///< SessionOptions::copyStream
  /// The devices' DeviceExecutor::hostSchedule() after the steps.
  std::vector<std::string> *hostSchedules = nullptr;
  /// Called after each step (checkpoints, setWeight in the middle of a run).
  std::function<void(runtime::Session &, int step)> afterStep = nullptr;
  /// Inputs of step i (makeInputs by default).
  std::function<std::vector<Tensor>(const runtime::Session &, int step)> inputs = nullptr;
};

RunResult run(const std::string &dir, int steps, bool train, const RunOptions &o = {}) {
  RunResult r;
  runtime::SessionOptions so;
  so.seed = 7;
  so.accumulateInPlace = o.inPlace;
  so.updateInStep = o.updateInStep;
  so.skipNonFinite = o.skipNonFinite;
  so.emulateGpu = o.emulateGpu;
  so.resident = o.resident;
  so.deviceMessages = o.deviceMessages;
  so.recordings = o.recordings;
  so.copyStream = o.copyStream;
  auto s = runtime::Session::open(dir, so);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  if (!s.isOk())
    return r;
  runtime::Session &session = **s;
  if (o.accumulatedInPlace)
    *o.accumulatedInPlace = session.gradientsAccumulatedInPlace();
  if (o.updatedInStep)
    *o.updatedInStep = session.paramsUpdatedInStep();
  if (o.residentTraining)
    *o.residentTraining = session.residentTraining();
  for (int i = 0; i < steps; ++i) {
    if (i > 0 && o.afterStep)
      o.afterStep(session, i);
    auto in = o.inputs ? o.inputs(session, i) : makeInputs(session, static_cast<uint64_t>(i));
    if (train) {
      auto st = session.train(in);
      EXPECT_TRUE(st.isOk()) << st.status().message();
      if (!st.isOk())
        return r;
      r.losses.push_back(st->loss);
      r.norms.push_back(st->gradNorm);
      r.skipped.push_back(st->skipped);
      r.outputs = std::move(st->outputs);
    } else {
      auto out = session.run(in);
      EXPECT_TRUE(out.isOk()) << out.status().message();
      if (!out.isOk())
        return r;
      r.outputs = std::move(*out);
    }
  }
  if (train) {
    Status flushed = session.flush(); // 2bw: the last step's remaining updates
    EXPECT_TRUE(flushed.isOk()) << flushed.message();
  }
  if (o.hostSchedules)
    for (const auto &ex : session.devices())
      if (ex)
        o.hostSchedules->push_back(ex->hostSchedule());
  if (train) {
    // The trained parameters, then the state the steps updated (running
    // statistics).
    std::vector<int32_t> kept;
    for (const plan::Parameter &pp : session.plan().training().params())
      kept.push_back(pp.weight());
    for (const plan::StateUpdate &u : session.plan().training().state_updates())
      kept.push_back(u.state());
    for (int32_t t : kept) {
      auto w = session.weight(session.plan().tensors(t).name());
      EXPECT_TRUE(w.isOk()) << w.status().message();
      if (!w.isOk())
        return r;
      r.weights.push_back(*w);
    }
  }
  return r;
}

bool bitwiseEqual(const Tensor &a, const Tensor &b) {
  return a.desc() == b.desc() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

void expectSame(const RunResult &ref, const RunResult &got, const std::string &what) {
  ASSERT_EQ(ref.weights.size(), got.weights.size()) << what;
  for (size_t i = 0; i < ref.weights.size(); ++i)
    EXPECT_TRUE(bitwiseEqual(ref.weights[i], got.weights[i])) << what << ": weight " << i;
  ASSERT_EQ(ref.outputs.size(), got.outputs.size()) << what;
  for (size_t i = 0; i < ref.outputs.size(); ++i)
    EXPECT_TRUE(bitwiseEqual(ref.outputs[i], got.outputs[i])) << what << ": output " << i;
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i) // NaN where a step's data was
    EXPECT_TRUE(ref.losses[i] == got.losses[i] || (std::isnan(ref.losses[i]) && std::isnan(got.losses[i])))
        << what << ": step " << i << " loss " << ref.losses[i] << " vs " << got.losses[i];
  ASSERT_EQ(ref.norms.size(), got.norms.size()) << what;
  for (size_t i = 0; i < ref.norms.size(); ++i) // NaN where a step was not finite
    EXPECT_TRUE(ref.norms[i] == got.norms[i] || (std::isnan(ref.norms[i]) && std::isnan(got.norms[i])))
        << what << ": step " << i << " norm " << ref.norms[i] << " vs " << got.norms[i];
  EXPECT_EQ(ref.skipped, got.skipped) << what;
}

/// A new session of `dir` resumes from checkpoint `ckpt`, trains steps
/// [from, to), and has the weights of the uninterrupted run `straight`.
void expectResumedAs(const std::string &dir, const runtime::SessionOptions &so, const std::string &ckpt, int from,
                     int to, const RunResult &straight, const std::string &what) {
  auto s = runtime::Session::open(dir, so);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  Status loaded = (*s)->loadCheckpoint(ckpt);
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  for (int i = from; i < to; ++i)
    ASSERT_TRUE((*s)->train(makeInputs(**s, static_cast<uint64_t>(i))).isOk());
  for (size_t k = 0; k < straight.weights.size(); ++k) {
    auto w = (*s)->weight((*s)->plan().tensors((*s)->plan().training().params(static_cast<int>(k)).weight()).name());
    ASSERT_TRUE(w.isOk());
    EXPECT_TRUE(bitwiseEqual(straight.weights[k], *w)) << what << ": resumed weight " << k;
  }
}

struct ModelCase {
  const char *name;
  int64_t microBatch;
  int steps;
  /// Forward nodes after the passes: the most stages the model can be cut
  /// into (the MLP's Gemm and Relu of each layer are one pipec:FusedGemm).
  int maxStages;
};

const ModelCase kTrainModels[] = {{"mlp-train", 4, 10, 5}, {"gpt-train", 2, 10, 50}, {"cnn-train", 2, 10, 21}};
const ModelCase kInferModels[] = {{"mlp", 4, 2, 4}, {"gpt", 2, 2, 50}, {"cnn", 2, 2, 20}};

} // namespace

TEST(Pipeline, TrainingIsBitwiseIndependentOfStagesAndSchedule) {
  for (const ModelCase &m : kTrainModels) {
    Config base;
    base.K = 1;
    RunResult ref = run(compile(m.name, m.microBatch, base), m.steps, true);
    ASSERT_FALSE(ref.weights.empty()) << m.name;
    for (int K : {2, 4})
      for (const char *schedule : {"gpipe", "1f1b", "zbh1", "zbh2", "interleaved", "zbv"}) {
        Config c;
        c.K = K;
        c.schedule = schedule;
        // Interleaved: v = 2 on K = 2 and 4, v = 3 on K = 2.
        for (unsigned v : {0u, 3u}) {
          if (v == 3 && (c.schedule != "interleaved" || K != 2))
            continue;
          const bool twoPerDevice = c.schedule == "interleaved" || c.schedule == "zbv";
          if (K * static_cast<int>(v ? v : twoPerDevice ? 2 : 1) > m.maxStages)
            continue; // the MLP's 5 nodes: K = 4 with two stages each is refused

          c.virtualStages = v;
          std::string what = cat(m.name, " K=", K, " ", schedule, v ? cat(" v=", v) : "");
          RunResult got = run(compile(m.name, m.microBatch, c), m.steps, true);
          expectSame(ref, got, what);
        }
      }
  }
}

namespace {

/// PipeDream-2BW's rule applied by hand on one device with pipec's own
/// gradients: step t's gradient g(t) is taken at W(t-1) (W(-1) = W(0)) by a
/// one-device flush plan (Session::gradients), and W(t+1) = W(t) -
/// update(g(t)) by the plan's optimizer.
RunResult twoWeightVersionsByHand(const std::string &dir, int steps) {
  RunResult r;
  runtime::SessionOptions so;
  so.seed = 7;
  auto s = runtime::Session::open(dir, so);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  if (!s.isOk())
    return r;
  runtime::Session &session = **s;
  auto oc = train::parseOptimizer(session.plan().training().optimizer());
  EXPECT_TRUE(oc.isOk()) << oc.status().message();
  if (!oc.isOk())
    return r;
  auto opt = train::Optimizer::create(*oc);
  EXPECT_TRUE(opt.isOk()) << opt.status().message();
  if (!opt.isOk())
    return r;
  train::LrSchedule lr;
  lr.baseLr = opt->baseLr();
  std::vector<std::string> names;
  std::vector<Tensor> current, previous;
  std::vector<std::vector<std::vector<float>>> state;
  for (const plan::Parameter &pp : session.plan().training().params()) {
    names.push_back(session.plan().tensors(pp.weight()).name());
    auto w = session.weight(names.back());
    EXPECT_TRUE(w.isOk()) << w.status().message();
    if (!w.isOk())
      return r;
    current.push_back(w->clone());
    previous.push_back(w->clone());
    state.emplace_back(opt->stateTensors(), std::vector<float>(static_cast<size_t>(w->numel()), 0.0f));
  }
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < names.size(); ++i)
      EXPECT_TRUE(session.setWeight(names[i], previous[i]).isOk());
    auto g = session.gradients(makeInputs(session, static_cast<uint64_t>(t)));
    EXPECT_TRUE(g.isOk()) << g.status().message();
    if (!g.isOk())
      return r;
    r.losses.push_back(g->loss);
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(g->values[i].first, names[i]);
      Tensor next = current[i].clone();
      std::vector<float *> st;
      for (auto &v : state[i])
        st.push_back(v.data());
      EXPECT_TRUE(opt->step(t + 1, lr.lrAt(t + 1), next.data<float>(), g->values[i].second.data<float>(), st,
                            next.numel())
                      .isOk());
      previous[i] = std::move(current[i]);
      current[i] = std::move(next);
    }
  }
  r.weights = std::move(current);
  return r;
}

} // namespace

// PipeDream-2BW (--schedule 2bw): steps back to back without a flush, each
// micro-batch of step t on W(t-1), W(t+1) = W(t) - update(g(t)). Bitwise
// the rule applied by hand on one device, for every sample and K = 2, 4.
TEST(Pipeline, TwoBWIsTheDelayedUpdateRuleBitwise) {
  for (const ModelCase &m : kTrainModels) {
    Config one;
    one.K = 1;
    const int steps = 6;
    RunResult ref = twoWeightVersionsByHand(compile(m.name, m.microBatch, one), steps);
    ASSERT_FALSE(ref.weights.empty()) << m.name;
    for (int K : {1, 2, 4}) {
      Config c;
      c.K = K;
      c.schedule = "2bw";
      RunResult got = run(compile(m.name, m.microBatch, c), steps, true);
      const std::string what = cat(m.name, " 2bw K=", K);
      // The trained parameters (the rule by hand keeps no running
      // statistics, which run() adds after them).
      ASSERT_LE(ref.weights.size(), got.weights.size()) << what;
      for (size_t i = 0; i < ref.weights.size(); ++i)
        EXPECT_TRUE(bitwiseEqual(ref.weights[i], got.weights[i])) << what << ": weight " << i;
      EXPECT_EQ(ref.losses, got.losses) << what;
    }
    // Not the flush schedules' training: the updates are one step late.
    RunResult flush = run(compile(m.name, m.microBatch, one), steps, true);
    EXPECT_EQ(flush.losses[0], ref.losses[0]) << m.name;
    EXPECT_NE(flush.losses[2], ref.losses[2]) << m.name;
  }
}

// A flush in the middle of a 2bw run (what a checkpoint does), and a
// checkpoint resumed in a new session, change nothing.
TEST(Pipeline, TwoBWFlushAndCheckpointResumeExactly) {
  Config c;
  c.K = 2;
  c.schedule = "2bw";
  const std::string dir = compile("gpt-train", 2, c);
  RunResult straight = run(dir, 6, true);
  runtime::SessionOptions so;
  so.seed = 7;
  const std::string ckpt = tempDir("2bw-checkpoint");
  std::vector<double> losses;
  {
    auto s = runtime::Session::open(dir, so);
    ASSERT_TRUE(s.isOk()) << s.status().message();
    EXPECT_TRUE((*s)->noFlush());
    for (int t = 0; t < 3; ++t) {
      auto st = (*s)->train(makeInputs(**s, static_cast<uint64_t>(t)));
      ASSERT_TRUE(st.isOk()) << st.status().message();
      losses.push_back(st->loss);
    }
    // The weights are not final while the last step is pending.
    EXPECT_FALSE((*s)->weight((*s)->plan().tensors((*s)->plan().training().params(0).weight()).name()).isOk());
    Status saved = (*s)->saveCheckpoint(ckpt);
    ASSERT_TRUE(saved.isOk()) << saved.message();
  }
  auto s = runtime::Session::open(dir, so);
  ASSERT_TRUE(s.isOk());
  Status loaded = (*s)->loadCheckpoint(ckpt);
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  for (int t = 3; t < 6; ++t) {
    auto st = (*s)->train(makeInputs(**s, static_cast<uint64_t>(t)));
    ASSERT_TRUE(st.isOk()) << st.status().message();
    losses.push_back(st->loss);
  }
  ASSERT_TRUE((*s)->flush().isOk());
  EXPECT_EQ(losses, straight.losses);
  const auto &params = (*s)->plan().training().params();
  for (int i = 0; i < params.size(); ++i) {
    auto w = (*s)->weight((*s)->plan().tensors(params[i].weight()).name());
    ASSERT_TRUE(w.isOk());
    EXPECT_TRUE(bitwiseEqual(*w, straight.weights[static_cast<size_t>(i)])) << "weight " << i;
  }
}

// The weight-gradient GEMMs sum their micro-batches into the accumulator
// themselves (beta 1) instead of the runtime adding each micro-batch's
// gradient: the same training up to float rounding, on one device and two.
TEST(Pipeline, GradientsAccumulatedInPlaceTrainAsCollected) {
  for (int K : {1, 2}) {
    Config c;
    c.K = K;
    c.M = 4;
    std::string dir = compile("gpt-train", 2, c);
    int inPlace = 0, collected = -1;
    RunResult fused = run(dir, 5, true, {.inPlace = true, .accumulatedInPlace = &inPlace});
    RunResult plain = run(dir, 5, true, {.inPlace = false, .accumulatedInPlace = &collected});
    // Every MatMul weight of the GPT-like sample (four per block and the
    // head) has a GEMM gradient; biases and norms are collected. The plan
    // says which, and the runtime follows it.
    EXPECT_EQ(inPlace, 9) << "K=" << K;
    int flagged = 0;
    auto lp = plan::loadPlan(dir);
    ASSERT_TRUE(lp.isOk()) << lp.status().message();
    for (const plan::Parameter &pp : lp->plan.training().params())
      flagged += pp.accumulate_in_place();
    EXPECT_EQ(flagged, 9) << "K=" << K;
    EXPECT_EQ(collected, 0);
    ASSERT_EQ(fused.weights.size(), plain.weights.size());
    for (size_t w = 0; w < fused.weights.size(); ++w) {
      const Tensor &a = fused.weights[w], &b = plain.weights[w];
      ASSERT_EQ(a.desc(), b.desc());
      double worst = 0;
      for (int64_t i = 0; i < a.numel(); ++i)
        worst = std::max(worst, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]) /
                                    (1e-3 + std::abs(double(b.data<float>()[i]))));
      EXPECT_LT(worst, 1e-4) << "K=" << K << " weight " << w;
    }
    for (size_t i = 0; i < fused.losses.size(); ++i)
      EXPECT_NEAR(fused.losses[i], plain.losses[i], 1e-5 * std::abs(plain.losses[i]));
  }
}

// Parameters updated inside the step, right after their last use
// (Session::planParamUpdates), train bitwise as when every update waits
// for the OPTIMIZER instruction: for each sample, one and two stages, one
// and four micro-batches, and a schedule that runs weight gradients apart.
// Where the optimizer needs every gradient first (skipping non-finite
// steps), or no gradient is summed in place, none is updated early.
TEST(Pipeline, ParametersUpdatedInStepTrainAsAtTheOptimizer) {
  for (const ModelCase &m : kTrainModels)
    for (int K : {1, 2})
      for (int M : {1, 4})
        for (const char *schedule : {"1f1b", "zbh1"}) {
          if (K == 1 && std::string(schedule) != "1f1b")
            continue;
          Config c;
          c.K = K;
          c.M = M;
          c.schedule = schedule;
          const std::string dir = compile(m.name, m.microBatch, c);
          const std::string what = cat(m.name, " K=", K, " M=", M, " ", schedule);
          int early = -1, inPlace = -1, late = -1, skipping = -1, collected = -1;
          RunResult at = run(dir, 4, true, {.updateInStep = false, .updatedInStep = &late});
          RunResult in = run(dir, 4, true, {.accumulatedInPlace = &inPlace, .updatedInStep = &early});
          expectSame(at, in, what);
          EXPECT_EQ(late, 0) << what;
          // Every parameter whose gradient is summed in place, on any device.
          EXPECT_EQ(early, inPlace) << what;
          if (std::string(m.name) != "cnn-train") {
            EXPECT_GT(early, 0) << what;
          }
          run(dir, 2, true, {.skipNonFinite = true, .updatedInStep = &skipping});
          EXPECT_EQ(skipping, 0) << what;
          run(dir, 2, true, {.inPlace = false, .updatedInStep = &collected});
          EXPECT_EQ(collected, 0) << what;
        }
}

TEST(Pipeline, RecomputeGivesBitwiseTheSameTrainingAndLessMemory) {
  for (const ModelCase &m : kTrainModels) {
    Config base;
    base.K = 2;
    base.schedule = "gpipe";
    std::string refDir = compile(m.name, m.microBatch, base);
    RunResult ref = run(refDir, 3, true);
    // Arenas summed over the stages: recomputing adds time, so the cost
    // model may cut the stages elsewhere than without it.
    auto totalArena = [](const plan::Plan &p) {
      uint64_t sum = 0;
      for (const plan::Device &d : p.devices())
        sum += d.arena_bytes();
      return sum;
    };
    const uint64_t refArena = totalArena(plan::loadPlan(refDir)->plan);
    for (const char *policy : {"full", "selective"}) {
      Config c = base;
      c.recompute = policy;
      std::string dir = compile(m.name, m.microBatch, c);
      expectSame(ref, run(dir, 3, true), cat(m.name, " recompute ", policy));
      auto lp = plan::loadPlan(dir);
      ASSERT_TRUE(lp.isOk());
      bool hasRecompute = false;
      for (const plan::Instruction &ins : lp->plan.devices(0).program())
        hasRecompute = hasRecompute || ins.kind() == plan::Instruction::RECOMPUTE;
      // Selective recomputes the cheap nodes, which the MLP has none of
      // once each layer's Relu runs in its GEMM's epilogue.
      if (std::string(policy) == "full" || std::string(m.name) != "mlp-train") {
        EXPECT_TRUE(hasRecompute) << m.name << " " << policy;
      }
      // GPipe keeps M micro-batches of activations: full recompute keeps
      // only stage inputs. Selective keeps the GEMM outputs, which may be
      // the peak already (the MLP), and its clones' buffers can place less
      // tightly in the greedy arena layout, so it gets a margin.
      if (std::string(policy) == "full")
        EXPECT_LT(totalArena(lp->plan), refArena) << m.name << " " << policy;
      else
        EXPECT_LE(totalArena(lp->plan), refArena * 12 / 10) << m.name << " " << policy;
    }
  }
}

TEST(Pipeline, InferenceIsBitwiseIndependentOfStages) {
  for (const ModelCase &m : kInferModels) {
    Config base;
    base.train = false;
    RunResult ref = run(compile(m.name, m.microBatch, base), m.steps, false);
    for (int K : {2, 4}) {
      Config c = base;
      c.K = K;
      expectSame(ref, run(compile(m.name, m.microBatch, c), m.steps, false), cat(m.name, " K=", K));
      // Two stages per device (the inference MLP has 4 nodes: K = 2).
      for (const char *schedule : {"interleaved", "zbv"}) {
        if (K > 2)
          break;
        c.schedule = schedule;
        expectSame(ref, run(compile(m.name, m.microBatch, c), m.steps, false),
                   cat(m.name, " K=", K, " ", schedule));
      }
      c.schedule = base.schedule;
    }
  }
}

TEST(Pipeline, FewerMicroBatchesThanStagesCompletes) {
  Config c;
  c.K = 4;
  c.M = 1;
  for (const char *schedule : {"gpipe", "1f1b", "zbh1", "zbh2", "zbv"}) {
    c.schedule = schedule;
    Config base = c;
    base.schedule = "1f1b";
    base.K = 1;
    // zbv's 8 stages need more nodes than the MLP's 5.
    const char *model = c.schedule == "zbv" ? "gpt-train" : "mlp-train";
    expectSame(run(compile(model, 4, base), 3, true), run(compile(model, 4, c), 3, true),
               cat(model, " M=1 K=4 ", schedule));
  }
}

TEST(Pipeline, AnErrorOnOneDeviceStopsEveryDevice) {
  Config c;
  c.K = 4;
  std::string dir = compile("mlp-train", 4, c);
  // Also on emulated GPUs, whose receives may still be copying from the
  // failed device's memory when the session goes (Session::~Session).
  for (bool gpu : {false, true})
    for (int dev : {0, 2, 3}) {
      runtime::SessionOptions so;
      so.failDevice = dev;
      so.failAtInstruction = 3;
      so.emulateGpu = gpu;
      auto s = runtime::Session::open(dir, so);
      ASSERT_TRUE(s.isOk()) << s.status().message();
      auto st = (*s)->train(makeInputs(**s, 0));
      ASSERT_FALSE(st.isOk());
      EXPECT_NE(st.status().message().find(cat("device ", dev, ": injected failure")), std::string::npos)
          << st.status().message();
      // The session refuses to go on from an undefined state, or to save it.
      auto again = (*s)->train(makeInputs(**s, 1));
      EXPECT_FALSE(again.isOk());
      Status saved = (*s)->saveCheckpoint(tempDir(cat("failed-ckpt", dev)));
      ASSERT_FALSE(saved.isOk());
      EXPECT_NE(saved.message().find("an earlier step failed"), std::string::npos) << saved.message();
    }
}

namespace {
plan::Plan loadedPlan(const std::string &dir) {
  auto lp = plan::loadPlan(dir);
  EXPECT_TRUE(lp.isOk()) << lp.status().message();
  return lp.isOk() ? lp->plan : plan::Plan();
}

int findInstruction(const plan::Device &d, plan::Instruction::Kind k) {
  for (int i = 0; i < d.program_size(); ++i)
    if (d.program(i).kind() == k)
      return i;
  return -1;
}
} // namespace

TEST(Pipeline, ValidatorRejectsBrokenPlans) {
  Config c;
  c.K = 2;
  const plan::Plan good = loadedPlan(compile("mlp-train", 4, c));
  auto expectRejected = [](const plan::Plan &p, const char *why) {
    Status s = plan::checkSchedule(p);
    ASSERT_FALSE(s.isOk()) << "accepted a plan that should fail with: " << why;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
  };
  ASSERT_TRUE(plan::checkSchedule(good).isOk());

  { // A previous-step instruction in a schedule that flushes.
    plan::Plan p = good;
    p.mutable_devices(0)->mutable_program(0)->set_previous_step(true);
    expectRejected(p, "flushes every step");
  }
  { // 2bw: proven over three steps back to back. Its device 0 program
    // starts F0, sends, then the step before's gradient receive and B.
    Config twobw = c;
    twobw.schedule = "2bw";
    const plan::Plan p2 = loadedPlan(compile("mlp-train", 4, twobw));
    ASSERT_TRUE(plan::checkSchedule(p2).isOk());
    const plan::Device &d0 = p2.devices(0);
    int b = findInstruction(d0, plan::Instruction::BACKWARD);
    ASSERT_GE(b, 0);
    ASSERT_TRUE(d0.program(b).previous_step());
    { // That backward moved into the current step: it reads its micro-batch's
      // activations before this step's forward wrote them.
      plan::Plan p = p2;
      p.mutable_devices(0)->mutable_program(b)->set_previous_step(false);
      expectRejected(p, "schedule:");
    }
    { // Its gradient's receive moved: the message of the step before is
      // taken for this step's (never sent in the first step).
      plan::Plan p = p2;
      p.mutable_devices(0)->mutable_program(b - 1)->set_previous_step(false);
      expectRejected(p, "schedule:");
    }
    { // The first device's update as a current-step one: it would run
      // before the step's last backward on that device.
      plan::Plan p = p2;
      int opt = findInstruction(d0, plan::Instruction::OPTIMIZER);
      ASSERT_GE(opt, 0);
      p.mutable_devices(0)->mutable_program(opt)->set_previous_step(false);
      expectRejected(p, "optimizer step 1 comes before the gradient of");
    }
  }
  { // A send without its receive.
    plan::Plan p = good;
    plan::Device *d1 = p.mutable_devices(1);
    int r = findInstruction(*d1, plan::Instruction::RECV);
    ASSERT_GE(r, 0);
    d1->mutable_program()->DeleteSubrange(r, 1);
    expectRejected(p, "never received");
  }
  { // Device 0 waits for a gradient before sending the activation device
    // 1 needs to compute it: a deadlock.
    plan::Plan p = good;
    plan::Device *d0 = p.mutable_devices(0);
    int send = findInstruction(*d0, plan::Instruction::SEND);
    int recv = findInstruction(*d0, plan::Instruction::RECV);
    ASSERT_GE(send, 0);
    ASSERT_GT(recv, send);
    plan::Instruction r = d0->program(recv);
    d0->mutable_program()->DeleteSubrange(recv, 1);
    *d0->mutable_program()->Add() = r;
    for (int i = d0->program_size() - 1; i > 0; --i)
      d0->mutable_program()->SwapElements(i, i - 1);
    expectRejected(p, "deadlock");
  }
  { // A tensor read before it is written: move device 1's first receive
    // after the instruction that reads it.
    plan::Plan p = good;
    plan::Device *d1 = p.mutable_devices(1);
    int r = findInstruction(*d1, plan::Instruction::RECV);
    d1->mutable_program()->SwapElements(r, r + 1);
    expectRejected(p, "before it is written");
  }
  { // Two live instances sharing arena bytes.
    plan::Plan p = good;
    plan::Device *d0 = p.mutable_devices(0);
    for (plan::Allocation &a : *d0->mutable_allocations())
      a.set_offset(0);
    expectRejected(p, "share arena bytes");
  }
  // Views: the GPT-like sample's reshapes run as views, their outputs on
  // their inputs' bytes.
  const plan::Plan gpt = loadedPlan(compile("gpt-train", 4, c));
  ASSERT_TRUE(plan::checkSchedule(gpt).isOk());
  int views = 0;
  for (const plan::Device &d : gpt.devices())
    for (const plan::Node &n : d.nodes())
      views += n.view();
  EXPECT_GT(views, 10);
  { // A view whose output is elsewhere in the arena than its input.
    plan::Plan p = gpt;
    plan::Device *d0 = p.mutable_devices(0);
    int32_t out = -1;
    for (const plan::Node &n : d0->nodes())
      if (n.view()) {
        out = n.outputs(0);
        break;
      }
    ASSERT_GE(out, 0);
    for (plan::Allocation &a : *d0->mutable_allocations())
      if (a.tensor() == out)
        a.set_offset(a.offset() + 64);
    expectRejected(p, "view node");
  }
  { // A view of a different size.
    plan::Plan p = gpt;
    plan::Device *d0 = p.mutable_devices(0);
    for (const plan::Node &n : d0->nodes())
      if (n.view()) {
        p.mutable_tensors(n.outputs(0))->set_bytes(p.tensors(n.inputs(0)).bytes() / 2);
        break;
      }
    expectRejected(p, "view node");
  }
  { // Weight gradients out of micro-batch order: the last device's W of
    // micro-batches 2 and 3 swapped.
    plan::Plan p = good;
    plan::Device *d = p.mutable_devices(1);
    std::vector<int> w;
    for (int i = 0; i < d->program_size(); ++i)
      if (d->program(i).kind() == plan::Instruction::WEIGHT_GRAD && d->program(i).micro_batch() >= 2)
        w.push_back(i);
    ASSERT_EQ(w.size(), 2u);
    d->mutable_program()->SwapElements(w[0], w[1]);
    expectRejected(p, "ascending micro-batch order");
  }
  { // A gradient said to be accumulated in place that a node reads.
    plan::Plan p = good;
    plan::Parameter *pp = p.mutable_training()->mutable_params(0);
    pp->set_accumulate_in_place(true);
    for (plan::Device &d : *p.mutable_devices())
      for (plan::Node &n : *d.mutable_nodes())
        if (std::find(n.outputs().begin(), n.outputs().end(), pp->grad()) != n.outputs().end() &&
            d.nodes_size() > 0) {
          d.mutable_nodes(d.nodes_size() - 1)->add_inputs(pp->grad());
          break;
        }
    expectRejected(p, "accumulated in place but node");
  }
  { // A schedule pipec does not know, and one with the wrong stage count.
    plan::Plan p = good;
    p.mutable_pipeline()->set_schedule("2f2b");
    expectRejected(p, "unknown pipeline schedule");
    p = good;
    p.mutable_pipeline()->set_stages_per_device(2);
    expectRejected(p, "stage(s) per device");
  }
}

// NCCL's point-to-point operations meet in order per pair of ranks and a
// send waits for its receive: every schedule's plans, with each device's
// consecutive SENDs and RECVs posted as one group, keep each pair's order
// and cannot deadlock (plan::checkRendezvous). A plan whose order differs,
// or whose groups are split so that two devices send to each other at
// once, is refused by name.
TEST(Pipeline, EverySchedulesMessagesMeetInOrderWithRendezvousSends) {
  int checked = 0;
  for (const ModelCase &m : {kTrainModels[1], kInferModels[1], kTrainModels[0], kTrainModels[2]})
    for (int K : {2, 3, 4, 6})
      for (int M : {1, 3, 4, 8})
        for (const char *schedule : {"gpipe", "1f1b", "zbh1", "zbh2", "interleaved", "zbv", "2bw"}) {
          const bool train = std::string(m.name).find("train") != std::string::npos;
          if (!train && std::string(schedule) != "gpipe" && std::string(schedule) != "1f1b")
            continue;
          const bool twoPerDevice = std::string(schedule) == "interleaved" || std::string(schedule) == "zbv";
          if (K * (twoPerDevice ? 2 : 1) > m.maxStages ||
              (std::string(schedule) == "interleaved" && M % K != 0) ||
              (std::string(schedule) == "2bw" && M < K))
            continue;
          Config c;
          c.K = K;
          c.M = M;
          c.schedule = schedule;
          c.train = train;
          const std::string dir = compile(m.name, m.microBatch, c);
          ASSERT_FALSE(dir.empty());
          auto lp = plan::loadPlan(dir, plan::LoadWeights::No);
          ASSERT_TRUE(lp.isOk()) << lp.status().message();
          Status s = plan::checkRendezvous(lp->plan);
          EXPECT_TRUE(s.isOk()) << m.name << " K=" << K << " M=" << M << " " << schedule << ": " << s.message();
          ++checked;
        }
  EXPECT_GT(checked, 50);
  // The refusals, on the GPT-like sample at K=2, M=4, 1F1B.
  Config c;
  c.K = 2;
  const std::string dir = compile("gpt-train", 2, c);
  ASSERT_FALSE(dir.empty());
  auto lp = plan::loadPlan(dir, plan::LoadWeights::No);
  ASSERT_TRUE(lp.isOk()) << lp.status().message();
  const plan::Plan &good = lp->plan;
  ASSERT_TRUE(plan::checkRendezvous(good).isOk());
  // One channel per (from, to, stage): here the activations and the
  // gradients between the two devices.
  const std::vector<plan::CommChannel> channels = plan::commChannels(good);
  ASSERT_EQ(channels.size(), 2u);
  EXPECT_EQ(channels[0].from, 0);
  EXPECT_EQ(channels[0].to, 1);
  EXPECT_EQ(channels[1].from, 1);
  EXPECT_EQ(channels[1].to, 0);
  // As the ranks of a D=2 x K=2 job see them: the same channels per
  // replica, numbered alike on both ends, each message instruction on its
  // channel in the right direction.
  for (int rank = 0; rank < 4; ++rank) {
    const plan::RankLinks links = plan::rankLinks(good, rank);
    const int device = rank % 2, replica = rank / 2;
    ASSERT_EQ(links.channels.size(), 2u) << "rank " << rank;
    for (size_t k = 0; k < 2; ++k) {
      const plan::RankChannel &rc = links.channels[k];
      EXPECT_EQ(rc.id, replica * 2 + static_cast<int>(k));
      EXPECT_EQ(rc.peer, replica * 2 + 1 - device);
      EXPECT_EQ(rc.sender, (k == 0) == (device == 0)) << "rank " << rank << " channel " << k;
      EXPECT_EQ(rc.messages, channels[k].sends.size());
    }
    const plan::Device &dev = good.devices(device);
    ASSERT_EQ(links.ofInstruction.size(), static_cast<size_t>(dev.program_size()));
    for (int i = 0; i < dev.program_size(); ++i) {
      const plan::Instruction &ins = dev.program(i);
      const int c = links.ofInstruction[static_cast<size_t>(i)];
      if (ins.kind() != plan::Instruction::SEND && ins.kind() != plan::Instruction::RECV) {
        EXPECT_EQ(c, -1);
        continue;
      }
      ASSERT_GE(c, 0) << "rank " << rank << " instruction " << i;
      EXPECT_EQ(links.channels[static_cast<size_t>(c)].sender, ins.kind() == plan::Instruction::SEND);
      EXPECT_EQ(links.channels[static_cast<size_t>(c)].peer, replica * 2 + ins.peer());
    }
  }
  { // Device 1 takes micro-batch 1's activations before micro-batch 0's,
    // which device 0 sends first: a tag would match them, NCCL would not.
    plan::Plan p = good;
    const plan::CommChannel &ch = channels[0];
    plan::Instruction *a = p.mutable_devices(1)->mutable_program(ch.recvs[0]), *b = nullptr;
    for (size_t k = 1; k < ch.recvs.size() && !b; ++k)
      if (p.devices(1).program(ch.recvs[k]).tensor() == a->tensor())
        b = p.mutable_devices(1)->mutable_program(ch.recvs[k]);
    ASSERT_NE(b, nullptr);
    const uint32_t mb = a->micro_batch();
    a->set_micro_batch(b->micro_batch());
    b->set_micro_batch(mb);
    Status s = plan::checkRendezvous(p);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("matches messages in order (NCCL), message 0 of stage 0 from device 0 to device 1"),
              std::string::npos)
        << s.message();
  }
  { // Device 0 waits for a gradient before sending the activation it
    // comes from.
    plan::Plan p = good;
    plan::Device *d0 = p.mutable_devices(0);
    const int recv = channels[1].recvs[0];
    plan::Instruction r = d0->program(recv);
    d0->mutable_program()->DeleteSubrange(recv, 1);
    *d0->mutable_program()->Add() = r;
    for (int i = d0->program_size() - 1; i > 0; --i)
      d0->mutable_program()->SwapElements(i, i - 1);
    Status s = plan::checkRendezvous(p);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("the devices deadlock: device 0 waits at instruction 0 RECV"), std::string::npos)
        << s.message();
  }
}

namespace {

/// Each rank of `p`'s job (threads over the in-process transport) makes
/// its channels (runtime::setUpChannels) with joins that wait, up to 10 s,
/// for the channel's other end, as ncclCommInitRank does; `gpuOf` gives
/// each rank's GPU. Returns each rank's status; `joined` counts the
/// channels both ends joined with one token, the sender as 0.
std::vector<Status> setUpEveryRank(const plan::Plan &p, int ranks, const std::function<int(int)> &gpuOf,
                                   int *joined) {
  auto transport = runtime::makeInProcessTransport(ranks, 0);
  struct End {
    int count = 0;
    runtime::LinkToken token{};
    bool agree = true, roles = true;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, End> ends; // by channel id
  std::vector<Status> result(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const plan::RankLinks links = plan::rankLinks(p, r);
      runtime::GpuIdentity gpu{};
      gpu[0] = static_cast<unsigned char>(gpuOf(r));
      int made = 0;
      runtime::LinkEnds le;
      le.makeToken = [&]() -> Expected<runtime::LinkToken> {
        runtime::LinkToken t{};
        t[0] = static_cast<unsigned char>(r);
        t[1] = static_cast<unsigned char>(++made);
        return t;
      };
      le.join = [&](size_t k, const runtime::LinkToken &token, int commRank) -> Status {
        const plan::RankChannel &c = links.channels[k];
        std::unique_lock<std::mutex> lock(mu);
        End &e = ends[c.id];
        if (e.count == 0)
          e.token = token;
        e.agree = e.agree && e.token == token;
        e.roles = e.roles && commRank == (c.sender ? 0 : 1);
        ++e.count;
        cv.notify_all();
        if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return e.count >= 2; }))
          return errorf("rank ", r, " waited 10 s for rank ", c.peer, " to join channel ", c.id);
        return Status::ok();
      };
      result[static_cast<size_t>(r)] = runtime::setUpChannels(links, r, *transport, gpu, gpuOf(r), le);
      // As a failed rank of an MPI job stops the others (their receives
      // fail rather than wait).
      if (!result[static_cast<size_t>(r)].isOk())
        transport->abort(result[static_cast<size_t>(r)]);
    });
  for (auto &t : threads)
    t.join();
  *joined = 0;
  for (auto &[id, e] : ends)
    *joined += e.count == 2 && e.agree && e.roles;
  return result;
}

} // namespace

// The channels' communicators are made in one order on every rank (the
// NCCL link's setup, runtime/dist/LinkSetup.h): with joins that wait for
// the other end, every rank of an interleaved and of a zbv job at K=4 (and
// of D=2 x K=2 1F1B) gets through, each channel joined by both ends with
// the sender's token; two ranks on one GPU are refused by name.
TEST(Pipeline, ChannelsAreMadeInOneOrderWithoutDeadlock) {
  struct Case {
    const char *schedule;
    int K, D;
  };
  for (const Case &k : {Case{"interleaved", 4, 1}, Case{"zbv", 4, 1}, Case{"1f1b", 2, 2}}) {
    Config c;
    c.K = k.K;
    c.M = 8;
    c.D = k.D;
    c.schedule = k.schedule;
    const std::string dir = compile("gpt-train", 2, c);
    ASSERT_FALSE(dir.empty());
    auto lp = plan::loadPlan(dir, plan::LoadWeights::No);
    ASSERT_TRUE(lp.isOk()) << lp.status().message();
    const int ranks = k.K * k.D;
    // Data parallelism: a channel each way between the replicas' devices
    // of a stage, with one id at both ends, after the plan's channels.
    for (int r = 0; r < ranks; ++r) {
      const plan::RankLinks links = plan::rankLinks(lp->plan, r);
      ASSERT_EQ(links.sendTo.size(), static_cast<size_t>(ranks));
      for (int q = 0; q < ranks; ++q) {
        const bool partner = q != r && q % k.K == r % k.K;
        ASSERT_EQ(links.sendTo[static_cast<size_t>(q)] >= 0, partner) << k.schedule << " rank " << r << " to " << q;
        ASSERT_EQ(links.recvFrom[static_cast<size_t>(q)] >= 0, partner) << k.schedule << " rank " << r << " from " << q;
        if (!partner)
          continue;
        const plan::RankLinks theirs = plan::rankLinks(lp->plan, q);
        EXPECT_EQ(links.channels[static_cast<size_t>(links.sendTo[static_cast<size_t>(q)])].id,
                  theirs.channels[static_cast<size_t>(theirs.recvFrom[static_cast<size_t>(r)])].id);
        EXPECT_TRUE(links.channels[static_cast<size_t>(links.sendTo[static_cast<size_t>(q)])].replica);
      }
      for (size_t j = 1; j < links.channels.size(); ++j)
        EXPECT_LT(links.channels[j - 1].id, links.channels[j].id) << "rank " << r;
    }
    size_t expected = 0;
    for (int r = 0; r < ranks; ++r)
      expected += plan::rankLinks(lp->plan, r).channels.size();
    ASSERT_GT(expected, 0u);
    int joined = 0;
    std::vector<Status> st = setUpEveryRank(lp->plan, ranks, [](int r) { return r; }, &joined);
    for (int r = 0; r < ranks; ++r)
      EXPECT_TRUE(st[static_cast<size_t>(r)].isOk()) << k.schedule << " rank " << r << ": "
                                                      << st[static_cast<size_t>(r)].message();
    EXPECT_EQ(static_cast<size_t>(joined) * 2, expected) << k.schedule;
    if (std::string(k.schedule) == "1f1b") {
      // Ranks 0 and 1 (replica 0's two stages) on one GPU.
      std::vector<Status> bad = setUpEveryRank(lp->plan, ranks, [](int r) { return r < 2 ? 0 : r; }, &joined);
      for (int r = 0; r < 2; ++r) {
        ASSERT_FALSE(bad[static_cast<size_t>(r)].isOk());
        EXPECT_NE(bad[static_cast<size_t>(r)].message().find("NCCL cannot connect two ranks on one GPU"),
                  std::string::npos)
            << bad[static_cast<size_t>(r)].message();
      }
      // Replica 1's ranks have GPUs of their own, and channels with ranks
      // 0 and 1: they stop with them rather than wait.
      EXPECT_FALSE(bad[2].isOk() || bad[3].isOk());
    }
  }
}

TEST(Pipeline, OneFOneBHoldsLessOnTheFirstStageThanGPipe) {
  // GPipe keeps all M micro-batches' activations on stage 0 until the
  // backward passes; 1F1B at most K. Measured by the runtime (the highest
  // arena byte the instructions touched) and stated by the plan.
  Config c;
  c.K = 2;
  c.M = 16;
  uint64_t measured[2], planned[2];
  int i = 0;
  for (const char *schedule : {"gpipe", "1f1b"}) {
    c.schedule = schedule;
    std::string dir = compile("gpt-train", 1, c);
    auto s = runtime::Session::open(dir, {});
    ASSERT_TRUE(s.isOk()) << s.status().message();
    ASSERT_TRUE((*s)->train(makeInputs(**s, 0)).isOk());
    measured[i] = (*s)->devices()[0]->stats().arenaHighWater;
    planned[i] = (*s)->plan().devices(0).arena_bytes();
    EXPECT_LE(measured[i], planned[i]) << schedule;
    EXPECT_GE(measured[i], planned[i] * 9 / 10) << schedule;
    ++i;
  }
  EXPECT_LT(measured[1], measured[0]) << "1f1b " << measured[1] << " vs gpipe " << measured[0];
  EXPECT_LT(planned[1], planned[0]);
}

TEST(Pipeline, TiedWeightsAndLongSkipConnections) {
  // A weight read by the first and the last stage (tied, as embeddings
  // are) and a value read by every later stage (a long skip): the gradient
  // contributions of the tied weight meet across stages and the skip value
  // is sent straight from its producer to each reader.
  auto build = [](int K, const std::string &schedule, double clip) {
    ir::Graph g;
    g.setName("tied");
    g.setOpset("", 17);
    const int64_t B = 4, D = 8;
    ir::Value *x = *g.addInput("x", TensorDesc{DType::F32, {B, D}});
    Tensor w0(DType::F32, {D, D});
    for (int64_t i = 0; i < w0.numel(); ++i)
      w0.data<float>()[i] = 0.05f * static_cast<float>((i * 7) % 11) - 0.2f;
    ir::Value *w = *g.addConstant("w", w0);
    w->setTrainable(true);
    ir::Value *h = (*g.addNode("first", "MatMul", "", {x, w}, {"h0"}))->output(0);
    ir::Value *skip = h;
    for (int l = 0; l < 6; ++l) {
      Tensor wl(DType::F32, {D, D});
      for (int64_t i = 0; i < wl.numel(); ++i)
        wl.data<float>()[i] = 0.03f * static_cast<float>((i * (l + 3)) % 13) - 0.15f;
      ir::Value *wv = *g.addConstant(cat("w", l), wl);
      wv->setTrainable(true);
      ir::Value *m = (*g.addNode(cat("mm", l), "MatMul", "", {h, wv}, {cat("m", l)}))->output(0);
      ir::Value *t = (*g.addNode(cat("tanh", l), "Tanh", "", {m}, {cat("t", l)}))->output(0);
      h = (*g.addNode(cat("skip", l), "Add", "", {t, skip}, {cat("h", l + 1)}))->output(0);
    }
    ir::Value *wt = (*g.addNode("tie", "Transpose", "", {w}, {"wt"}))->output(0);
    ir::Value *out = (*g.addNode("last", "MatMul", "", {h, wt}, {"y"}))->output(0);
    ir::Value *sq = (*g.addNode("sq", "Mul", "", {out, out}, {"y2"}))->output(0);
    AttrMap keep;
    keep["keepdims"] = Attribute::ofInt(0);
    g.addOutput((*g.addNode("loss", "ReduceMean", "", {sq}, {"l"}, keep))->output(0));
    driver::CompileOptions co;
    co.emit.training = true;
    co.emit.microBatches = 2;
    auto parsed = pipeline::Schedule::parse(schedule);
    EXPECT_TRUE(parsed.isOk()) << parsed.status().message();
    if (!parsed.isOk())
      return std::string();
    co.emit.schedule = *parsed;
    co.partition.numStages = K;
    co.partition.schedule = co.emit.schedule;
    co.partition.training = true;
    co.train.optimizer = "adam:lr=0.01";
    co.train.lossOutput = "l";
    co.train.clipGradNorm = clip;
    auto compiled = driver::compileGraph(g, co);
    EXPECT_TRUE(compiled.isOk()) << compiled.status().message();
    if (!compiled.isOk())
      return std::string();
    std::string dir = tempDir(cat("tied-k", K, schedule, clip));
    EXPECT_TRUE(codegen::writePlanDirectory(dir, compiled->plan).isOk());
    return dir;
  };
  // With clipping every device waits for the global norm before updating;
  // without, the devices holding the tied weight still must not update it
  // while another reads it.
  for (double clip : {0.5, 0.0}) {
    RunResult ref = run(build(1, "1f1b", clip), 8, true);
    ASSERT_FALSE(ref.weights.empty());
    for (int K : {2, 3, 5})
      for (const char *schedule : {"gpipe", "1f1b", "zbh1", "zbh2", "zbv"})
        expectSame(ref, run(build(K, schedule, clip), 8, true),
                   cat("tied K=", K, " ", schedule, " clip ", clip));
  }
}

// The in-process transport, spinning or not: messages of several sizes and
// tags arrive intact and out of order (recycled buffers hold no stale
// bytes), a receive of the wrong size is an error, and an abort wakes a
// receiver that is spinning or asleep.
TEST(Pipeline, InProcessTransportDeliversAndAborts) {
  for (double spin : {0.0, 0.05}) {
    auto t = runtime::makeInProcessTransport(2, spin);
    std::vector<std::vector<float>> sent;
    for (int round = 0; round < 3; ++round) {
      const size_t sizes[] = {1000, 17, 4096, 1000};
      sent.assign(4, {});
      for (size_t i = 0; i < 4; ++i) {
        sent[i].resize(sizes[i]);
        for (size_t k = 0; k < sizes[i]; ++k)
          sent[i][k] = static_cast<float>(round * 100000 + i * 10000 + k);
      }
      std::thread sender([&] {
        for (size_t i = 0; i < 4; ++i)
          ASSERT_TRUE(t->send(0, 1, 10 * round + i, sent[i].data(), sent[i].size() * 4).isOk());
      });
      // Received in reverse order of sending.
      for (size_t i = 4; i-- > 0;) {
        std::vector<float> got(sent[i].size(), -1.0f);
        Status s = t->recv(1, 0, 10 * round + i, got.data(), got.size() * 4);
        ASSERT_TRUE(s.isOk()) << s.message();
        EXPECT_EQ(got, sent[i]) << "spin " << spin << " round " << round << " message " << i;
      }
      sender.join();
    }
    float x = 1;
    ASSERT_TRUE(t->send(0, 1, 99, &x, 4).isOk());
    double wrong[2];
    EXPECT_FALSE(t->recv(1, 0, 99, wrong, sizeof wrong).isOk());
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      t->abort(errorf("device 0 failed"));
    });
    Status s = t->recv(1, 0, 1234, &x, 4); // never sent
    aborter.join();
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("device 0 failed"), std::string::npos);
    // Collectives and sends after the abort fail with it too.
    double v = 1;
    Status c = t->allReduceSum(0, &v, 1);
    ASSERT_FALSE(c.isOk());
    EXPECT_NE(c.message().find("device 0 failed"), std::string::npos);
    EXPECT_FALSE(t->send(0, 1, 7, &x, 4).isOk());
    // A device waiting in a collective is woken by an abort.
    t->reset();
    std::thread aborter2([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      t->abort(errorf("device 1 failed"));
    });
    Status w = t->allReduceSum(0, &v, 1); // device 1 never joins
    aborter2.join();
    ASSERT_FALSE(w.isOk());
    EXPECT_NE(w.message().find("device 1 failed"), std::string::npos);
    t->reset();
    // After a reset the transport delivers again.
    ASSERT_TRUE(t->send(0, 1, 8, &x, 4).isOk());
    ASSERT_TRUE(t->recv(1, 0, 8, &x, 4).isOk());
  }
}

// DeviceThreads, spinning between steps or sleeping: every run calls each
// device once, device 0 on the caller's thread and the others each on a
// thread of its own that stays the same from step to step; each device's
// status comes back in its slot.
TEST(Pipeline, DeviceThreadsRunEveryDeviceOncePerStep) {
  for (double spin : {0.0, 0.05}) {
    constexpr int kDevices = 3;
    runtime::DeviceThreads threads(kDevices, 1, spin);
    std::vector<std::thread::id> first(kDevices);
    for (int step = 0; step < 100; ++step) {
      std::vector<std::atomic<int>> calls(kDevices);
      std::vector<std::thread::id> ids(kDevices);
      std::vector<Status> st = threads.run([&](int d) -> Status {
        calls[static_cast<size_t>(d)].fetch_add(1);
        ids[static_cast<size_t>(d)] = std::this_thread::get_id();
        if (d == 2 && step % 7 == 3)
          return errorf("device 2 failed at step ", step);
        return Status::ok();
      });
      ASSERT_EQ(st.size(), static_cast<size_t>(kDevices));
      for (int d = 0; d < kDevices; ++d) {
        EXPECT_EQ(calls[static_cast<size_t>(d)].load(), 1) << "spin " << spin << " step " << step;
        EXPECT_EQ(st[static_cast<size_t>(d)].isOk(), d != 2 || step % 7 != 3) << "step " << step;
      }
      EXPECT_EQ(ids[0], std::this_thread::get_id());
      EXPECT_NE(ids[1], ids[2]);
      if (step == 0)
        first = ids;
      EXPECT_EQ(ids, first) << "spin " << spin << " step " << step;
    }
  }
}

// The spin decision counts the cores the affinity mask allows: under
// `taskset -c 0` two spinning devices would share one core.
TEST(Pipeline, UsableCoresFollowTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(usableCores(), static_cast<unsigned>(CPU_COUNT(&saved)));
  int first = 0;
  while (!CPU_ISSET(first, &saved))
    ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(usableCores(), 1u);
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
}

namespace {
/// A traced session of the plan in `dir` after `steps` training steps, or
/// null (the failure reported).
std::unique_ptr<runtime::Session> tracedAfterSteps(const std::string &dir, int steps) {
  runtime::SessionOptions so;
  so.trace = true;
  auto s = runtime::Session::open(dir, so);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  if (!s.isOk())
    return nullptr;
  for (int i = 0; i < steps; ++i) {
    auto st = (*s)->train(makeInputs(**s, static_cast<uint64_t>(i)));
    EXPECT_TRUE(st.isOk()) << st.status().message();
    if (!st.isOk())
      return nullptr;
  }
  return std::move(*s);
}
} // namespace

// piperun --report: the plan's predicted timeline beside the measured one.
// Every instruction carries its prediction (a compute instruction's is
// its nodes' sum); both timelines have one slice per instruction; the
// differences are sorted; an untraced session is refused.
TEST(Pipeline, RunReportPutsThePredictionBesideTheMeasurement) {
  Config c;
  c.K = 2;
  c.M = 4;
  c.schedule = "interleaved";
  const std::string dir = compile("mlp-train", 4, c);
  std::unique_ptr<runtime::Session> s = tracedAfterSteps(dir, 3);
  ASSERT_TRUE(s);
  runtime::Session &session = *s;
  const plan::Plan &p = session.plan();
  for (const plan::Device &d : p.devices())
    for (const plan::Instruction &ins : d.program()) {
      double nodes = 0;
      for (int32_t ni : ins.nodes())
        nodes += d.nodes(ni).predicted_seconds();
      if (ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::OPTIMIZER) {
        EXPECT_GT(ins.predicted_seconds(), 0) << plan::Instruction::Kind_Name(ins.kind());
      } else if (ins.kind() != plan::Instruction::RECV) {
        EXPECT_DOUBLE_EQ(ins.predicted_seconds(), nodes);
      }
    }
  auto cmp = runtime::comparePrediction(session, 5);
  ASSERT_TRUE(cmp.isOk()) << cmp.status().message();
  const nlohmann::json &r = *cmp;
  auto sim = pipeline::simulate(plan::predictedPrograms(p));
  ASSERT_TRUE(sim.isOk());
  EXPECT_DOUBLE_EQ(r["predicted"]["step_seconds"].get<double>(), sim->makespan);
  EXPECT_NEAR(r["predicted"]["step_seconds"].get<double>(), p.pipeline().predicted_step_seconds(),
              1e-12);
  EXPECT_EQ(r["measured"]["steps"].get<size_t>(), 3u);
  EXPECT_GT(r["measured"]["step_seconds"].get<double>(), 0);
  for (const char *side : {"predicted", "measured"}) {
    ASSERT_EQ(r[side]["timeline"].size(), 2u) << side;
    for (int d = 0; d < 2; ++d) {
      const nlohmann::json &tl = r[side]["timeline"][static_cast<size_t>(d)];
      ASSERT_EQ(tl.size(), static_cast<size_t>(p.devices(d).program_size())) << side;
      // Interleaved: slices name their stage ("F0.2").
      bool staged = false;
      for (const nlohmann::json &ev : tl) {
        EXPECT_LE(ev["start"].get<double>(), ev["end"].get<double>()) << side;
        staged = staged || ev["label"].get<std::string>().find('.') != std::string::npos;
      }
      EXPECT_TRUE(staged) << side;
    }
  }
  const nlohmann::json &diffs = r["largest_differences"];
  ASSERT_EQ(diffs.size(), 5u);
  for (size_t i = 1; i < diffs.size(); ++i)
    EXPECT_GE(std::abs(diffs[i - 1]["measured_seconds"].get<double>() -
                       diffs[i - 1]["predicted_seconds"].get<double>()),
              std::abs(diffs[i]["measured_seconds"].get<double>() -
                       diffs[i]["predicted_seconds"].get<double>()));
  ASSERT_EQ(r["devices"].size(), 2u);
  for (const nlohmann::json &d : r["devices"]) {
    EXPECT_GT(d["predicted_busy_seconds"].get<double>(), 0);
    EXPECT_GT(d["measured_busy_seconds"].get<double>(), 0);
    EXPECT_GT(d["measured_peak_memory_bytes"].get<double>(), 0);
  }
  const std::string html = runtime::renderRunReportHtml(r);
  size_t svgs = 0;
  for (size_t at = 0; (at = html.find("<svg", at)) != std::string::npos; ++at)
    ++svgs;
  EXPECT_EQ(svgs, 2u);
  EXPECT_NE(html.find("id=\"differences\""), std::string::npos);
  EXPECT_NE(html.find("id=\"devices\""), std::string::npos);

  auto untraced = runtime::Session::open(dir, {});
  ASSERT_TRUE(untraced.isOk());
  ASSERT_TRUE((*untraced)->train(makeInputs(**untraced, 0)).isOk());
  auto none = runtime::comparePrediction(**untraced);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("no traced step"), std::string::npos);
}

// Updates made inside the step are the optimizer's time: in the device
// stats, in the trace (each instruction's updateSeconds) and, where the
// run report compares instructions with the plan's prediction, at the
// OPTIMIZER instruction, whose prediction covers every update.
TEST(Pipeline, UpdatesInsideTheStepCountAsTheOptimizers) {
  Config c;
  c.M = 1;
  const std::string dir = compile("mlp-train", 4, c);
  const int steps = 3;
  std::unique_ptr<runtime::Session> s = tracedAfterSteps(dir, steps);
  ASSERT_TRUE(s);
  runtime::Session &session = *s;
  ASSERT_GT(session.paramsUpdatedInStep(), 0);
  const plan::Device &pd = session.plan().devices(0);
  const size_t P = static_cast<size_t>(pd.program_size());
  const auto &trace = session.deviceTrace(0);
  ASSERT_EQ(trace.size(), P * steps);
  int optimizerAt = findInstruction(pd, plan::Instruction::OPTIMIZER);
  ASSERT_GE(optimizerAt, 0);
  std::vector<double> withUpdates;
  for (int k = 0; k < steps; ++k) {
    double updates = 0;
    for (size_t i = 0; i < P; ++i) {
      const runtime::TraceEvent &e = trace[k * P + i];
      EXPECT_LE(e.updateSeconds, e.end - e.start);
      if (pd.program(static_cast<int>(i)).kind() == plan::Instruction::OPTIMIZER) {
        EXPECT_EQ(e.updateSeconds, 0);
      }
      updates += e.updateSeconds;
    }
    EXPECT_GT(updates, 0) << "step " << k;
    const runtime::TraceEvent &opt = trace[k * P + static_cast<size_t>(optimizerAt)];
    withUpdates.push_back(opt.end - opt.start + updates);
  }
  std::sort(withUpdates.begin(), withUpdates.end());
  auto cmp = runtime::comparePrediction(session, 1000);
  ASSERT_TRUE(cmp.isOk()) << cmp.status().message();
  bool found = false;
  for (const nlohmann::json &row : (*cmp)["largest_differences"])
    if (row["instruction"].get<int>() == optimizerAt) {
      found = true;
      EXPECT_DOUBLE_EQ(row["measured_seconds"].get<double>(), withUpdates[steps / 2]);
    }
  EXPECT_TRUE(found);
  const runtime::DeviceStats &st = session.devices()[0]->stats();
  EXPECT_GE(st.optimizerSeconds, withUpdates[0] * steps * 0.999);
}

// pipec --auto: every feasible candidate is what partitioning it gives, the
// fastest first; under a budget one device cannot meet, every K=1
// candidate is rejected for memory and the choice uses both devices.
TEST(Pipeline, AutoPlanChoosesTheFastestPredictedPipelineThatFits) {
  auto load = [](int64_t b) {
    frontend::ImportOptions io;
    io.batch = b;
    return frontend::importOnnxFile(samplePath("gpt-train"), io);
  };
  driver::CompileOptions base;
  base.emit.training = true;
  base.train.optimizer = "adam";
  driver::AutoPlanOptions ao;
  ao.devices = 2;
  ao.globalBatch = 8;
  auto plan = driver::autoPlan(load, base, ao);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  ASSERT_FALSE(plan->feasible.empty());
  for (size_t i = 1; i < plan->feasible.size(); ++i)
    EXPECT_LE(plan->feasible[i - 1].stepSeconds, plan->feasible[i].stepSeconds);
  // The first candidate's figures are its partition's.
  const driver::AutoCandidate &best = plan->feasible.front();
  auto g = load(best.microBatchSize);
  ASSERT_TRUE(g.isOk()) << g.status().message();
  driver::CompileOptions co = base;
  co.partition.numStages = best.devices;
  co.partition.recompute = "auto";
  co.emit.microBatches = best.microBatches;
  co.emit.schedule = best.schedule;
  auto compiled = driver::compileGraph(**g, co);
  ASSERT_TRUE(compiled.isOk()) << compiled.status().message();
  EXPECT_DOUBLE_EQ(compiled->partition.estimate.stepTime, best.stepSeconds);
  EXPECT_EQ(best.microBatchSize * best.microBatches, 8);

  // The peak of the chosen 2-device plan is under one device's whole
  // model: a budget between the two leaves only K=2.
  double one = 0;
  for (const driver::AutoCandidate &c : plan->feasible)
    if (c.devices == 1)
      one = one == 0 ? c.peakMemoryBytes : std::min(one, c.peakMemoryBytes);
  double two = 0;
  for (const driver::AutoCandidate &c : plan->feasible)
    if (c.devices == 2)
      two = two == 0 ? c.peakMemoryBytes : std::min(two, c.peakMemoryBytes);
  ASSERT_GT(one, two);
  base.partition.memoryBudget = (one + two) / 2;
  auto tight = driver::autoPlan(load, base, ao);
  ASSERT_TRUE(tight.isOk()) << tight.status().message();
  for (const driver::AutoCandidate &c : tight->feasible)
    EXPECT_EQ(c.devices, 2) << c.label();
  size_t overBudget = 0;
  for (const driver::AutoCandidate &c : tight->rejected)
    overBudget += c.rejected.find("memory budget") != std::string::npos;
  EXPECT_GE(overBudget, 4u); // K=1 at b = 1, 2, 4, 8
  const nlohmann::json j = driver::autoPlanToJson(*tight, 3);
  EXPECT_EQ(j["best"].size(), std::min<size_t>(3, tight->feasible.size()));
  EXPECT_GE(j["rejected_by_reason"]["over the memory budget"].get<int>(), 4);
  // Nothing fits one byte.
  base.partition.memoryBudget = 1;
  auto none = driver::autoPlan(load, base, ao);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("--auto found no pipeline"), std::string::npos);
}

// What piperun feeds a training plan (runtime/DataFeed.h): four seeded
// synthetic batches, repeated, labels below the class count; or examples
// from .npy files taken in order and wrapping around, every file with the
// same example count.
TEST(Pipeline, DataFeedSyntheticAndFromFiles) {
  Config c;
  c.K = 1;
  c.M = 2;
  const std::string dir = compile("mlp-train", 2, c);
  auto s = runtime::Session::open(dir, {});
  ASSERT_TRUE(s.isOk()) << s.status().message();
  const runtime::Session &session = **s;
  const std::vector<std::string> names = session.inputNames();
  ASSERT_EQ(names.size(), 2u); // x, labels
  auto synth = runtime::DataFeed::open(session, "", 3);
  ASSERT_TRUE(synth.isOk()) << synth.status().message();
  const auto b0 = synth->batch(0), b1 = synth->batch(1), b4 = synth->batch(4);
  EXPECT_TRUE(bitwiseEqual(b0[0], b4[0]));
  EXPECT_FALSE(bitwiseEqual(b0[0], b1[0]));
  const Tensor &labels = b0[1];
  ASSERT_EQ(labels.dtype(), DType::I64);
  EXPECT_EQ(runtime::integerBound(session.plan(), session.plan().inputs(1)), 10);
  for (int64_t i = 0; i < labels.numel(); ++i) {
    EXPECT_GE(labels.data<int64_t>()[i], 0);
    EXPECT_LT(labels.data<int64_t>()[i], 10);
  }
  // Three examples in the files, four rows a step: step 0 takes rows
  // 0 1 2 0, step 1 rows 1 2 0 1.
  const std::string data = tempDir("feed");
  std::filesystem::create_directories(data);
  const TensorDesc xd = session.stepInputDescs()[0];
  ASSERT_EQ(xd.shape[0], 4);
  Tensor x(DType::F32, {3, xd.shape[1]});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = static_cast<float>(i / xd.shape[1]);
  Tensor y(DType::I64, {3});
  for (int64_t i = 0; i < 3; ++i)
    y.data<int64_t>()[i] = 7 + i;
  EXPECT_EQ(runtime::npyFileName("x"), "x.npy");
  EXPECT_EQ(runtime::npyFileName("a/b:c"), "a_b_c.npy");
  ASSERT_TRUE(writeNpy(joinPath(data, runtime::npyFileName(names[0])), x).isOk());
  ASSERT_TRUE(writeNpy(joinPath(data, runtime::npyFileName(names[1])), y).isOk());
  auto files = runtime::DataFeed::open(session, data, 0);
  ASSERT_TRUE(files.isOk()) << files.status().message();
  const auto f1 = files->batch(1);
  const int64_t expect[4] = {1, 2, 0, 1};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(f1[0].data<float>()[r * xd.shape[1]], static_cast<float>(expect[r]));
    EXPECT_EQ(f1[1].data<int64_t>()[r], 7 + expect[r]);
  }
  Tensor y2(DType::I64, {2});
  ASSERT_TRUE(writeNpy(joinPath(data, runtime::npyFileName(names[1])), y2).isOk());
  auto bad = runtime::DataFeed::open(session, data, 0);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("every input of --data needs the same number"),
            std::string::npos)
      << bad.status().message();
}

// The GPU path's host side on the emulated GPU (runtime/EmulatedGpu.h: memory apart from the host's, copies that complete in
// stream order, the CPU's kernels). Resident training keeps the weights,
// the gradients summed over micro-batches and the optimizer's state in
// the device's memory and updates them with the multi-tensor device
// update (runtime/cuda/UpdateBodies.h); it must train bitwise as the CPU
// does: every optimizer, with clipping, with a non-finite step skipped
// (on one device and across two, where the squared sums are all-reduced),
// gradient norms included. What the host reads and writes between steps
// (setWeight, weight(), checkpoints) goes through the devices. The CNN
// sample's running statistics keep its state on the host (not resident),
// and its steps, whose collects are deferred to the step's end, match too.
TEST(Pipeline, ResidentTrainingOnTheEmulatedGpuIsTheCpus) {
  struct Opt {
    const char *spec;
    double lr, clip;
  };
  const Opt optimizers[] = {{"adam", 1e-3, 0},
                            {"adamw:amsgrad=true", 1e-3, 0.05},
                            {"sgd:momentum=0.9,nesterov=true,weight_decay=0.01", 0.05, 0},
                            {"sgd", 0.1, 0.5},
                            {"rmsprop:centered=true,momentum=0.5,weight_decay=0.001", 1e-3, 0},
                            {"rmsprop", 1e-3, 0}};
  for (const Opt &o : optimizers)
    for (int K : {1, 2})
      for (int M : {1, 4}) {
        Config c;
        c.K = K;
        c.M = M;
        c.optimizer = o.spec;
        c.lr = o.lr;
        c.clip = o.clip;
        const std::string dir = compile("mlp-train", 4, c);
        const std::string what = cat("mlp-train ", o.spec, " clip ", o.clip, " K=", K, " M=", M);
        bool resident = false;
        RunResult cpu = run(dir, 4, true);
        RunResult gpu = run(dir, 4, true, {.emulateGpu = true, .residentTraining = &resident});
        EXPECT_TRUE(resident) << what;
        expectSame(cpu, gpu, what);
      }
  for (int K : {1, 2}) {
    Config c;
    c.K = K;
    c.M = 4;
    const std::string dir = compile("gpt-train", 2, c);
    const std::string what = cat("gpt-train K=", K);
    bool resident = false, host = true;
    RunResult cpu = run(dir, 3, true);
    RunResult gpu = run(dir, 3, true, {.emulateGpu = true, .residentTraining = &resident});
    RunResult off = run(dir, 3, true, {.emulateGpu = true, .resident = false, .residentTraining = &host});
    RunResult staged = run(dir, 3, true, {.emulateGpu = true, .deviceMessages = false});
    EXPECT_TRUE(resident) << what;
    EXPECT_FALSE(host) << what;
    expectSame(cpu, gpu, what);
    expectSame(cpu, off, what + " (state on the host)");
    expectSame(cpu, staged, what + " (messages through the host)");
    for (bool onDevices : {true, false}) {
      runtime::SessionOptions so;
      so.emulateGpu = true;
      so.deviceMessages = onDevices;
      auto s = runtime::Session::open(dir, so);
      ASSERT_TRUE(s.isOk()) << s.status().message();
      EXPECT_EQ((*s)->devices()[0]->deviceMessages(), onDevices && K > 1) << what;
    }
  }
  {
    Config c;
    c.K = 2;
    c.M = 2;
    const std::string dir = compile("cnn-train", 2, c);
    bool resident = true;
    RunResult cpu = run(dir, 3, true);
    RunResult gpu = run(dir, 3, true, {.emulateGpu = true, .residentTraining = &resident});
    EXPECT_FALSE(resident) << "the CNN's running statistics keep it on the host";
    expectSame(cpu, gpu, "cnn-train K=2");
  }
}

// Recorded instructions (DeviceExecutor::setRecording; CUDA graphs on a
// GPU): on the emulated GPU each compute instruction's kernel calls are
// kept at its first run and replayed after, with their ExecContext and
// operands as recorded. Training and inference must be bitwise the CPU's
// and the eager runs', every instruction replayed except those with a
// parameter update inside (which stay eager and say why).
TEST(Pipeline, RecordedInstructionsAreTheEagerRuns) {
  auto replayedAll = [](const std::vector<std::string> &schedules, const std::string &what) {
    ASSERT_FALSE(schedules.empty()) << what;
    for (const std::string &h : schedules) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(h, m, std::regex("(\\d+) of (\\d+) compute instructions replayed"))) << h;
      EXPECT_EQ(m[1], m[2]) << what << ": " << h;
      EXPECT_NE(m[1], "0") << what << ": " << h;
    }
  };
  for (const char *model : {"mlp-train", "gpt-train"})
    for (int K : {1, 2}) {
      Config c;
      c.K = K;
      c.M = 4;
      c.optimizer = "adamw";
      c.clip = 0.5;
      const std::string dir = compile(model, 2, c);
      const std::string what = cat(model, " K=", K);
      std::vector<std::string> on, off, inStep;
      RunResult cpu = run(dir, 3, true, {.updateInStep = false});
      RunResult replayed = run(dir, 3, true, {.updateInStep = false, .emulateGpu = true, .hostSchedules = &on});
      RunResult eager =
          run(dir, 3, true, {.updateInStep = false, .emulateGpu = true, .recordings = false, .hostSchedules = &off});
      expectSame(cpu, replayed, what + " (recorded)");
      expectSame(cpu, eager, what + " (eager)");
      replayedAll(on, what);
      for (const std::string &h : off)
        EXPECT_NE(h.find("kernels launched one by one"), std::string::npos) << h;
      // Updates inside the step keep their instructions eager.
      int updated = 0;
      RunResult mixed = run(dir, 3, true, {.emulateGpu = true, .updatedInStep = &updated, .hostSchedules = &inStep});
      expectSame(cpu, mixed, what + " (updates in the step)");
      if (updated > 0) {
        bool eagerSaid = false;
        for (const std::string &h : inStep)
          eagerSaid = eagerSaid || h.find("parameter updates inside it") != std::string::npos;
        EXPECT_TRUE(eagerSaid) << what;
      }
    }
  // Inference: the recordings of ExecContext::training = false.
  Config c;
  c.K = 2;
  c.M = 2;
  c.train = false;
  const std::string dir = compile("gpt", 2, c);
  std::vector<std::string> on;
  RunResult cpu = run(dir, 3, false);
  RunResult replayed = run(dir, 3, false, {.emulateGpu = true, .hostSchedules = &on});
  ASSERT_EQ(cpu.outputs.size(), replayed.outputs.size());
  for (size_t i = 0; i < cpu.outputs.size(); ++i)
    EXPECT_TRUE(bitwiseEqual(cpu.outputs[i], replayed.outputs[i])) << "gpt inference output " << i;
  replayedAll(on, "gpt inference");
}

// Receives on the copy stream (DeviceExecutor::setCopyQueue): on the
// emulated GPUs, whose queues run on threads of their own, pausing at
// random before each piece of work (PIPEC_EMULATED_GPU_DELAY_US), a RECV's
// copy starts once the sender's event and the point of the program that
// frees its bytes are reached, and the compute queue waits for it only
// where an instruction touches them. Every schedule's training must be
// bitwise the CPU's and the copy stream off's; a copy that does not wait
// for either event, or a compute queue that does not wait for the copy,
// gives other bits here. (2bw is refused on GPUs.)
TEST(Pipeline, ReceivesOnTheCopyStreamAreTheCpus) {
  struct Case {
    const char *schedule;
    int K, M;
  };
  ::setenv("PIPEC_EMULATED_GPU_DELAY_US", "40", 1);
  size_t ahead = 0;
  for (const Case &k : {Case{"1f1b", 2, 4}, Case{"gpipe", 3, 3}, Case{"zbh2", 2, 4}, Case{"interleaved", 2, 4},
                        Case{"zbv", 2, 4}}) {
    Config c;
    c.K = k.K;
    c.M = k.M;
    c.schedule = k.schedule;
    c.optimizer = "adamw";
    const std::string dir = compile("gpt-train", 2, c);
    ASSERT_FALSE(dir.empty());
    const std::string what = cat(k.schedule, " K=", k.K, " M=", k.M);
    std::vector<std::string> on, off;
    RunResult cpu = run(dir, 3, true);
    RunResult copied = run(dir, 3, true, {.emulateGpu = true, .hostSchedules = &on});
    RunResult inline_ = run(dir, 3, true, {.emulateGpu = true, .copyStream = false, .hostSchedules = &off});
    expectSame(cpu, copied, what + " (copy stream)");
    expectSame(cpu, inline_, what + " (copy stream off)");
    for (const std::string &h : on) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(h, m, std::regex("(\\d+) receives copied on the copy stream, (\\d+) of them"))) << h;
      ahead += std::stoul(m[2]);
    }
    for (const std::string &h : off)
      EXPECT_NE(h.find("receives copied on the compute stream"), std::string::npos) << h;
  }
  ::unsetenv("PIPEC_EMULATED_GPU_DELAY_US");
  // Some copies can start before the instruction ahead of them.
  EXPECT_GT(ahead, 0u);
}

// Resident training with data parallelism: every replica's device sums
// its micro-batches, each parameter's updater (replica 0's device, or its
// shard's) adds the other replicas' sums in replica order, updates on the
// device and sends the new weight to the other replicas' devices: bitwise
// the CPU's step (which sums on the host in the same order), with the
// buffers going device to device or through the host, the optimizer
// sharded or not, with clipping and with a non-finite step skipped.
// Checkpoints of a sharded resident run resume the CPU's unsharded plan.
TEST(Pipeline, ResidentDataParallelTrainingIsTheCpus) {
  auto nanAtStep1 = [](const runtime::Session &s, int step) {
    std::vector<Tensor> in = makeInputs(s, static_cast<uint64_t>(step));
    if (step == 1)
      for (Tensor &t : in)
        if (t.dtype() == DType::F32) {
          t.data<float>()[t.numel() - 1] = std::nanf(""); // the last replica's data
          break;
        }
    return in;
  };
  struct Case {
    const char *model;
    int64_t b;
    int K, M, D;
    bool shard;
    const char *optimizer;
    double clip;
  };
  const Case cases[] = {{"mlp-train", 4, 1, 2, 2, false, "adam", 0},
                        {"mlp-train", 4, 2, 2, 2, true, "adamw:amsgrad=true", 0.05},
                        {"mlp-train", 4, 2, 1, 3, true, "sgd:momentum=0.9,nesterov=true", 0},
                        {"gpt-train", 2, 2, 2, 2, false, "sgd:momentum=0.9", 0.5},
                        {"gpt-train", 2, 2, 2, 3, true, "adam", 0}};
  for (const Case &k : cases) {
    Config c;
    c.K = k.K;
    c.M = k.M;
    c.D = k.D;
    c.shard = k.shard;
    c.optimizer = k.optimizer;
    c.lr = 0.01;
    c.clip = k.clip;
    const std::string dir = compile(k.model, k.b, c);
    const std::string what = cat(k.model, " K=", k.K, " M=", k.M, " D=", k.D, k.shard ? " sharded " : " ",
                                 k.optimizer, " clip ", k.clip);
    RunResult cpu = run(dir, 3, true);
    for (bool onDevices : {true, false}) {
      bool resident = false;
      RunResult gpu = run(dir, 3, true,
                          {.emulateGpu = true, .deviceMessages = onDevices, .residentTraining = &resident});
      EXPECT_TRUE(resident) << what;
      expectSame(cpu, gpu, what + (onDevices ? " (device to device)" : " (through the host)"));
    }
    if (std::string(k.model) != "mlp-train") // the GPT-like sample's inputs are tokens
      continue;
    RunResult cpuSkip = run(dir, 3, true, {.skipNonFinite = true, .inputs = nanAtStep1});
    ASSERT_EQ(cpuSkip.skipped.size(), 3u) << what;
    EXPECT_TRUE(cpuSkip.skipped[1]) << what;
    expectSame(cpuSkip, run(dir, 3, true, {.skipNonFinite = true, .emulateGpu = true, .inputs = nanAtStep1}),
               what + " skipping");
  }
  // A sharded resident run's checkpoint, resumed by the unsharded plan on
  // the CPU: the uninterrupted unsharded run's weights.
  Config c;
  c.K = 2;
  c.M = 2;
  c.D = 2;
  c.lr = 0.01;
  const std::string whole = compile("mlp-train", 4, c);
  c.shard = true;
  const std::string sharded = compile("mlp-train", 4, c);
  const std::string ckpt = tempDir("resident-dp-ckpt");
  runtime::SessionOptions gpu;
  gpu.seed = 7;
  gpu.emulateGpu = true;
  {
    auto s = runtime::Session::open(sharded, gpu);
    ASSERT_TRUE(s.isOk()) << s.status().message();
    ASSERT_TRUE((*s)->residentTraining());
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE((*s)->train(makeInputs(**s, static_cast<uint64_t>(i))).isOk());
    Status saved = (*s)->saveCheckpoint(ckpt);
    ASSERT_TRUE(saved.isOk()) << saved.message();
  }
  runtime::SessionOptions cpu;
  cpu.seed = 7;
  expectResumedAs(whole, cpu, ckpt, 2, 4, run(whole, 4, true), "a sharded resident checkpoint on the CPU");
}

// Resident training skips a non-finite step as the CPU does, decided on
// the device (one stage) or from the all-reduced squared sums (two), and
// what the host writes and reads between steps reaches the device and
// comes back: setWeight, then a checkpoint saved, loaded into a fresh
// session, and trained on as an uninterrupted run.
TEST(Pipeline, ResidentTrainingSkipsWritesAndCheckpointsAsTheCpu) {
  auto nanAtStep2 = [](const runtime::Session &s, int step) {
    std::vector<Tensor> in = makeInputs(s, static_cast<uint64_t>(step));
    if (step == 2)
      for (Tensor &t : in)
        if (t.dtype() == DType::F32) {
          t.data<float>()[0] = std::nanf("");
          break;
        }
    return in;
  };
  for (int K : {1, 2}) {
    Config c;
    c.K = K;
    c.M = 4;
    c.clip = 1.0;
    const std::string dir = compile("mlp-train", 4, c);
    const std::string what = cat("mlp-train K=", K);
    RunResult cpu = run(dir, 5, true, {.skipNonFinite = true, .inputs = nanAtStep2});
    RunResult gpu = run(dir, 5, true, {.skipNonFinite = true, .emulateGpu = true, .inputs = nanAtStep2});
    ASSERT_EQ(cpu.skipped.size(), 5u);
    EXPECT_TRUE(cpu.skipped[2]) << what;
    expectSame(cpu, gpu, what + " skipping");

    auto setFirst = [](runtime::Session &s, int step) {
      if (step != 2)
        return;
      const std::string name = s.plan().tensors(s.plan().training().params(0).weight()).name();
      auto w = s.weight(name);
      ASSERT_TRUE(w.isOk()) << w.status().message();
      for (int64_t i = 0; i < w->numel(); ++i)
        w->data<float>()[i] *= 0.5f;
      ASSERT_TRUE(s.setWeight(name, *w).isOk());
    };
    expectSame(run(dir, 4, true, {.afterStep = setFirst}),
               run(dir, 4, true, {.emulateGpu = true, .afterStep = setFirst}), what + " setWeight");

    // Six steps straight, against three, a checkpoint, a new session and
    // three more.
    const std::string ckpt = tempDir(cat("resident-ckpt-", K));
    RunResult straight = run(dir, 6, true, {.emulateGpu = true});
    runtime::SessionOptions so;
    so.seed = 7;
    so.emulateGpu = true;
    {
      auto s = runtime::Session::open(dir, so);
      ASSERT_TRUE(s.isOk()) << s.status().message();
      for (int i = 0; i < 3; ++i)
        ASSERT_TRUE((*s)->train(makeInputs(**s, static_cast<uint64_t>(i))).isOk());
      Status saved = (*s)->saveCheckpoint(ckpt);
      ASSERT_TRUE(saved.isOk()) << saved.message();
    }
    expectResumedAs(dir, so, ckpt, 3, 6, straight, what);
  }
}
