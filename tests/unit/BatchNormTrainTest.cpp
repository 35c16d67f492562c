//===- tests/unit/BatchNormTrainTest.cpp - Running statistics in training ===//
//
// Trains loss = ReduceSum(BatchNormalization(x) * r) for one step with M = 2
// micro-batches through the compiler and runtime and checks the running
// statistics afterwards against the ONNX formula applied per micro-batch
// in ascending order:
//   running = running * momentum + batch_statistic * (1 - momentum),
// with the biased batch variance, computed here in double from the data.
// Also: a checkpoint carries the statistics, so a resumed run continues
// from the updated ones.
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "runtime/Session.h"
#include "support/FileIO.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace pipec;

namespace {
constexpr int64_t N = 3, C = 2, L = 5; // micro-batch N, channels, length
constexpr float kMomentum = 0.8f;

std::string compileBn(int M) {
  ir::Graph g;
  g.setName("bn");
  g.setOpset("", 15);
  ir::Value *x = *g.addInput("x", TensorDesc{DType::F32, {N, C, L}});
  ir::Value *r = *g.addInput("r", TensorDesc{DType::F32, {N, C, L}});
  auto vec = [&](const std::string &name, float a, float b) {
    Tensor t(DType::F32, {C});
    t.data<float>()[0] = a;
    t.data<float>()[1] = b;
    ir::Value *v = *g.addConstant(name, t);
    v->setTrainable(true); // as the importer marks float initializers
    return v;
  };
  ir::Value *scale = vec("scale", 1.5f, 0.5f), *bias = vec("bias", 0.1f, -0.2f);
  ir::Value *mean = vec("mean", 0.25f, -0.5f), *var = vec("var", 2.0f, 0.75f);
  AttrMap a;
  a["momentum"] = Attribute::ofFloat(kMomentum);
  ir::Node *bn = *g.addNode("bn", "BatchNormalization", "", {x, scale, bias, mean, var}, {"y"}, a);
  ir::Node *mul = *g.addNode("mul", "Mul", "", {bn->output(0), r}, {"p"});
  AttrMap keep;
  keep["keepdims"] = Attribute::ofInt(0);
  ir::Node *sum = *g.addNode("sum", "ReduceSum", "", {mul->output(0)}, {"loss"}, keep);
  g.addOutput(sum->output(0));
  driver::CompileOptions co;
  co.emit.training = true;
  co.emit.microBatches = M;
  co.train.optimizer = "sgd:lr=0.01";
  co.train.lossOutput = "loss";
  auto compiled = driver::compileGraph(g, co);
  EXPECT_TRUE(compiled.isOk()) << compiled.status().message();
  if (!compiled.isOk())
    return "";
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("pipec-bn-train-" + std::to_string(::getpid()) + ".plan"))
                        .string();
  EXPECT_TRUE(codegen::writePlanDirectory(dir, compiled->plan).isOk());
  return dir;
}

Tensor data(int M, float base) {
  Tensor t(DType::F32, {M * N, C, L});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = base + 0.37f * static_cast<float>((i * 29) % 13) - 0.1f * static_cast<float>(i % 4);
  return t;
}
} // namespace

TEST(BatchNormTraining, RunningStatisticsFollowTheMicroBatchesInOrder) {
  const int M = 2;
  std::string dir = compileBn(M);
  auto session = runtime::Session::open(dir, {});
  ASSERT_TRUE(session.isOk()) << session.status().message();
  Tensor x = data(M, 0.5f), r = data(M, -0.25f);
  auto step = (*session)->train({x, r});
  ASSERT_TRUE(step.isOk()) << step.status().message();
  double mean[C] = {0.25, -0.5}, var[C] = {2.0, 0.75};
  for (int mb = 0; mb < M; ++mb)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < L; ++l) {
          double v = x.data<float>()[((mb * N + n) * C + c) * L + l];
          s += v;
          sq += v * v;
        }
      double m = s / (N * L), v = sq / (N * L) - m * m;
      // The kernel rounds each update to float.
      mean[c] = static_cast<float>(mean[c] * kMomentum + m * (1.0 - kMomentum));
      var[c] = static_cast<float>(var[c] * kMomentum + v * (1.0 - kMomentum));
    }
  auto gotMean = (*session)->weight("mean"), gotVar = (*session)->weight("var");
  ASSERT_TRUE(gotMean.isOk() && gotVar.isOk());
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(gotMean->data<float>()[c], mean[c], 1e-6 * (1 + std::fabs(mean[c]))) << c;
    EXPECT_NEAR(gotVar->data<float>()[c], var[c], 1e-6 * (1 + std::fabs(var[c]))) << c;
  }
  // The statistics moved (a test of nothing would pass otherwise).
  EXPECT_GT(std::fabs(gotMean->data<float>()[0] - 0.25f), 1e-3);

  // A checkpoint carries them: a resumed session continues from them.
  std::string ckpt = dir + ".ckpt";
  ASSERT_TRUE((*session)->saveCheckpoint(ckpt).isOk());
  auto resumed = runtime::Session::open(dir, {});
  ASSERT_TRUE(resumed.isOk());
  ASSERT_TRUE((*resumed)->loadCheckpoint(ckpt).isOk());
  auto again = (*resumed)->weight("mean");
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->data<float>()[0], gotMean->data<float>()[0]);
  (void)removeTree(ckpt);
  (void)removeTree(dir);
}
