//===- tests/unit/CostModelTest.cpp - Profiles, roofline, calibration -----===//
#include "ir/Text.h"
#include "tools/calibrate/Calibrate.h"
#include "partitioner/CostModel.h"
#include "partitioner/DeviceProfile.h"
#include "partitioner/StageModel.h"
#include "support/FileIO.h"

#include <gtest/gtest.h>

using namespace pipec;
using namespace pipec::partitioner;
using namespace pipec::calibrate;

namespace {
/// A valid profile with round figures and the given per-node overhead.
nlohmann::json testProfile(double nodeOverhead) {
  return {{"name", "t"},
          {"source", "test"},
          {"peak_flops", {{"fp32", 1e11}}},
          {"memory_bandwidth_bytes_per_s", 1e10},
          {"memory_capacity_bytes", 1e9},
          {"link_bandwidth_bytes_per_s", 1e9},
          {"link_latency_s", 1e-6},
          {"node_overhead_s", nodeOverhead}};
}
} // namespace

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
  ASSERT_TRUE(v100.isOk()) << v100.status().message();
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
  const std::pair<const char *, double> sizes[] = {
      {"16GiB", 16.0 * 1073741824.0}, {"8 GB", 8e9}, {"512MiB", 512.0 * 1048576.0}, {"1e6", 1e6}};
  for (const auto &[text, bytes] : sizes) {
    auto b = parseByteSize(text);
    ASSERT_TRUE(b.isOk()) << text << ": " << b.status().message();
    EXPECT_DOUBLE_EQ(*b, bytes) << text;
  }
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
  auto v100 = loadProfile("v100-sxm2-16gb");
  ASSERT_TRUE(v100.isOk()) << v100.status().message();
  CostModel m;
  m.profile = *v100;
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

// The fused nodes count their GEMMs: pipec:FusedGemm as its product,
// pipec:Attention as its two products per batch entry and the softmax,
// pipec:AttentionGrad as its five products and the rows (four with the
// forward's probabilities).
TEST(CostModel, FusedNodesCountTheirProducts) {
  ir::Graph g;
  g.setOpset("", 17);
  ir::Value *a = *g.addInput("a", TensorDesc{DType::F32, {2, 64, 128}});
  ir::Value *w = *g.addConstant("w", Tensor(DType::F32, {256, 128}));
  ir::Value *b = *g.addConstant("b", Tensor(DType::F32, {256}));
  AttrMap at{{"transB", Attribute::ofInt(1)}, {"activation", Attribute::ofString("Relu")}};
  ir::Node *fg = *g.addNode("fg", "FusedGemm", "pipec", {a, w, b}, {"y"}, at);
  fg->output(0)->setType(TensorDesc{DType::F32, {2, 64, 256}});
  NodeCost c = forwardCost(*fg);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 2 * 64 * 256 * 128);
  EXPECT_TRUE(c.gemm);
  // Q [2, 4, 16, 8], KT [2, 4, 8, 32], V [2, 4, 32, 8]: 8 batch entries.
  ir::Value *q = *g.addInput("q", TensorDesc{DType::F32, {2, 4, 16, 8}});
  ir::Value *kt = *g.addInput("kt", TensorDesc{DType::F32, {2, 4, 8, 32}});
  ir::Value *v = *g.addInput("v", TensorDesc{DType::F32, {2, 4, 32, 8}});
  ir::Node *att = *g.addNode("att", "Attention", "pipec", {q, kt, v}, {"o"}, {});
  att->output(0)->setType(TensorDesc{DType::F32, {2, 4, 16, 8}});
  c = forwardCost(*att);
  EXPECT_DOUBLE_EQ(c.flops, 8.0 * 16 * 32 * (2.0 * (8 + 8) + 5));
  EXPECT_DOUBLE_EQ(c.calls, 16);
  ir::Node *grad = *g.addNode("attg", "AttentionGrad", "pipec", {q, kt, v, att->output(0)}, {"dq", "dkt", "dv"}, {});
  c = forwardCost(*grad);
  EXPECT_DOUBLE_EQ(c.flops, 8.0 * 16 * 32 * (2.0 * (3 * 8 + 2 * 8) + 10));
  EXPECT_DOUBLE_EQ(c.calls, 40);
  // With the forward's P (keep-attention-probs): four products, no
  // recomputed softmax.
  ir::Value *p = *g.addNodeOutput(att, "p");
  p->setType(TensorDesc{DType::F32, {2, 4, 16, 32}});
  ir::Node *given = *g.addNode("attp", "AttentionGrad", "pipec", {q, kt, v, att->output(0), p}, {"dq2", "dkt2", "dv2"}, {});
  c = forwardCost(*given);
  EXPECT_DOUBLE_EQ(c.flops, 8.0 * 16 * 32 * (2.0 * (2 * 8 + 2 * 8) + 5));
  EXPECT_DOUBLE_EQ(c.calls, 32);
  // channels-last's NhwcConv counts what the Conv it replaces does: X [2,
  // 8, 8, 16] NHWC, W [32, 16, 3, 3], Y [2, 8, 8, 32].
  ir::Value *x = *g.addInput("x", TensorDesc{DType::F32, {2, 8, 8, 16}});
  ir::Value *cw = *g.addConstant("cw", Tensor(DType::F32, {32, 16, 3, 3}));
  ir::Node *conv = *g.addNode("conv", "NhwcConv", "pipec", {x, cw}, {"cy"},
                              {{"pads", Attribute::ofInts({1, 1, 1, 1})}});
  conv->output(0)->setType(TensorDesc{DType::F32, {2, 8, 8, 32}});
  c = forwardCost(*conv);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * (2 * 8 * 8 * 32) * (16 * 3 * 3));
  EXPECT_TRUE(c.gemm);
}

