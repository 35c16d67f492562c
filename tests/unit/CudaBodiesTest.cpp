//===- tests/unit/CudaBodiesTest.cpp - CUDA kernel bodies on the host -----===//
//
// The bodies the CUDA kernels run (runtime/cuda/Bodies.h), compiled for the
// host, against the CPU kernels, and the device update's
// (runtime/cuda/UpdateBodies.h) against train::StepUpdate; and
// the kernels' launch shapes (runtime/cuda/Launch.h). These run everywhere:
// no GPU, no CUDA toolkit needed.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cuda/Bodies.h"
#include "runtime/cuda/DnnBodies.h"
#include "runtime/cuda/Gpu.h"
#include "runtime/cuda/Launch.h"
#include "runtime/cuda/MoveBodies.h"
#include "runtime/cuda/Roundings.h"
#include "runtime/cpu/kernels/ResizeCommon.h"
#include "runtime/cuda/RowBodies.h"
#include "runtime/cuda/Update.h"
#include "runtime/train/Clip.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/StepUpdate.h"
#include "support/Format.h"
#include "support/Half.h"
#include "support/StridedView.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstring>
#include <memory>
#include <random>
#include <set>

using namespace pipec;
using namespace pipec::test;
namespace body = pipec::cuda::body;

namespace {
/// The CPU's LayerNormalizationScaleGrad of [rows, cols] (as `shape`,
/// normalized over `axis` on), and the bodies' row statistics of x.
Tensor cpuLayerNormScaleGrad(const Tensor &dy, const Tensor &x, int64_t axis, int64_t cols) {
  cpu::OpDesc sg = makeDesc("LayerNormalizationScaleGrad", {dy.desc(), x.desc()}, {{DType::F32, {cols}}}, {}, 17,
                            "pipec");
  sg.attrs["axis"] = Attribute::ofInt(axis);
  sg.attrs["epsilon"] = Attribute::ofFloat(1e-5f);
  sg.attrs["shape"] = Attribute::ofInts({cols});
  return evalOne(sg, {dy, x});
}
std::vector<body::RowStats> rowStatsOf(const Tensor &x, int64_t rows, int64_t cols) {
  std::vector<body::RowStats> stats(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    stats[r] = body::layerNormStats(x.data<float>() + r * cols, cols, static_cast<double>(1e-5f));
  return stats;
}
} // namespace

TEST(CudaBodies, ElementwiseMatchTheCpuKernels) {
  Tensor x = randomF32({4099}, 1, -12.f, 12.f);
  x.data<float>()[0] = 0.0f;
  x.data<float>()[1] = -0.0f;
  const int64_t n = x.numel();
  struct Case {
    const char *op;
    float (*f)(float);
    double tol; ///< 0: bitwise
  };
  // Relu and Neg are exact on both; the transcendental ones share VecMath's
  // code, but the host compiler may contract a multiply-add in the CPU
  // kernel's vectorized loop and not in the scalar body, or the other way.
  const Case cases[] = {{"Relu", body::relu, 0},       {"Neg", body::neg, 0},
                        {"Sigmoid", body::sigmoid, 2e-7}, {"Tanh", body::tanhF, 2e-7},
                        {"Exp", body::expF, 2e-7}};
  for (const Case &c : cases) {
    Tensor ref = evalOne(makeDesc(c.op, {x.desc()}, {x.desc()}), {x});
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      y[i] = c.f(x.data<float>()[i]);
    if (c.tol == 0)
      EXPECT_EQ(0, std::memcmp(y.data(), ref.raw(), ref.bytes())) << c.op << ": not the CPU kernel's bits";
    else
      EXPECT_LE(worstError(y.data(), ref.data<float>(), n), c.tol) << c.op;
  }
  // Gelu, both approximations (opset 20).
  for (const char *approx : {"none", "tanh"}) {
    cpu::OpDesc d = makeDesc("Gelu", {x.desc()}, {x.desc()});
    d.opset = 20;
    d.attrs["approximate"] = Attribute::ofString(approx);
    Tensor ref = evalOne(d, {x});
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      y[i] = std::string(approx) == "none" ? body::geluErf(x.data<float>()[i]) : body::geluTanh(x.data<float>()[i]);
    EXPECT_LE(worstError(y.data(), ref.data<float>(), n), 2e-7) << "Gelu " << approx;
  }
  // GeluGrad (pipec domain), both forms, against the CPU kernel.
  for (const char *approx : {"none", "tanh"}) {
    Tensor g = randomF32({4099}, 3, -4.f, 4.f);
    cpu::OpDesc d = makeDesc("GeluGrad", {g.desc(), x.desc()}, {g.desc()}, {}, 17, "pipec");
    d.attrs["approximate"] = Attribute::ofString(approx);
    Tensor ref = evalOne(d, {g, x});
    std::vector<float> dx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      dx[i] = body::geluGrad(g.data<float>()[i], x.data<float>()[i], std::string(approx) == "tanh");
    EXPECT_LE(worstError(dx.data(), ref.data<float>(), n), 2e-6) << "GeluGrad " << approx;
  }
  // ReluGrad (pipec domain): dY where Y > 0.
  Tensor dy = randomF32({4099}, 2, -4.f, 4.f);
  Tensor ry = evalOne(makeDesc("Relu", {x.desc()}, {x.desc()}), {x});
  Tensor ref =
      evalOne(makeDesc("ReluGrad", {dy.desc(), ry.desc()}, {dy.desc()}, {}, 17, "pipec"), {dy, ry});
  std::vector<float> dx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    dx[i] = body::reluGrad(dy.data<float>()[i], ry.data<float>()[i]);
  EXPECT_EQ(0, std::memcmp(dx.data(), ref.raw(), ref.bytes())) << "ReluGrad";
}

TEST(CudaBodies, BroadcastBinaryOpsMatchTheCpuKernelsBitwise) {
  struct Shapes {
    Shape a, b, out;
  };
  const Shapes shapes[] = {{{7, 5}, {7, 5}, {7, 5}},
                           {{4, 3, 5}, {5}, {4, 3, 5}},
                           {{4, 1, 5}, {1, 3, 1}, {4, 3, 5}},
                           {{2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}},
                           {{1}, {6, 2}, {6, 2}}};
  const std::pair<const char *, body::BinaryOp> ops[] = {{"Add", body::BinaryOp::Add},
                                                         {"Sub", body::BinaryOp::Sub},
                                                         {"Mul", body::BinaryOp::Mul},
                                                         {"Div", body::BinaryOp::Div}};
  uint32_t seed = 10;
  for (const Shapes &s : shapes)
    for (const auto &[name, op] : ops) {
      Tensor a = randomF32(s.a, ++seed, -4.f, 4.f), b = randomF32(s.b, ++seed, 0.5f, 3.f);
      Tensor ref = evalOne(makeDesc(name, {a.desc(), b.desc()}, {{DType::F32, s.out}}), {a, b});
      const body::Broadcast ba = body::makeBroadcast(s.out.data(), static_cast<int>(s.out.size()), s.a.data(),
                                                     static_cast<int>(s.a.size()));
      const body::Broadcast bb = body::makeBroadcast(s.out.data(), static_cast<int>(s.out.size()), s.b.data(),
                                                     static_cast<int>(s.b.size()));
      std::vector<float> y(static_cast<size_t>(ref.numel()));
      for (int64_t i = 0; i < ref.numel(); ++i)
        y[i] = body::binary(op, a.data<float>()[body::broadcastOffset(i, ba)],
                            b.data<float>()[body::broadcastOffset(i, bb)]);
      EXPECT_EQ(0, std::memcmp(y.data(), ref.raw(), ref.bytes()))
          << name << " " << shapeStr(s.a) << " " << shapeStr(s.b);
    }
}

// pipec:MaskedSoftmax's row body against the CPU kernel: bitwise, for a
// mask broadcast over the leading axes and one per row.
TEST(CudaBodies, MaskedSoftmaxRowsMatchTheCpuKernelBitwise) {
  Tensor x = randomF32({2, 3, 37}, 77, -8.f, 8.f);
  for (const Shape &ms : {Shape{1, 3, 37}, Shape{3, 1}}) {
    Tensor mask(DType::Bool, ms);
    for (int64_t i = 0; i < mask.numel(); ++i)
      mask.data<uint8_t>()[i] = ms.back() == 1 ? 0 : (i % 37 != 0 && i % 3 == 0);
    cpu::OpDesc d = makeDesc("MaskedSoftmax", {x.desc(), mask.desc()}, {x.desc()});
    d.domain = "pipec";
    d.attrs["scale"] = Attribute::ofFloat(0.125f);
    d.attrs["fill"] = Attribute::ofFloat(-INFINITY);
    d.attrs["fill_when"] = Attribute::ofInt(1);
    Tensor ref = evalOne(d, {x, mask});
    const Shape &xs = x.shape();
    const body::Broadcast b = body::makeBroadcast(xs.data(), static_cast<int>(xs.size()), ms.data(),
                                                  static_cast<int>(ms.size()));
    std::vector<float> y(static_cast<size_t>(x.numel()));
    for (int64_t r = 0; r < 6; ++r)
      body::maskedSoftmaxRow(x.data<float>(), reinterpret_cast<const bool *>(mask.data<uint8_t>()), y.data(),
                             37, r, b, 0.125f, -INFINITY, true);
    EXPECT_EQ(0, std::memcmp(y.data(), ref.raw(), ref.bytes())) << shapeStr(ms);
  }
}

TEST(CudaBodies, SoftmaxRowsMatchTheCpuKernel) {
  // Rows along the last axis (stride 1) and along a middle axis (strided).
  for (int64_t axis : {2, 1}) {
    Tensor x = randomF32({3, 33, 17}, 40 + static_cast<uint32_t>(axis), -20.f, 20.f);
    for (bool log : {false, true}) {
      cpu::OpDesc d = makeDesc(log ? "LogSoftmax" : "Softmax", {x.desc()}, {x.desc()});
      d.attrs["axis"] = Attribute::ofInt(axis);
      Tensor ref = evalOne(d, {x});
      const int64_t len = x.shape()[axis], inner = axis == 2 ? 1 : 17, outer = axis == 2 ? 3 * 33 : 3;
      std::vector<float> y(static_cast<size_t>(x.numel()));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k) {
          const int64_t off = o * len * inner + k;
          if (log)
            body::softmaxRow<true>(x.data<float>() + off, y.data() + off, len, inner);
          else
            body::softmaxRow<false>(x.data<float>() + off, y.data() + off, len, inner);
        }
      EXPECT_LE(worstError(y.data(), ref.data<float>(), x.numel()), 4e-7)
          << (log ? "LogSoftmax" : "Softmax") << " axis " << axis;
    }
  }
}

TEST(CudaBodies, TreeSumIsTheFixedOrderItSays) {
  Tensor x = randomF32({10007}, 5, -4.f, 4.f);
  const float *v = x.data<float>();
  for (int lanes : {1, 2, 32, 256}) {
    std::vector<float> partial(static_cast<size_t>(lanes));
    const float got = body::treeSum(v, x.numel(), lanes, partial.data());
    // The same order written out: lanes, then pairwise halvings.
    std::vector<float> p(static_cast<size_t>(lanes), 0.0f);
    for (int64_t i = 0; i < x.numel(); ++i)
      p[static_cast<size_t>(i % lanes)] += v[i];
    for (int h = lanes / 2; h >= 1; h /= 2)
      for (int l = 0; l < h; ++l)
        p[l] += p[l + h];
    EXPECT_EQ(floatBits(got), floatBits(p[0])) << lanes << " lanes";
    double exact = 0;
    for (int64_t i = 0; i < x.numel(); ++i)
      exact += v[i];
    EXPECT_NEAR(got, exact, 1e-6 * x.numel() * 4) << lanes << " lanes";
  }
}

namespace {

/// Parameters of the sizes given, for a StepUpdate (host) and the same
/// values in buffers for the device update's host run.
struct UpdateCase {
  std::vector<train::ParamState> params;
  std::vector<std::vector<float>> weights, grads;
  std::vector<std::vector<std::vector<float>>> states;
};

UpdateCase makeUpdateCase(const std::vector<int64_t> &sizes, size_t stateTensors, uint64_t seed) {
  UpdateCase c;
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t n : sizes) {
    std::vector<float> w(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (auto &x : w)
      x = u(rng);
    for (auto &x : g)
      x = u(rng);
    c.weights.push_back(w);
    c.grads.push_back(g);
    c.states.emplace_back(stateTensors, std::vector<float>(static_cast<size_t>(n), 0.0f));
  }
  c.params.resize(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    train::ParamState &ps = c.params[i];
    ps.n = sizes[i];
    ps.data = c.weights[i].data();
    ps.accum.assign(c.grads[i].begin(), c.grads[i].end());
    ps.state.assign(stateTensors, LargeVector<float>(static_cast<size_t>(sizes[i]), 0.0f));
  }
  return c;
}

} // namespace

