//===- tests/unit/HalfGemmTest.cpp - Products on bf16/f16 operands -------===//
//
// MatMul, Gemm and pipec:FusedGemm under output_dtype (16-bit operands, an
// f32 result; support/FusedOps.h) and LinalgHalfGemm behind them:
//  - the emulated path (forced) is bitwise the f32 kernel run on the
//    operands widened to f32, what a Cast to f32 before the product gave;
//  - the path this machine takes (oneDNN's bf16 matmul where it has
//    AVX512_BF16 or AMX, else the emulation) agrees with a double-precision
//    product of the same 16-bit values to f32 rounding, with 1, 2 and 3
//    threads bitwise alike;
//  - bad type combinations are refused by name.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/FusedOps.h"
#include "support/Half.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace pipec;
using namespace pipec::cpu;
using namespace pipec::test;

namespace {

/// `f32` rounded to `t` (bf16 or f16): the 16-bit tensor and its exact
/// f32 widening.
struct HalfPair {
  Tensor half, wide;
};

HalfPair halfOf(const Tensor &f32, DType t) {
  HalfPair p{Tensor(t, f32.shape()), Tensor(DType::F32, f32.shape())};
  const float *src = static_cast<const float *>(f32.raw());
  auto *h = static_cast<uint16_t *>(p.half.raw());
  auto *w = static_cast<float *>(p.wide.raw());
  for (int64_t i = 0; i < f32.numel(); ++i) {
    h[i] = t == DType::BF16 ? floatToBf16(src[i]) : floatToHalf(src[i]);
    w[i] = t == DType::BF16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
  }
  return p;
}

struct Case {
  std::string op;
  Shape a, b;
  bool ta = false, tb = false;
  float alpha = 1.0f, beta = 1.0f;
  bool withC = false;
  std::string act;
  Case(std::string o, Shape a_, Shape b_, bool ta_ = false, bool tb_ = false, float alpha_ = 1.0f,
       float beta_ = 1.0f, bool withC_ = false, std::string act_ = "")
      : op(std::move(o)), a(std::move(a_)), b(std::move(b_)), ta(ta_), tb(tb_), alpha(alpha_), beta(beta_),
        withC(withC_), act(std::move(act_)) {}
};

/// The cases: the shapes of a training step's layers (forward, input and
/// weight gradients), attention's batched products, odd sizes, Gemm's
/// alpha, beta and C, FusedGemm's epilogues, and products large enough to
/// run in several blocks.
std::vector<Case> cases() {
  return {
      {"MatMul", {33, 65}, {65, 17}},
      {"MatMul", {2, 64, 96}, {96, 160}},           // B shared: one GEMM of 128 rows
      {"MatMul", {2, 4, 32, 16}, {2, 4, 16, 32}},   // attention's batched products
      {"MatMul", {5, 7}, {4, 7, 3}},                // A broadcast
      {"MatMul", {512, 384}, {384, 512}},           // several blocks
      {"Gemm", {64, 96}, {80, 96}, false, true},    // forward layer, B transposed
      {"Gemm", {96, 64}, {96, 80}, true, false},    // weight gradient, A transposed
      {"Gemm", {40, 24}, {56, 40}, true, true, 0.5f, 2.0f, true},
      {"Gemm", {300, 200}, {200, 1}, false, false, 1.0f, 0.25f, true},
      {"FusedGemm", {2, 48, 64}, {64, 96}, false, false, 1, 1, true, "Gelu"},
      {"FusedGemm", {96, 64}, {80, 64}, false, true, 1, 1, true, "Relu"},
      {"FusedGemm", {384, 256}, {256, 512}, false, false, 1, 1, false, "GeluTanh"},
  };
}

/// The node description of case `c` on operands of type `t` (f32 without
/// output_dtype, 16-bit with it) and the inputs beyond A and B.
OpDesc descOf(const Case &c, DType t, const std::vector<Tensor> &extra, Shape &out) {
  const int64_t M = c.ta ? c.a[1] : c.a[c.a.size() - 2], N = c.tb ? c.b[0] : c.b.back();
  AttrMap at;
  std::vector<TensorDesc> ins{{t, c.a}, {t, c.b}};
  for (const Tensor &e : extra)
    ins.push_back(e.desc());
  if (c.op == "MatMul") {
    Shape batch = c.a.size() >= c.b.size() ? Shape(c.a.begin(), c.a.end() - 2) : Shape(c.b.begin(), c.b.end() - 2);
    out = batch;
    out.push_back(M);
    out.push_back(N);
  } else {
    out = c.op == "FusedGemm" && c.a.size() > 2 ? Shape(c.a.begin(), c.a.end() - 1) : Shape{M};
    out.push_back(N);
    at["transA"] = Attribute::ofInt(c.ta);
    at["transB"] = Attribute::ofInt(c.tb);
  }
  if (c.op == "Gemm") {
    at["alpha"] = Attribute::ofFloat(c.alpha);
    at["beta"] = Attribute::ofFloat(c.beta);
  }
  if (!c.act.empty())
    at["activation"] = Attribute::ofString(c.act);
  if (t != DType::F32)
    at[kProductOutputDType] = Attribute::ofInt(static_cast<int64_t>(DType::F32));
  OpDesc d = makeDesc(c.op, ins, {{DType::F32, out}}, at, 13);
  if (c.op == "FusedGemm")
    d.domain = "pipec";
  return d;
}

/// The case's extra input (Gemm's C, FusedGemm's bias), f32.
std::vector<Tensor> extraOf(const Case &c, uint32_t seed) {
  if (!c.withC)
    return {};
  const int64_t M = c.ta ? c.a[1] : c.a[c.a.size() - 2], N = c.tb ? c.b[0] : c.b.back();
  return {randomF32(c.op == "FusedGemm" ? Shape{N} : Shape{M, N}, seed, -1.f, 1.f)};
}

std::string nameOf(const Case &c, DType t) {
  return cat(c.op, " ", shapeStr(c.a), c.ta ? "^T" : "", " x ", shapeStr(c.b), c.tb ? "^T" : "", " ",
             dtypeName(t), c.act.empty() ? "" : " " + c.act);
}

TEST(HalfGemm, EmulationIsBitwiseTheF32ProductOfTheWidenedOperands) {
  // PIPEC_LINALG_NO_DNNL: no oneDNN matmul, so the emulation; the f32
  // kernel then takes the same sgemm path on the widened operands.
  for (bool dnnl : {true, false}) {
    useDnnl(dnnl);
    for (DType t : {DType::BF16, DType::F16})
      for (const Case &c : cases()) {
        const std::string what = nameOf(c, t) + (dnnl ? "" : " (no oneDNN)");
        HalfPair A = halfOf(randomF32(c.a, 11, -2.f, 2.f), t), B = halfOf(randomF32(c.b, 12, -2.f, 2.f), t);
        std::vector<Tensor> extra = extraOf(c, 13);
        Shape out;
        OpDesc hd = descOf(c, t, extra, out), fd = descOf(c, DType::F32, extra, out);
        std::vector<Tensor> hin{A.half, B.half}, fin{A.wide, B.wide};
        hin.insert(hin.end(), extra.begin(), extra.end());
        fin.insert(fin.end(), extra.begin(), extra.end());
        Tensor want = evalOne(fd, fin);
        if (!dnnl) {
          Tensor got = evalOne(hd, hin);
          ASSERT_EQ(got.bytes(), want.bytes()) << what;
          EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.bytes()), 0) << what;
          continue;
        }
        // With oneDNN the machine may take the native path: the product
        // by LinalgHalfGemm forced to emulate, on MatMul's geometry.
        if (c.op != "MatMul" || c.a.size() != 2 || c.b.size() != 2)
          continue;
        LinalgHalfGemm g;
        g.operands = t;
        g.f32.M = c.a[0];
        g.f32.K = c.a[1];
        g.f32.N = c.b[1];
        g.f32.lda = g.f32.K;
        g.f32.ldb = g.f32.ldc = g.f32.N;
        g.f32.aOff = g.f32.bOff = g.f32.cOff = {0};
        g.prepare(false);
        EXPECT_FALSE(g.native()) << what;
        std::vector<unsigned char> ws(g.workspaceBytes() + 64);
        std::vector<float> got(static_cast<size_t>(want.numel()));
        ASSERT_TRUE(g.run(static_cast<const uint16_t *>(A.half.raw()), static_cast<const uint16_t *>(B.half.raw()),
                          got.data(), ws.data())
                        .isOk())
            << what;
        EXPECT_EQ(std::memcmp(got.data(), want.raw(), want.bytes()), 0) << what;
      }
  }
  useDnnl(true);
}