TEST(Calibrate, SmallRunGivesAValidProfile) {
  CalibrateOptions o;
  o.gemmSize = 128;
  o.repeats = 3;
  o.copyBytes = 1 << 20;
  o.optimizerElements = 4096;
  auto p = calibrate::calibrate(o);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_GT(p->peakFlops.at("fp32"), 1e8);
  EXPECT_GT(p->memoryBandwidth, 1e8);
  EXPECT_GT(p->memoryCapacity, 1e8);
  EXPECT_GT(p->linkBandwidth, 1e7);
  EXPECT_GT(p->linkLatency, 0);
  EXPECT_EQ(p->raw["measured"]["gemm_n"], 128);
}

// pipec --calibrate --device cuda measures a GPU through the runtime's
// backend interface; on the emulated GPU (the CPU's kernels behind it) the
// same code gives a valid GPU profile: its peak from the MatMul kernel and
// a curve below it, copies, a launch's cost, the device update per
// optimizer, the sample graphs' kernels as op curves (products among them)
// and the slowdown of two stages sharing the device; it parses back.
TEST(Calibrate, GpuCalibrationOnTheEmulatedGpuGivesAValidProfile) {
  GpuCalibrateOptions o;
  o.emulate = true;
  o.gemmSize = 64;
  o.repeats = 2;
  o.copyBytes = 1 << 20;
  o.optimizerElements = 4096;
  o.batches = {1};
  o.runsPerNode = 1;
  o.passes = 1;
  auto p = calibrate::calibrateGpu(o);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(p->kind, "gpu");
  EXPECT_GT(p->peakFlops.at("fp32"), 1e8);
  ASSERT_EQ(p->gemmCurve.size(), 3u); // 16, 32, 64
  EXPECT_DOUBLE_EQ(p->gemmCurve.back().first, 2.0 * 64 * 64 * 64);
  EXPECT_DOUBLE_EQ(p->gemmCurve.back().second, p->peakFlops.at("fp32"));
  EXPECT_GT(p->memoryBandwidth, 1e8);
  EXPECT_GT(p->linkBandwidth, 1e7);
  EXPECT_GT(p->linkLatency, 0);
  EXPECT_GT(p->nodeOverhead, 0);
  EXPECT_GT(p->accumulateSecondsPerElement, 0);
  for (const char *kind : {"sgd", "adam", "adamw", "rmsprop"})
    EXPECT_GT(p->optimizerStepSeconds.at(kind), 0) << kind;
  EXPECT_GE(p->concurrentSlowdown, 1.0);
  for (const char *op : {"Gemm", "LayerNormalization", "Conv", "SoftmaxCrossEntropyLoss"})
    EXPECT_TRUE(p->opCurves.count(op)) << op;
  auto back = parseProfile(profileToJson(*p), "round trip");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->opCurves, p->opCurves);
  EXPECT_EQ(back->raw["measured"]["math"], "exact");
}

