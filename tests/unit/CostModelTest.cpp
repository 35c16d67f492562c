//===- tests/unit/CostModelTest.cpp - Profiles, roofline, calibration -----===//
#include "partitioner/Calibrate.h"
#include "partitioner/CostModel.h"
#include "partitioner/DeviceProfile.h"
#include "support/FileIO.h"

#include <gtest/gtest.h>

using namespace pipec;
using namespace pipec::partitioner;

TEST(DeviceProfile, EveryCheckedInProfileLoadsAndCitesASource) {
  std::vector<std::string> names = listProfiles();
  for (const char *want : {"this-cpu", "v100-sxm2-16gb", "v100-sxm2-32gb", "a100-sxm-40gb",
                           "a100-sxm-80gb", "h100-sxm", "h200-sxm", "tpu-v3-core", "accel-8gb"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const std::string &n : names) {
    auto p = loadProfile(n);
    ASSERT_TRUE(p.isOk()) << p.status().message();
    EXPECT_EQ(p->name, n);
    EXPECT_FALSE(p->source.empty()) << n;
    EXPECT_GT(p->memoryCapacity, 0);
    // The JSON form parses back to the same figures.
    auto again = parseProfile(profileToJson(*p), n);
    ASSERT_TRUE(again.isOk());
    EXPECT_EQ(again->peakFlops, p->peakFlops);
  }
  auto v100 = loadProfile("v100-sxm2-16gb");
  EXPECT_DOUBLE_EQ(v100->flopsFor(DType::F32), 15.7e12);
  EXPECT_DOUBLE_EQ(v100->flopsFor(DType::F16), 125e12);
  auto gpipe = loadProfile("tpu-v2-core"); // alias
  ASSERT_TRUE(gpipe.isOk());
  EXPECT_EQ(gpipe->name, "accel-8gb");
  EXPECT_DOUBLE_EQ(gpipe->memoryCapacity, 8.0 * 1024 * 1024 * 1024);
  auto bad = loadProfile("no-such-gpu");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("v100-sxm2-16gb"), std::string::npos);
}

TEST(DeviceProfile, ParseByteSize) {
  EXPECT_DOUBLE_EQ(*parseByteSize("16GiB"), 16.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(*parseByteSize("8 GB"), 8e9);
  EXPECT_DOUBLE_EQ(*parseByteSize("512MiB"), 512.0 * 1048576.0);
  EXPECT_DOUBLE_EQ(*parseByteSize("1e6"), 1e6);
  EXPECT_FALSE(parseByteSize("16 parsecs").isOk());
  EXPECT_FALSE(parseByteSize("-1GiB").isOk());
  EXPECT_FALSE(parseByteSize("lots").isOk());
}

TEST(CostModel, RooflineAndMeasuredTimes) {
  ir::Graph g;
  g.setOpset("", 17);
  ir::Value *a = *g.addInput("a", TensorDesc{DType::F32, {256, 512}});
  ir::Value *w = *g.addConstant("w", Tensor(DType::F32, {512, 1024}));
  ir::Node *mm = *g.addNode("mm", "MatMul", "", {a, w}, {"y"});
  mm->output(0)->setType(TensorDesc{DType::F32, {256, 1024}});
  ir::Node *relu = *g.addNode("relu", "Relu", "", {mm->output(0)}, {"z"});
  relu->output(0)->setType(TensorDesc{DType::F32, {256, 1024}});
  CostModel m;
  m.profile = *loadProfile("v100-sxm2-16gb");
  NodeCost c = forwardCost(*mm);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 256 * 1024 * 512);
  // MatMul is compute-bound, Relu memory-bound on a V100.
  EXPECT_DOUBLE_EQ(m.nodeTime(*mm), c.flops / 15.7e12 + 5e-6);
  NodeCost r = forwardCost(*relu);
  EXPECT_DOUBLE_EQ(m.nodeTime(*relu), (r.bytesRead + r.bytesWritten) / 900e9 + 5e-6);
  EXPECT_DOUBLE_EQ(m.transferTime(0), 0);
  EXPECT_DOUBLE_EQ(m.transferTime(150e9), 1 + 1e-5);
  // Measured times (piperun --profile-ops output) win over the roofline.
  std::string path = joinPath(PIPEC_BINARY_DIR, "tests/op-times.json");
  ASSERT_TRUE(writeFileAtomic(path, R"({"plan": "x", "steps": 2, "micro_batches": 4,
      "nodes": [{"device": 0, "node": "mm", "op": "MatMul", "seconds": 0.02}]})").isOk());
  auto times = loadOpTimes(path);
  ASSERT_TRUE(times.isOk()) << times.status().message();
  m.measured = *times;
  EXPECT_DOUBLE_EQ(m.nodeTime(*mm), 0.005); // per step over 4 micro-batches
  EXPECT_DOUBLE_EQ(m.nodeTime(*relu), (r.bytesRead + r.bytesWritten) / 900e9 + 5e-6);
  ASSERT_TRUE(writeFileAtomic(path, R"({"mm": "fast"})").isOk());
  EXPECT_FALSE(loadOpTimes(path).isOk());
}

TEST(Calibrate, SmallRunGivesAValidProfile) {
  CalibrateOptions o;
  o.gemmSize = 128;
  o.repeats = 3;
  o.copyBytes = 1 << 20;
  auto p = calibrate(o);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_GT(p->peakFlops.at("fp32"), 1e8);
  EXPECT_GT(p->memoryBandwidth, 1e8);
  EXPECT_GT(p->memoryCapacity, 1e8);
  EXPECT_GT(p->linkBandwidth, 1e7);
  EXPECT_GT(p->linkLatency, 0);
  EXPECT_EQ(p->raw["measured"]["gemm_n"], 128);
}

TEST(DeviceProfile, GemmCurveInterpolatesInLogFlops) {
  nlohmann::json j = {{"name", "t"},
                      {"source", "test"},
                      {"peak_flops", {{"fp32", 1e11}}},
                      {"memory_bandwidth_bytes_per_s", 1e10},
                      {"memory_capacity_bytes", 1e9},
                      {"link_bandwidth_bytes_per_s", 1e9},
                      {"link_latency_s", 1e-6},
                      {"node_overhead_s", 1e-6},
                      {"gemm_curve", {{1e3, 1e9}, {1e5, 3e9}, {1e7, 5e10}}}};
  auto p = parseProfile(j, "test");
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_DOUBLE_EQ(p->gemmRate(1e2, DType::F32), 1e9);    // clamped below
  EXPECT_DOUBLE_EQ(p->gemmRate(1e4, DType::F32), 2e9);    // halfway in log
  EXPECT_DOUBLE_EQ(p->gemmRate(1e6, DType::F32), 2.65e10);
  EXPECT_DOUBLE_EQ(p->gemmRate(1e9, DType::F32), 5e10);   // clamped above
  // A GEMM node is timed at its size's rate, an elementwise one at peak.
  CostModel m;
  m.profile = *p;
  NodeCost gemm{1e4, 0, 0, true}, ew{1e4, 0, 0, false};
  EXPECT_NEAR(m.rooflineTime(gemm, DType::F32), 1e4 / 2e9 + 1e-6, 1e-12);
  EXPECT_NEAR(m.rooflineTime(ew, DType::F32), 1e4 / 1e11 + 1e-6, 1e-12);
  // A descending curve is refused.
  j["gemm_curve"] = {{1e5, 1e9}, {1e3, 1e9}};
  EXPECT_FALSE(parseProfile(j, "test").isOk());
}
