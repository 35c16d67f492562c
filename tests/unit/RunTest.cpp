//===- tests/unit/RunTest.cpp - runtime/run: piperun's loops as a library -===//
//
// The training loop, checkpoints and resume, the inference loop and its
// inputs, and the trained model saved as ONNX, on the sample MLP compiled
// here (K=2, M=2), checked against what the session itself computes.
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "frontend/OnnxExport.h"
#include "frontend/OnnxImporter.h"
#include "pipeline/Schedule.h"
#include "runtime/Session.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/run/Run.h"
#include "support/FileIO.h"
#include "support/Npy.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <unistd.h>

using namespace pipec;

namespace {

class RunTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("pipec-run-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(makeDirs(dir_).isOk());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Data parallelism for compile(): D replicas, the optimizer sharded or
  /// not, and the plan's name.
  struct Replicas {
    int D = 1;
    bool shard = false;
    std::string name;
  };

  /// The sample `model` compiled (batch 4 per micro-batch, K=2, M=2) into
  /// dir_/NAME.plan.
  std::string compile(const std::string &model, bool train) { return compile(model, train, Replicas()); }
  std::string compile(const std::string &model, bool train, const Replicas &dp) {
    frontend::ImportOptions io;
    io.batch = 4;
    const std::string path = std::string(PIPEC_BINARY_DIR) + "/samples/" + model + ".onnx";
    auto g = frontend::importOnnxFile(path, io);
    EXPECT_TRUE(g.isOk()) << g.status().message();
    if (!g.isOk())
      return "";
    auto schedule = pipeline::Schedule::parse("1f1b", 0);
    EXPECT_TRUE(schedule.isOk());
    if (!schedule.isOk())
      return "";
    driver::CompileOptions co;
    co.partition.numStages = 2;
    co.partition.schedule = *schedule;
    co.partition.training = train;
    co.emit.microBatches = 2;
    co.emit.schedule = *schedule;
    co.emit.training = train;
    co.emit.dataParallel = dp.D;
    co.emit.shardOptimizer = dp.shard;
    co.train.optimizer = "adam";
    co.train.lr = 1e-3;
    auto compiled = driver::compileGraph(**g, co);
    EXPECT_TRUE(compiled.isOk()) << compiled.status().message();
    if (!compiled.isOk())
      return "";
    // As pipec writes it: the plan, the source model without its weights
    // (for saving), then the manifest.
    const std::string plan = joinPath(dir_, (dp.name.empty() ? model : dp.name) + ".plan");
    Status s = codegen::writePlanDirectory(plan, compiled->plan, /*manifest=*/false);
    EXPECT_TRUE(s.isOk()) << s.message();
    std::set<std::string> stored;
    for (const plan::TensorInfo &t : compiled->plan.plan.tensors())
      if (!t.onnx_name().empty() &&
          (t.kind() == plan::TensorInfo::WEIGHT || t.kind() == plan::TensorInfo::CONSTANT))
        stored.insert(t.onnx_name());
    auto bytes = readFile(path);
    EXPECT_TRUE(bytes.isOk());
    auto stripped = frontend::stripInitializers(bytes.isOk() ? *bytes : "", path, stored);
    EXPECT_TRUE(stripped.isOk()) << stripped.status().message();
    if (stripped.isOk()) {
      EXPECT_TRUE(writeFileAtomic(joinPath(plan, frontend::kSourceModelFile), *stripped).isOk());
    }
    EXPECT_TRUE(plan::writeManifest(plan).isOk());
    return plan;
  }

  std::unique_ptr<runtime::Session> open(const std::string &plan) {
    auto s = runtime::Session::open(plan, runtime::SessionOptions{});
    EXPECT_TRUE(s.isOk()) << s.status().message();
    return s.isOk() ? std::move(*s) : nullptr;
  }

  static runtime::TrainRunOptions quiet(int64_t steps) {
    runtime::TrainRunOptions o;
    o.steps = steps;
    o.progress = false;
    return o;
  }

  std::string dir_;
};

bool sameBytes(const Tensor &a, const Tensor &b) {
  return a.desc() == b.desc() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

/// Every trained weight of `a` and `b` bitwise alike; `what` says when not.
void expectSameWeights(const runtime::Session &a, const runtime::Session &b, const std::string &what) {
  for (const plan::Parameter &p : a.plan().training().params()) {
    const std::string name = a.plan().tensors(p.weight()).name();
    auto wa = a.weight(name), wb = b.weight(name);
    ASSERT_TRUE(wa.isOk() && wb.isOk()) << name;
    EXPECT_TRUE(sameBytes(*wa, *wb)) << name << " differs " << what;
  }
}

} // namespace

TEST_F(RunTest, TrainingRunsEveryStepAndWritesMetrics) {
  const std::string plan = compile("mlp-train", true);
  ASSERT_FALSE(plan.empty());
  auto session = open(plan);
  ASSERT_TRUE(session);
  runtime::TrainRunOptions o = quiet(5);
  o.warmup = 1;
  o.metrics = joinPath(dir_, "metrics.jsonl");
  auto r = runtime::trainRun(*session, o);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->stepsRun, 5);
  EXPECT_EQ(r->firstStep, 0);
  EXPECT_EQ(r->stepSeconds.size(), 4u); // the warm-up step is not timed
  EXPECT_EQ(session->stepsRun(), 5u);
  EXPECT_EQ(r->examplesPerStep, 8); // 2 micro-batches of 4
  EXPECT_TRUE(std::isfinite(r->firstLoss) && std::isfinite(r->lastLoss));
  EXPECT_EQ(r->skippedSteps, 0);
  auto text = readFile(o.metrics);
  ASSERT_TRUE(text.isOk());
  EXPECT_EQ(std::count(text->begin(), text->end(), '\n'), 5);
  EXPECT_NE(text->find("\"step\":5"), std::string::npos) << *text;
}