TEST(DeviceProfile, GemmCurveInterpolatesInLogFlops) {
  nlohmann::json j = testProfile(1e-6);
  j["gemm_curve"] = {{1e3, 1e9}, {1e5, 3e9}, {1e7, 5e10}};
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

TEST(DeviceProfile, OpCurveInterpolatesInLogLog) {
  nlohmann::json j = testProfile(1e-6);
  j["op_curves"] = {{"Softmax", {{1e3, 1e-6}, {1e5, 1e-4}}}};
  auto p = parseProfile(j, "test");
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_DOUBLE_EQ(p->opCurveTime("Softmax", 1e2), 1e-6);         // the fixed cost below
  EXPECT_NEAR(p->opCurveTime("Softmax", 1e4), 1e-5, 1e-18);       // halfway in log-log
  EXPECT_NEAR(p->opCurveTime("Softmax", 1e6), 1e-3, 1e-15);       // proportional above
  EXPECT_LT(p->opCurveTime("Relu", 1e4), 0);                      // no curve
  // A GEMM-like op above its curve: the largest size's time plus the rest
  // at the marginal rate given (1e9 a second), not proportional.
  EXPECT_NEAR(p->opCurveTime("Softmax", 1e6, 1e9), 1e-4 + (1e6 - 1e5) / 1e9, 1e-15);
  // The curve survives the JSON round trip.
  auto again = parseProfile(profileToJson(*p), "again");
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->opCurves, p->opCurves);
  // The cost model uses the curve (plus the per-node overhead) for a node of
  // that op, and the roofline for others.
  auto g = ir::parseGraph("graph \"t\" {\n opset \"\" 17\n input %x: f32[50,50]\n"
                          " node \"s\" Softmax(%x) -> %y: f32[50,50]\n"
                          " node \"r\" Relu(%y) -> %z: f32[50,50]\n output %z\n}\n");
  ASSERT_TRUE(g.isOk()) << g.status().message();
  CostModel m;
  m.profile = *p;
  const ir::Node *s = (*g)->findNode("s"), *r = (*g)->findNode("r");
  EXPECT_NEAR(m.nodeTime(*s), 2e-5 + 1e-6, 1e-12); // 2e4 bytes: 2e-5 s on the curve
  EXPECT_NEAR(m.nodeTime(*r), m.rooflineTime(forwardCost(*r), DType::F32), 1e-15);
  // A descending or non-positive curve is refused.
  j["op_curves"] = {{"Softmax", {{1e5, 1e-6}, {1e3, 1e-6}}}};
  EXPECT_FALSE(parseProfile(j, "test").isOk());
  j["op_curves"] = {{"Softmax", {{1e3, 0.0}}}};
  EXPECT_FALSE(parseProfile(j, "test").isOk());
}