// The device update (runtime/cuda/UpdateBodies.h, here its host run of
// runtime/cuda/Update.h, which the CUDA kernels run thread by thread) is
// train::StepUpdate bit for bit: every optimizer and option, parameters
// of one element to several chunks, the mean over micro-batches, clipping
// (below and above the norm), a skipped non-finite step, and the squared
// sums that make the reported gradient norm.
TEST(CudaBodies, DeviceUpdateIsTheStepUpdateBitwise) {
  const std::vector<int64_t> sizes = {1, 7, 1000, cuda::update::kChunk, 2 * cuda::update::kChunk + 5};
  const char *specs[] = {"sgd:lr=0.1",
                         "sgd:lr=0.1,momentum=0.9,dampening=0.1,weight_decay=0.01",
                         "sgd:lr=0.1,momentum=0.9,nesterov=true",
                         "adam:lr=0.001",
                         "adam:lr=0.001,weight_decay=0.1,amsgrad=true",
                         "adamw:lr=0.001,weight_decay=0.1",
                         "adamw:lr=0.001,beta1=0.6,amsgrad=true",
                         "rmsprop:lr=0.01",
                         "rmsprop:lr=0.01,momentum=0.9,centered=true,weight_decay=0.01",
                         "rmsprop:lr=0.01,alpha=0.3,centered=true"};
  struct Rule {
    unsigned microBatches;
    double clip;
    bool skip, nonFinite;
  };
  const Rule rules[] = {{1, 0, false, false}, {3, 0, false, false}, {4, 0.5, false, false},
                        {4, 1e9, false, false}, {2, 0, true, false},  {2, 0.5, true, true}};
  for (const char *spec : specs)
    for (const Rule &rule : rules) {
      const std::string what = cat(spec, " M=", rule.microBatches, " clip ", rule.clip,
                                   rule.skip ? " skipping" : "", rule.nonFinite ? " (a NaN)" : "");
      auto cfg = train::parseOptimizer(spec);
      ASSERT_TRUE(cfg.isOk()) << cfg.status().message();
      auto opt = train::Optimizer::create(*cfg);
      ASSERT_TRUE(opt.isOk()) << opt.status().message();
      UpdateCase host = makeUpdateCase(sizes, opt->stateTensors(), 11);
      UpdateCase dev = makeUpdateCase(sizes, opt->stateTensors(), 11);
      std::vector<kernel::ParamBuffers> buffers;
      for (size_t i = 0; i < sizes.size(); ++i) {
        kernel::ParamBuffers b;
        b.param = dev.weights[i].data();
        b.grad = dev.grads[i].data();
        for (size_t k = 0; k < opt->stateTensors(); ++k)
          b.state[k] = dev.states[i][k].data();
        b.n = sizes[i];
        buffers.push_back(b);
      }
      auto table = cuda::makeUpdateTable(buffers);
      ASSERT_TRUE(table.isOk()) << table.status().message();
      std::vector<double> lanes(table->chunks.size() * cuda::update::kLanes), squares(sizes.size());
      train::UpdateRule r;
      r.clip = rule.clip;
      r.skipNonFinite = rule.skip;
      for (int64_t step = 1; step <= 3; ++step) {
        const float lr = static_cast<float>(opt->baseLr() * (1.0 - 0.1 * static_cast<double>(step)));
        for (size_t i = 0; i < sizes.size(); ++i) { // the step's gradients
          for (int64_t e = 0; e < sizes[i]; ++e)
            host.params[i].accum[static_cast<size_t>(e)] = dev.grads[i][static_cast<size_t>(e)] =
                std::sin(static_cast<float>(e + 1) * 0.37f * static_cast<float>(step + static_cast<int64_t>(i)));
          if (rule.nonFinite && step == 2)
            host.params[i].accum[3 % static_cast<size_t>(sizes[i])] =
                dev.grads[i][3 % static_cast<size_t>(sizes[i])] = std::nanf("");
        }
        train::StepUpdate su(*opt, host.params, r, step, lr, rule.microBatches, 0);
        auto updated = su.optimize(0, nullptr);
        ASSERT_TRUE(updated.isOk()) << updated.status().message();

        cuda::hostSquares(*table, rule.microBatches > 1 ? 1.0f / static_cast<float>(rule.microBatches) : 1.0f,
                          lanes.data(), squares.data());
        const cuda::update::Control k =
            cuda::update::decide(squares.data(), table->params(), rule.clip, rule.skip);
        cuda::hostApply(*table, k, opt->scalars(step, lr), true);
        EXPECT_EQ(k.skip != 0, su.skipped()) << what << " step " << step;
        EXPECT_EQ(*updated, !su.skipped()) << what;
        for (size_t i = 0; i < sizes.size(); ++i) {
          const double a = squares[i], b = su.squares()[i];
          EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << what << " step " << step << " param " << i;
          EXPECT_EQ(std::memcmp(dev.weights[i].data(), host.weights[i].data(), sizes[i] * sizeof(float)), 0)
              << what << " step " << step << " param " << i;
          EXPECT_EQ(std::memcmp(dev.grads[i].data(), host.params[i].accum.data(), sizes[i] * sizeof(float)), 0)
              << what << " step " << step << " gradient " << i;
          for (size_t s = 0; s < opt->stateTensors(); ++s)
            EXPECT_EQ(std::memcmp(dev.states[i][s].data(), host.params[i].state[s].data(), sizes[i] * sizeof(float)),
                      0)
                << what << " step " << step << " param " << i << " state " << s;
        }
      }
    }
}

// The table cuts every parameter into chunks of at most kChunk elements,
// in order, each element in exactly one chunk; the lanes' total is
// train::chunkSquaredSum's.
TEST(CudaBodies, UpdateTableCoversEveryElementOnceInTheCpusChunks) {
  std::vector<std::vector<float>> mem;
  std::vector<kernel::ParamBuffers> buffers;
  for (int64_t n : {int64_t{0}, int64_t{3}, cuda::update::kChunk + 1, 3 * cuda::update::kChunk}) {
    mem.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 1)));
    kernel::ParamBuffers b;
    b.param = b.grad = mem.back().data();
    b.n = n;
    buffers.push_back(b);
  }
  auto t = cuda::makeUpdateTable(buffers);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  ASSERT_EQ(t->params(), 4);
  EXPECT_EQ(t->firstChunk, (std::vector<int32_t>{0, 0, 1, 3, 6}));
  for (int32_t p = 0; p < t->params(); ++p) {
    int64_t covered = 0;
    for (int32_t c = t->firstChunk[p]; c < t->firstChunk[p + 1]; ++c) {
      EXPECT_EQ(t->chunks[c].index, p);
      EXPECT_EQ(t->chunks[c].grad, buffers[p].grad + covered);
      EXPECT_LE(t->chunks[c].n, cuda::update::kChunk);
      covered += t->chunks[c].n;
    }
    EXPECT_EQ(covered, buffers[p].n);
  }
  Tensor x = randomF32({cuda::update::kChunk}, 5, -3.f, 3.f);
  cuda::update::Chunk c;
  c.grad = x.data<float>();
  c.n = 12345;
  double lanes[cuda::update::kLanes];
  for (int l = 0; l < cuda::update::kLanes; ++l)
    lanes[l] = cuda::update::laneSquares(c, 1.0f, l);
  EXPECT_EQ(cuda::update::laneTotal(lanes), train::chunkSquaredSum(x.data<float>(), 12345));
  // A kernel's misuse of the table is refused, not run.
  buffers[1].grad = nullptr;
  EXPECT_FALSE(cuda::makeUpdateTable(buffers).isOk());
}

// pipec:GatherGrad by the indices sorted by row (runtime/cuda/GatherGrad.cu:
// a stable sort, then a binary search per output element) is the CPU
// kernel bit for bit: repeated and negative indices, rows no index takes,
// an outer axis, and every index the same row.
TEST(CudaBodies, GatherGradBySortedIndicesIsTheCpuKernelBitwise) {
  struct Case {
    int64_t outer, len, inner, count;
    bool allSame;
  };
  for (const Case &c : {Case{1, 128, 64, 200, false}, Case{3, 50, 7, 33, false}, Case{2, 9, 5, 40, true},
                        Case{1, 1000, 3, 5, false}}) {
    std::mt19937 rng(static_cast<unsigned>(c.len + c.count));
    Tensor idx(DType::I64, {c.count});
    for (int64_t j = 0; j < c.count; ++j) {
      const int64_t r = c.allSame ? 4 : static_cast<int64_t>(rng() % static_cast<uint64_t>(c.len));
      idx.data<int64_t>()[j] = r % 3 == 0 ? r - c.len : r; // some counted from the end
    }
    Tensor dy = randomF32({c.outer, c.count, c.inner}, 9);
    cpu::OpDesc d = makeDesc("GatherGrad", {dy.desc(), idx.desc()}, {{DType::F32, {c.outer, c.len, c.inner}}}, {},
                             17, "pipec");
    d.attrs["shape"] = Attribute::ofInts({c.outer, c.len, c.inner});
    d.attrs["axis"] = Attribute::ofInt(1);
    auto ref = cpu::evaluate(d, {dy, idx});
    ASSERT_TRUE(ref.isOk()) << ref.status().message();
    std::vector<int32_t> keys(static_cast<size_t>(c.count)), pos(keys.size());
    std::vector<std::pair<int32_t, int32_t>> kp;
    for (int64_t j = 0; j < c.count; ++j)
      kp.emplace_back(body::gatherRow(idx.data<int64_t>()[j], c.len), static_cast<int32_t>(j));
    std::stable_sort(kp.begin(), kp.end(), [](auto a, auto b) { return a.first < b.first; });
    for (size_t p = 0; p < kp.size(); ++p)
      std::tie(keys[p], pos[p]) = kp[p];
    const Tensor &want = (*ref)[0];
    for (int64_t o = 0; o < c.outer; ++o)
      for (int64_t r = 0; r < c.len; ++r)
        for (int64_t k = 0; k < c.inner; ++k) {
          const float got = body::gatherGradSorted(dy.data<float>(), keys.data(), pos.data(), c.count, c.inner, o,
                                                   static_cast<int32_t>(r), k);
          const float w = want.data<float>()[(o * c.len + r) * c.inner + k];
          ASSERT_EQ(std::memcmp(&got, &w, sizeof got), 0) << "element " << o << "," << r << "," << k;
        }
  }
  EXPECT_EQ(body::gatherRow(-1, 10), 9);
  EXPECT_EQ(body::gatherRow(10, 10), 10); // out of range: sorts last, no row reads it
  const int32_t sorted[] = {0, 2, 2, 2, 5};
  EXPECT_EQ(body::lowerBound(sorted, 5, 2), 1);
  EXPECT_EQ(body::lowerBound(sorted, 5, 3), 4);
  EXPECT_EQ(body::lowerBound(sorted, 5, 6), 5);
}

// The row kernels that share a row among a warp's lanes
// (runtime/cuda/RowBodies.h), run lane by lane on the host: the softmax
// rows (16 lanes) are bitwise the one-thread bodies, and so the CPU
// kernels' rows; the loss, its gradient and layer normalization (32 lanes,
// sums in lanes) against the CPU kernels, on rows shorter than the lanes,
// of one element, and long ones.
TEST(CudaBodies, RowsSharedByLanesMatchTheCpuKernels) {
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, int64_t{128}, int64_t{1000}}) {
    Tensor x = randomF32({n}, static_cast<uint32_t>(n), -8.f, 8.f);
    std::vector<float> a(static_cast<size_t>(n)), b(a.size());
    body::softmaxRow<false>(x.data<float>(), a.data(), n, 1);
    cuda::rows::softmaxRowLanes<false>(x.data<float>(), b.data(), n, 16);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "softmax, n " << n;
    body::softmaxRow<true>(x.data<float>(), a.data(), n, 1);
    cuda::rows::softmaxRowLanes<true>(x.data<float>(), b.data(), n, 16);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "log softmax, n " << n;
  }
  // The loss and its gradient over 1, 7 and 1000 classes, mean reduction.
  for (int64_t C : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
    const int64_t N = 6;
    Tensor s = randomF32({N, C}, 40, -6.f, 6.f), t(DType::I64, {N});
    for (int64_t i = 0; i < N; ++i)
      t.data<int64_t>()[i] = (i * 5) % C;
    Tensor loss = evalOne(makeDesc("SoftmaxCrossEntropyLoss", {s.desc(), t.desc()}, {{DType::F32, {}}}), {s, t});
    double sum = 0;
    for (int64_t i = 0; i < N; ++i)
      sum += cuda::rows::sceLossLanes(s.data<float>() + i * C, C, 1, t.data<int64_t>()[i], 32);
    EXPECT_NEAR(sum / N, loss.data<float>()[0], 1e-6 * std::max(1.0, std::fabs(sum / N))) << C << " classes";
    Tensor g = Tensor::scalarF32(1.0f);
    Tensor dx = evalOne(
        makeDesc("SoftmaxCrossEntropyLossGrad", {g.desc(), s.desc(), t.desc()}, {s.desc()}, {}, 17, "pipec"),
        {g, s, t});
    std::vector<float> mine(static_cast<size_t>(N * C));
    for (int64_t i = 0; i < N; ++i)
      cuda::rows::sceGradLanes(s.data<float>() + i * C, mine.data() + i * C, C, 1, t.data<int64_t>()[i], 1.0f / N,
                               32);
    EXPECT_LE(worstError(mine.data(), dx.data<float>(), N * C), 1e-7) << C << " classes";
  }
  // Layer normalization and its input gradient, rows of 3, 256 and 1000.
  for (int64_t cols : {int64_t{3}, int64_t{256}, int64_t{1000}}) {
    const int64_t rows = 4;
    Tensor x = randomF32({rows, cols}, 50, -3.f, 3.f), sc = randomF32({cols}, 51), bi = randomF32({cols}, 52);
    Tensor dy = randomF32({rows, cols}, 53);
    cpu::OpDesc ln = makeDesc("LayerNormalization", {x.desc(), sc.desc(), bi.desc()}, {x.desc()}, {}, 17);
    ln.attrs["axis"] = Attribute::ofInt(-1);
    ln.attrs["epsilon"] = Attribute::ofFloat(1e-5f);
    Tensor y = evalOne(ln, {x, sc, bi});
    std::vector<float> mine(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      cuda::rows::layerNormRowLanes(x.data<float>() + r * cols, sc.data<float>(), bi.data<float>(),
                                    mine.data() + r * cols, cols, static_cast<double>(1e-5f), 32);
    EXPECT_LE(worstError(mine.data(), y.data<float>(), rows * cols), 5e-7) << cols << " columns";
    // The one-thread body, which the CPU gradient test pins, against the
    // lanes: the statistics differ in a double's rounding at most.
    std::vector<float> one(mine.size());
    for (int64_t r = 0; r < rows; ++r) {
      body::layerNormGradRow(dy.data<float>() + r * cols, x.data<float>() + r * cols, sc.data<float>(),
                             one.data() + r * cols, cols, static_cast<double>(1e-5f));
      cuda::rows::layerNormGradRowLanes(dy.data<float>() + r * cols, x.data<float>() + r * cols, sc.data<float>(),
                                        mine.data() + r * cols, cols, static_cast<double>(1e-5f), 32);
    }
    EXPECT_LE(worstError(mine.data(), one.data(), rows * cols), 1e-7) << cols << " columns";
  }
  float p[4] = {1, 2, 3, 4};
  EXPECT_EQ(cuda::rows::foldSum(p, 4), (1.f + 3.f) + (2.f + 4.f)); // the shuffles' order
}