/// The double-precision product of case `c` on the widened operands (and
/// its C, bias and activation), and per element the sum of the terms'
/// magnitudes.
std::vector<double> reference(const Case &c, const Tensor &A, const Tensor &B, const std::vector<Tensor> &extra,
                              const Shape &out, std::vector<double> &scale) {
  const bool matmul = c.op == "MatMul";
  const int64_t M = c.ta ? c.a[1] : c.a[c.a.size() - 2], K = c.ta ? c.a[0] : c.a.back();
  const int64_t N = c.tb ? c.b[0] : c.b.back();
  const int64_t rowsA = c.op == "FusedGemm" && !c.ta ? A.numel() / K : M;
  const int64_t batch = numElements(out) / (rowsA * N);
  const int64_t batchA = matmul ? A.numel() / (M * K) : 1, batchB = matmul ? B.numel() / (K * N) : 1;
  std::vector<double> y(static_cast<size_t>(numElements(out))), s(y.size());
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t m = 0; m < rowsA; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t ai = (batchA > 1 ? bi % batchA * M * K : 0) + (c.ta ? k * M + m : m * K + k);
          const int64_t bj = (batchB > 1 ? bi % batchB * K * N : 0) + (c.tb ? n * K + k : k * N + n);
          const double p = A.getDouble(ai) * B.getDouble(bj);
          sum += p;
          mag += std::fabs(p);
        }
        double v = (c.op == "Gemm" ? c.alpha : 1.0) * sum;
        mag *= c.op == "Gemm" ? std::fabs(c.alpha) : 1.0;
        if (c.withC) {
          const double e = c.op == "Gemm" ? c.beta * extra[0].getDouble(m * N + n) : extra[0].getDouble(n);
          v += e;
          mag += std::fabs(e);
        }
        if (c.act == "Relu")
          v = std::max(v, 0.0);
        else if (c.act == "Gelu")
          v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        else if (c.act == "GeluTanh")
          v = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        const size_t at = static_cast<size_t>((bi * rowsA + m) * N + n);
        y[at] = v;
        s[at] = mag;
      }
  scale = s;
  return y;
}