TEST(Calibrate, TimesEveryKernelNodeAndFitsOneCurvePerOp) {
  auto g = ir::parseGraph("graph \"t\" {\n opset \"\" 17\n input %x: f32[64,256]\n"
                          " input %y: f32[16,256]\n input %t: f32[256,64]\n"
                          " input %p: f32[8,16,32]\n input %q: f32[8,32,16]\n"
                          " node \"a\" Softmax(%x) -> %a: f32[64,256]\n"
                          " node \"b\" Softmax(%y) -> %b: f32[16,256]\n"
                          " node \"m\" MatMul(%a, %t) -> %c: f32[64,64]\n"
                          " node \"bm\" MatMul(%p, %q) -> %r: f32[8,16,16]\n"
                          " node \"e\" Exp(%b) -> %d: f32[16,256]\n"
                          " output %c\n output %d\n output %r\n}\n");
  ASSERT_TRUE(g.isOk()) << g.status().message();
  NodeTimingOptions o;
  o.minSeconds = 1e-4;
  auto t = timeGraphNodes(**g, o);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  ASSERT_EQ(t->size(), 5u);
  for (const NodeTiming &n : *t)
    EXPECT_GT(n.seconds, 0);
  // Bytes moved for the others, FLOPs per GEMM call for MatMul: the batched
  // one makes 8 calls of 2*16*16*32.
  EXPECT_EQ((*t)[0].key, "Softmax");
  EXPECT_DOUBLE_EQ((*t)[0].size, 2.0 * 64 * 256 * 4);
  EXPECT_EQ((*t)[2].key, "MatMul");
  EXPECT_DOUBLE_EQ((*t)[2].size, 2.0 * 64 * 64 * 256);
  EXPECT_EQ((*t)[3].key, "MatMul");
  EXPECT_DOUBLE_EQ((*t)[3].size, 2.0 * 16 * 16 * 32);
  auto curves = fitOpCurves(*t);
  ASSERT_EQ(curves.size(), 3u);
  ASSERT_EQ(curves["Softmax"].size(), 2u); // two sizes, two points, ascending
  EXPECT_LT(curves["Softmax"][0].first, curves["Softmax"][1].first);
  // Timings of one size share a bin: the median of theirs.
  std::vector<NodeTiming> same = {{"Relu", 1000, 1e-6}, {"Relu", 1010, 3e-6}, {"Relu", 1020, 2e-6}};
  auto c = fitOpCurves(same);
  ASSERT_EQ(c["Relu"].size(), 1u);
  EXPECT_DOUBLE_EQ(c["Relu"][0].first, 1010);
  // The cost model times a batched MatMul as its calls on the curve.
  nlohmann::json j = testProfile(1e-7);
  j["op_curves"] = {{"MatMul", {{16384.0, 2e-6}}}};
  auto p = parseProfile(j, "test");
  ASSERT_TRUE(p.isOk()) << p.status().message();
  CostModel m;
  m.profile = *p;
  EXPECT_NEAR(m.nodeTime(*(*g)->findNode("bm")), 8 * 2e-6 + 1e-7, 1e-15);
  EXPECT_DOUBLE_EQ(c["Relu"][0].second, 2e-6);
}

// A pipeline's devices compute at once: stage times of K > 1 are the
// profile's two-core times; a single device's are not.
TEST(CostModel, ConcurrentSlowdownScalesPipelineStagesOnly) {
  auto g = ir::parseGraph("graph \"t\" {\n opset \"\" 17\n input %x: f32[64,256]\n"
                          " node \"a\" Softmax(%x) -> %a: f32[64,256]\n"
                          " node \"b\" Exp(%a) -> %b: f32[64,256]\n"
                          " output %b\n}\n");
  ASSERT_TRUE(g.isOk()) << g.status().message();
  std::vector<const ir::Node *> order = {(*g)->findNode("a"), (*g)->findNode("b")};
  nlohmann::json j = testProfile(1e-6);
  j["concurrent_slowdown"] = 1.5;
  auto p = parseProfile(j, "test");
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_DOUBLE_EQ(p->concurrentSlowdown, 1.5);
  auto again = parseProfile(profileToJson(*p), "again");
  ASSERT_TRUE(again.isOk());
  EXPECT_DOUBLE_EQ(again->concurrentSlowdown, 1.5);
  CostModel m;
  m.profile = *p;
  auto chain = ChainModel::build(**g, order, m, ChainOptions{});
  ASSERT_TRUE(chain.isOk()) << chain.status().message();
  const double alone = chain->evaluate(0, 2, 0, 1).forwardTime;
  EXPECT_GT(alone, 0);
  EXPECT_DOUBLE_EQ(chain->evaluate(0, 1, 0, 2).forwardTime +
                       chain->evaluate(1, 2, 1, 2).forwardTime,
                   1.5 * alone);
  for (double bad : {0.1, 9.0}) {
    j["concurrent_slowdown"] = bad;
    auto q = parseProfile(j, "bad");
    ASSERT_FALSE(q.isOk());
    EXPECT_NE(q.status().message().find("concurrent_slowdown"), std::string::npos);
  }
  // One device has nobody to share with.
  auto one = measureConcurrentSlowdown(**g, 1);
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ(*one, 1.0);
  NodeTimingOptions o;
  o.minSeconds = 1e-5;
  // Two devices: a figure a profile accepts ([1, 4]; the measurement never
  // reports less than 1).
  auto two = measureConcurrentSlowdown(**g, 2, o, 1);
  ASSERT_TRUE(two.isOk()) << two.status().message();
  auto withIt = testProfile(1e-6);
  withIt["concurrent_slowdown"] = *two;
  EXPECT_TRUE(parseProfile(withIt, "measured").isOk()) << *two;
}