// The other elementwise ops' bodies (body::mathUnary, mathBinary) against
// the CPU kernels: the same formulas, NaN and infinity conventions and
// attributes; bool results exactly.
TEST(CudaBodies, MathOpsMatchTheCpuKernels) {
  Tensor x = randomF32({513}, 71, -3.f, 3.f);
  float *xv = x.data<float>();
  xv[0] = NAN;
  xv[1] = INFINITY;
  xv[2] = -INFINITY;
  xv[3] = 0.0f;
  xv[4] = -0.0f;
  xv[5] = 2.5f; // Round: half to even
  struct U {
    const char *op;
    body::MathOp code;
    float alpha, beta;
  };
  using M = body::MathOp;
  const U unary[] = {{"Abs", M::Abs, 0, 0},       {"Sign", M::Sign, 0, 0},         {"Ceil", M::Ceil, 0, 0},
                     {"Floor", M::Floor, 0, 0},   {"Round", M::Round, 0, 0},       {"Acos", M::Acos, 0, 0},
                     {"Acosh", M::Acosh, 0, 0},   {"Asin", M::Asin, 0, 0},         {"Asinh", M::Asinh, 0, 0},
                     {"Atan", M::Atan, 0, 0},     {"Atanh", M::Atanh, 0, 0},       {"Cos", M::Cos, 0, 0},
                     {"Cosh", M::Cosh, 0, 0},     {"Sin", M::Sin, 0, 0},           {"Sinh", M::Sinh, 0, 0},
                     {"Tan", M::Tan, 0, 0},       {"Log", M::Log, 0, 0},           {"Sqrt", M::Sqrt, 0, 0},
                     {"Reciprocal", M::Reciprocal, 0, 0}, {"Softplus", M::Softplus, 0, 0},
                     {"Softsign", M::Softsign, 0, 0}, {"Mish", M::Mish, 0, 0},     {"Celu", M::Celu, 0.7f, 0},
                     {"Elu", M::Elu, 0.7f, 0},    {"Selu", M::Selu, 1.5f, 1.1f},   {"LeakyRelu", M::LeakyRelu, 0.1f, 0},
                     {"ThresholdedRelu", M::ThresholdedRelu, 0.4f, 0}, {"HardSigmoid", M::HardSigmoid, 0.3f, 0.6f},
                     {"HardSwish", M::HardSwish, 0, 0}};
  for (const U &u : unary) {
    cpu::OpDesc d = makeDesc(u.op, {x.desc()}, {x.desc()});
    if (u.code == M::Selu) {
      d.attrs["alpha"] = Attribute::ofFloat(u.alpha);
      d.attrs["gamma"] = Attribute::ofFloat(u.beta);
    } else if (u.code == M::HardSigmoid) {
      d.attrs["alpha"] = Attribute::ofFloat(u.alpha);
      d.attrs["beta"] = Attribute::ofFloat(u.beta);
    } else if (u.alpha != 0) {
      d.attrs["alpha"] = Attribute::ofFloat(u.alpha);
    }
    Tensor ref = evalOne(d, {x});
    body::MathParams p;
    p.op = u.code;
    p.alpha = u.alpha;
    p.beta = u.beta;
    std::vector<float> got(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i)
      got[i] = body::mathUnary(p, xv[i]);
    // The same functions; the compilers may contract a multiply-add in one
    // and not the other (HardSigmoid's alpha x + beta, Celu, Selu).
    EXPECT_LE(worstError(got.data(), ref.data<float>(), x.numel()), 2e-7) << u.op;
  }
  const TensorDesc bools{DType::Bool, x.shape()};
  for (auto [op, code] : {std::pair{"IsNaN", M::IsNaN}, std::pair{"IsInf", M::IsInf}}) {
    Tensor ref = evalOne(makeDesc(op, {x.desc()}, {bools}, {}, 20), {x});
    body::MathParams p;
    p.op = code;
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(body::mathUnary(p, xv[i]) != 0.0f, ref.data<uint8_t>()[i] != 0) << op << " " << xv[i];
  }
  Tensor y = randomF32({513}, 72, -3.f, 3.f);
  y.data<float>()[0] = 1.0f; // NaN against a number
  y.data<float>()[7] = xv[7];
  for (auto [op, code] : {std::pair{"Equal", M::Equal}, std::pair{"Greater", M::Greater},
                          std::pair{"GreaterOrEqual", M::GreaterOrEqual}, std::pair{"Less", M::Less},
                          std::pair{"LessOrEqual", M::LessOrEqual}}) {
    Tensor ref = evalOne(makeDesc(op, {x.desc(), y.desc()}, {bools}), {x, y});
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(body::mathBinary(code, xv[i], y.data<float>()[i]) != 0.0f, ref.data<uint8_t>()[i] != 0) << op;
  }
  for (auto [op, code] : {std::pair{"Pow", M::Pow}, std::pair{"PRelu", M::PRelu}, std::pair{"Max", M::Max},
                          std::pair{"Min", M::Min}, std::pair{"Sum", M::Sum}}) {
    Tensor ref = evalOne(makeDesc(op, {x.desc(), y.desc()}, {x.desc()}), {x, y});
    std::vector<float> got(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i)
      got[i] = body::mathBinary(code, xv[i], y.data<float>()[i]);
    EXPECT_LE(worstError(got.data(), ref.data<float>(), x.numel()), 0.0) << op;
  }
}

// The other reductions' body (body::reduceElement) against the CPU
// kernels over axis 0, axes {1, 2} and all axes (opset 18: axes as an
// input): Max and Min exactly (NaN propagating), the sums within float
// rounding of a different order.
TEST(CudaBodies, ReductionsMatchTheCpuKernels) {
  Tensor x = randomF32({6, 5, 7}, 80, 0.5f, 1.5f);
  x.data<float>()[17] = NAN;
  Tensor clean = randomF32({6, 5, 7}, 81, -2.f, 2.f);
  using R = body::ReduceOp;
  const std::pair<const char *, R> ops[] = {{"ReduceMean", R::Mean}, {"ReduceSumSquare", R::SumSquare},
                                            {"ReduceL1", R::L1},     {"ReduceL2", R::L2},
                                            {"ReduceProd", R::Prod}, {"ReduceMax", R::Max},
                                            {"ReduceMin", R::Min},   {"ReduceLogSumExp", R::LogSumExp}};
  const int64_t strides[3] = {35, 7, 1};
  for (const Tensor *in : {&clean, &x})
    for (const std::vector<int64_t> &axes :
         {std::vector<int64_t>{0}, std::vector<int64_t>{1, 2}, std::vector<int64_t>{0, 1, 2}})
      for (const auto &[op, code] : ops) {
        Tensor ax(DType::I64, {static_cast<int64_t>(axes.size())});
        for (size_t i = 0; i < axes.size(); ++i)
          ax.data<int64_t>()[i] = axes[i];
        Shape out;
        body::Reduction r;
        for (int64_t a = 0; a < 3; ++a) {
          if (std::find(axes.begin(), axes.end(), a) != axes.end()) {
            r.reducedDims[r.reducedRank] = in->shape()[a];
            r.reducedStrides[r.reducedRank++] = strides[a];
            r.reducedCount *= in->shape()[a];
          } else {
            out.push_back(in->shape()[a]);
            r.keptDims[r.keptRank] = in->shape()[a];
            r.keptStrides[r.keptRank++] = strides[a];
          }
        }
        if (r.keptRank == 0) {
          r.keptDims[0] = 1;
          r.keptStrides[0] = 0;
          r.keptRank = 1;
        }
        cpu::OpDesc d = makeDesc(op, {in->desc(), ax.desc()}, {{DType::F32, out}}, {}, 18);
        d.attrs["keepdims"] = Attribute::ofInt(0);
        d.constInputs = {Tensor(), ax};
        Tensor ref = evalOne(d, {*in, ax});
        std::vector<float> y(static_cast<size_t>(ref.numel()));
        for (int64_t o = 0; o < ref.numel(); ++o)
          y[o] = body::reduceElement(in->data<float>(), o, r, code);
        const double tol = code == R::Max || code == R::Min ? 0.0 : 2e-6;
        EXPECT_LE(worstError(y.data(), ref.data<float>(), ref.numel()), tol)
            << op << " over " << axes.size() << " axes" << (in == &x ? " with a NaN" : "");
      }
}

// Slice (negative steps, clamped ends, two axes), Expand and Tile as the
// CUDA kernels copy them (support/StridedView.h's view, read through
// body::broadcastOffset) against the CPU kernels, byte for byte, on float
// and int64 data.
TEST(CudaBodies, StridedViewsCopyAsTheCpuKernels) {
  auto ints = [](std::vector<int64_t> v) {
    Tensor t(DType::I64, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i)
      t.data<int64_t>()[i] = v[i];
    return t;
  };
  Tensor xf = randomF32({4, 5, 6}, 90);
  Tensor xi(DType::I64, {4, 5, 6});
  for (int64_t i = 0; i < xi.numel(); ++i)
    xi.data<int64_t>()[i] = i * 1000003 - 7;
  for (const Tensor *x : {&xf, &xi}) {
    struct Case {
      const char *op;
      std::vector<Tensor> args;
      Expected<StridedView> view;
    };
    std::vector<Case> cases;
    cases.push_back({"Slice", {ints({-1, 1}), ints({-100, 5}), ints({0, 2}), ints({-2, 2})},
                     sliceView(x->shape(), {-1, 1}, {-100, 5}, {0, 2}, {-2, 2})});
    cases.push_back({"Slice", {ints({0}), ints({3}), ints({1}), ints({1})}, sliceView(x->shape(), {0}, {3}, {1}, {1})});
    cases.push_back({"Expand", {ints({3, 4, 1, 6})}, expandView(x->shape(), {3, 4, 1, 6})});
    cases.push_back({"Tile", {ints({2, 1, 3})}, tileView(x->shape(), {2, 1, 3})});
    for (Case &c : cases) {
      ASSERT_TRUE(c.view.isOk()) << c.view.status().message();
      std::vector<TensorDesc> in{x->desc()};
      std::vector<Tensor> inputs{*x}, consts{Tensor()};
      for (const Tensor &a : c.args) {
        in.push_back(a.desc());
        inputs.push_back(a);
        consts.push_back(a);
      }
      cpu::OpDesc d = makeDesc(c.op, in, {{x->dtype(), c.view->out}}, {}, 13);
      d.constInputs = consts;
      Tensor ref = evalOne(d, inputs);
      body::Broadcast v;
      v.rank = static_cast<int>(c.view->dims.size());
      for (int a = 0; a < v.rank; ++a) {
        v.dims[a] = c.view->dims[a];
        v.strides[a] = c.view->strides[a];
      }
      Tensor got(ref.desc());
      const size_t es = dtypeSize(x->dtype());
      for (int64_t i = 0; i < got.numel(); ++i)
        std::memcpy(static_cast<char *>(got.raw()) + i * es,
                    static_cast<const char *>(x->raw()) + (c.view->offset + body::broadcastOffset(i, v)) * es, es);
      EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), ref.bytes()), 0) << c.op << " " << dtypeName(x->dtype());
    }
  }
  // The ops' errors, as the CPU kernels give them.
  EXPECT_FALSE(sliceView({4}, {0}, {4}, {0}, {0}).isOk());
  EXPECT_FALSE(expandView({3}, {4}).isOk());
  EXPECT_FALSE(tileView({3}, {-1}).isOk());
}

// Clip, ArgMax / ArgMin (ties, NaN, select_last_index) and Cast (NaN,
// out-of-range floats, to and from bool) as the CUDA bodies compute them,
// against the CPU kernels, exactly.
TEST(CudaBodies, ClipArgAndCastMatchTheCpuKernels) {
  Tensor x = randomF32({6, 9}, 95, -4.f, 4.f);
  float *xv = x.data<float>();
  xv[3] = NAN;
  xv[10] = xv[11] = 3.99f; // a tie
  xv[20] = 1e30f;
  xv[21] = -1e30f;
  Tensor lo = Tensor::scalarF32(-1.5f), hi = Tensor::scalarF32(2.0f);
  cpu::OpDesc c = makeDesc("Clip", {x.desc(), lo.desc(), hi.desc()}, {x.desc()}, {}, 13);
  Tensor ref = evalOne(c, {x, lo, hi});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float got = body::clipOf(xv[i], -1.5f, 2.0f), want = ref.data<float>()[i];
    ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << i;
  }
  for (const char *op : {"ArgMax", "ArgMin"})
    for (int64_t axis : {0, 1})
      for (int64_t last : {0, 1}) {
        cpu::OpDesc d = makeDesc(op, {x.desc()}, {{DType::I64, {axis == 0 ? 9 : 6}}}, {}, 13);
        d.attrs["axis"] = Attribute::ofInt(axis);
        d.attrs["keepdims"] = Attribute::ofInt(0);
        d.attrs["select_last_index"] = Attribute::ofInt(last);
        Tensor r = evalOne(d, {x});
        const int64_t outer = axis == 0 ? 1 : 6, len = axis == 0 ? 6 : 9, inner = axis == 0 ? 9 : 1;
        for (int64_t o = 0; o < outer * inner; ++o)
          ASSERT_EQ(body::argIndex(xv + (o / inner) * len * inner + o % inner, len, inner,
                                   std::string(op) == "ArgMax", last != 0),
                    r.data<int64_t>()[o])
              << op << " axis " << axis << " last " << last << " output " << o;
      }
  for (DType to : {DType::I64, DType::I32, DType::U8, DType::Bool, DType::F64}) {
    cpu::OpDesc d = makeDesc("Cast", {x.desc()}, {{to, x.shape()}}, {}, 13);
    d.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(to));
    Tensor r = evalOne(d, {x});
    for (int64_t i = 0; i < x.numel(); ++i) {
      switch (to) {
      case DType::I64: ASSERT_EQ(body::castValue<int64_t>(xv[i], false), r.data<int64_t>()[i]) << xv[i]; break;
      case DType::I32: ASSERT_EQ(body::castValue<int32_t>(xv[i], false), r.data<int32_t>()[i]) << xv[i]; break;
      case DType::U8: ASSERT_EQ(body::castValue<uint8_t>(xv[i], false), r.data<uint8_t>()[i]) << xv[i]; break;
      case DType::Bool: ASSERT_EQ(body::castValue<uint8_t>(xv[i], true), r.data<uint8_t>()[i]) << xv[i]; break;
      default: {
        const double got = body::castValue<double>(xv[i], false), want = r.data<double>()[i];
        ASSERT_EQ(std::memcmp(&got, &want, 8), 0) << xv[i];
      }
      }
    }
  }
}