TEST(HalfGemm, MatchesADoubleProductOfTheSameValuesWithAnyThreadCount) {
  for (DType t : {DType::BF16, DType::F16})
    for (const Case &c : cases()) {
      const std::string what = nameOf(c, t);
      HalfPair A = halfOf(randomF32(c.a, 21, -2.f, 2.f), t), B = halfOf(randomF32(c.b, 22, -2.f, 2.f), t);
      std::vector<Tensor> extra = extraOf(c, 23);
      Shape out;
      OpDesc d = descOf(c, t, extra, out);
      std::vector<Tensor> in{A.half, B.half};
      in.insert(in.end(), extra.begin(), extra.end());
      std::vector<Tensor> got = expectThreadInvariant(d, in);
      ASSERT_EQ(got.size(), 1u) << what;
      EXPECT_EQ(got[0].shape(), out) << what;
      std::vector<double> scale;
      const std::vector<double> want = reference(c, A.wide, B.wide, extra, out, scale);
      int bad = 0;
      for (int64_t i = 0; i < got[0].numel() && bad < 5; ++i) {
        const double g = got[0].getDouble(i), w = want[static_cast<size_t>(i)];
        if (!(std::fabs(g - w) <= 1e-5 * scale[static_cast<size_t>(i)] + 1e-6)) {
          ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
          ++bad;
        }
      }
    }
}