TEST_F(RunTest, ResumedRunEqualsAnUninterruptedOne) {
  const std::string plan = compile("mlp-train", true);
  ASSERT_FALSE(plan.empty());
  // Four steps in one go.
  auto whole = open(plan);
  ASSERT_TRUE(whole);
  ASSERT_TRUE(runtime::trainRun(*whole, quiet(4)).isOk());
  // Two, a checkpoint, then a fresh session resumed to four.
  auto first = open(plan);
  ASSERT_TRUE(first);
  runtime::TrainRunOptions o = quiet(2);
  o.checkpoint = joinPath(dir_, "ckpt");
  ASSERT_TRUE(runtime::trainRun(*first, o).isOk());
  auto second = open(plan);
  ASSERT_TRUE(second);
  runtime::TrainRunOptions rest = quiet(4);
  rest.resume = o.checkpoint;
  auto r = runtime::trainRun(*second, rest);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->firstStep, 2);
  EXPECT_EQ(r->stepsRun, 2);
  expectSameWeights(*whole, *second, "after resuming");
}

// ZeRO-1: D=3 replicas of the GPT-like sample's K=2 stages with Adam, the
// optimizer sharded and not. Each parameter is updated by the device of
// its shard's replica, which alone keeps its state: the same weights bit
// for bit, the replicas' shares balanced, and no device holding more
// training state than unsharded replica 0's.
TEST_F(RunTest, ShardedOptimizerTrainsAsTheUnshardedOne) {
  const std::string whole = compile("gpt-train", true, {3, false, "whole"});
  const std::string sharded = compile("gpt-train", true, {3, true, "sharded"});
  ASSERT_FALSE(whole.empty());
  ASSERT_FALSE(sharded.empty());
  auto a = open(whole), b = open(sharded);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(b->plan().pipeline().shard_optimizer());
  // The plan: per stage, every replica updates something, and the
  // greedy split is within one parameter of an even one.
  const plan::Plan &p = b->plan();
  const int K = p.devices_size(), D = 3;
  std::vector<int> producer(static_cast<size_t>(p.tensors_size()), -1);
  for (int d = 0; d < K; ++d)
    for (const plan::Node &n : p.devices(d).nodes())
      for (int32_t o : n.outputs())
        producer[static_cast<size_t>(o)] = d;
  std::vector<std::vector<uint64_t>> load(static_cast<size_t>(K), std::vector<uint64_t>(D, 0));
  std::vector<uint64_t> largest(static_cast<size_t>(K), 0);
  for (const plan::Parameter &pp : p.training().params()) {
    ASSERT_LT(pp.shard(), 3u);
    const int s = producer[static_cast<size_t>(pp.grad())];
    ASSERT_GE(s, 0);
    const uint64_t bytes = p.tensors(pp.weight()).bytes();
    load[static_cast<size_t>(s)][pp.shard()] += bytes;
    largest[static_cast<size_t>(s)] = std::max(largest[static_cast<size_t>(s)], bytes);
  }
  for (int s = 0; s < K; ++s) {
    const auto &l = load[static_cast<size_t>(s)];
    const uint64_t total = l[0] + l[1] + l[2];
    for (uint64_t share : l) {
      EXPECT_GT(share, 0u) << "stage " << s;
      EXPECT_LE(share, total / D + largest[static_cast<size_t>(s)]) << "stage " << s;
    }
  }
  // A plan that gives a parameter to a replica it does not have, or
  // shards without replicas, is refused by name.
  {
    plan::Plan bad = p;
    bad.mutable_training()->mutable_params(0)->set_shard(3);
    Status s = plan::validatePlan(bad);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("is updated by replica 3 of 3"), std::string::npos) << s.message();
    bad = p;
    bad.mutable_pipeline()->set_data_parallel(1);
    s = plan::validatePlan(bad);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("shards its optimizer over 1 replica(s)"), std::string::npos) << s.message();
    EXPECT_TRUE(plan::validatePlan(p).isOk());
  }
  // The state: the same in all, spread over the replicas.
  uint64_t sumA = 0, sumB = 0, maxA = 0, maxB = 0;
  for (int d = 0; d < K * D; ++d) {
    sumA += a->trainingStateBytes(d);
    sumB += b->trainingStateBytes(d);
    maxA = std::max(maxA, a->trainingStateBytes(d));
    maxB = std::max(maxB, b->trainingStateBytes(d));
    if (d >= K) {
      EXPECT_GT(b->trainingStateBytes(d), a->trainingStateBytes(d)) << "device " << d << " keeps no state";
    }
  }
  EXPECT_EQ(sumA, sumB);
  EXPECT_LT(maxB, maxA);
  // Training: bitwise the same weights (and checkpoints hold the state).
  ASSERT_TRUE(runtime::trainRun(*a, quiet(3)).isOk());
  ASSERT_TRUE(runtime::trainRun(*b, quiet(3)).isOk());
  expectSameWeights(*a, *b, "with the optimizer sharded");
  // Each parameter's state is in the checkpoint once, whichever replica
  // keeps it: the unsharded plan resumes from the sharded one's bitwise.
  auto first = open(sharded), rest = open(whole), uninterrupted = open(whole);
  ASSERT_TRUE(first && rest && uninterrupted);
  runtime::TrainRunOptions o = quiet(2);
  o.checkpoint = joinPath(dir_, "ckpt");
  ASSERT_TRUE(runtime::trainRun(*first, o).isOk());
  runtime::TrainRunOptions resumed = quiet(4);
  resumed.resume = o.checkpoint;
  ASSERT_TRUE(runtime::trainRun(*rest, resumed).isOk());
  ASSERT_TRUE(runtime::trainRun(*uninterrupted, quiet(4)).isOk());
  expectSameWeights(*uninterrupted, *rest, "after resuming a sharded checkpoint");
}