// Pad (every mode, cropping pads, a run-time constant), GatherElements
// (negative and out-of-range indices, int32 and int64), Trilu (k past the
// matrix) and Mod (both signs rules, integer division by 0 and -1) as the
// CUDA kernels compute them element by element, against the CPU kernels,
// bit for bit.
TEST(CudaBodies, PadGatherElementsTriluAndModMatchTheCpuKernels) {
  auto ints = [](std::vector<int64_t> v) {
    Tensor t(DType::I64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return t;
  };
  Tensor xf = randomF32({3, 4, 5}, 31);
  Tensor xi(DType::I64, {3, 4, 5});
  for (int64_t i = 0; i < xi.numel(); ++i)
    xi.data<int64_t>()[i] = i * 7919 - 100;
  for (const Tensor *x : {&xf, &xi}) {
    const size_t es = dtypeSize(x->dtype());
    struct Case {
      const char *mode;
      std::vector<int64_t> pads;
    };
    for (const Case &c : {Case{"constant", {1, 0, 2, 2, 3, -1}}, Case{"reflect", {2, 3, 4, 1, 3, 4}},
                          Case{"edge", {0, -1, 6, 3, 0, 2}}, Case{"wrap", {4, 2, 9, 1, 7, -2}}}) {
      Tensor value(x->dtype(), {});
      std::memcpy(value.raw(), x->raw(), es); // the first element as the constant
      Tensor pads = ints(c.pads);
      Shape out = x->shape();
      for (size_t a = 0; a < 3; ++a)
        out[a] += c.pads[a] + c.pads[a + 3];
      cpu::OpDesc d = makeDesc("Pad", {x->desc(), pads.desc(), value.desc()}, {{x->dtype(), out}}, {}, 19);
      d.attrs["mode"] = Attribute::ofString(c.mode);
      setConst(d, 1, pads);
      Tensor ref = evalOne(d, {*x, pads, value});
      auto spec = cpu::dm::padSpec(d);
      ASSERT_TRUE(spec.isOk()) << spec.status().message();
      ASSERT_TRUE(spec->runtimeValue);
      const body::PadGeometry g = body::padGeometry(*spec);
      Tensor got(ref.desc());
      for (int64_t i = 0; i < got.numel(); ++i) {
        const int64_t src = body::padOffset(g, i);
        std::memcpy(static_cast<char *>(got.raw()) + i * es,
                    src < 0 ? static_cast<const char *>(value.raw()) : static_cast<const char *>(x->raw()) + src * es,
                    es);
      }
      EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), ref.bytes()), 0) << "Pad " << c.mode << " " << dtypeName(x->dtype());
    }
    for (int axis : {0, 1, 2})
      for (DType it : {DType::I64, DType::I32}) {
        Shape is = {2, 3, 4};
        is[static_cast<size_t>(axis)] = 7; // longer than the data along the axis
        const int64_t dim = x->shape()[static_cast<size_t>(axis)];
        Tensor idx(it, is);
        std::mt19937 rng(static_cast<uint32_t>(axis * 10 + (it == DType::I32)));
        for (int64_t i = 0; i < idx.numel(); ++i) {
          const int64_t v = std::uniform_int_distribution<int64_t>(-dim, dim - 1)(rng);
          if (it == DType::I64)
            idx.data<int64_t>()[i] = v;
          else
            idx.data<int32_t>()[i] = static_cast<int32_t>(v);
        }
        cpu::OpDesc d = makeDesc("GatherElements", {x->desc(), idx.desc()}, {{x->dtype(), is}}, {}, 13);
        d.attrs["axis"] = Attribute::ofInt(axis - 3); // negative: counted from the end
        Tensor ref = evalOne(d, {*x, idx});
        const body::GatherElementsGeometry g = body::gatherElementsGeometry(x->shape(), is, axis);
        Tensor got(ref.desc());
        for (int64_t i = 0; i < got.numel(); ++i) {
          const int64_t v = it == DType::I64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i];
          const int64_t src = body::gatherElementsOffset(g, i, v);
          ASSERT_GE(src, 0);
          std::memcpy(static_cast<char *>(got.raw()) + i * es, static_cast<const char *>(x->raw()) + src * es, es);
        }
        EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), ref.bytes()), 0) << "GatherElements axis " << axis;
        EXPECT_EQ(body::gatherElementsOffset(g, 0, dim), -1);
        EXPECT_EQ(body::gatherElementsOffset(g, 0, -dim - 1), -1);
      }
    for (int64_t upper : {0, 1})
      for (int64_t k : std::vector<int64_t>{-100, -2, 0, 3, 100, INT64_MAX}) {
        Tensor kt(DType::I64, {});
        *kt.data<int64_t>() = k;
        cpu::OpDesc d = makeDesc("Trilu", {x->desc(), kt.desc()}, {x->desc()}, {}, 14);
        d.attrs["upper"] = Attribute::ofInt(upper);
        Tensor ref = evalOne(d, {*x, kt});
        Tensor got(ref.desc());
        std::memset(got.raw(), 0, got.bytes());
        for (int64_t i = 0; i < got.numel(); ++i)
          if (body::triluKeeps((i / 5) % 4, i % 5, 4, 5, k, upper != 0))
            std::memcpy(static_cast<char *>(got.raw()) + i * es, static_cast<const char *>(x->raw()) + i * es, es);
        EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), ref.bytes()), 0) << "Trilu upper " << upper << " k " << k;
      }
  }
  Tensor a = randomF32({4, 6}, 32, -9.f, 9.f), b = randomF32({6}, 33, -4.f, 4.f);
  b.data<float>()[2] = 0.0f;
  b.data<float>()[3] = -0.0f;
  Tensor ai(DType::I64, {4, 6}), bi(DType::I64, {6});
  for (int64_t i = 0; i < ai.numel(); ++i)
    ai.data<int64_t>()[i] = (i * 37 % 23) - 11;
  const int64_t divisors[] = {3, -4, 0, -1, 7, -13};
  std::copy(std::begin(divisors), std::end(divisors), bi.data<int64_t>());
  for (int64_t fmod : {0, 1}) {
    for (const auto &[x, y] : {std::pair{&a, &b}, std::pair{&ai, &bi}}) {
      cpu::OpDesc d = makeDesc("Mod", {x->desc(), y->desc()}, {x->desc()}, {}, 13);
      d.attrs["fmod"] = Attribute::ofInt(fmod);
      Tensor ref = evalOne(d, {*x, *y});
      for (int64_t i = 0; i < ref.numel(); ++i) {
        if (x->dtype() == DType::F32) {
          const float got = body::modOf<float>(x->data<float>()[i], y->data<float>()[i % 6], fmod != 0);
          ASSERT_EQ(std::memcmp(&got, ref.data<float>() + i, 4), 0) << i;
        } else {
          ASSERT_EQ(body::modOf<int64_t>(x->data<int64_t>()[i], y->data<int64_t>()[i % 6], fmod != 0),
                    ref.data<int64_t>()[i])
              << x->data<int64_t>()[i] << " mod " << y->data<int64_t>()[i % 6] << " fmod " << fmod;
        }
      }
    }
  }
}

// Resize and pipec:ResizeGrad as the CUDA kernel runs them: the CPU plan's
// passes (runtime/cpu/kernels/ResizeCommon.h), each element by
// body::resizePassElement, against the CPU kernels; nearest exactly.
TEST(CudaBodies, ResizePassesMatchTheCpuKernels) {
  Tensor x = randomF32({2, 3, 5, 6}, 51);
  struct Case {
    const char *mode;
    std::vector<float> scales;
    int64_t antialias;
  };
  for (const Case &c : {Case{"nearest", {1, 1, 2, 1.5f}, 0}, Case{"linear", {1, 1, 1.6f, 0.5f}, 0},
                        Case{"cubic", {1, 1, 0.6f, 2}, 0}, Case{"linear", {1, 1, 0.4f, 0.5f}, 1}}) {
    Shape out = x.shape();
    for (size_t a = 0; a < 4; ++a)
      out[a] = static_cast<int64_t>(std::floor(out[a] * static_cast<double>(c.scales[a])));
    Tensor scales(DType::F32, {4});
    std::copy(c.scales.begin(), c.scales.end(), scales.data<float>());
    cpu::OpDesc d = makeDesc("Resize", {x.desc(), TensorDesc{}, scales.desc()}, {{DType::F32, out}}, {}, 18);
    d.attrs["mode"] = Attribute::ofString(c.mode);
    d.attrs["antialias"] = Attribute::ofInt(c.antialias);
    setConst(d, 2, scales);
    ResizeArgs a;
    a.opType = "Resize";
    a.opset = 18;
    a.attrs = &d.attrs;
    a.x = x.shape();
    a.scales = &scales;
    Tensor dy = randomF32(out, 52);
    cpu::OpDesc g = makeDesc("ResizeGrad", {{DType::F32, out}}, {x.desc()}, resizeGradAttrs(a), 1, "pipec");
    for (const cpu::OpDesc *node : {&d, &g}) {
      const Tensor &in = node == &d ? x : dy;
      Tensor ref = evalOne(*node, node == &d ? std::vector<Tensor>{x, Tensor(), scales} : std::vector<Tensor>{dy});
      auto rn = cpu::resize::resizeNode(*node);
      ASSERT_TRUE(rn.isOk()) << rn.status().message();
      const cpu::resize::SeparablePlan<float> plan(rn->in, rn->taps, 0.0);
      ASSERT_FALSE(plan.passes().empty());
      std::vector<float> src(in.data<float>(), in.data<float>() + in.numel()), dst;
      for (const cpu::resize::Pass<float> &p : plan.passes()) {
        const body::ResizePass bp{p.outer, p.nIn, p.nOut, p.inner, p.start.data(), p.idx.data(), p.w.data()};
        dst.assign(static_cast<size_t>(p.outer * p.nOut * p.inner), 0.0f);
        for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i)
          dst[static_cast<size_t>(i)] = body::resizePassElement(bp, src.data(), i);
        src.swap(dst);
      }
      ASSERT_EQ(static_cast<int64_t>(src.size()), ref.numel());
      if (std::string(c.mode) == "nearest" && node == &d)
        EXPECT_EQ(std::memcmp(src.data(), ref.raw(), ref.bytes()), 0) << c.mode;
      else
        EXPECT_LE(worstError(src.data(), ref.data<float>(), ref.numel()), 1e-6)
            << c.mode << (node == &g ? " gradient" : "") << " antialias " << c.antialias;
    }
  }
}

// The losses' kernels as the GPU runs them (runtime/cuda/Kernels.cu:
// lossRowsKernel, lossSumKernel, lossWeightTotalKernel, lossGradRowsKernel,
// their per-position bodies run lane by lane here) with class weights, an
// ignore index and int32 targets, against the CPU kernels: NLL exactly,
// SCE within its exp's rounding.
TEST(CudaBodies, LossesWithWeightsAndIgnoredTargetsMatchTheCpuKernels) {
  const int64_t N = 3, C = 5, D = 4, P = N * D;
  Tensor x = randomF32({N, C, D}, 41), w = randomF32({C}, 42, 0.25f, 2.f);
  Tensor t32(DType::I32, {N, D});
  for (int64_t p = 0; p < P; ++p)
    t32.data<int32_t>()[p] = static_cast<int32_t>((p * 3) % C);
  t32.data<int32_t>()[5] = -100; // ignored
  t32.data<int32_t>()[7] = -100;
  for (const char *op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})
    for (const char *red : {"none", "sum", "mean"}) {
      const bool none = std::string(red) == "none";
      cuda::rows::LossGeometry g;
      g.n = N;
      g.c = C;
      g.d = D;
      g.softmax = std::string(op) == "SoftmaxCrossEntropyLoss";
      g.hasIgnore = true;
      g.ignoreIndex = -100;
      g.target32 = true;
      g.reduction = none ? 0 : std::string(red) == "sum" ? 1 : 2;
      const TensorDesc lossDesc{DType::F32, none ? Shape{N, D} : Shape{}};
      cpu::OpDesc d = makeDesc(op, {x.desc(), t32.desc(), w.desc()}, {lossDesc}, {}, 13);
      d.attrs["reduction"] = Attribute::ofString(red);
      d.attrs["ignore_index"] = Attribute::ofInt(-100);
      Tensor ref = evalOne(d, {x, t32, w});
      std::vector<float> loss(P), weight(P);
      for (int64_t p = 0; p < P; ++p) {
        const float *xr = x.data<float>() + (p / D) * C * D + p % D;
        int64_t t = 0;
        float wt = 0;
        ASSERT_TRUE(cuda::rows::lossTargetWeight(g, t32.raw(), w.data<float>(), p, t, wt));
        const float term = t < 0 ? 0.0f : g.softmax ? cuda::rows::sceLossLanes(xr, C, D, t, 32) : -xr[t * D];
        loss[p] = t < 0 ? 0.0f : term * wt;
        weight[p] = wt;
      }
      if (none) {
        EXPECT_LE(worstError(loss.data(), ref.data<float>(), P), g.softmax ? 2e-7 : 0.0) << op << " " << red;
      } else {
        double sl = 0, sw = 0;
        for (int64_t p = 0; p < P; ++p) {
          sl += loss[p];
          sw += weight[p];
        }
        const float got = static_cast<float>(g.reduction == 2 ? sl / sw : sl);
        EXPECT_LE(worstError(&got, ref.data<float>(), 1), 2e-7) << op << " " << red;
      }
      // The gradient, for dLoss of the forward's shape.
      Tensor dl = randomF32(lossDesc.shape, 43, 0.5f, 1.5f);
      cpu::OpDesc gd = makeDesc(std::string(op) + "Grad", {dl.desc(), x.desc(), t32.desc(), w.desc()}, {x.desc()}, {},
                                13, "pipec");
      gd.attrs = d.attrs;
      Tensor gref = evalOne(gd, {dl, x, t32, w});
      double total = 0;
      for (int64_t p = 0; p < P; ++p) {
        int64_t t = 0;
        float wt = 0;
        cuda::rows::lossTargetWeight(g, t32.raw(), w.data<float>(), p, t, wt);
        total += wt;
      }
      std::vector<float> dx(static_cast<size_t>(x.numel()));
      for (int64_t p = 0; p < P; ++p) {
        const int64_t off = (p / D) * C * D + p % D;
        int64_t t = 0;
        float wt = 0;
        cuda::rows::lossTargetWeight(g, t32.raw(), w.data<float>(), p, t, wt);
        const float gw = cuda::rows::lossScale(g, dl.data<float>(), p, total) * wt;
        if (g.softmax)
          cuda::rows::sceGradLanes(x.data<float>() + off, dx.data() + off, C, D, t, gw, 32);
        else
          for (int64_t c = 0; c < C; ++c)
            dx[static_cast<size_t>(off + c * D)] = cuda::rows::nllGradOf(c, t, gw);
      }
      if (g.softmax)
        EXPECT_LE(worstError(dx.data(), gref.data<float>(), x.numel()), 4e-7) << op << "Grad " << red;
      else
        EXPECT_EQ(std::memcmp(dx.data(), gref.raw(), gref.bytes()), 0) << op << "Grad " << red;
    }
  // A target outside [0, C) that is not the ignore index is refused.
  cuda::rows::LossGeometry g;
  g.c = C;
  const int64_t bad[] = {C};
  int64_t t = 0;
  float wt = 0;
  EXPECT_FALSE(cuda::rows::lossTargetWeight(g, bad, nullptr, 0, t, wt));
}