TEST(HalfGemm, NativePathWhereTheMachineHasOneIsThreadCountFree) {
  // Whichever path prepare() takes here, its result on a product of
  // several blocks is the same with 1 and 4 threads, and it names its
  // implementation when native.
  LinalgHalfGemm g;
  g.f32.M = 700;
  g.f32.K = 320;
  g.f32.N = 260;
  g.f32.lda = g.f32.K;
  g.f32.ldb = g.f32.ldc = g.f32.N;
  g.f32.aOff = g.f32.bOff = g.f32.cOff = {0};
  g.prepare();
  if (g.native())
    EXPECT_EQ(g.implementation().rfind("brg", 0), 0u) << g.implementation();
  else
    EXPECT_EQ(g.implementation(), "");
  HalfPair A = halfOf(randomF32({700, 320}, 31), DType::BF16), B = halfOf(randomF32({320, 260}, 32), DType::BF16);
  std::vector<unsigned char> ws(g.workspaceBytes() + 64);
  std::vector<float> one(700 * 260), four(700 * 260);
  for (auto [threads, y] : {std::pair{1, &one}, std::pair{4, &four}})
    EXPECT_TRUE(withThreads(threads, [&] {
      return g.run(static_cast<const uint16_t *>(A.half.raw()), static_cast<const uint16_t *>(B.half.raw()),
                   y->data(), ws.data())
          .isOk();
    }));
  EXPECT_EQ(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)), 0);
}

TEST(HalfGemm, RoundsAnF32OperandAsACastWould) {
  // An f32 operand under output_dtype (the weight a product reads as it
  // is) gives bitwise the result of its 16-bit copy: B kept for the step,
  // A rounded in the workspace at every run; oneDNN's path and the
  // emulation alike.
  for (bool dnnl : {true, false}) {
    useDnnl(dnnl);
    for (DType t : {DType::BF16, DType::F16})
      for (const Case &c : cases()) {
        const std::string what = nameOf(c, t) + (dnnl ? "" : " (no oneDNN)");
        const Tensor a32 = randomF32(c.a, 41, -2.f, 2.f), b32 = randomF32(c.b, 42, -2.f, 2.f);
        HalfPair A = halfOf(a32, t), B = halfOf(b32, t);
        std::vector<Tensor> extra = extraOf(c, 43);
        Shape out;
        const OpDesc hd = descOf(c, t, extra, out);
        std::vector<Tensor> hin{A.half, B.half};
        hin.insert(hin.end(), extra.begin(), extra.end());
        const Tensor want = evalOne(hd, hin);
        for (size_t f : {size_t(0), size_t(1)}) {
          OpDesc wd = hd;
          wd.inputs[f].dtype = DType::F32;
          wd.stepInvariant.assign(wd.inputs.size(), false);
          wd.stepInvariant[f] = f == 1;
          std::vector<Tensor> win = hin;
          win[f] = f == 0 ? a32 : b32;
          const Tensor got = evalOne(wd, win);
          ASSERT_EQ(got.bytes(), want.bytes()) << what;
          EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.bytes()), 0) << what << ", operand " << f << " f32";
        }
      }
  }
  useDnnl(true);
}

