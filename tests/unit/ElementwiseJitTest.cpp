//===- tests/unit/ElementwiseJitTest.cpp - Fused elementwise loops --------===//
//
// pipec:FusedElementwise (passes/Fusion.cpp: fuse-elementwise): the loop
// LLVM generates (runtime/cpu/ElementwiseJit.h), the interpreter, the CUDA
// kernel's body and the unfused nodes' CPU kernels give bitwise the same
// values, for random programs over broadcast inputs and for the special
// values (NaN, infinities, signed zeros) each op meets; program decoding
// refuses what it must.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ElementwiseJit.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cuda/Bodies.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <limits>
#include <random>

#include <unistd.h>

using namespace pipec;
using namespace pipec::test;

namespace {

Tensor runKernel(const cpu::OpDesc &d, const std::vector<const Tensor *> &in) {
  Tensor y(d.outputs[0]);
  auto k = cpu::createKernel(d);
  EXPECT_TRUE(k.isOk()) << k.status().message();
  if (!k.isOk())
    return y;
  std::vector<const void *> ins;
  for (const Tensor *t : in)
    ins.push_back(t->raw());
  void *outs[1] = {y.raw()};
  std::vector<unsigned char> ws((*k)->workspaceBytes() + 64);
  cpu::ExecContext ctx;
  ctx.workspace = ws.data();
  Status s = (*k)->run(ctx, ins.data(), outs);
  EXPECT_TRUE(s.isOk()) << s.message();
  return y;
}

/// Values with the special cases mixed in.
Tensor values(const Shape &s, std::mt19937 &rng) {
  Tensor t(DType::F32, s);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  const float special[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                           1e-40f, -1e-40f};
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = rng() % 9 == 0 ? special[rng() % 7] : u(rng);
  return t;
}

/// Bitwise equal, NaNs aside: any NaN equals any NaN (which operand's NaN
/// an x86 instruction passes on, and so its sign, depends on the operand
/// order a compiler picks for a commutative op; IEEE 754 leaves it open).
bool sameBits(const Tensor &a, const Tensor &b) {
  if (a.desc() != b.desc())
    return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (!(std::isnan(x) && std::isnan(y)) && std::memcmp(&x, &y, sizeof x) != 0)
      return false;
  }
  return true;
}

} // namespace