// Dropout's CUDA body draws the CPU kernel's Philox words (the shared
// runtime/cpu/kernels/ElementwiseRandom.h): the same outputs and masks, bit
// for bit, for a length that is not a multiple of the block.
TEST(CudaBodies, DropoutIsTheCpuKernelsBitwise) {
  const int64_t n = 1003;
  Tensor x = randomF32({n}, 97, -2.f, 2.f);
  cpu::OpDesc d = makeDesc("Dropout", {x.desc(), {DType::F32, {}}}, {x.desc(), {DType::Bool, {n}}}, {}, 13);
  d.constInputs = {Tensor(), Tensor::scalarF32(0.3f)};
  cpu::ExecContext ctx;
  ctx.training = true;
  ctx.seed = 11;
  ctx.step = 5;
  ctx.microBatch = 2;
  std::vector<Tensor> ref = eval(d, {x, Tensor::scalarF32(0.3f)}, ctx);
  ASSERT_EQ(ref.size(), 2u);
  const double ratio = 0.3f;
  const cpu::ew::RandomStream stream(11, 5, 2, 0); // cpu::evaluate's node id
  std::vector<float> y(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  for (int64_t b = 0; 4 * b < n; ++b)
    body::dropoutBlock(stream, b, x.data<float>(), y.data(), mask.data(), n,
                       static_cast<uint64_t>(std::ldexp(ratio, 32)), static_cast<float>(1.0 / (1.0 - ratio)));
  EXPECT_EQ(std::memcmp(y.data(), ref[0].raw(), ref[0].bytes()), 0);
  EXPECT_EQ(std::memcmp(mask.data(), ref[1].raw(), ref[1].bytes()), 0);
  int64_t dropped = 0;
  for (uint8_t m : mask)
    dropped += m == 0;
  EXPECT_GT(dropped, 0); // the rule dropped something
}

// pipec:LogSoftmaxGrad's body against the CPU kernel, along the last axis
// and along a strided one.
TEST(CudaBodies, LogSoftmaxGradMatchesTheCpuKernel) {
  Tensor dy = randomF32({5, 7, 3}, 98), y = randomF32({5, 7, 3}, 99, -4.f, 0.f);
  for (int64_t axis : {2, 1}) {
    cpu::OpDesc d = makeDesc("LogSoftmaxGrad", {dy.desc(), y.desc()}, {dy.desc()}, {}, 17, "pipec");
    d.attrs["axis"] = Attribute::ofInt(axis);
    Tensor ref = evalOne(d, {dy, y});
    const int64_t outer = axis == 2 ? 35 : 5, len = axis == 2 ? 3 : 7, inner = axis == 2 ? 1 : 3;
    std::vector<float> got(static_cast<size_t>(dy.numel()));
    for (int64_t r = 0; r < outer * inner; ++r) {
      const int64_t off = (r / inner) * len * inner + r % inner;
      body::logSoftmaxGradRow(dy.data<float>() + off, y.data<float>() + off, got.data() + off, len, inner);
    }
    // The same order; a multiply-add may be contracted in one build only.
    EXPECT_LE(worstError(got.data(), ref.data<float>(), dy.numel()), 2e-7) << "axis " << axis;
  }
}

TEST(CudaLaunch, EveryItemIsTakenOnceAndLaunchesStayInLimits) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{1} << 20,
                    (int64_t{1} << 31) + 5, int64_t{1} << 40}) {
    for (uint32_t block : {1u, 64u, 256u, 4096u}) {
      const cuda::LaunchShape s = cuda::itemLaunch(n, block);
      if (n == 0) {
        EXPECT_EQ(s.grid, 0u);
        continue;
      }
      EXPECT_GE(s.block, 32u);
      EXPECT_LE(s.block, cuda::kMaxBlock);
      EXPECT_GE(s.grid, 1u);
      EXPECT_LE(s.grid, cuda::kMaxGrid);
      // The grid-stride loop takes every item: the threads' counts add up
      // to n (checked on the first and last threads and in total).
      const int64_t threads = static_cast<int64_t>(s.grid) * s.block;
      int64_t total = 0;
      if (threads <= (1 << 22)) {
        for (int64_t t = 0; t < threads; ++t)
          total += cuda::itemsOfThread(s, t, n);
        EXPECT_EQ(total, n) << n << " items, block " << block;
      } else {
        const int64_t full = n / threads, rest = n % threads;
        EXPECT_EQ(cuda::itemsOfThread(s, 0, n), full + (rest > 0));
        EXPECT_EQ(cuda::itemsOfThread(s, threads - 1, n), full + (rest == threads));
      }
    }
  }
}

TEST(CudaBodies, BroadcastOffsetsAreTheIndexArithmetic) {
  const Shape out{3, 4, 5}, in{4, 1};
  const body::Broadcast b = body::makeBroadcast(out.data(), 3, in.data(), 2);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 60; ++i) {
    const int64_t j = (i / 5) % 4; // the input's row; its column is broadcast
    EXPECT_EQ(body::broadcastOffset(i, b), j) << i;
    seen.insert(body::broadcastOffset(i, b));
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(CudaGpus, ListingSaysWhyThereIsNoneInsteadOfCrashing) {
  // Built with or without CUDA, on a machine with or without a GPU and
  // driver: a list, or one line saying why not.
  auto gpus = cuda::listGpus();
  if (gpus) {
    ASSERT_FALSE(gpus->empty());
    for (const cuda::GpuInfo &g : *gpus) {
      EXPECT_FALSE(g.name.empty());
      EXPECT_GT(g.memoryBytes, 0u);
    }
    return;
  }
  const std::string m = gpus.status().message();
  EXPECT_TRUE(m.rfind("no CUDA device", 0) == 0 || m.find("built without CUDA") != std::string::npos) << m;
  EXPECT_EQ(cuda::built(), m.find("built without CUDA") == std::string::npos);
}

TEST(CudaBodies, ReduceSumAndTheLossMatchTheCpuKernels) {
  // ReduceSum over axis 0 (a bias gradient) and over axes {1, 2}.
  Tensor x = randomF32({6, 5, 7}, 30, -4.f, 4.f);
  for (const std::vector<int64_t> &axes : {std::vector<int64_t>{0}, std::vector<int64_t>{1, 2}}) {
    Tensor ax(DType::I64, {static_cast<int64_t>(axes.size())});
    for (size_t i = 0; i < axes.size(); ++i)
      ax.data<int64_t>()[i] = axes[i];
    Shape out;
    for (int64_t a = 0; a < 3; ++a)
      if (std::find(axes.begin(), axes.end(), a) == axes.end())
        out.push_back(x.shape()[a]);
    cpu::OpDesc d = makeDesc("ReduceSum", {x.desc(), ax.desc()}, {{DType::F32, out}});
    d.attrs["keepdims"] = Attribute::ofInt(0);
    d.constInputs = {Tensor(), ax};
    Tensor ref = evalOne(d, {x, ax});
    // The body's index arithmetic for the same reduction.
    body::Reduction r;
    const int64_t strides[3] = {35, 7, 1};
    for (int64_t a = 0; a < 3; ++a) {
      if (std::find(axes.begin(), axes.end(), a) != axes.end()) {
        r.reducedDims[r.reducedRank] = x.shape()[a];
        r.reducedStrides[r.reducedRank++] = strides[a];
        r.reducedCount *= x.shape()[a];
      } else {
        r.keptDims[r.keptRank] = x.shape()[a];
        r.keptStrides[r.keptRank++] = strides[a];
      }
    }
    std::vector<float> y(static_cast<size_t>(ref.numel()));
    for (int64_t o = 0; o < ref.numel(); ++o)
      y[o] = body::reduceSumElement(x.data<float>(), o, r);
    // The body adds in index order, the CPU kernel in its own lanes: the
    // same sum to float rounding (35 terms of up to 4).
    EXPECT_LE(worstError(y.data(), ref.data<float>(), ref.numel()), 1e-5) << axes.size() << " axes";
  }
  // Softmax cross-entropy (mean) and its gradient, scores [N, C].
  const int64_t N = 9, C = 13;
  Tensor s = randomF32({N, C}, 31, -6.f, 6.f), t(DType::I64, {N});
  for (int64_t i = 0; i < N; ++i)
    t.data<int64_t>()[i] = (i * 5) % C;
  Tensor loss = evalOne(makeDesc("SoftmaxCrossEntropyLoss", {s.desc(), t.desc()}, {{DType::F32, {}}}), {s, t});
  double sum = 0;
  for (int64_t i = 0; i < N; ++i)
    sum += body::sceLoss(s.data<float>() + i * C, C, 1, t.data<int64_t>()[i]);
  EXPECT_NEAR(sum / N, loss.data<float>()[0], 1e-6 * std::max(1.0, std::fabs(sum / N)));
  Tensor g = Tensor::scalarF32(1.0f);
  Tensor dx = evalOne(makeDesc("SoftmaxCrossEntropyLossGrad", {g.desc(), s.desc(), t.desc()},
                               {s.desc()}, {}, 17, "pipec"),
                      {g, s, t});
  std::vector<float> mine(static_cast<size_t>(N * C));
  for (int64_t i = 0; i < N; ++i)
    body::sceGrad(s.data<float>() + i * C, mine.data() + i * C, C, 1, t.data<int64_t>()[i], 1.0f / N);
  EXPECT_LE(worstError(mine.data(), dx.data<float>(), N * C), 1e-7);
}

TEST(CudaBodies, LayerNormAndSoftmaxGradientsMatchTheCpuKernels) {
  const int64_t rows = 12, cols = 64;
  Tensor x = randomF32({3, 4, cols}, 50, -4.f, 4.f), dy = randomF32({3, 4, cols}, 51, -4.f, 4.f);
  Tensor scale = randomF32({cols}, 52, 0.5f, 1.5f), bias = randomF32({cols}, 53, -4.f, 4.f);
  // Forward.
  cpu::OpDesc f = makeDesc("LayerNormalization", {x.desc(), scale.desc(), bias.desc()}, {x.desc()});
  f.attrs["axis"] = Attribute::ofInt(-1);
  f.attrs["epsilon"] = Attribute::ofFloat(1e-5f);
  Tensor y = evalOne(f, {x, scale, bias});
  std::vector<float> mine(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    body::layerNormRow(x.data<float>() + r * cols, scale.data<float>(), bias.data<float>(), mine.data() + r * cols,
                       cols, static_cast<double>(1e-5f));
  // The CPU's float LayerNormalization is oneDNN's: a few ulps apart.
  EXPECT_LE(worstError(mine.data(), y.data<float>(), rows * cols), 5e-7) << "LayerNormalization";
  // dX.
  cpu::OpDesc g = makeDesc("LayerNormalizationGrad", {dy.desc(), x.desc(), scale.desc()},
                           {x.desc()}, {}, 17, "pipec");
  g.attrs["axis"] = Attribute::ofInt(2);
  g.attrs["epsilon"] = Attribute::ofFloat(1e-5f);
  Tensor dx = evalOne(g, {dy, x, scale});
  for (int64_t r = 0; r < rows; ++r)
    body::layerNormGradRow(dy.data<float>() + r * cols, x.data<float>() + r * cols, scale.data<float>(),
                           mine.data() + r * cols, cols, static_cast<double>(1e-5f));
  EXPECT_LE(worstError(mine.data(), dx.data<float>(), rows * cols), 2e-7) << "LayerNormalizationGrad";
  // dScale.
  Tensor ds = cpuLayerNormScaleGrad(dy, x, 2, cols);
  const std::vector<body::RowStats> stats = rowStatsOf(x, rows, cols);
  std::vector<float> dsMine(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c)
    dsMine[c] = body::layerNormScaleGradColumn(dy.data<float>(), x.data<float>(), stats.data(), rows, cols, c);
  EXPECT_LE(worstError(dsMine.data(), ds.data<float>(), cols), 2e-7) << "LayerNormalizationScaleGrad";
  // SoftmaxGrad along a middle axis.
  Tensor sy = randomF32({4, 9, 5}, 54, 0.f, 1.f), sdy = randomF32({4, 9, 5}, 55, -4.f, 4.f);
  cpu::OpDesc sm = makeDesc("SoftmaxGrad", {sdy.desc(), sy.desc()}, {sy.desc()}, {}, 17, "pipec");
  sm.attrs["axis"] = Attribute::ofInt(1);
  Tensor sdx = evalOne(sm, {sdy, sy});
  std::vector<float> smMine(static_cast<size_t>(sy.numel()));
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t k = 0; k < 5; ++k)
      body::softmaxGradRow(sdy.data<float>() + o * 45 + k, sy.data<float>() + o * 45 + k,
                           smMine.data() + o * 45 + k, 9, 5);
  // The same float sum in the same order; multiply-adds contracted in the
  // compiler's own ways: an ulp or two.
  EXPECT_LE(worstError(smMine.data(), sdx.data<float>(), sy.numel()), 5e-7) << "SoftmaxGrad";
}

// ---- The CNN ops' bodies (runtime/cuda/DnnBodies.h) and cuDNN's pads.

namespace {

namespace dnn = pipec::cuda::dnn;

/// Bitwise equal, NaNs of any payload alike.
bool sameBits(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(a + i, b + i, sizeof(float)) != 0)
      return false;
  return true;
}

/// A pool node's windows (what runtime/cuda/kernels/Pool.cpp resolves)
/// and its output shape.
dnn::PoolGeom poolWindows(const cpu::OpDesc &d, const Shape &x, Shape &y) {
  std::vector<cpu::LinalgWindowDim> dims;
  const Status s = cpu::linalgResolveWindow(d, Shape(x.begin() + 2, x.end()), {}, attrInt(d.attrs, "ceil_mode", 0) != 0,
                                            nullptr, dims);
  EXPECT_TRUE(s.isOk()) << s.message();
  dnn::PoolGeom g;
  g.nd = static_cast<int>(dims.size());
  g.planes = x[0] * x[1];
  y = {x[0], x[1]};
  for (size_t i = 0; i < dims.size(); ++i) {
    g.in[i] = dims[i].in;
    g.out[i] = dims[i].out;
    g.kernel[i] = dims[i].kernel;
    g.stride[i] = dims[i].stride;
    g.dilation[i] = dims[i].dilation;
    g.padBegin[i] = dims[i].padBegin;
    g.padEnd[i] = dims[i].padEnd;
    g.inSp *= dims[i].in;
    g.outSp *= dims[i].out;
    y.push_back(dims[i].out);
  }
  return g;
}

struct PoolCase {
  const char *op;
  Shape x;
  AttrMap attrs;
  int64_t opset = 12;
};

std::vector<PoolCase> poolCases() {
  auto ints = [](std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); };
  auto one = [](int64_t v) { return Attribute::ofInt(v); };
  return {
      {"MaxPool",
       {2, 3, 9, 10},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 0, 1, 2})},
        {"ceil_mode", one(1)}}},
      {"MaxPool",
       {2, 3, 9, 10},
       {{"kernel_shape", ints({2, 3})},
        {"strides", ints({1, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"dilations", ints({2, 1})}}},
      {"MaxPool", {2, 3, 17}, {{"kernel_shape", ints({4})}, {"strides", ints({3})}, {"pads", ints({2, 1})}}},
      {"MaxPool",
       {1, 2, 5, 6, 7},
       {{"kernel_shape", ints({2, 3, 2})},
        {"strides", ints({2, 2, 1})},
        {"pads", ints({0, 1, 1, 1, 1, 0})},
        {"ceil_mode", one(1)}}},
      {"MaxPool",
       {2, 2, 8, 8},
       {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"auto_pad", Attribute::ofString("SAME_UPPER")}}},
      {"AveragePool",
       {2, 3, 8, 9},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"ceil_mode", one(1)},
        {"count_include_pad", one(1)}}},
      {"AveragePool",
       {2, 3, 8, 9},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"ceil_mode", one(1)}}},
      {"AveragePool",
       {1, 2, 5, 6, 7},
       {{"kernel_shape", ints({3, 2, 3})},
        {"strides", ints({2, 1, 2})},
        {"pads", ints({1, 0, 1, 1, 1, 0})},
        {"count_include_pad", one(1)}}},
      {"AveragePool", {2, 2, 11}, {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({0, 2})}}},
      {"AveragePool",
       {2, 3, 9, 9},
       {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}, {"pads", ints({1, 0, 0, 1})}},
       19},
  };
}