TEST(HalfGemm, KeepsAWeightsRoundingForTheStepSharedByItsReaders) {
  // MatMul(A, W) and Gemm(A, W^T... as W) reading the same f32 weight W
  // under output_dtype: each step rounds W once (the device's HalfWeights
  // holds one copy); a change of W within a step is not seen (the step
  // invariance the executor promises), the next step sees it.
  const DType t = DType::BF16;
  const Tensor a32 = randomF32({8, 16}, 51), w = randomF32({16, 12}, 52);
  const HalfPair A = halfOf(a32, t);
  AttrMap at{{kProductOutputDType, Attribute::ofInt(static_cast<int64_t>(DType::F32))}};
  OpDesc mm = makeDesc("MatMul", {{t, {8, 16}}, {DType::F32, {16, 12}}}, {{DType::F32, {8, 12}}}, at, 13);
  OpDesc gm = makeDesc("Gemm", {{t, {8, 16}}, {DType::F32, {16, 12}}}, {{DType::F32, {8, 12}}}, at, 13);
  mm.stepInvariant = gm.stepInvariant = {false, true};
  auto k1 = cpu::createKernel(mm), k2 = cpu::createKernel(gm);
  ASSERT_TRUE(k1.isOk() && k2.isOk());
  std::unique_ptr<kernel::HalfWeights> shared = makeCpuHalfWeights();
  std::vector<unsigned char> ws(std::max((*k1)->workspaceBytes(), (*k2)->workspaceBytes()) + 64);
  Tensor W = w.clone();
  auto run = [&](Kernel &k, uint64_t step) {
    Tensor y(DType::F32, {8, 12});
    ExecContext ctx;
    ctx.training = true;
    ctx.step = step;
    ctx.workspace = ws.data();
    ctx.halfWeights = shared.get();
    const void *in[3] = {A.half.raw(), W.raw(), nullptr};
    void *out[1] = {y.raw()};
    EXPECT_TRUE(k.run(ctx, in, out).isOk());
    return y;
  };
  auto fresh = [&] { return evalOne(mm, {A.half, W}); };
  const Tensor y0 = run(**k1, 0), want0 = fresh();
  EXPECT_TRUE(y0.identical(want0));
  EXPECT_TRUE(run(**k2, 0).identical(want0));
  EXPECT_EQ(shared->bytes(), (16 * 12 + 32) * sizeof(uint16_t)) << "one rounding of W for both readers";
  for (int64_t i = 0; i < W.numel(); ++i)
    W.data<float>()[i] *= 2.0f;
  EXPECT_TRUE(run(**k1, 0).identical(y0)) << "within a step the rounding is kept";
  const Tensor want1 = fresh();
  EXPECT_FALSE(want1.identical(want0));
  EXPECT_TRUE(run(**k2, 1).identical(want1)) << "the next step rounds again";
  EXPECT_TRUE(run(**k1, 1).identical(want1));
  EXPECT_EQ(shared->bytes(), (16 * 12 + 32) * sizeof(uint16_t));
}

TEST(HalfGemm, RefusesOperandsThatDoNotFit) {
  Tensor a(DType::BF16, {4, 8}), b(DType::F16, {8, 4}), f(DType::F32, {8, 4});
  AttrMap at{{kProductOutputDType, Attribute::ofInt(static_cast<int64_t>(DType::F32))}};
  // Mixed 16-bit types.
  OpDesc mixed = makeDesc("MatMul", {a.desc(), b.desc()}, {{DType::F32, {4, 4}}}, at);
  EXPECT_NE(evalError(mixed, {a, b}).find("operands differ in type"), std::string::npos);
  // output_dtype on f32 operands.
  Tensor fa(DType::F32, {4, 8});
  OpDesc f32 = makeDesc("MatMul", {fa.desc(), f.desc()}, {{DType::F32, {4, 4}}}, at);
  EXPECT_NE(evalError(f32, {fa, f}).find("needs bf16 or f16 operands"), std::string::npos);
  // 16-bit operands without output_dtype give a 16-bit result, not f32.
  Tensor bb(DType::BF16, {8, 4});
  OpDesc plain = makeDesc("Gemm", {a.desc(), bb.desc()}, {{DType::F32, {4, 4}}}, {}, 13);
  EXPECT_NE(evalError(plain, {a, bb}).find("element types do not fit"), std::string::npos);
}

} // namespace