TEST_F(RunTest, RefusesRunsThatCannotHappen) {
  const std::string plan = compile("mlp-train", true);
  ASSERT_FALSE(plan.empty());
  auto session = open(plan);
  ASSERT_TRUE(session);
  runtime::TrainRunOptions o = quiet(3);
  o.warmup = 3;
  auto r = runtime::trainRun(*session, o);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("leaves none of the 3 training steps"), std::string::npos)
      << r.status().message();
  o = quiet(3);
  o.checkpointEvery = 2; // without a checkpoint directory
  r = runtime::trainRun(*session, o);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("--checkpoint-every needs --checkpoint"), std::string::npos);
  // Resuming at or past the steps to reach.
  runtime::TrainRunOptions c = quiet(2);
  c.checkpoint = joinPath(dir_, "ckpt");
  ASSERT_TRUE(runtime::trainRun(*session, c).isOk());
  auto again = open(plan);
  ASSERT_TRUE(again);
  runtime::TrainRunOptions done = quiet(2);
  done.resume = c.checkpoint;
  r = runtime::trainRun(*again, done);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("leaves nothing to run"), std::string::npos) << r.status().message();
}

TEST_F(RunTest, SavedModelHoldsTheTrainedWeights) {
  const std::string plan = compile("mlp-train", true);
  ASSERT_FALSE(plan.empty());
  auto session = open(plan);
  ASSERT_TRUE(session);
  ASSERT_TRUE(runtime::trainRun(*session, quiet(2)).isOk());
  for (bool external : {false, true}) {
    const std::string out = joinPath(dir_, external ? "external.onnx" : "inline.onnx");
    Status s = runtime::saveTrainedModel(*session, plan, out, external);
    ASSERT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(std::filesystem::exists(out + ".data"), external);
    // Imported back (external data resolved by the importer), every
    // initializer is the session's weight, byte for byte.
    frontend::ImportOptions io;
    io.batch = 4;
    auto g = frontend::importOnnxFile(out, io);
    ASSERT_TRUE(g.isOk()) << g.status().message();
    int checked = 0;
    for (const plan::Parameter &p : session->plan().training().params()) {
      const std::string name = session->plan().tensors(p.weight()).name();
      ir::Value *v = (*g)->findValue(name);
      ASSERT_TRUE(v && v->isConstant()) << name;
      auto w = session->weight(name);
      ASSERT_TRUE(w.isOk());
      EXPECT_TRUE(sameBytes(v->constant(), *w)) << name << (external ? " (external data)" : "");
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
}

TEST_F(RunTest, InferenceInputsFromFilesAndSeeds) {
  const std::string plan = compile("mlp", false);
  ASSERT_FALSE(plan.empty());
  auto session = open(plan);
  ASSERT_TRUE(session);
  const std::vector<std::string> names = session->inputNames();
  ASSERT_EQ(names.size(), 1u);
  const TensorDesc d = session->stepInputDescs()[0];
  Tensor given(d);
  for (int64_t i = 0; i < given.numel(); ++i)
    given.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  const std::string npy = joinPath(dir_, "x.npy");
  ASSERT_TRUE(writeNpy(npy, given).isOk());
  auto fromFile = runtime::inferenceInputs(*session, {names[0] + "=" + npy}, 0);
  ASSERT_TRUE(fromFile.isOk()) << fromFile.status().message();
  EXPECT_TRUE(sameBytes((*fromFile)[0], given));
  // Seeded: the same seed, the same data; another seed, other data.
  auto a = runtime::inferenceInputs(*session, {}, 1), b = runtime::inferenceInputs(*session, {}, 1),
       c = runtime::inferenceInputs(*session, {}, 2);
  ASSERT_TRUE(a.isOk() && b.isOk() && c.isOk());
  EXPECT_TRUE(sameBytes((*a)[0], (*b)[0]));
  EXPECT_FALSE(sameBytes((*a)[0], (*c)[0]));
  auto bad = runtime::inferenceInputs(*session, {"nope=" + npy}, 0);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("the model has no input of that name"), std::string::npos);
  // Three timed steps after one warm-up; the outputs are the session's.
  auto r = runtime::inferRun(*session, *fromFile, 3, 1, false);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->stepSeconds.size(), 3u);
  auto direct = session->run(*fromFile);
  ASSERT_TRUE(direct.isOk());
  ASSERT_EQ(direct->size(), r->outputs.size());
  for (size_t i = 0; i < direct->size(); ++i)
    EXPECT_TRUE(sameBytes((*direct)[i], r->outputs[i]));
}

TEST(RunMedian, OddEvenEmpty) {
  EXPECT_EQ(runtime::medianOf({3, 1, 2}), 2);
  EXPECT_EQ(runtime::medianOf({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(runtime::medianOf({}), 0);
}