/// Random inputs with a NaN and both zeros among them.
Tensor poolInput(const Shape &s, uint32_t seed) {
  Tensor x = randomF32(s, seed);
  x.data<float>()[5] = NAN;
  x.data<float>()[6] = -0.0f;
  x.data<float>()[7] = 0.0f;
  x.data<float>()[x.numel() - 1] = 0.0f;
  x.data<float>()[x.numel() - 2] = -0.0f;
  return x;
}

} // namespace

TEST(CudaBodies, PoolsAreTheCpuLoopsBitwise) {
  useDnnl(false); // the CPU's loops: the f32 oneDNN paths round and pick their own way
  uint32_t seed = 900;
  for (const PoolCase &c : poolCases()) {
    Shape ys;
    const dnn::PoolGeom g = poolWindows(makeDesc(c.op, {}, {}, c.attrs, c.opset), c.x, ys);
    Tensor x = poolInput(c.x, ++seed);
    const bool isMax = std::string(c.op) == "MaxPool";
    const dnn::PoolKind kind = isMax                                      ? dnn::PoolKind::Max
                               : attrInt(c.attrs, "count_include_pad", 0) ? dnn::PoolKind::AvgIncludePad
                                                                          : dnn::PoolKind::AvgExcludePad;
    for (int indices = 0; indices < (isMax ? 3 : 1); ++indices) {
      // indices: 0 none, 1 row-major, 2 column-major (storage_order 1).
      cpu::OpDesc d = makeDesc(c.op, {x.desc()}, {{DType::F32, ys}}, c.attrs, c.opset);
      if (indices) {
        d.outputs.push_back({DType::I64, ys});
        d.attrs["storage_order"] = Attribute::ofInt(indices - 1);
      }
      std::vector<Tensor> ref = eval(d, {x});
      ASSERT_EQ(ref.size(), d.outputs.size());
      std::vector<float> y(static_cast<size_t>(ref[0].numel()));
      std::vector<int64_t> ind(y.size());
      const bool firstTakes = indices || g.nd >= 3;
      for (int64_t i = 0; i < ref[0].numel(); ++i)
        y[i] = dnn::poolOutput(g, kind, firstTakes, indices == 2, x.data<float>(), i, indices ? &ind[i] : nullptr);
      const std::string what = cat(c.op, " ", shapeStr(c.x), " indices ", indices);
      EXPECT_TRUE(sameBits(y.data(), ref[0].data<float>(), ref[0].numel())) << what;
      if (indices) {
        EXPECT_EQ(0, std::memcmp(ind.data(), ref[1].raw(), ref[1].bytes())) << what;
      }
    }
    // The gradient of the same windows, from its own loop (GradPool.cpp).
    Tensor dy = randomF32(ys, ++seed);
    cpu::OpDesc gd = isMax ? makeDesc("MaxPoolGrad", {dy.desc(), x.desc()}, {x.desc()}, c.attrs, 17, "pipec")
                           : makeDesc("AveragePoolGrad", {dy.desc()}, {x.desc()}, c.attrs, 17, "pipec");
    if (!isMax)
      gd.attrs["shape"] = Attribute::ofInts(c.x);
    Tensor ref = isMax ? evalOne(gd, {dy, x}) : evalOne(gd, {dy});
    std::vector<int32_t> argmax(static_cast<size_t>(dy.numel()));
    if (isMax)
      for (int64_t i = 0; i < dy.numel(); ++i)
        argmax[i] = static_cast<int32_t>(dnn::poolArgmax(g, x.data<float>(), i));
    std::vector<float> dx(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i)
      dx[i] = dnn::poolGradInput(g, kind, dy.data<float>(), isMax ? argmax.data() : nullptr, i);
    EXPECT_TRUE(sameBits(dx.data(), ref.data<float>(), x.numel())) << gd.opType << " " << shapeStr(c.x);
  }
  // The global pools, over planes shorter and longer than the 16 lanes.
  for (const Shape &s : {Shape{2, 3, 5, 7}, Shape{3, 4, 300}, Shape{2, 2, 1}}) {
    Tensor x = poolInput(s, ++seed);
    Shape ys = {s[0], s[1]};
    ys.resize(s.size(), 1);
    const int64_t planes = s[0] * s[1], n = x.numel() / planes;
    for (bool isMax : {false, true}) {
      Tensor ref =
          evalOne(makeDesc(isMax ? "GlobalMaxPool" : "GlobalAveragePool", {x.desc()}, {{DType::F32, ys}}), {x});
      std::vector<float> y(static_cast<size_t>(planes));
      for (int64_t p = 0; p < planes; ++p)
        y[p] = isMax ? dnn::globalMax(x.data<float>() + p * n, n) : dnn::globalAverage(x.data<float>() + p * n, n);
      EXPECT_TRUE(sameBits(y.data(), ref.data<float>(), planes))
          << (isMax ? "GlobalMaxPool " : "GlobalAveragePool ") << shapeStr(s);
    }
  }
  useDnnl(true);
}

namespace {

/// A normalization pass on the host as runtime/cuda/DnnKernels.cu runs it:
/// every channel's block sums thread by thread, then its thread 0.
void hostNormChannels(const dnn::NormArgs &a) {
  for (int64_t c = 0; c < a.C; ++c) {
    double s[2] = {0.0, 0.0}, shift = 0.0;
    if (a.reduces()) {
      switch (a.pass) {
      case dnn::NormPass::Forward:
      case dnn::NormPass::Stats:
        shift = dnn::momentShift(a, c);
        dnn::hostChannelSums<2>(
            a.N, a.C, a.inner, c, dnn::kLanes, [&](int64_t off, double(&v)[2]) { dnn::momentTerms(a, shift, off, v); },
            s);
        break;
      case dnn::NormPass::Grad:
      case dnn::NormPass::ScaleGrad: {
        const double m = a.mu[c], r = a.rstd[c];
        dnn::hostChannelSums<2>(
            a.N, a.C, a.inner, c, dnn::kLanes, [&](int64_t off, double(&v)[2]) { dnn::gradTerms(a, m, r, off, v); }, s);
        break;
      }
      case dnn::NormPass::Instance: {
        double s1[2];
        dnn::hostChannelSums<2>(
            a.N, a.C, a.inner, c, dnn::kLanes,
            [&](int64_t off, double(&v)[2]) {
              v[0] = a.x[off];
              v[1] = 0.0;
            },
            s1);
        const double m = s1[0] / static_cast<double>(a.count());
        dnn::hostChannelSums<2>(
            a.N, a.C, a.inner, c, dnn::kLanes,
            [&](int64_t off, double(&v)[2]) {
              const double d = a.x[off] - m;
              v[0] = 0.0;
              v[1] = d * d;
            },
            s);
        s[0] = s1[0];
        break;
      }
      }
    }
    dnn::normChannel(a, c, s, shift);
  }
}

} // namespace

TEST(CudaBodies, NormalizationsMatchTheCpuKernels) {
  // BatchNormalization: training by attribute (opset 15, running
  // statistics), the five outputs of opset 9, inference, opset 7's
  // spatial = 0; X far from zero, where the statistics' shift matters.
  struct BnCase {
    Shape x;
    int64_t opset;
    int outputs;
    int training; ///< training_mode, -1: none
    bool spatial = true;
  };
  const BnCase cases[] = {{{4, 3, 5, 6}, 15, 3, 1},
                          {{2, 4, 3, 3}, 9, 5, -1},
                          {{3, 5, 4}, 15, 1, 0},
                          {{2, 3, 5, 6}, 7, 1, -1, false},
                          {{6, 7}, 15, 3, 1}};
  uint32_t seed = 950;
  for (const BnCase &bc : cases) {
    Tensor x = randomF32(bc.x, ++seed, 99.f, 101.f);
    const Shape cs = bc.spatial ? Shape{bc.x[1]} : Shape(bc.x.begin() + 1, bc.x.end());
    Tensor scale = randomF32(cs, ++seed, 0.5f, 1.5f), bias = randomF32(cs, ++seed),
           mean = randomF32(cs, ++seed, 99.f, 101.f), var = randomF32(cs, ++seed, 0.5f, 2.f);
    std::vector<TensorDesc> outs = {x.desc()};
    for (int o = 1; o < bc.outputs; ++o)
      outs.push_back(scale.desc());
    cpu::OpDesc d =
        makeDesc("BatchNormalization", {x.desc(), scale.desc(), bias.desc(), mean.desc(), var.desc()}, outs,
                 {{"momentum", Attribute::ofFloat(0.8f)}, {"epsilon", Attribute::ofFloat(1e-3f)}}, bc.opset);
    if (bc.training >= 0)
      d.attrs["training_mode"] = Attribute::ofInt(bc.training);
    if (!bc.spatial)
      d.attrs["spatial"] = Attribute::ofInt(0);
    std::vector<Tensor> ref = eval(d, {x, scale, bias, mean, var});
    ASSERT_EQ(ref.size(), outs.size());
    dnn::NormArgs a;
    a.pass = dnn::NormPass::Forward;
    a.N = bc.x[0];
    a.C = scale.numel();
    a.inner = x.numel() / (a.N * a.C);
    a.epsilon = 1e-3f;
    a.momentum = 0.8f;
    a.training = bc.training == 1 || bc.outputs == 5;
    a.x = x.data<float>();
    a.scale = scale.data<float>();
    a.bias = bias.data<float>();
    a.mean = mean.data<float>();
    a.var = var.data<float>();
    std::vector<float> ta(static_cast<size_t>(a.C)), tb(ta), y(static_cast<size_t>(x.numel()));
    std::vector<std::vector<float>> stats(4, std::vector<float>(static_cast<size_t>(a.C)));
    a.ta = ta.data();
    a.tb = tb.data();
    if (bc.outputs >= 3) {
      a.runMean = stats[0].data();
      a.runVar = stats[1].data();
    }
    if (bc.outputs == 5) {
      a.savedMean = stats[2].data();
      a.savedVar = stats[3].data();
    }
    hostNormChannels(a);
    for (int64_t e = 0; e < x.numel(); ++e)
      y[e] = dnn::normApply(a.x, a.ta, a.tb, a.C, a.inner, e);
    const std::string what = cat("BatchNormalization-", bc.opset, " ", shapeStr(bc.x));
    EXPECT_LE(worstError(y.data(), ref[0].data<float>(), x.numel()), 1e-6) << what;
    for (int o = 1; o < bc.outputs; ++o)
      EXPECT_LE(worstError(stats[o - 1].data(), ref[o].data<float>(), a.C), 1e-6) << what << " output " << o;
  }
  // The three gradients, with and without batch statistics.
  Tensor x = randomF32({4, 3, 5, 7}, ++seed, -2.f, 6.f), dy = randomF32({4, 3, 5, 7}, ++seed);
  Tensor scale = randomF32({3}, ++seed, 0.5f, 1.5f), mean = randomF32({3}, ++seed),
         var = randomF32({3}, ++seed, 0.5f, 2.f);
  const int64_t N = 4, C = 3, inner = 35;
  for (bool training : {true, false}) {
    cpu::ExecContext ctx;
    ctx.training = training;
    cpu::OpDesc st = makeDesc("BatchNormalizationStats", {x.desc(), mean.desc(), var.desc()},
                              {scale.desc(), scale.desc()}, {}, 17, "pipec");
    std::vector<Tensor> muRstd = eval(st, {x, mean, var}, ctx);
    ASSERT_EQ(muRstd.size(), 2u);
    dnn::NormArgs a;
    a.N = N;
    a.C = C;
    a.inner = inner;
    a.training = training;
    a.x = x.data<float>();
    a.dy = dy.data<float>();
    a.scale = scale.data<float>();
    a.mean = mean.data<float>();
    a.var = var.data<float>();
    std::vector<float> mu(3), rstd(3);
    a.pass = dnn::NormPass::Stats;
    a.muOut = mu.data();
    a.rstdOut = rstd.data();
    hostNormChannels(a);
    EXPECT_LE(worstError(mu.data(), muRstd[0].data<float>(), C), 1e-6) << "Stats mu, training " << training;
    EXPECT_LE(worstError(rstd.data(), muRstd[1].data<float>(), C), 1e-6) << "Stats rstd, training " << training;
    // The gradients from the CPU's statistics, as a plan hands them over.
    a.mu = muRstd[0].data<float>();
    a.rstd = muRstd[1].data<float>();
    cpu::OpDesc gd = makeDesc("BatchNormalizationGrad", {dy.desc(), x.desc(), scale.desc(), scale.desc(), scale.desc()},
                              {x.desc(), {DType::F32, {2, C}}}, {}, 17, "pipec");
    std::vector<Tensor> ref = eval(gd, {dy, x, scale, muRstd[0], muRstd[1]}, ctx);
    ASSERT_EQ(ref.size(), 2u);
    std::vector<double> coef(5 * C);
    std::vector<float> sums(2 * C), dx(static_cast<size_t>(x.numel()));
    a.pass = dnn::NormPass::Grad;
    a.coef = coef.data();
    a.sums = sums.data();
    hostNormChannels(a);
    for (int64_t e = 0; e < x.numel(); ++e)
      dx[e] = dnn::bnGradApply(a.dy, a.x, a.coef, C, inner, training, e);
    EXPECT_LE(worstError(dx.data(), ref[0].data<float>(), x.numel()), 1e-6) << "Grad dX, training " << training;
    EXPECT_LE(worstError(sums.data(), ref[1].data<float>(), 2 * C), 1e-6) << "Grad sums, training " << training;
    cpu::OpDesc sg = makeDesc("BatchNormalizationScaleGrad", {dy.desc(), x.desc(), scale.desc(), scale.desc()},
                              {scale.desc(), scale.desc()}, {}, 17, "pipec");
    std::vector<Tensor> sref = eval(sg, {dy, x, muRstd[0], muRstd[1]}, ctx);
    ASSERT_EQ(sref.size(), 2u);
    std::vector<float> dScale(3), dBias(3);
    a.pass = dnn::NormPass::ScaleGrad;
    a.dScale = dScale.data();
    a.dBias = dBias.data();
    hostNormChannels(a);
    EXPECT_LE(worstError(dScale.data(), sref[0].data<float>(), C), 1e-6) << "ScaleGrad dScale";
    EXPECT_LE(worstError(dBias.data(), sref[1].data<float>(), C), 1e-6) << "ScaleGrad dBias";
  }
  // InstanceNormalization.
  {
    Tensor xi = randomF32({2, 3, 7, 9}, ++seed, 49.f, 51.f), s = randomF32({3}, ++seed, 0.5f, 1.5f),
           b = randomF32({3}, ++seed);
    cpu::OpDesc d = makeDesc("InstanceNormalization", {xi.desc(), s.desc(), b.desc()}, {xi.desc()},
                             {{"epsilon", Attribute::ofFloat(1e-4f)}});
    Tensor ref = evalOne(d, {xi, s, b});
    dnn::NormArgs a;
    a.pass = dnn::NormPass::Instance;
    a.N = 1;
    a.C = 6;
    a.inner = 63;
    a.scaleC = 3;
    a.epsilon = 1e-4f;
    a.x = xi.data<float>();
    a.scale = s.data<float>();
    a.bias = b.data<float>();
    std::vector<float> ta(6), tb(6), y(static_cast<size_t>(xi.numel()));
    a.ta = ta.data();
    a.tb = tb.data();
    hostNormChannels(a);
    for (int64_t e = 0; e < xi.numel(); ++e)
      y[e] = dnn::normApply(a.x, a.ta, a.tb, 6, 63, e);
    EXPECT_LE(worstError(y.data(), ref.data<float>(), xi.numel()), 1e-6) << "InstanceNormalization";
  }
  // LRN, odd and even windows, against the CPU's loop.
  useDnnl(false);
  for (int64_t size : {3, 4, 1}) {
    Tensor xl = randomF32({2, 7, 3, 4}, ++seed);
    cpu::OpDesc d = makeDesc("LRN", {xl.desc()}, {xl.desc()},
                             {{"size", Attribute::ofInt(size)},
                              {"alpha", Attribute::ofFloat(0.02f)},
                              {"beta", Attribute::ofFloat(0.7f)},
                              {"bias", Attribute::ofFloat(1.5f)}},
                             13);
    Tensor ref = evalOne(d, {xl});
    dnn::LrnArgs a;
    a.N = 2;
    a.C = 7;
    a.spatial = 12;
    a.size = size;
    a.scale = static_cast<float>(static_cast<double>(0.02f) / static_cast<double>(size));
    a.bias = 1.5f;
    a.negBeta = static_cast<float>(-static_cast<double>(0.7f));
    std::vector<float> y(static_cast<size_t>(xl.numel()));
    for (int64_t e = 0; e < xl.numel(); ++e)
      y[e] = dnn::lrnOutput(a, xl.data<float>(), e);
    // The same float sums; the host compiler may contract x * x + sum in
    // one place and not the other.
    EXPECT_LE(worstError(y.data(), ref.data<float>(), xl.numel()), 2e-7) << "LRN size " << size;
  }
  useDnnl(true);
}

