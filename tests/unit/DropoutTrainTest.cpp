//===- tests/unit/DropoutTrainTest.cpp - Dropout's gradient replays its mask ===//
//
// Trains y = Dropout(w), loss = sum(y * r) for one SGD step with lr 1 through
// the whole compiler and runtime. The gradient of w is mask * scale * r, so
// w_new = w - (y / w) * r exactly: it holds only if the backward pass drops
// the very elements the forward pass dropped.
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "runtime/Session.h"
#include "support/FileIO.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace pipec;

TEST(DropoutTraining, BackwardReplaysTheForwardMask) {
  const int64_t n = 256;
  ir::Graph g;
  g.setName("drop");
  g.setOpset("", 17);
  ir::Value *r = *g.addInput("r", TensorDesc{DType::F32, {n}});
  Tensor w0(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    w0.data<float>()[i] = 1.0f + static_cast<float>(i % 7);
  ir::Value *w = *g.addConstant("w", w0.clone());
  w->setTrainable(true);
  ir::Value *ratio = *g.addConstant("ratio", Tensor::scalarF32(0.5f));
  Tensor mode(DType::Bool, {});
  *mode.data<uint8_t>() = 1;
  ir::Value *tm = *g.addConstant("training_mode", mode);
  ir::Node *drop = *g.addNode("drop", "Dropout", "", {w, ratio, tm}, {"y"});
  ir::Node *mul = *g.addNode("mul", "Mul", "", {drop->output(0), r}, {"p"});
  AttrMap keep;
  keep["keepdims"] = Attribute::ofInt(0);
  ir::Node *sum = *g.addNode("sum", "ReduceSum", "", {mul->output(0)}, {"loss"}, keep);
  g.addOutput(sum->output(0));
  g.addOutput(drop->output(0));

  driver::CompileOptions co;
  co.emit.training = true;
  co.train.optimizer = "sgd:lr=1";
  co.train.lossOutput = "loss";
  auto compiled = driver::compileGraph(g, co);
  ASSERT_TRUE(compiled.isOk()) << compiled.status().message();
  std::string dir = (std::filesystem::temp_directory_path() / "pipec-dropout-train.plan").string();
  ASSERT_TRUE(codegen::writePlanDirectory(dir, compiled->plan).isOk());
  auto session = runtime::Session::open(dir, {});
  ASSERT_TRUE(session.isOk()) << session.status().message();

  Tensor rv(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    rv.data<float>()[i] = 0.25f * static_cast<float>((i * 37) % 11) - 1.0f;
  auto step = (*session)->train({rv});
  ASSERT_TRUE(step.isOk()) << step.status().message();
  std::vector<std::string> names = (*session)->outputNames();
  const Tensor &y = step->outputs[names[0] == "y" ? 0 : 1];
  auto w1 = (*session)->weight("w");
  ASSERT_TRUE(w1.isOk());
  int dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    float wOld = w0.data<float>()[i];
    float factor = y.data<float>()[i] / wOld; // 0 (dropped) or 2 (kept, scaled)
    ASSERT_TRUE(factor == 0.0f || factor == 2.0f) << i << ": " << factor;
    dropped += factor == 0.0f;
    EXPECT_EQ(w1->data<float>()[i], wOld - factor * rv.data<float>()[i]) << "element " << i;
  }
  // About half are dropped; a mask of all-kept or all-dropped would not test
  // anything.
  EXPECT_GT(dropped, n / 4);
  EXPECT_LT(dropped, 3 * n / 4);
  (void)removeTree(dir);
}