// Random programs over inputs that are the whole output, one value, a bias
// over the last axis and a per-row value: the JIT's loop, the interpreter
// (PIPEC_NO_CODEGEN's path), the CUDA body and the unfused ops' kernels
// applied one after the other agree to the bit (NaNs: NaN in all).
TEST(ElementwiseJit, FusedEqualsUnfusedBitwise) {
  std::mt19937 rng(17);
  // Outputs with an axis of one element between larger ones ([B,1,D] is a
  // one-token decoding step's) as well as without.
  const std::vector<std::pair<Shape, std::vector<Shape>>> cases = {
      {{3, 5, 33}, {{3, 5, 33}, {}, {33}, {3, 5, 1}, {1, 5, 33}, {5, 33}}},
      {{8, 1, 16}, {{8, 1, 16}, {}, {16}, {8, 1, 1}, {1, 1, 16}, {1, 16}}},
      {{2, 3, 1, 5}, {{2, 3, 1, 5}, {}, {5}, {2, 3, 1, 1}, {1, 3, 1, 5}, {3, 1, 5}}},
      {{1, 6, 1, 4}, {{1, 6, 1, 4}, {6, 1, 4}, {4}, {1, 6, 1, 1}}}};
  for (int trial = 0; trial < 120; ++trial) {
    const Shape &out = cases[static_cast<size_t>(trial) % cases.size()].first;
    const std::vector<Shape> &inputShapes = cases[static_cast<size_t>(trial) % cases.size()].second;
    const int nIn = 2 + static_cast<int>(rng() % 4);
    EwProgram p;
    p.numInputs = nIn;
    std::vector<Tensor> in;
    std::vector<Shape> shapes;
    for (int k = 0; k < nIn; ++k) {
      shapes.push_back(k == 0 ? out : inputShapes[rng() % inputShapes.size()]);
      in.push_back(values(shapes.back(), rng));
    }
    // Steps over the values so far; each step's value is of the output's
    // shape once it reads input 0 or a step (the fusion's rule), so the
    // unfused evaluation below broadcasts exactly like the fused loop.
    const int nSteps = 1 + static_cast<int>(rng() % 8);
    for (int s = 0; s < nSteps; ++s) {
      const auto op = static_cast<EwOp>(rng() % kEwOpCount);
      const int32_t defined = nIn + s;
      const int32_t a = s == 0 ? 0 : nIn + s - 1; // a chain through the full-shape values
      const int32_t b = ewArity(op) == 2 ? static_cast<int32_t>(rng() % defined) : 0;
      p.steps.push_back({op, a, b});
    }
    // Unfused: one CPU kernel per step (Add ... Relu, pipec:ReluGrad).
    std::vector<Tensor> v = in;
    for (const EwStep &s : p.steps) {
      const Tensor &a = v[static_cast<size_t>(s.a)];
      if (ewArity(s.op) == 1) {
        v.push_back(runKernel(makeDesc(ewOpName(s.op), {a.desc()}, {{DType::F32, out}}), {&a}));
      } else {
        const Tensor &b = v[static_cast<size_t>(s.b)];
        if (s.op == EwOp::ReluGrad) {
          // pipec:ReluGrad takes equal shapes: broadcast b first.
          Tensor bb(DType::F32, out);
          Tensor zero(DType::F32, out);
          std::memset(zero.raw(), 0, zero.bytes());
          Tensor full =
              runKernel(makeDesc("Add", {zero.desc(), b.desc()}, {{DType::F32, out}}), {&zero, &b});
          // Add(0, x) turns -0 into +0; ReluGrad only compares b with 0.
          v.push_back(runKernel(
              makeDesc("ReluGrad", {a.desc(), full.desc()}, {{DType::F32, out}}, {}, 17, "pipec"),
              {&a, &full}));
        } else {
          v.push_back(runKernel(makeDesc(ewOpName(s.op), {a.desc(), b.desc()}, {{DType::F32, out}}),
                                {&a, &b}));
        }
      }
    }
    const Tensor &unfused = v.back();
    // Fused: the node's kernel with the JIT (this process) and the
    // interpreter (the same loop, PIPEC_NO_CODEGEN's path).
    std::vector<TensorDesc> descs;
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : in) {
      descs.push_back(t.desc());
      ptrs.push_back(&t);
    }
    cpu::OpDesc fd = makeDesc("FusedElementwise", descs, {{DType::F32, out}}, {}, 17, "pipec");
    fd.attrs["program"] = Attribute::ofInts(p.encode());
    const Tensor fused = runKernel(fd, ptrs);
    EXPECT_TRUE(sameBits(fused, unfused)) << p.str();
    std::vector<std::vector<int64_t>> sh;
    for (const Shape &s : shapes)
      sh.emplace_back(s.begin(), s.end());
    auto layout = ewLoopLayout(sh, std::vector<int64_t>(out.begin(), out.end()));
    ASSERT_TRUE(layout.isOk()) << layout.status().message();
    Tensor interpreted(DType::F32, out);
    std::vector<uint8_t> steps;
    for (const auto &i : layout->inputs)
      steps.push_back(i.step);
    for (int64_t r = 0; r < layout->rows; ++r) {
      const float *row[16];
      for (int k = 0; k < nIn; ++k)
        row[k] = in[static_cast<size_t>(k)].data<float>() +
                 (r * layout->rowLen / layout->inputs[static_cast<size_t>(k)].div) % layout->inputs[static_cast<size_t>(k)].mod;
      cpu::interpretElementwiseLoop(p, steps.data(), row, interpreted.data<float>() + r * layout->rowLen,
                                    layout->rowLen);
    }
    EXPECT_TRUE(sameBits(interpreted, unfused)) << p.str();
    // The CUDA kernel's body, element by element.
    cuda::body::EwDeviceProgram dp;
    dp.numInputs = p.numInputs;
    dp.numSteps = static_cast<int32_t>(p.steps.size());
    for (size_t s = 0; s < p.steps.size(); ++s) {
      dp.ops[3 * s] = static_cast<int32_t>(p.steps[s].op);
      dp.ops[3 * s + 1] = p.steps[s].a;
      dp.ops[3 * s + 2] = p.steps[s].b;
    }
    cuda::body::EwInputs ip;
    for (int k = 0; k < nIn; ++k) {
      dp.div[k] = layout->inputs[static_cast<size_t>(k)].div;
      dp.mod[k] = layout->inputs[static_cast<size_t>(k)].mod;
      ip.p[k] = in[static_cast<size_t>(k)].data<float>();
    }
    Tensor gpu(DType::F32, out);
    for (int64_t i = 0; i < gpu.numel(); ++i)
      gpu.data<float>()[i] = cuda::body::ewEvaluate(dp, ip, i);
    EXPECT_TRUE(sameBits(gpu, unfused)) << p.str();
  }
}

// The JIT compiles for this machine and caches: one program, one loop.
TEST(ElementwiseJit, CompilesForTheHostAndCaches) {
  if (!cpu::codegenEnabled())
    GTEST_SKIP() << "PIPEC_NO_CODEGEN is set";
  EwProgram p;
  p.numInputs = 2;
  p.steps = {{EwOp::Add, 0, 1}, {EwOp::Relu, 2, 0}};
  auto a = cpu::compileElementwiseLoop(p, {1, 0});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  auto b = cpu::compileElementwiseLoop(p, {1, 0});
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(*a, *b);
  auto c = cpu::compileElementwiseLoop(p, {1, 1});
  ASSERT_TRUE(c.isOk());
  EXPECT_NE(*a, *c);
  float x[37], y = -0.5f, out[37];
  for (int i = 0; i < 37; ++i)
    x[i] = static_cast<float>(i) * 0.25f - 2.0f;
  const float *in[2] = {x, &y};
  (*a)(in, out, 37);
  for (int i = 0; i < 37; ++i)
    EXPECT_EQ(out[i], x[i] + y < 0 ? 0.0f : x[i] + y) << i;
  EXPECT_NE(cpu::codegenTarget().find("x86_64"), std::string::npos) << cpu::codegenTarget();
}