namespace {

/// `t` [N, C, spatial...] padded by the plans' begin and end zeros (a
/// negative count crops), as launchPad copies it for the CUDA
/// convolutions; `negate`: the opposite (the crop back).
Tensor padPlanned(const Tensor &t, const std::vector<dnn::DimPlan> &plans, bool negate) {
  const Shape &in = t.shape();
  Shape out = in;
  std::vector<int64_t> b(in.size(), 0), e(in.size(), 0);
  for (size_t i = 0; i < plans.size(); ++i) {
    b[i + 2] = negate ? -plans[i].begin : plans[i].begin;
    e[i + 2] = negate ? -plans[i].end : plans[i].end;
    out[i + 2] = in[i + 2] + b[i + 2] + e[i + 2];
  }
  Tensor r(DType::F32, out);
  const std::vector<int64_t> inStrides = rowMajorStrides(in);
  for (int64_t o = 0; o < r.numel(); ++o) {
    int64_t rem = o, off = 0;
    bool fill = false;
    for (size_t a = out.size(); a-- > 0;) {
      const int64_t s = cpu::dm::padSource(rem % out[a], in[a], b[a], e[a], cpu::dm::PadMode::Constant);
      rem /= out[a];
      fill |= s < 0;
      off += s * inStrides[a];
    }
    r.data<float>()[o] = fill ? 0.0f : t.data<float>()[off];
  }
  return r;
}

} // namespace

// The CUDA convolutions run cuDNN with symmetric pads: Conv and
// ConvGradWeight on X padded by the pads' difference, ConvGradInput and
// ConvTranspose cropped after (DnnBodies.h: convPlan, deconvPlan), or on
// the tensors as they are where the node's windows are cuDNN's. Checked
// here with the CPU kernels in both roles: the node as it is against the
// symmetric convolution and the copies.
TEST(CudaBodies, CudnnSymmetricPadsComputeTheNodesConvolutions) {
  useDnnl(false);
  struct ConvCase {
    Shape x, w;
    AttrMap attrs;
  };
  auto ints = [](std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); };
  const ConvCase cases[] = {
      {{2, 4, 9, 8}, {6, 4, 3, 3}, {{"pads", ints({1, 0, 2, 1})}, {"strides", ints({2, 1})}}},
      {{2, 4, 8, 8},
       {4, 2, 3, 3},
       {{"auto_pad", Attribute::ofString("SAME_UPPER")}, {"strides", ints({2, 2})}, {"group", Attribute::ofInt(2)}}},
      {{1, 3, 9, 7},
       {3, 1, 3, 2},
       {{"auto_pad", Attribute::ofString("SAME_LOWER")}, {"dilations", ints({2, 1})}, {"group", Attribute::ofInt(3)}}},
      {{2, 3, 8, 8}, {5, 3, 3, 3}, {{"pads", ints({2, 2, 1, 1})}, {"strides", ints({2, 2})}}}, // cuDNN's windows
      {{2, 3, 11}, {4, 3, 4}, {{"pads", ints({0, 3})}, {"strides", ints({2})}}},
      {{1, 2, 5, 6, 5}, {3, 2, 2, 3, 2}, {{"pads", ints({1, 0, 1, 0, 1, 1})}, {"strides", ints({1, 2, 2})}}},
      {{2, 3, 6, 6}, {4, 3, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}},
  };
  int copies = 0, direct = 0;
  uint32_t seed = 990;
  for (const ConvCase &c : cases) {
    Tensor x = randomF32(c.x, ++seed), w = randomF32(c.w, ++seed);
    cpu::OpDesc probe = makeDesc("Conv", {x.desc(), w.desc()}, {}, c.attrs, 11);
    std::vector<cpu::LinalgWindowDim> dims;
    ASSERT_TRUE(cpu::linalgResolveWindow(probe, Shape(c.x.begin() + 2, c.x.end()),
                                         std::vector<int64_t>(c.w.begin() + 2, c.w.end()), false, nullptr, dims)
                    .isOk());
    Shape ys = {c.x[0], c.w[0]};
    std::vector<dnn::DimPlan> plans;
    bool copy = false;
    std::vector<int64_t> sym;
    for (const cpu::LinalgWindowDim &d : dims) {
      ys.push_back(d.out);
      plans.push_back(dnn::convPlan({d.in, d.out, d.kernel, d.stride, d.dilation, d.padBegin, d.padEnd}));
      copy |= plans.back().copy();
      sym.push_back(plans.back().pad);
    }
    (copy ? copies : direct) += 1;
    std::vector<int64_t> symPads = sym;
    symPads.insert(symPads.end(), sym.begin(), sym.end());
    AttrMap symAttrs = c.attrs;
    symAttrs.erase("auto_pad");
    symAttrs["pads"] = Attribute::ofInts(symPads);
    const std::string what = cat(shapeStr(c.x), " * ", shapeStr(c.w), copy ? " (copied)" : " (as it is)");
    // Conv.
    Tensor xs = copy ? padPlanned(x, plans, false) : x;
    Tensor ref = evalOne(makeDesc("Conv", {x.desc(), w.desc()}, {{DType::F32, ys}}, c.attrs, 11), {x, w});
    Tensor got = evalOne(makeDesc("Conv", {xs.desc(), w.desc()}, {{DType::F32, ys}}, symAttrs, 11), {xs, w});
    EXPECT_LE(worstError(got.data<float>(), ref.data<float>(), ref.numel()), 1e-6) << "Conv " << what;
    // ConvGradWeight: dY with X, padded the same way.
    Tensor dy = randomF32(ys, ++seed);
    AttrMap gw = c.attrs, gwSym = symAttrs;
    gw["shape"] = gwSym["shape"] = Attribute::ofInts(c.w);
    ref = evalOne(makeDesc("ConvGradWeight", {dy.desc(), x.desc()}, {w.desc()}, gw, 17, "pipec"), {dy, x});
    got = evalOne(makeDesc("ConvGradWeight", {dy.desc(), xs.desc()}, {w.desc()}, gwSym, 17, "pipec"), {dy, xs});
    EXPECT_LE(worstError(got.data<float>(), ref.data<float>(), ref.numel()), 1e-6) << "ConvGradWeight " << what;
    // ConvGradInput: dX of the padded X, cropped back.
    AttrMap gi = c.attrs, giSym = symAttrs;
    gi["shape"] = Attribute::ofInts(c.x);
    giSym["shape"] = Attribute::ofInts(xs.shape());
    ref = evalOne(makeDesc("ConvGradInput", {dy.desc(), w.desc()}, {x.desc()}, gi, 17, "pipec"), {dy, w});
    got = evalOne(makeDesc("ConvGradInput", {dy.desc(), w.desc()}, {xs.desc()}, giSym, 17, "pipec"), {dy, w});
    if (copy)
      got = padPlanned(got, plans, true);
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_LE(worstError(got.data<float>(), ref.data<float>(), ref.numel()), 1e-6) << "ConvGradInput " << what;
  }
  EXPECT_GT(copies, 0);
  EXPECT_GT(direct, 0);

  // ConvTranspose: X [N, C, in...], W [C, M / G, k...], explicit pads
  // (negative too) and output_padding.
  struct DeconvCase {
    Shape x, w;
    std::vector<int64_t> strides, dilations, pads, outPad;
    int64_t group = 1;
  };
  const DeconvCase dcases[] = {
      {{2, 4, 5, 4}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, {1, 1}},     // output_padding: as it is
      {{2, 4, 5, 4}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 0, 0, 0}, {0, 0}},     // the end pad is never cuDNN's
      {{2, 4, 5, 4}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {0, 1, 1, 0}, {0, 1}},     // cropped
      {{1, 4, 5, 6}, {4, 2, 3, 2}, {1, 2}, {2, 1}, {2, 0, -1, 1}, {0, 1}, 2}, // negative pad: zeros
      {{2, 3, 7}, {3, 2, 4}, {3}, {1}, {2, 1}, {2}},
      {{1, 2, 3, 4, 3}, {2, 2, 2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {0, 1, 1, 1, 0, 0}, {1, 0, 0}},
  };
  copies = direct = 0;
  for (const DeconvCase &c : dcases) {
    Tensor x = randomF32(c.x, ++seed), w = randomF32(c.w, ++seed);
    const size_t nd = c.x.size() - 2;
    Shape ys = {c.x[0], c.w[1] * c.group};
    std::vector<dnn::DimPlan> plans;
    bool copy = false;
    std::vector<int64_t> symPads(2 * nd), symOutPad(nd);
    for (size_t i = 0; i < nd; ++i) {
      const dnn::ConvDim d{c.x[i + 2], 0, c.w[i + 2], c.strides[i], c.dilations[i], c.pads[i], c.pads[i + nd]};
      dnn::ConvDim full = d;
      full.out = d.stride * (d.in - 1) + c.outPad[i] + d.extent() - d.padBegin - d.padEnd;
      ys.push_back(full.out);
      plans.push_back(dnn::deconvPlan(full));
      copy |= plans.back().copy();
      symPads[i] = symPads[i + nd] = plans.back().pad;
      // The output_padding that makes the symmetric transposed convolution
      // as wide as cuDNN's Y (the node's, or the full one to crop).
      symOutPad[i] = plans.back().size + 2 * plans.back().pad - d.extent() - d.stride * (d.in - 1);
    }
    (copy ? copies : direct) += 1;
    AttrMap attrs = {{"strides", Attribute::ofInts(c.strides)},
                     {"dilations", Attribute::ofInts(c.dilations)},
                     {"pads", Attribute::ofInts(c.pads)},
                     {"output_padding", Attribute::ofInts(c.outPad)},
                     {"group", Attribute::ofInt(c.group)}};
    Tensor ref = evalOne(makeDesc("ConvTranspose", {x.desc(), w.desc()}, {{DType::F32, ys}}, attrs, 11), {x, w});
    AttrMap sym = attrs;
    sym["pads"] = Attribute::ofInts(symPads);
    sym["output_padding"] = Attribute::ofInts(symOutPad);
    Shape fs = {ys[0], ys[1]};
    for (const dnn::DimPlan &p : plans)
      fs.push_back(p.size);
    Tensor got = evalOne(makeDesc("ConvTranspose", {x.desc(), w.desc()}, {{DType::F32, fs}}, sym, 11), {x, w});
    if (copy)
      got = padPlanned(got, plans, false);
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_LE(worstError(got.data<float>(), ref.data<float>(), ref.numel()), 1e-6)
        << "ConvTranspose " << shapeStr(c.x) << (copy ? " (cropped)" : " (as it is)");
  }
  EXPECT_GT(copies, 0);
  EXPECT_GT(direct, 0);
  useDnnl(true);
}

// The GPU's weight roundings (runtime/cuda/Roundings.h), with host memory
// and a host rounding for the device's: one rounding per weight, type and
// step; a failed recording's roundings made again, a recorded one's kept;
// failures of the memory or the launch give null, not a stale rounding.
TEST(CudaBodies, WeightRoundingsAreMadeOncePerStep) {
  std::vector<std::unique_ptr<uint16_t[]>> memory;
  bool allocFails = false, roundFails = false;
  cuda::Roundings r(
      [&](uint64_t bytes) -> void * {
        if (allocFails)
          return nullptr;
        memory.emplace_back(new uint16_t[bytes / sizeof(uint16_t) + 1]);
        return memory.back().get();
      },
      [&](const float *src, void *dst, int64_t n, DType t) {
        if (roundFails)
          return false;
        auto *d = static_cast<uint16_t *>(dst);
        for (int64_t i = 0; i < n; ++i)
          d[i] = t == DType::BF16 ? floatToBf16(src[i]) : floatToHalf(src[i]);
        return true;
      });
  std::vector<float> w = {1.0f, 1.00390625f, -3.14159f, 65504.0f, 1e-8f};
  const int64_t n = static_cast<int64_t>(w.size());
  auto expectRounded = [&](const uint16_t *got, DType t) {
    ASSERT_NE(got, nullptr);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(got[i], t == DType::BF16 ? floatToBf16(w[i]) : floatToHalf(w[i])) << i;
  };
  // Step 1: made at the first read, served after.
  const uint16_t *a = r.get(w.data(), n, DType::BF16, 1);
  expectRounded(a, DType::BF16);
  EXPECT_EQ(r.get(w.data(), n, DType::BF16, 1), a);
  EXPECT_EQ(r.launches(), 1u);
  // The other type is a rounding of its own.
  expectRounded(r.get(w.data(), n, DType::F16, 1), DType::F16);
  EXPECT_EQ(r.launches(), 2u);
  EXPECT_EQ(r.bytes(), 2 * n * sizeof(uint16_t));
  // Step 2: the weight changed (its update); made again, in place.
  w[0] = 2.5f;
  EXPECT_EQ(r.get(w.data(), n, DType::BF16, 2), a);
  expectRounded(a, DType::BF16);
  EXPECT_EQ(r.launches(), 3u);
  // A recording that fails ran nothing: its rounding is made again.
  r.beginCapture();
  EXPECT_NE(r.get(w.data(), n, DType::BF16, 3), nullptr);
  r.endCapture(false);
  EXPECT_NE(r.get(w.data(), n, DType::BF16, 3), nullptr);
  EXPECT_EQ(r.launches(), 5u);
  // A recorded one holds the launch: the step's later reads use it.
  r.beginCapture();
  EXPECT_NE(r.get(w.data(), n, DType::BF16, 4), nullptr);
  r.endCapture(true);
  EXPECT_NE(r.get(w.data(), n, DType::BF16, 4), nullptr);
  EXPECT_EQ(r.launches(), 6u);
  // A launch that fails gives null, and the next read tries again.
  roundFails = true;
  EXPECT_EQ(r.get(w.data(), n, DType::BF16, 5), nullptr);
  roundFails = false;
  w[1] = -7.0f;
  expectRounded(r.get(w.data(), n, DType::BF16, 5), DType::BF16);
  // Memory that cannot be had gives null.
  allocFails = true;
  std::vector<float> other(8, 1.0f);
  EXPECT_EQ(r.get(other.data(), 8, DType::BF16, 5), nullptr);
}

// Long sums in chunks (body::reduceChunks): ReduceSum's and LayerNormalization
// scale gradient's chunks computed as the GPU's threads compute them (one
// per (chunk, output)), then added in chunk order. On small integers every
// float sum is exact, so the chunked sums must be the exact ones: each
// element counted once, in its output. On random floats, the CPU's within
// the tolerance of the unchunked bodies.
TEST(CudaBodies, LongSumsInChunksAreTheWholeSums) {
  // Adjacent axes of one kind merge: [8, 16, 256] over {0, 1} is [128, 256]
  // over {0}; {0, 2} of [40, 9, 30] stays two reduced axes.
  {
    const int64_t dims[3] = {8, 16, 256};
    const bool red[3] = {true, true, false};
    const body::Reduction r = body::reductionOf(dims, 3, red);
    EXPECT_EQ(r.reducedRank, 1);
    EXPECT_EQ(r.reducedDims[0], 128);
    EXPECT_EQ(r.reducedStrides[0], 256);
    EXPECT_EQ(r.keptRank, 1);
    EXPECT_EQ(r.reducedCount, 128);
    const int64_t dims2[3] = {40, 9, 30};
    const bool red2[3] = {true, false, true};
    EXPECT_EQ(body::reductionOf(dims2, 3, red2).reducedRank, 2);
  }
  EXPECT_EQ(body::reduceChunks(2 * body::kReduceChunk), 1);
  EXPECT_EQ(body::reduceChunks(2 * body::kReduceChunk + 1), 3);
  struct Case {
    Shape shape;
    std::vector<bool> reduced;
  };
  const Case cases[] = {{{600, 33}, {true, false}},          // a bias gradient: 3 chunks, the last short
                        {{3, 700, 5}, {true, true, false}},   // merged to 2100 rows
                        {{40, 9, 30}, {true, false, true}},   // two reduced axes apart
                        {{7, 513}, {false, true}},            // rows: 3 chunks each
                        {{512, 4}, {true, false}}};           // 512 terms: summed whole
  for (const Case &c : cases) {
    const int rank = static_cast<int>(c.shape.size());
    bool red[body::kMaxRank] = {};
    Shape out;
    std::vector<int64_t> axes;
    for (int a = 0; a < rank; ++a) {
      red[a] = c.reduced[a];
      if (c.reduced[a])
        axes.push_back(a);
      else
        out.push_back(c.shape[a]);
    }
    const body::Reduction r = body::reductionOf(c.shape.data(), rank, red);
    int64_t outN = 1;
    for (int64_t v : out)
      outN *= v;
    const int64_t chunks = body::reduceChunks(r.reducedCount);
    EXPECT_EQ(body::reduceSumParts(outN, r), chunks > 1 ? chunks * outN : 0);
    auto chunked = [&](const float *x) {
      std::vector<float> parts(static_cast<size_t>(outN * chunks)), y(static_cast<size_t>(outN));
      if (chunks == 1) {
        for (int64_t o = 0; o < outN; ++o)
          y[o] = body::reduceSumElement(x, o, r);
        return y;
      }
      for (int64_t t = 0; t < outN * chunks; ++t)
        parts[t] = body::reduceSumChunk(x, t % outN, t / outN, r);
      for (int64_t o = 0; o < outN; ++o)
        y[o] = body::sumOfChunks(parts.data(), o, outN, chunks);
      return y;
    };
    // The exact sums, by the shapes' own index arithmetic.
    auto exact = [&](const float *x) {
      std::vector<double> y(static_cast<size_t>(outN), 0.0);
      int64_t n = 1;
      for (int64_t v : c.shape)
        n *= v;
      std::vector<int64_t> idx(static_cast<size_t>(rank));
      for (int64_t i = 0; i < n; ++i) {
        int64_t rest = i, o = 0;
        for (int a = rank - 1; a >= 0; --a) {
          idx[a] = rest % c.shape[a];
          rest /= c.shape[a];
        }
        for (int a = 0; a < rank; ++a)
          if (!c.reduced[a])
            o = o * c.shape[a] + idx[a];
        y[o] += x[i];
      }
      return y;
    };
    const std::string what = cat(shapeStr(c.shape), " over ", axes.size(), " axes");
    Tensor ints(DType::F32, c.shape);
    for (int64_t i = 0; i < ints.numel(); ++i)
      ints.data<float>()[i] = static_cast<float>((i * 7919) % 7 - 3);
    const std::vector<float> yi = chunked(ints.data<float>());
    const std::vector<double> ei = exact(ints.data<float>());
    for (int64_t o = 0; o < outN; ++o)
      ASSERT_EQ(static_cast<double>(yi[o]), ei[o]) << what << " output " << o;
    // Random floats against the CPU kernel.
    Tensor x = randomF32(c.shape, 71, -4.f, 4.f), ax(DType::I64, {static_cast<int64_t>(axes.size())});
    for (size_t i = 0; i < axes.size(); ++i)
      ax.data<int64_t>()[i] = axes[i];
    cpu::OpDesc d = makeDesc("ReduceSum", {x.desc(), ax.desc()}, {{DType::F32, out}});
    d.attrs["keepdims"] = Attribute::ofInt(0);
    d.constInputs = {Tensor(), ax};
    Tensor ref = evalOne(d, {x, ax});
    const std::vector<float> y = chunked(x.data<float>());
    const std::vector<double> e = exact(x.data<float>());
    for (int64_t o = 0; o < outN; ++o) // float sums of up to 2100 terms of up to 4
      EXPECT_NEAR(y[o], ref.data<float>()[o], 2e-6 * r.reducedCount * 4) << what << " output " << o;
    // No less accurate than summing whole (in index order).
    double chunkedErr = 0, wholeErr = 0;
    for (int64_t o = 0; o < outN; ++o) {
      chunkedErr += std::fabs(y[o] - e[o]);
      wholeErr += std::fabs(body::reduceSumElement(x.data<float>(), o, r) - e[o]);
    }
    EXPECT_LE(chunkedErr, wholeErr * 1.5 + 1e-6) << what;
  }
  // LayerNormalization's scale gradient over 1100 rows: 5 chunks.
  const int64_t rows = 1100, cols = 48;
  Tensor x = randomF32({rows, cols}, 72, -4.f, 4.f), dy = randomF32({rows, cols}, 73, -4.f, 4.f);
  Tensor ds = cpuLayerNormScaleGrad(dy, x, 1, cols);
  const std::vector<body::RowStats> stats = rowStatsOf(x, rows, cols);
  const int64_t chunks = body::reduceChunks(rows);
  ASSERT_EQ(chunks, 5);
  std::vector<double> parts(static_cast<size_t>(chunks * cols));
  for (int64_t t = 0; t < chunks * cols; ++t)
    parts[t] = body::layerNormScaleGradChunk(dy.data<float>(), x.data<float>(), stats.data(), rows, cols, t % cols,
                                             t / cols);
  std::vector<float> mine(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    mine[c] = static_cast<float>(body::sumOfChunks(parts.data(), c, cols, chunks));
    // Doubles: the same float as the whole column's sum, or one ulp apart.
    const float whole = body::layerNormScaleGradColumn(dy.data<float>(), x.data<float>(), stats.data(), rows, cols, c);
    EXPECT_LE(std::fabs(mine[c] - whole), std::fabs(whole) * 1.2e-7f) << "column " << c;
  }
  EXPECT_LE(worstError(mine.data(), ds.data<float>(), cols), 2e-7) << "LayerNormalizationScaleGrad in chunks";
}

// The loss's sums on one warp (rows::lossLaneSums, lossLaneWeight), run lane
// by lane and folded as the shuffles fold: the sums of every position, in
// double, as the one-thread sums in position order give them.
TEST(CudaBodies, LossSumsOnAWarpAreThePositionSums) {
  const int64_t p = 1000, C = 7;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.f, 9.f);
  std::vector<float> loss(p), weight(p), classWeights(C);
  std::vector<int64_t> target(p);
  for (int64_t i = 0; i < p; ++i) {
    loss[i] = u(rng);
    weight[i] = static_cast<float>(i % 3);
    target[i] = i % 11 == 0 ? -100 : i % C;
  }
  for (int64_t c = 0; c < C; ++c)
    classWeights[c] = u(rng);
  double s0 = 0, w0 = 0;
  for (int64_t i = 0; i < p; ++i) {
    s0 += loss[i];
    w0 += weight[i];
  }
  double s[32], w[32];
  for (int l = 0; l < 32; ++l)
    cuda::rows::lossLaneSums(loss.data(), weight.data(), p, l, 32, s[l], w[l]);
  EXPECT_NEAR(cuda::rows::foldSum(s, 32), s0, 1e-12 * s0);
  EXPECT_EQ(cuda::rows::foldSum(w, 32), w0); // integers: exact in any order
  for (int l = 0; l < 32; ++l)
    cuda::rows::lossLaneSums(loss.data(), nullptr, p, l, 32, s[l], w[l]);
  EXPECT_EQ(cuda::rows::foldSum(w, 32), static_cast<double>(p));
  // The targets' total weight: class weights, an ignored index.
  cuda::rows::LossGeometry g;
  g.n = p;
  g.c = C;
  g.d = 1;
  g.hasIgnore = true;
  g.ignoreIndex = -100;
  double total0 = 0;
  for (int64_t i = 0; i < p; ++i)
    if (target[i] != -100)
      total0 += classWeights[static_cast<size_t>(target[i])];
  double t[32];
  for (int l = 0; l < 32; ++l)
    t[l] = cuda::rows::lossLaneWeight(g, target.data(), classWeights.data(), l, 32);
  EXPECT_NEAR(cuda::rows::foldSum(t, 32), total0, 1e-12 * total0);
  for (int l = 0; l < 32; ++l)
    t[l] = cuda::rows::lossLaneWeight(g, target.data(), nullptr, l, 32);
  EXPECT_EQ(cuda::rows::foldSum(t, 32), static_cast<double>(p - (p + 10) / 11));
}

// SoftmaxGrad and LogSoftmaxGrad of contiguous rows on 16 lanes
// (rows::softmaxGradLaneSum, softmaxGradLaneWrite: attention's scores'
// gradient), run lane by lane: the CPU kernels' within the few ulps their
// sum's order moves.
TEST(CudaBodies, SoftmaxGradRowsOnLanesMatchTheCpuKernels) {
  const int64_t rows = 5, n = 1001;
  Tensor logits = randomF32({rows, n}, 81, -6.f, 6.f), dy = randomF32({rows, n}, 82, -4.f, 4.f);
  for (bool log : {false, true}) {
    // Y as the forward gives it: each row a (log-)softmax.
    Tensor y = evalOne(makeDesc(log ? "LogSoftmax" : "Softmax", {logits.desc()}, {logits.desc()}), {logits});
    cpu::OpDesc d = makeDesc(log ? "LogSoftmaxGrad" : "SoftmaxGrad", {dy.desc(), y.desc()}, {y.desc()}, {}, 17,
                             "pipec");
    d.attrs["axis"] = Attribute::ofInt(1);
    Tensor ref = evalOne(d, {dy, y});
    std::vector<float> mine(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      cuda::rows::softmaxGradRowOnLanes(dy.data<float>() + r * n, y.data<float>() + r * n, mine.data() + r * n, n,
                                        log, 16);
    EXPECT_LE(worstError(mine.data(), ref.data<float>(), rows * n), 4e-6) << (log ? "LogSoftmaxGrad" : "SoftmaxGrad");
  }
}