// The CUDA kernel of a program (elementwisePtx), built from the CPU loop's
// IR by LLVM's NVPTX back end: every operation IEEE-rounded and nothing
// contracted into an FMA (what keeps the GPU bitwise the CPU), the
// broadcast input's stride and extent folded in, and PTX that the CUDA
// toolkit's assembler takes for sm_80 and sm_90 where the toolkit is
// installed. (Running it needs a GPU: tests/gpu/CudaKernelTest.cpp.)
TEST(ElementwiseJit, ProgramsBecomePtxThatPtxasAssembles) {
  EwProgram p;
  p.numInputs = 3;
  p.steps = {{EwOp::Mul, 0, 1}, {EwOp::Add, 3, 2}, {EwOp::Div, 4, 0}, {EwOp::Sqrt, 5, 0},
             {EwOp::Sub, 6, 1}, {EwOp::Neg, 7, 0}, {EwOp::Abs, 8, 0}, {EwOp::Relu, 9, 0},
             {EwOp::ReluGrad, 10, 2}};
  // Input 0 full, input 1 one value per row of 33 (stride 33, extent 5),
  // input 2 a scalar.
  auto text = cpu::elementwisePtx(p, {1, 33, 1}, {3 * 5 * 33, 5, 1}, 3 * 5 * 33, "pipec_ew_test");
  ASSERT_TRUE(text.isOk()) << text.status().message();
  const std::string &ptx = *text;
  EXPECT_NE(ptx.find(".entry pipec_ew_test"), std::string::npos) << ptx;
  for (const char *op : {"mul.rn.f32", "add.rn.f32", "div.rn.f32", "sqrt.rn.f32", "sub.rn.f32"})
    EXPECT_NE(ptx.find(op), std::string::npos) << op << " missing:\n" << ptx;
  EXPECT_EQ(ptx.find("fma"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find("approx"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos) << ptx;
  // The refusals.
  EXPECT_FALSE(cpu::elementwisePtx(p, {1, 1}, {1, 1}, 8, "k").isOk());
  EXPECT_FALSE(cpu::elementwisePtx(p, {1, 0, 1}, {8, 8, 1}, 8, "k").isOk());
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK) != 0)
    GTEST_SKIP() << "no CUDA toolkit at /usr/local/cuda: PTX not assembled";
  const std::string dir = ::testing::TempDir();
  const std::string src = dir + "/pipec_ew_test.ptx";
  {
    std::ofstream f(src);
    f << ptx;
  }
  for (const char *arch : {"sm_80", "sm_90"}) {
    const std::string cmd = std::string(ptxas) + " -arch=" + arch + " " + src + " -o " + dir + "/pipec_ew_test.cubin";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

TEST(ElementwiseJit, BadProgramsAreRefused) {
  auto bad = [](std::vector<int64_t> ints, const char *why) {
    auto p = EwProgram::decode(ints);
    ASSERT_FALSE(p.isOk()) << why;
    EXPECT_NE(p.status().message().find(why), std::string::npos) << p.status().message();
  };
  bad({}, "numInputs");
  bad({2, 0, 0}, "numInputs");
  bad({2}, "1 to 256 steps");
  bad({2, 99, 0, 1}, "unknown op 99");
  bad({2, 0, 0, 2}, "only v0 .. v1 are defined");
  bad({1, 4, 0, 1}, "reads v0, v1");
  auto ok = EwProgram::decode({2, 0, 0, 1, 6, 2, 0});
  ASSERT_TRUE(ok.isOk());
  EXPECT_EQ(ok->str(), "inputs 2: v2=Add(v0,v1) v3=Relu(v2)");
  // Inputs the loop cannot read: broadcast across a gap of axes.
  EXPECT_FALSE(ewLoopLayout({{3, 1, 33}}, {3, 5, 33}).isOk());
  EXPECT_TRUE(ewLoopLayout({{5, 1}}, {3, 5, 33}).isOk());
  // An output axis of one element is no gap between an input's axes.
  EXPECT_TRUE(ewLoopLayout({{8, 1, 16}}, {8, 1, 16}).isOk());
  EXPECT_TRUE(ewLoopLayout({{3, 1, 5}}, {2, 3, 1, 5}).isOk());
  EXPECT_FALSE(ewLoopLayout({{2, 1, 1, 5}}, {2, 3, 1, 5}).isOk());
}
