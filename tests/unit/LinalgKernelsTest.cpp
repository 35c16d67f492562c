//===- tests/unit/LinalgKernelsTest.cpp - Linalg/conv/pool/norm kernels ---===//
//
// Checks of the Linalg-family CPU kernels beyond ONNX's node tests: Gemm,
// MatMul and Einsum against naive double-precision references on random
// (odd) shapes; Conv, ConvTranspose and pools against naive loops, on both
// the oneDNN path and the loop fallback (PIPEC_LINALG_NO_DNNL); the
// normalizations' training and broadcasting cases; results with 1 and 2
// OpenMP threads; errors (not crashes) on bad descriptions. LinalgPerf.*
// prints GEMM throughput of the MatMul kernel next to raw cblas_sgemm.
// Over 700 lines: one binary for the family, whose kernels share the GEMM
// front end and its machine-dependent choices; the TESTs are independent.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/LinalgGemm.h"
#include "tests/unit/KernelTestSupport.h"

#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>

using namespace pipec;
using namespace pipec::cpu;
using namespace pipec::test;

namespace {

/// Expects |got - want| <= tol * scale[i] + 1e-6 elementwise, where scale
/// bounds the magnitude of the terms summed into element i.
void expectClose(const Tensor &got, const std::vector<double> &want,
                 const std::vector<double> &scale, double tol, const std::string &what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    double g = got.getDouble(i), w = want[i];
    double s = scale.empty() ? std::fabs(w) : scale[i];
    if (!(std::fabs(g - w) <= tol * s + 1e-6)) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

// ---------------------------------------------------------------------------
// Gemm, MatMul, Einsum

TEST(LinalgKernels, GemmMatchesReference) {
  // oneDNN's sgemm from kOneDnnMinMacs multiply-adds, OpenBLAS below; with
  // PIPEC_LINALG_NO_DNNL OpenBLAS throughout.
  bothPaths([](const std::string &path) {
  std::mt19937 rng(7);
  const int64_t sizes[] = {1, 3, 17, 33, 64, 127};
  int cases = 0;
  for (int64_t M : sizes)
    for (int64_t N : {1, 5, 31, 70})
      for (int64_t K : {1, 2, 19, 129}) {
        bool ta = rng() & 1, tb = rng() & 1;
        int cKind = static_cast<int>(rng() % 5); // none, scalar, [N], [M,1], [M,N]
        float alpha = (rng() % 3) ? 1.0f : 0.5f, beta = (rng() % 3) ? 1.0f : -2.0f;
        Shape as = ta ? Shape{K, M} : Shape{M, K}, bs = tb ? Shape{N, K} : Shape{K, N};
        Shape cs = cKind == 1   ? Shape{}
                   : cKind == 2 ? Shape{N}
                   : cKind == 3 ? Shape{M, 1}
                                : Shape{M, N};
        DType dt = cases % 4 == 3 ? DType::F64 : DType::F32;
        Tensor A = randomT(dt, as, ++cases), B = randomT(dt, bs, 1000 + cases),
               C = randomT(dt, cs, 2000 + cases);
        std::vector<TensorDesc> ins = {A.desc(), B.desc()};
        std::vector<Tensor> vals = {A, B};
        if (cKind) {
          ins.push_back(C.desc());
          vals.push_back(C);
        }
        AttrMap at = {{"transA", Attribute::ofInt(ta)},
                      {"transB", Attribute::ofInt(tb)},
                      {"alpha", Attribute::ofFloat(alpha)},
                      {"beta", Attribute::ofFloat(beta)}};
        OpDesc d = makeDesc("Gemm", ins, {{dt, {M, N}}}, at, 13);
        std::vector<Tensor> out = eval(d, vals);
        ASSERT_EQ(out.size(), 1u);
        std::vector<double> want(M * N), scale(M * N);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; ++k) {
              double x = A.getDouble(ta ? k * M + m : m * K + k);
              double y = B.getDouble(tb ? n * K + k : k * N + n);
              s += x * y;
              a += std::fabs(x * y);
            }
            double c = 0;
            if (cKind == 1)
              c = C.getDouble(0);
            else if (cKind == 2)
              c = C.getDouble(n);
            else if (cKind == 3)
              c = C.getDouble(m);
            else if (cKind == 4)
              c = C.getDouble(m * N + n);
            want[m * N + n] = alpha * s + beta * c;
            scale[m * N + n] = std::fabs(alpha) * a + std::fabs(beta * c);
          }
        expectClose(out[0], want, scale, dt == DType::F32 ? 1e-5 : 1e-12,
                    cat(path, " Gemm ", M, "x", N, "x", K, " ta=", ta, " tb=", tb, " c=", cKind));
      }
  });
}

// Plans place a tensor at different arena offsets for different K, and the
// results must be bitwise those of one device: the GEMM's bits may not
// depend on where its operands are.
TEST(LinalgKernels, SgemmBitsDoNotDependOnAlignment) {
  struct Shape3 {
    int64_t M, N, K;
  };
  for (const Shape3 &sh : {Shape3{64, 192, 64}, Shape3{17, 33, 129}, Shape3{16, 16, 8},
                           Shape3{128, 64, 256}})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t M = sh.M, N = sh.N, K = sh.K;
      std::vector<float> a(M * K), b(K * N);
      std::mt19937 rng(static_cast<unsigned>(M * 131 + N * 7 + K + t));
      std::uniform_real_distribution<float> u(-1, 1);
      for (float &v : a)
        v = u(rng);
      for (float &v : b)
        v = u(rng);
      std::vector<float> first;
      for (int64_t shift : {0, 1, 3, 16}) {
        std::vector<float> A(a.size() + 16), B(b.size() + 16), C(M * N + 16, 0.0f);
        std::copy(a.begin(), a.end(), A.begin() + shift);
        std::copy(b.begin(), b.end(), B.begin() + shift);
        cpu::sgemm(ta, tb, M, N, K, 1.0f, A.data() + shift, ta ? M : K, B.data() + shift,
                   tb ? K : N, 0.0f, C.data() + shift, N);
        std::vector<float> got(C.begin() + shift, C.begin() + shift + M * N);
        if (first.empty())
          first = got;
        else
          EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0)
              << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " shift " << shift;
      }
    }
}

/// A two-input f32 kernel's operands placed `shift` elements into padded
/// buffers (plans place tensors at other offsets for other K), with its
/// output buffer likewise; run() runs the kernel on them.
struct ShiftedRun {
  std::vector<float> a, b, y;
  int64_t shift, outN;
  ShiftedRun(const Tensor &A, const Tensor &B, int64_t outElems, int64_t s)
      : a(A.numel() + 16), b(B.numel() + 16), y(outElems + 16, 0.0f), shift(s), outN(outElems) {
    std::memcpy(a.data() + shift, A.raw(), A.bytes());
    std::memcpy(b.data() + shift, B.raw(), B.bytes());
  }
  Status run(Kernel &k, ExecContext &ctx) {
    const void *in[2] = {a.data() + shift, b.data() + shift};
    void *out[1] = {y.data() + shift};
    return k.run(ctx, in, out);
  }
  std::vector<float> output() const {
    return std::vector<float>(y.begin() + shift, y.begin() + shift + outN);
  }
};

// pipec:FusedGemm (fuse-gemm-epilogue) against its unfused nodes, MatMul or
// Gemm, Add of the bias and the activation, on each path its product can
// take: sgemm tiles (B not transposed), a oneDNN matmul (B transposed) and
// the packed one (inference on a layer's weights), in training and
// inference. On the sgemm path the epilogue computes what the Add and the
// activation kernels do, bit for bit; oneDNN's post-ops add the bias as
// the Add does and round their GELUs as oneDNN's eltwise kernels do
// (within 2e-6 of the value here). Every path gives the same bits on one
// and two threads.
TEST(LinalgKernels, FusedGemmEqualsItsUnfusedNodes) {
  struct Case {
    Shape a;
    int64_t N;
    bool tb, training, exact;
  };
  const Case cases[] = {{{2, 16, 64}, 48, false, true, true},     // sgemm tiles
                        {{32, 256}, 64, true, true, false},       // oneDNN matmul
                        {{128, 1024}, 256, true, false, false},   // packed (inference)
                        {{128, 256}, 1024, true, true, false},    // a matmul per tile
                        {{600, 512}, 512, false, false, true}};   // sgemm, several tiles
  for (const Case &c : cases)
    for (const char *act : {"", "Relu", "Gelu", "GeluTanh"})
      for (bool bias : {false, true}) {
        if (!bias && !*act)
          continue;
        const int64_t K = c.a.back();
        const std::string what = cat(shapeStr(c.a), " N=", c.N, " tb=", c.tb, " act=", act, " bias=", bias,
                                     c.training ? " training" : " inference");
        Tensor A = randomT(DType::F32, c.a, static_cast<uint32_t>(K + c.N));
        Tensor B =
            randomT(DType::F32, c.tb ? Shape{c.N, K} : Shape{K, c.N}, static_cast<uint32_t>(3 * K));
        Tensor bv = randomT(DType::F32, {c.N}, static_cast<uint32_t>(c.N));
        Shape ys(c.a.begin(), c.a.end() - 1);
        ys.push_back(c.N);
        ExecContext ctx;
        ctx.training = c.training;
        AttrMap at{{"transB", Attribute::ofInt(c.tb)}};
        if (*act)
          at["activation"] = Attribute::ofString(act);
        std::vector<TensorDesc> ins{A.desc(), B.desc()};
        std::vector<Tensor> vals{A, B};
        if (bias) {
          ins.push_back(bv.desc());
          vals.push_back(bv);
        }
        OpDesc fd = makeDesc("FusedGemm", ins, {{DType::F32, ys}}, at);
        fd.domain = "pipec";
        fd.stepInvariant = {false, true, false};
        std::vector<Tensor> fused = eval(fd, vals, ctx);
        ASSERT_EQ(fused.size(), 1u) << what;
        EXPECT_TRUE(sameWithThreads(fd, vals, ctx)) << what;
        // The unfused nodes: the product on the same path, then the Add,
        // then the activation.
        OpDesc pd = c.a.size() == 2 ? makeDesc("Gemm", {A.desc(), B.desc()}, {{DType::F32, ys}},
                                               {{"transB", Attribute::ofInt(c.tb)}}, 13)
                                    : makeDesc("MatMul", {A.desc(), B.desc()}, {{DType::F32, ys}});
        pd.stepInvariant = {false, true};
        std::vector<Tensor> y = eval(pd, {A, B}, ctx);
        ASSERT_EQ(y.size(), 1u) << what;
        if (bias)
          y = eval(makeDesc("Add", {y[0].desc(), bv.desc()}, {y[0].desc()}, {}, 14), {y[0], bv});
        if (*act) {
          const bool gelu = std::string(act) != "Relu";
          AttrMap ga;
          if (std::string(act) == "GeluTanh")
            ga["approximate"] = Attribute::ofString("tanh");
          y = eval(makeDesc(gelu ? "Gelu" : "Relu", {y[0].desc()}, {y[0].desc()}, ga, gelu ? 20 : 14), {y[0]});
        }
        ASSERT_EQ(y.size(), 1u) << what;
        if (c.exact) {
          EXPECT_TRUE(fused[0].identical(y[0])) << what;
          continue;
        }
        double worst = 0;
        for (int64_t i = 0; i < y[0].numel(); ++i)
          worst = std::max(worst, std::fabs(double(fused[0].data<float>()[i]) - y[0].data<float>()[i]));
        EXPECT_LE(worst, 2e-6) << what;
      }
}

/// pipec:AttentionGrad (attributes `attrs`) on `in` (Q, K, V, [mask,] dO)
/// with P recomputed and with the forward's `probs` given, which must give
/// bitwise the same dQ, dK, dV (checked, named `what`). Returns the given
/// form: its node, inputs and outputs.
struct AttentionGradRun {
  OpDesc node;
  std::vector<Tensor> in, out;
};
AttentionGradRun attentionGradBothWays(const AttrMap &attrs, const std::vector<Tensor> &in, const Tensor &probs,
                                       const std::string &what) {
  auto node = [&](const std::vector<Tensor> &ins) {
    std::vector<TensorDesc> descs;
    for (const Tensor &t : ins)
      descs.push_back(t.desc());
    OpDesc d = makeDesc("AttentionGrad", std::move(descs), {in[0].desc(), in[1].desc(), in[2].desc()}, attrs);
    d.domain = "pipec";
    return d;
  };
  AttentionGradRun given{{}, in, {}};
  given.in.push_back(probs);
  given.node = node(given.in);
  const std::vector<Tensor> recomputed = eval(node(in), in);
  given.out = eval(given.node, given.in);
  EXPECT_EQ(recomputed.size(), 3u) << what;
  EXPECT_EQ(given.out.size(), 3u) << what;
  for (size_t i = 0; i < 3 && i < recomputed.size() && i < given.out.size(); ++i)
    EXPECT_TRUE(recomputed[i].identical(given.out[i])) << what << " output " << i;
  return given;
}

// keep-attention-probs (passes/AttentionProbs.cpp): pipec:Attention's
// second output P is the probabilities the gradient would recompute, so
// AttentionGrad given P gives bitwise what it gives without; both layouts,
// every mask kind, 1 and 2 threads.
TEST(LinalgKernels, AttentionGradGivenTheForwardsProbabilitiesIsBitwiseTheSame) {
  for (bool inner : {false, true})
    for (const char *kind : {"none", "add", "bool"}) {
      const Shape q = inner ? Shape{2, 16, 3, 8} : Shape{2, 3, 16, 8};
      const Shape k = inner ? Shape{2, 12, 3, 8} : Shape{2, 3, 8, 12};
      const Shape v = inner ? Shape{2, 12, 3, 4} : Shape{2, 3, 12, 4};
      const Shape o = inner ? Shape{2, 16, 3, 4} : Shape{2, 3, 16, 4};
      const Shape scores{2, 3, 16, 12};
      std::vector<Tensor> in{randomT(DType::F32, q, 301), randomT(DType::F32, k, 302),
                             randomT(DType::F32, v, 303)};
      AttrMap attrs{{"scale", Attribute::ofFloat(0.35f)}, {"mask", Attribute::ofString(kind)},
                    {"heads_inner", Attribute::ofInt(inner)}};
      if (std::string(kind) == "add") {
        in.push_back(randomT(DType::F32, {16, 12}, 304));
      } else if (std::string(kind) == "bool") {
        Tensor m(DType::Bool, {16, 12});
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 12; ++j)
            m.data<uint8_t>()[i * 12 + j] = j > i ? 1 : 0;
        in.push_back(m);
        attrs["fill"] = Attribute::ofFloat(-INFINITY);
      }
      std::vector<TensorDesc> descs;
      for (const Tensor &t : in)
        descs.push_back(t.desc());
      const std::string what = std::string(kind) + (inner ? " heads_inner" : "");
      auto node = [&](const char *op, std::vector<TensorDesc> ins, std::vector<TensorDesc> outs) {
        OpDesc d = makeDesc(op, std::move(ins), std::move(outs), attrs);
        d.domain = "pipec";
        return d;
      };
      std::vector<Tensor> fwd = eval(node("Attention", descs, {{DType::F32, o}, {DType::F32, scores}}), in);
      ASSERT_EQ(fwd.size(), 2u) << what;
      // P is a softmax: rows sum to 1.
      for (int64_t r = 0; r < fwd[1].numel() / 12; ++r) {
        double sum = 0;
        for (int64_t j = 0; j < 12; ++j)
          sum += fwd[1].data<float>()[r * 12 + j];
        EXPECT_NEAR(sum, 1.0, 1e-6) << what << " row " << r;
      }
      std::vector<Tensor> one = eval(node("Attention", descs, {{DType::F32, o}}), in);
      ASSERT_EQ(one.size(), 1u);
      EXPECT_TRUE(one[0].identical(fwd[0])) << what;
      in.push_back(randomT(DType::F32, o, 305));
      AttentionGradRun given = attentionGradBothWays(attrs, in, fwd[1], what);
      EXPECT_TRUE(sameWithThreads(given.node, given.in)) << what;
      // A P of the wrong shape is refused.
      AttentionGradRun wrong = given;
      wrong.node.inputs.back() = TensorDesc{DType::F32, {2, 3, 12, 16}};
      wrong.in.back() = Tensor(DType::F32, {2, 3, 12, 16});
      EXPECT_NE(evalError(wrong.node, wrong.in).find("P is"), std::string::npos) << what;
    }
}

// Masks that leave whole blocks of the scores masked (causal ones) let
// Attention and AttentionGrad skip those blocks (runtime/cpu/kernels/
// Attention.cpp, causalBlocks): O, P, dQ, dK and dV against float64, for
// both layouts, a causal mask (bool and additive -inf), one whose rows see
// windows of varying length (blocks reach different widths, not in
// order), fewer queries than keys, windows that leave the last keys
// unseen (dK and dV zero there), and a row masked all through (its block
// keeps every column; the row is NaN as unblocked). An additive mask of
// -1e29, which is not skipped, gives the same values within rounding; P
// given equals P recomputed bitwise; 1 and 2 threads bitwise.
TEST(LinalgKernels, AttentionSkipsMaskedBlocks) {
  const int64_t n = 2, h = 2, d = 8, dv = 4, t = 150;
  struct Case {
    const char *name;
    int64_t s;
    std::function<bool(int64_t, int64_t)> masked; // (row, column)
  };
  const std::vector<Case> cases = {
      {"causal", 150, [](int64_t i, int64_t j) { return j > i; }},
      {"windows", 150, [](int64_t i, int64_t j) { return j > (i * 37) % 140; }},
      {"fewer queries", 100, [](int64_t i, int64_t j) { return j > i + 50; }},
      {"short windows", 150, [](int64_t i, int64_t j) { return j > i % 60; }},
      {"a row masked", 150, [](int64_t i, int64_t j) { return j > i || i == 80; }},
  };
  for (bool inner : {false, true})
    for (const Case &c : cases)
      for (const char *kind : {"bool", "add"}) {
        const int64_t s = c.s;
        const std::string what = cat(c.name, " ", kind, inner ? " heads_inner" : "");
        const Shape q = inner ? Shape{n, s, h, d} : Shape{n, h, s, d};
        const Shape k = inner ? Shape{n, t, h, d} : Shape{n, h, d, t};
        const Shape v = inner ? Shape{n, t, h, dv} : Shape{n, h, t, dv};
        const Shape o = inner ? Shape{n, s, h, dv} : Shape{n, h, s, dv};
        const Shape scores{n, h, s, t};
        std::vector<Tensor> in{randomT(DType::F32, q, 311), randomT(DType::F32, k, 312),
                               randomT(DType::F32, v, 313)};
        AttrMap attrs{{"scale", Attribute::ofFloat(0.35f)}, {"mask", Attribute::ofString(kind)},
                      {"heads_inner", Attribute::ofInt(inner)}};
        Tensor unblockedMask(DType::F32, {s, t});
        if (std::string(kind) == "bool") {
          Tensor m(DType::Bool, {s, t});
          for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < t; ++j)
              m.data<uint8_t>()[i * t + j] = c.masked(i, j) ? 1 : 0;
          in.push_back(m);
          attrs["fill"] = Attribute::ofFloat(-INFINITY);
        } else {
          Tensor m = randomT(DType::F32, {s, t}, 314);
          for (int64_t i = 0; i < s * t; ++i) {
            const bool off = c.masked(i / t, i % t);
            unblockedMask.data<float>()[i] = off ? -1e29f : m.data<float>()[i];
            if (off)
              m.data<float>()[i] = -INFINITY;
          }
          in.push_back(m);
        }
        in.push_back(randomT(DType::F32, o, 315)); // dO
        // Element (r, col) of item b, head e of a [n, h, rows, cols] operand
        // ([n, rows, h, cols] heads inner); KT is [n, h, d, t], K [n, t, h, d].
        auto idx = [&](const Shape &sh, int64_t b, int64_t e, int64_t r, int64_t col) {
          return inner ? ((b * sh[1] + r) * h + e) * sh[3] + col : ((b * h + e) * sh[2] + r) * sh[3] + col;
        };
        auto Q = [&](int64_t b, int64_t e, int64_t i, int64_t x) { return in[0].getDouble(idx(q, b, e, i, x)); };
        auto K = [&](int64_t b, int64_t e, int64_t j, int64_t x) {
          return inner ? in[1].getDouble(idx(k, b, e, j, x)) : in[1].getDouble(idx(k, b, e, x, j));
        };
        auto V = [&](int64_t b, int64_t e, int64_t j, int64_t x) { return in[2].getDouble(idx(v, b, e, j, x)); };
        auto DO = [&](int64_t b, int64_t e, int64_t i, int64_t x) { return in[4].getDouble(idx(o, b, e, i, x)); };
        std::vector<TensorDesc> descs;
        for (size_t i = 0; i < 4; ++i)
          descs.push_back(in[i].desc());
        auto node = [&](const char *op, std::vector<TensorDesc> ins, std::vector<TensorDesc> outs) {
          OpDesc nd = makeDesc(op, std::move(ins), std::move(outs), attrs);
          nd.domain = "pipec";
          return nd;
        };
        const std::vector<Tensor> fwdIn(in.begin(), in.begin() + 4);
        OpDesc fwdNode = node("Attention", descs, {{DType::F32, o}, {DType::F32, scores}});
        std::vector<Tensor> fwd = eval(fwdNode, fwdIn);
        ASSERT_EQ(fwd.size(), 2u) << what;
        EXPECT_TRUE(sameWithThreads(fwdNode, fwdIn)) << what;
        const AttentionGradRun given = attentionGradBothWays(attrs, in, fwd[1], what);
        ASSERT_EQ(given.out.size(), 3u) << what;
        const std::vector<Tensor> &grad = given.out;
        EXPECT_TRUE(sameWithThreads(given.node, given.in)) << what;
        {
          // Into outputs that hold NaNs, as an arena may: every element is
          // written (the zeros of keys no query sees too).
          auto kernel = createKernel(given.node);
          ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
          std::vector<unsigned char> ws((*kernel)->workspaceBytes() + 64);
          ExecContext ctx;
          ctx.workspace = ws.data();
          std::vector<Tensor> outs;
          std::vector<const void *> ip;
          std::vector<void *> op;
          for (const Tensor &x : given.in)
            ip.push_back(x.raw());
          for (const Tensor &x : grad) {
            outs.emplace_back(DType::F32, x.shape());
            std::fill(outs.back().data<float>(), outs.back().data<float>() + x.numel(), NAN);
            op.push_back(outs.back().raw());
          }
          ASSERT_TRUE((*kernel)->run(ctx, ip.data(), op.data()).isOk()) << what;
          for (size_t i = 0; i < 3; ++i)
            EXPECT_TRUE(outs[i].identical(grad[i])) << what << " output " << i << " over NaNs";
        }
        // float64: P, O, dV, dP, dS, dQ, dK.
        std::vector<double> P(static_cast<size_t>(s * t)), dS(static_cast<size_t>(s * t));
        auto at = [t](std::vector<double> &m, int64_t i, int64_t j) -> double & { return m[static_cast<size_t>(i * t + j)]; };
        bool nanRowSeen = false;
        auto check = [&](double got, double want, double mag, const char *name) {
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << what << " " << name;
            nanRowSeen = true;
            return;
          }
          EXPECT_LE(std::fabs(got - want) / (mag + 1e-3), 2e-5)
              << what << " " << name << " got " << got << " want " << want;
        };
        // Sum of term(r) over r in [0, count) and of its magnitudes.
        auto sum = [](int64_t count, auto &&term) {
          double acc = 0, mag = 0;
          for (int64_t r = 0; r < count; ++r) {
            const double x = term(r);
            acc += x;
            mag += std::fabs(x);
          }
          return std::pair<double, double>{acc, mag};
        };
        const float scale = 0.35f;
        const bool boolMask = std::string(kind) == "bool";
        for (int64_t b = 0; b < n; ++b)
          for (int64_t e = 0; e < h; ++e) {
            for (int64_t i = 0; i < s; ++i) {
              double mx = -INFINITY;
              std::vector<double> row(static_cast<size_t>(t));
              for (int64_t j = 0; j < t; ++j) {
                const double qk = sum(d, [&](int64_t x) { return Q(b, e, i, x) * K(b, e, j, x); }).first * scale;
                double &r = row[static_cast<size_t>(j)];
                r = boolMask ? (c.masked(i, j) ? -INFINITY : qk) : qk + in[3].getDouble(i * t + j);
                mx = std::max(mx, r);
              }
              double total = 0;
              for (double &r : row)
                total += (r = std::exp(r - mx));
              for (int64_t j = 0; j < t; ++j) {
                at(P, i, j) = row[static_cast<size_t>(j)] / total;
                check(fwd[1].getDouble(((b * h + e) * s + i) * t + j), at(P, i, j), 1.0, "P");
              }
            }
            for (int64_t i = 0; i < s; ++i) {
              for (int64_t x = 0; x < dv; ++x) {
                const auto [o_, mag] = sum(t, [&](int64_t j) { return at(P, i, j) * V(b, e, j, x); });
                check(fwd[0].getDouble(idx(o, b, e, i, x)), o_, mag, "O");
              }
              std::vector<double> dp(static_cast<size_t>(t));
              for (int64_t j = 0; j < t; ++j)
                dp[static_cast<size_t>(j)] = sum(dv, [&](int64_t x) { return DO(b, e, i, x) * V(b, e, j, x); }).first;
              const double dot = sum(t, [&](int64_t j) { return dp[static_cast<size_t>(j)] * at(P, i, j); }).first;
              for (int64_t j = 0; j < t; ++j)
                at(dS, i, j) = scale * at(P, i, j) * (dp[static_cast<size_t>(j)] - dot);
            }
            for (int64_t j = 0; j < t; ++j) {
              for (int64_t x = 0; x < dv; ++x) {
                const auto [dv_, mag] = sum(s, [&](int64_t i) { return at(P, i, j) * DO(b, e, i, x); });
                check(grad[2].getDouble(idx(v, b, e, j, x)), dv_, mag, "dV");
              }
              for (int64_t x = 0; x < d; ++x) {
                const auto [dk, mag] = sum(s, [&](int64_t i) { return at(dS, i, j) * Q(b, e, i, x); });
                check(grad[1].getDouble(inner ? idx(k, b, e, j, x) : idx(k, b, e, x, j)), dk, mag, "dK");
              }
            }
            for (int64_t i = 0; i < s; ++i)
              for (int64_t x = 0; x < d; ++x) {
                const auto [dq, mag] = sum(t, [&](int64_t j) { return at(dS, i, j) * K(b, e, j, x); });
                check(grad[0].getDouble(idx(q, b, e, i, x)), dq, mag, "dQ");
              }
          }
        EXPECT_EQ(nanRowSeen, std::string(c.name) == "a row masked") << what;
        // The mask of -1e29 is not skipped: the same values within rounding.
        if (std::string(kind) == "add") {
          std::vector<Tensor> un = fwdIn;
          un[3] = unblockedMask;
          std::vector<Tensor> ref = eval(fwdNode, un);
          for (int64_t i = 0; i < ref[0].numel(); ++i) {
            const int64_t row = inner ? i / (h * dv) % s : i / dv % s;
            if (std::string(c.name) != "a row masked" || row != 80) {
              EXPECT_NEAR(fwd[0].getDouble(i), ref[0].getDouble(i), 1e-5) << what << " unblocked O " << i;
            }
          }
        }
      }
}

// pack-qkv (passes/PackQkv.cpp): Attention and AttentionGrad reading Q, K
// and V as the thirds of one [n, s, 3 h d] tensor (and writing dQKV) give
// bitwise what the unpacked nodes give on the split parts; every mask
// kind, with and without P, 1 and 2 threads. Shapes that do not pack are
// refused.
TEST(LinalgKernels, PackedQkvAttentionIsBitwiseTheSplitOne) {
  const int64_t n = 2, s = 12, h = 3, d = 8, hd = h * d;
  for (const char *kind : {"none", "add", "bool"})
    for (bool probs : {false, true}) {
      const Tensor X = randomT(DType::F32, {n, s, 3 * hd}, 311);
      // The three parts as [n, s, h, d] tensors (Split, then Reshape).
      std::vector<Tensor> parts;
      for (int p = 0; p < 3; ++p) {
        Tensor t(DType::F32, {n, s, h, d});
        for (int64_t r = 0; r < n * s; ++r)
          for (int64_t c = 0; c < hd; ++c)
            t.data<float>()[r * hd + c] = X.data<float>()[r * 3 * hd + p * hd + c];
        parts.push_back(t);
      }
      AttrMap attrs{{"scale", Attribute::ofFloat(0.35f)}, {"mask", Attribute::ofString(kind)},
                    {"heads_inner", Attribute::ofInt(1)}};
      std::vector<Tensor> extra; // the mask
      if (std::string(kind) == "add") {
        extra.push_back(randomT(DType::F32, {s, s}, 314));
      } else if (std::string(kind) == "bool") {
        Tensor m(DType::Bool, {s, s});
        for (int i = 0; i < s; ++i)
          for (int j = 0; j < s; ++j)
            m.data<uint8_t>()[i * s + j] = j > i ? 1 : 0;
        extra.push_back(m);
        attrs["fill"] = Attribute::ofFloat(-INFINITY);
      }
      AttrMap packedAttrs = attrs;
      packedAttrs["packed_qkv"] = Attribute::ofInt(1);
      packedAttrs["heads"] = Attribute::ofInt(h);
      const std::string what = std::string(kind) + (probs ? " with P" : "");
      auto node = [&](const char *op, const AttrMap &at, const std::vector<Tensor> &ins,
                      std::vector<TensorDesc> outs) {
        std::vector<TensorDesc> descs;
        for (const Tensor &t : ins)
          descs.push_back(t.desc());
        OpDesc dd = makeDesc(op, std::move(descs), std::move(outs), at);
        dd.domain = "pipec";
        return dd;
      };
      const TensorDesc o{DType::F32, {n, s, h, d}}, scores{DType::F32, {n, h, s, s}};
      std::vector<Tensor> plainIn = parts, packedIn{X, X, X};
      for (const Tensor &t : extra) {
        plainIn.push_back(t);
        packedIn.push_back(t);
      }
      std::vector<TensorDesc> fwdOuts{o};
      if (probs)
        fwdOuts.push_back(scores);
      std::vector<Tensor> a = eval(node("Attention", attrs, plainIn, fwdOuts), plainIn);
      const OpDesc packedFwd = node("Attention", packedAttrs, packedIn, fwdOuts);
      std::vector<Tensor> b = eval(packedFwd, packedIn);
      ASSERT_EQ(a.size(), fwdOuts.size()) << what;
      ASSERT_EQ(b.size(), fwdOuts.size()) << what;
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(a[i].identical(b[i])) << what << " forward output " << i;
      EXPECT_TRUE(sameWithThreads(packedFwd, packedIn)) << what;
      const Tensor dO = randomT(DType::F32, o.shape, 315);
      plainIn.push_back(dO);
      packedIn.push_back(dO);
      if (probs) {
        plainIn.push_back(a[1]);
        packedIn.push_back(b[1]);
      }
      std::vector<Tensor> ga =
          eval(node("AttentionGrad", attrs, plainIn, {parts[0].desc(), parts[1].desc(), parts[2].desc()}), plainIn);
      const OpDesc packedGrad = node("AttentionGrad", packedAttrs, packedIn, {X.desc()});
      std::vector<Tensor> gb = eval(packedGrad, packedIn);
      ASSERT_EQ(ga.size(), 3u) << what;
      ASSERT_EQ(gb.size(), 1u) << what;
      // dQKV's thirds are dQ, dK and dV.
      bool same = true;
      for (int p = 0; p < 3; ++p)
        for (int64_t r = 0; r < n * s; ++r)
          same = same && std::memcmp(gb[0].data<float>() + r * 3 * hd + p * hd, ga[p].data<float>() + r * hd,
                                     static_cast<size_t>(hd) * sizeof(float)) == 0;
      EXPECT_TRUE(same) << what;
      EXPECT_TRUE(sameWithThreads(packedGrad, packedIn)) << what;
      // The unpacked gradient's three outputs, or a width that is not
      // 3 x heads x d, are refused.
      EXPECT_NE(evalError(node("AttentionGrad", packedAttrs, packedIn, {X.desc(), X.desc(), X.desc()}), packedIn)
                    .find("expects 1 output"),
                std::string::npos)
          << what;
      AttrMap wrongHeads = packedAttrs;
      wrongHeads["heads"] = Attribute::ofInt(5);
      std::vector<Tensor> wrongIn{X, X, X};
      wrongIn.insert(wrongIn.end(), extra.begin(), extra.end());
      EXPECT_NE(evalError(node("Attention", wrongHeads, wrongIn, {o}), wrongIn).find("packed_qkv"), std::string::npos)
          << what;
    }
}

// Gemm with transB at a micro-batch's sizes runs as a prepared oneDNN matmul
// (runtime/cpu/kernels/DnnlGemm.cpp), in several tiles one per tile
// (128x1024x256 through a dense buffer, 1024x128x256 on whole rows of C):
// its bits may not depend on where the operands lie nor on
// the thread count, and with ExecContext::accumulate it adds to what Y
// holds.
TEST(LinalgKernels, TransposedBGemmIsExactAnywhereAndAccumulates) {
  struct Shape3 {
    int64_t M, N, K;
  };
  for (const Shape3 &sh : {Shape3{32, 64, 256}, Shape3{16, 64, 256}, Shape3{32, 64, 192},
                           Shape3{64, 10, 784}, Shape3{128, 1024, 256}, Shape3{1024, 128, 256}})
    for (bool ta : {false, true}) {
      const int64_t M = sh.M, N = sh.N, K = sh.K;
      const std::string what = cat(M, "x", N, "x", K, " ta=", ta);
      Tensor A =
          randomT(DType::F32, ta ? Shape{K, M} : Shape{M, K}, static_cast<uint32_t>(M + K + ta));
      Tensor B = randomT(DType::F32, {N, K}, static_cast<uint32_t>(N + 3 * K));
      OpDesc d = makeDesc("Gemm", {A.desc(), B.desc()}, {{DType::F32, {M, N}}},
                          {{"transA", Attribute::ofInt(ta)}, {"transB", Attribute::ofInt(1)}}, 13);
      EXPECT_TRUE(sameWithThreads(d, {A, B})) << what;
      auto kernel = createKernel(d);
      ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
      std::vector<unsigned char> ws((*kernel)->workspaceBytes() + 64);
      ExecContext ctx;
      ctx.workspace = ws.data();
      // Y = A'B^T at four alignments, then Y += A'B^T twice.
      std::vector<float> first;
      for (int64_t shift : {0, 1, 3, 16}) {
        ShiftedRun sr(A, B, M * N, shift);
        ctx.accumulate = false;
        ASSERT_TRUE(sr.run(**kernel, ctx).isOk()) << what;
        std::vector<float> got = sr.output();
        if (first.empty())
          first = got;
        else
          EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0)
              << what << " shift " << shift;
        ctx.accumulate = true;
        for (int r = 0; r < 2; ++r)
          ASSERT_TRUE(sr.run(**kernel, ctx).isOk()) << what;
        got = sr.output();
        int bad = 0;
        for (int64_t m = 0; m < M && bad < 5; ++m)
          for (int64_t n = 0; n < N && bad < 5; ++n) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              double x = A.getDouble(ta ? k * M + m : m * K + k) * B.getDouble(n * K + k);
              s += x;
              mag += std::fabs(x);
            }
            double g = got[m * N + n];
            if (!(std::fabs(g - 3 * s) <= 3e-5 * 3 * mag + 1e-6)) {
              ADD_FAILURE() << what << " shift " << shift << ": element " << m << "," << n
                            << " got " << g << " want " << 3 * s;
              ++bad;
            }
          }
      }
    }
}

// The paths of a GEMM depend on its shape and the machine's facts alone
// (LinalgBatchedGemm::choose), asked here for a machine whose oneDNN has
// brgemm (avx512_core), one whose oneDNN has not (AVX2) and one without
// oneDNN, whatever machine runs the test.
TEST(LinalgGemmChoice, DependsOnTheMachineAlone) {
  const LinalgGemmMachine avx512{true, true}, avx2{true, false}, none{false, false};
  auto gemm = [](int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool invariant, int64_t batch = 1) {
    LinalgBatchedGemm<float> g;
    g.ta = ta;
    g.tb = tb;
    g.M = M;
    g.N = N;
    g.K = K;
    g.lda = ta ? M : K;
    g.ldb = tb ? K : N;
    g.ldc = N;
    for (int64_t b = 0; b < batch; ++b) {
      g.aOff.push_back(b * M * K);
      g.bOff.push_back(b * K * N);
      g.cOff.push_back(b * M * N);
    }
    g.bStepInvariant = invariant;
    return g;
  };
  // Inference on a transformer's fc layer: four blocks of 256 whole rows on
  // B packed once, and for training the same blocks on B as it is.
  LinalgBatchedGemm<float> fc = gemm(1024, 1024, 256, false, false, true);
  LinalgGemmChoice c = fc.choose(avx512);
  EXPECT_EQ(c.packedRows, 256);
  EXPECT_EQ(c.plainRows, 256);
  EXPECT_FALSE(c.packedColumns);
  EXPECT_FALSE(c.openBlasTiles);
  // Without brgemm: sgemm tiles, on OpenBLAS where B is plain (NN, TN).
  LinalgGemmChoice tilesOnOpenBlas;
  tilesOnOpenBlas.openBlasTiles = true;
  EXPECT_EQ(fc.choose(avx2), tilesOnOpenBlas);
  EXPECT_EQ(fc.choose(none), LinalgGemmChoice{});
  // The MLP's 128-row layer: column blocks packed (inference) on avx512.
  LinalgBatchedGemm<float> mlp = gemm(128, 1024, 1024, false, true, true);
  EXPECT_TRUE(mlp.choose(avx512).packedColumns);
  EXPECT_TRUE(mlp.choose(avx512).tilePrimitives);
  EXPECT_EQ(mlp.choose(avx512).packedRows, 0);
  EXPECT_EQ(mlp.choose(avx2), LinalgGemmChoice{}); // NT: oneDNN's sgemm tiles
  EXPECT_TRUE(gemm(1024, 256, 1024, true, false, false).choose(avx2).openBlasTiles);
  EXPECT_FALSE(gemm(1024, 256, 1024, true, false, false).choose(avx512).openBlasTiles);
  // Weight gradients: cut along K where C is at least as tall as wide.
  EXPECT_EQ(gemm(1024, 256, 1024, true, false, false).choose(avx512).splitDepth, 512);
  EXPECT_EQ(gemm(1024, 1024, 2048, true, false, false).choose(avx512).splitDepth, 512);
  EXPECT_EQ(gemm(256, 1024, 1024, true, false, false).choose(avx512).splitDepth, 0);
  EXPECT_EQ(gemm(1024, 256, 1024, true, false, false).choose(avx2).splitDepth, 0);
  // One small product with B transposed: one primitive where oneDNN has
  // brgemm; a batch of small ones (attention's heads) on every machine
  // with oneDNN; never an epilogue on a batch.
  EXPECT_TRUE(gemm(32, 64, 256, false, true, false).choose(avx512).batchPrimitive);
  EXPECT_FALSE(gemm(32, 64, 256, false, true, false).choose(avx2).batchPrimitive);
  LinalgBatchedGemm<float> heads = gemm(16, 16, 16, false, true, false, 8);
  EXPECT_TRUE(heads.choose(avx512).batchPrimitive);
  EXPECT_TRUE(heads.choose(avx2).batchPrimitive);
  EXPECT_FALSE(heads.choose(none).batchPrimitive);
  heads.act = FusedActivation::Relu;
  EXPECT_FALSE(heads.choose(avx2).batchPrimitive);
}

// An inference GEMM cut across rows (step-invariant B, more than one tile
// down M) runs, where oneDNN has brgemm, as blocks of whole rows, each one
// primitive on B packed once by the first (LinalgBatchedGemm::prepare);
// elsewhere as sgemm tiles. Whichever this machine takes: within float rounding of a
// float64 product, GELU as the epilogue computes it, B plain or
// transposed, the same bits on one and two threads, B packed again when
// its address changes, and a last block of fewer rows (1030 = 3 x 258 +
// 256) sharing the first one's copy of B. Where C is at least four times
// as wide as K is deep, the runs that do not pack B (training) take the
// same blocks on B as it is, checked alike.
TEST(LinalgKernels, RowBlocksMatchTheProduct) {
  struct Case {
    int64_t M, N, K;
    bool tb;
  };
  for (const Case &c : {Case{1024, 1024, 256, false}, Case{1030, 1024, 256, false}, Case{600, 512, 512, true},
                        Case{1024, 1024, 256, true}})
    for (FusedActivation act : {FusedActivation::None, FusedActivation::GeluErf}) {
      const std::string what = cat(c.M, "x", c.N, "x", c.K, " tb=", c.tb, " gelu=", act != FusedActivation::None);
      Tensor A = randomT(DType::F32, {c.M, c.K}, static_cast<uint32_t>(c.M + c.K));
      const Shape bs = c.tb ? Shape{c.N, c.K} : Shape{c.K, c.N};
      Tensor B1 = randomT(DType::F32, bs, static_cast<uint32_t>(7 * c.N)),
             B2 = randomT(DType::F32, bs, 99u);
      Tensor bias = randomT(DType::F32, {c.N}, 5u);
      LinalgBatchedGemm<float> g;
      g.tb = c.tb;
      g.M = c.M;
      g.N = c.N;
      g.K = c.K;
      g.lda = c.K;
      g.ldb = c.tb ? c.K : c.N;
      g.ldc = c.N;
      g.aOff = g.bOff = g.cOff = {0};
      g.bStepInvariant = true;
      g.act = act;
      g.bias = true;
      g.prepare();
      // The blocks this machine's choice asks for are the ones built
      // (LinalgGemmChoice.DependsOnTheMachineAlone checks the choice
      // itself for machines with and without oneDNN's brgemm).
      const LinalgGemmMachine host = LinalgGemmMachine::host();
      ASSERT_EQ(g.packedRowBlock(), g.choose(host).packedRows) << what;
      ASSERT_LT(g.packedRowBlock(), c.M) << what;
      // Where C is four times as wide as K is deep, the runs that do not
      // pack B (training) take blocks of rows on B as it is.
      LinalgBatchedGemm<float> plain = g;
      plain.bStepInvariant = false;
      plain.prepare();
      EXPECT_EQ(plain.plainRowBlock(), plain.choose(host).plainRows) << what;
      std::vector<unsigned char> ws(std::max(g.workspaceBytes(), plain.workspaceBytes()) + 64);
      auto product = [&](const LinalgBatchedGemm<float> &gemm, bool packed, const Tensor &B, int threads) {
        std::vector<float> y(static_cast<size_t>(c.M * c.N));
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        Status s = gemm.runPrepared(A.data<float>(), B.data<float>(), y.data(), linalgAlign(ws.data()), packed,
                                    bias.data<float>());
        omp_set_num_threads(before);
        EXPECT_TRUE(s.isOk()) << what << ": " << s.message();
        return y;
      };
      for (const Tensor *B : {&B1, &B2, &B1})
        for (bool packed : {true, false}) {
          const LinalgBatchedGemm<float> &gemm = packed ? g : plain;
          std::vector<float> one = product(gemm, packed, *B, 1), two = product(gemm, packed, *B, 2);
          EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * 4), 0) << what << " packed=" << packed;
          int bad = 0;
          for (int64_t m = 0; m < c.M && bad < 5; m += 7)
            for (int64_t n = 0; n < c.N && bad < 5; n += 3) {
              double s = bias.getDouble(n), mag = std::fabs(s);
              for (int64_t k = 0; k < c.K; ++k) {
                const double x = A.getDouble(m * c.K + k) * B->getDouble(c.tb ? n * c.K + k : k * c.N + n);
                s += x;
                mag += std::fabs(x);
              }
              const float pre = static_cast<float>(s);
              const double want = act == FusedActivation::None ? s : double(geluErfOf(pre));
              if (!(std::fabs(one[static_cast<size_t>(m * c.N + n)] - want) <= 2e-6 * mag + 1e-6)) {
                ADD_FAILURE() << what << " packed=" << packed << ": element " << m << "," << n << " got "
                              << one[static_cast<size_t>(m * c.N + n)] << " want " << want;
                ++bad;
              }
            }
        }
    }
}

// A weight gradient's GEMM (A transposed, B plain) of several tiles runs
// cut along K where oneDNN has brgemm (LinalgBatchedGemm::prepare), in
// sgemm tiles elsewhere; whichever this machine takes: each part's product, the
// partial sums added in part order, with alpha and with beta onto what C
// held (gradients accumulated over micro-batches), the same bits on one
// thread and two, and a shorter last part (K 1000 = 512 + 488).
TEST(LinalgKernels, SplitAlongKMatchesTheProduct) {
  struct Case {
    int64_t M, N, K, depth;
  };
  for (const Case &c : {Case{1024, 256, 1024, 512}, Case{1024, 256, 1000, 512}, Case{1024, 1024, 2048, 512}})
    for (float beta : {0.0f, 1.0f}) {
      const std::string what = cat(c.M, "x", c.N, "x", c.K, " beta=", beta);
      Tensor A = randomT(DType::F32, {c.K, c.M},
                         static_cast<uint32_t>(c.M + 3 * c.K)); // transposed: [K, M]
      Tensor B = randomT(DType::F32, {c.K, c.N}, static_cast<uint32_t>(5 * c.N));
      Tensor C0 = randomT(DType::F32, {c.M, c.N}, 17u);
      LinalgBatchedGemm<float> g;
      g.ta = true;
      g.M = c.M;
      g.N = c.N;
      g.K = c.K;
      g.lda = c.M;
      g.ldb = c.N;
      g.ldc = c.N;
      g.alpha = 0.5f;
      g.beta = beta;
      g.aOff = g.bOff = g.cOff = {0};
      g.prepare();
      const LinalgGemmMachine host = LinalgGemmMachine::host();
      ASSERT_EQ(g.splitDepth(), g.choose(host).splitDepth) << what;
      LinalgBatchedGemm<float> wide = g; // C wider than tall: tiles
      std::swap(wide.M, wide.N);
      wide.lda = wide.M;
      wide.ldb = wide.ldc = wide.N;
      wide.prepare();
      EXPECT_EQ(wide.splitDepth(), wide.choose(host).splitDepth) << what;
      std::vector<unsigned char> ws(g.workspaceBytes() + 64);
      auto product = [&](int threads) {
        std::vector<float> y(C0.data<float>(), C0.data<float>() + c.M * c.N);
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        Status s = g.runPrepared(A.data<float>(), B.data<float>(), y.data(), linalgAlign(ws.data()));
        omp_set_num_threads(before);
        EXPECT_TRUE(s.isOk()) << what << ": " << s.message();
        return y;
      };
      std::vector<float> one = product(1), two = product(2);
      EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * 4), 0) << what;
      int bad = 0;
      for (int64_t m = 0; m < c.M && bad < 5; m += 5)
        for (int64_t n = 0; n < c.N && bad < 5; n += 7) {
          double s = beta * C0.getDouble(m * c.N + n), mag = std::fabs(s);
          for (int64_t k = 0; k < c.K; ++k) {
            const double x = 0.5 * A.getDouble(k * c.M + m) * B.getDouble(k * c.N + n);
            s += x;
            mag += std::fabs(x);
          }
          if (!(std::fabs(one[static_cast<size_t>(m * c.N + n)] - s) <= 2e-6 * mag + 1e-6)) {
            ADD_FAILURE() << what << ": element " << m << "," << n << " got " << one[static_cast<size_t>(m * c.N + n)]
                          << " want " << s;
            ++bad;
          }
        }
    }
}

// A batch of small products runs as one oneDNN matmul primitive
// (runtime/cpu/kernels/DnnlGemm.cpp): its bits may not depend on where the
// operands lie (plans place tensors at other offsets for other K) nor on the
// thread count.
TEST(LinalgKernels, BatchedMatMulBitsDoNotDependOnPlacementOrThreads) {
  struct Case {
    Shape a, b, out;
  };
  for (const Case &c : {Case{{2, 4, 16, 16}, {2, 4, 16, 16}, {2, 4, 16, 16}},
                        Case{{8, 16, 64}, {8, 64, 16}, {8, 16, 16}},
                        Case{{5, 7}, {4, 7, 3}, {4, 5, 3}}}) {
    Tensor A = randomT(DType::F32, c.a, 91), B = randomT(DType::F32, c.b, 92);
    OpDesc d = makeDesc("MatMul", {A.desc(), B.desc()}, {{DType::F32, c.out}});
    const std::string what = cat(shapeStr(c.a), " x ", shapeStr(c.b));
    EXPECT_TRUE(sameWithThreads(d, {A, B})) << what;
    auto kernel = createKernel(d);
    ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
    std::vector<unsigned char> ws((*kernel)->workspaceBytes() + 64);
    ExecContext ctx;
    ctx.workspace = ws.data();
    const int64_t outN = numElements(c.out);
    std::vector<float> first;
    for (int64_t shift : {0, 1, 3, 16}) {
      ShiftedRun sr(A, B, outN, shift);
      ASSERT_TRUE(sr.run(**kernel, ctx).isOk()) << what;
      std::vector<float> got = sr.output();
      if (first.empty())
        first = got;
      else
        EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0)
            << what << " shift " << shift;
    }
  }
}

/// numpy matmul in double, for rank >= 1 operands.
std::vector<double> refMatMul(const Tensor &a, const Tensor &b, Shape &outShape,
                              std::vector<double> &scale) {
  Shape as = a.shape(), bs = b.shape();
  bool av = as.size() == 1, bv = bs.size() == 1;
  if (av)
    as.insert(as.begin(), 1);
  if (bv)
    bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  while (ab.size() < r)
    ab.insert(ab.begin(), 1);
  while (bb.size() < r)
    bb.insert(bb.begin(), 1);
  Shape batch(r);
  for (size_t i = 0; i < r; ++i)
    batch[i] = std::max(ab[i], bb[i]);
  outShape = batch;
  if (!av)
    outShape.push_back(M);
  if (!bv)
    outShape.push_back(N);
  int64_t nb = numElements(batch);
  std::vector<double> out(nb * M * N), sc(nb * M * N);
  std::vector<int64_t> idx(r, 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t ao = 0, bo = 0;
    for (size_t i = 0; i < r; ++i) {
      ao = ao * ab[i] + (ab[i] == 1 ? 0 : idx[i]);
      bo = bo * bb[i] + (bb[i] == 1 ? 0 : idx[i]);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, t = 0;
        for (int64_t k = 0; k < K; ++k) {
          double p = a.getDouble(ao * M * K + m * K + k) * b.getDouble(bo * K * N + k * N + n);
          s += p;
          t += std::fabs(p);
        }
        out[(bi * M + m) * N + n] = s;
        sc[(bi * M + m) * N + n] = t;
      }
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < batch[i])
        break;
      idx[i] = 0;
    }
  }
  scale = sc;
  return out;
}

TEST(LinalgKernels, MatMulMatchesReference) {
  struct Case {
    Shape a, b;
    DType dt;
  };
  const Case cases[] = {
      {{5}, {5}, DType::F32},
      {{3, 5}, {5}, DType::F32},
      {{7}, {7, 9}, DType::F32},
      {{1, 1}, {1, 1}, DType::F32},
      {{33, 65}, {65, 17}, DType::F32},
      {{2, 3, 4, 5}, {5, 6}, DType::F32},    // B shared: folded into one GEMM
      {{2, 1, 4, 5}, {3, 5, 6}, DType::F32}, // both broadcast
      {{5, 7}, {4, 7, 3}, DType::F32},       // A shared
      {{3, 1, 17, 33}, {1, 4, 33, 9}, DType::F64},
      {{6, 129, 31}, {6, 31, 65}, DType::F32}, // batched, BLAS per batch
      {{64, 3, 4}, {64, 4, 2}, DType::F32},    // many tiny products
      {{4, 3, 5}, {5, 2}, DType::I32},
      {{2, 3, 5}, {2, 5, 4}, DType::I64},
  };
  uint32_t seed = 1;
  for (const Case &c : cases) {
    Tensor A = randomT(c.dt, c.a, ++seed), B = randomT(c.dt, c.b, ++seed);
    Shape os;
    std::vector<double> scale;
    std::vector<double> want = refMatMul(A, B, os, scale);
    OpDesc d = makeDesc("MatMul", {A.desc(), B.desc()}, {{c.dt, os}});
    std::vector<Tensor> out = eval(d, {A, B});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), os);
    expectClose(out[0], want, scale, c.dt == DType::F32 ? 1e-5 : 1e-12,
                cat("MatMul ", shapeStr(c.a), " x ", shapeStr(c.b)));
  }
}

TEST(LinalgKernels, EinsumMatchesReference) {
  Tensor a = randomT(DType::F32, {3, 4}, 1), b = randomT(DType::F32, {4, 5}, 2),
         sq = randomT(DType::F32, {4, 4}, 3);
  Tensor bat = randomT(DType::F32, {2, 3, 4}, 4), bat2 = randomT(DType::F32, {2, 5, 4}, 5);
  Tensor e3 = randomT(DType::F32, {2, 1, 3, 4}, 6), e3b = randomT(DType::F32, {3, 4, 5}, 7);
  Tensor v = randomT(DType::F32, {4}, 8), w = randomT(DType::F32, {5}, 9),
         c3 = randomT(DType::F32, {5, 6}, 10);
  struct Case {
    std::string eq;
    std::vector<Tensor> in;
    Shape out;
    std::function<double(const std::vector<int64_t> &)> ref; ///< by output index
  };
  auto at = [](const Tensor &t, std::initializer_list<int64_t> idx) {
    std::vector<int64_t> st = rowMajorStrides(t.shape());
    int64_t o = 0, k = 0;
    for (int64_t i : idx)
      o += i * st[k++];
    return t.getDouble(o);
  };
  std::vector<Case> cases = {
      {"ij,jk->ik",
       {a, b},
       {3, 5},
       [&](auto i) {
         double s = 0;
         for (int64_t j = 0; j < 4; ++j)
           s += at(a, {i[0], j}) * at(b, {j, i[1]});
         return s;
       }},
      {"ij,jk",
       {a, b},
       {3, 5},
       [&](auto i) {
         double s = 0;
         for (int64_t j = 0; j < 4; ++j)
           s += at(a, {i[0], j}) * at(b, {j, i[1]});
         return s;
       }},
      {"ba",
       {a},
       {4, 3},
       [&](auto i) {
         return at(a, {i[1], i[0]});
       }},
      {"ii->i",
       {sq},
       {4},
       [&](auto i) {
         return at(sq, {i[0], i[0]});
       }},
      {"ii",
       {sq},
       {},
       [&](auto) {
         double s = 0;
         for (int64_t j = 0; j < 4; ++j)
           s += at(sq, {j, j});
         return s;
       }},
      {"ij->",
       {a},
       {},
       [&](auto) {
         double s = 0;
         for (int64_t i = 0; i < 12; ++i)
           s += a.getDouble(i);
         return s;
       }},
      {"ij->j",
       {a},
       {4},
       [&](auto i) {
         double s = 0;
         for (int64_t r = 0; r < 3; ++r)
           s += at(a, {r, i[0]});
         return s;
       }},
      {"bij,bkj->bik",
       {bat, bat2},
       {2, 3, 5},
       [&](auto i) {
         double s = 0;
         for (int64_t j = 0; j < 4; ++j)
           s += at(bat, {i[0], i[1], j}) * at(bat2, {i[0], i[2], j});
         return s;
       }},
      {"...ij,...jk->...ik",
       {e3, e3b},
       {2, 3, 3, 5},
       [&](auto i) {
         double s = 0;
         for (int64_t j = 0; j < 4; ++j)
           s += at(e3, {i[0], 0, i[2], j}) * at(e3b, {i[1], j, i[3]});
         return s;
       }},
      {"i,j->ij", {v, w}, {4, 5}, [&](auto i) { return at(v, {i[0]}) * at(w, {i[1]}); }},
      {"ij,ij->ij",
       {a, a},
       {3, 4},
       [&](auto i) {
         return at(a, {i[0], i[1]}) * at(a, {i[0], i[1]});
       }},
      {"ij,jk,kl->il",
       {a, b, c3},
       {3, 6},
       [&](auto i) {
         double s = 0;
         for (int64_t j = 0; j < 4; ++j)
           for (int64_t k = 0; k < 5; ++k)
             s += at(a, {i[0], j}) * at(b, {j, k}) * at(c3, {k, i[1]});
         return s;
       }},
      {"bij,bij->b",
       {bat, bat},
       {2},
       [&](auto i) {
         double s = 0;
         for (int64_t r = 0; r < 3; ++r)
           for (int64_t j = 0; j < 4; ++j)
             s += at(bat, {i[0], r, j}) * at(bat, {i[0], r, j});
         return s;
       }},
      {"ij,k->i",
       {a, w},
       {3},
       [&](auto i) {
         double s = 0, t = 0;
         for (int64_t j = 0; j < 4; ++j)
           s += at(a, {i[0], j});
         for (int64_t k = 0; k < 5; ++k)
           t += at(w, {k});
         return s * t;
       }},
  };
  for (const Case &c : cases) {
    std::vector<TensorDesc> ins;
    for (const Tensor &t : c.in)
      ins.push_back(t.desc());
    OpDesc d = makeDesc("Einsum", ins, {{DType::F32, c.out}},
                        {{"equation", Attribute::ofString(c.eq)}}, 12);
    std::vector<Tensor> out = eval(d, c.in);
    ASSERT_EQ(out.size(), 1u) << c.eq;
    std::vector<double> want(numElements(c.out));
    std::vector<int64_t> idx(c.out.size(), 0);
    for (size_t o = 0; o < want.size(); ++o) {
      want[o] = c.ref(idx);
      for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < c.out[k])
          break;
        idx[k] = 0;
      }
    }
    expectClose(out[0], want, std::vector<double>(want.size(), 10.0), 1e-5, "Einsum " + c.eq);
    EXPECT_TRUE(sameWithThreads(d, c.in)) << c.eq;
  }
}

// ---------------------------------------------------------------------------
// Conv, ConvTranspose, pools

struct ConvCase {
  Shape x, w;
  int64_t group;
  std::vector<int64_t> strides, dil, pads; ///< pads empty: use autoPad
  std::string autoPad;
  bool bias;
};

/// Output spatial sizes and begin pads of a Conv/pool window.
void convGeometry(const Shape &in, const std::vector<int64_t> &k, const std::vector<int64_t> &s,
                  const std::vector<int64_t> &dl, const std::vector<int64_t> &pads,
                  const std::string &autoPad, std::vector<int64_t> &out, std::vector<int64_t> &pb) {
  size_t n = in.size();
  out.assign(n, 0);
  pb.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    int64_t ext = (k[i] - 1) * dl[i] + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      out[i] = (in[i] + s[i] - 1) / s[i];
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * s[i] + ext - in[i]);
      pb[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else {
      int64_t b = pads.empty() ? 0 : pads[i], e = pads.empty() ? 0 : pads[i + n];
      pb[i] = b;
      out[i] = (in[i] + b + e - ext) / s[i] + 1;
    }
  }
}

/// Calls f(spatial index vector) for every position of `dims`.
void forEachIndex(const std::vector<int64_t> &dims,
                  const std::function<void(const std::vector<int64_t> &)> &f) {
  std::vector<int64_t> i(dims.size(), 0);
  if (numElements(dims) == 0)
    return;
  for (;;) {
    f(i);
    size_t k = dims.size();
    while (k-- > 0) {
      if (++i[k] < dims[k])
        break;
      i[k] = 0;
    }
    if (k == static_cast<size_t>(-1))
      return;
  }
}

int64_t flat(const std::vector<int64_t> &idx, const std::vector<int64_t> &dims) {
  int64_t o = 0;
  for (size_t k = 0; k < dims.size(); ++k)
    o = o * dims[k] + idx[k];
  return o;
}

TEST(LinalgKernels, ConvMatchesNaiveLoop) {
  const ConvCase cases[] = {
      {{1, 3, 11}, {4, 3, 3}, 1, {2}, {1}, {1, 0}, "", true},                  // 1-D
      {{2, 4, 9, 8}, {6, 2, 3, 3}, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true}, // groups
      {{1, 3, 10, 7}, {5, 3, 3, 2}, 1, {2, 1}, {2, 1}, {0, 1, 2, 0}, "", false},
      {{1, 2, 7, 7}, {3, 2, 3, 3}, 1, {2, 2}, {1, 1}, {}, "SAME_UPPER", true},
      {{1, 2, 7, 6}, {3, 2, 4, 3}, 1, {2, 3}, {1, 1}, {}, "SAME_LOWER", true},
      {{1, 2, 6, 6}, {2, 2, 3, 3}, 1, {1, 1}, {1, 1}, {}, "VALID", false},
      {{1, 6, 5, 5}, {6, 1, 3, 3}, 6, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true}, // depthwise
      {{1, 8, 6, 6}, {4, 8, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", true}, // 1x1
      // 1x1 with channels in 16s (oneDNN's brgconv_1x1 and its blocked
      // weight layouts).
      {{2, 32, 5, 5}, {64, 32, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", true},
      {{2, 48, 3, 3}, {48, 48, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", false},
      {{3, 16, 2, 2}, {32, 16, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", true},
      {{1, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, 1, {1, 2, 1}, {1, 1, 2}, {1, 0, 0, 0, 1, 1}, "", true},
  };
  bothPaths([&](const std::string &path) {
    uint32_t seed = 100;
    for (const ConvCase &c : cases) {
      size_t nd = c.x.size() - 2;
      Shape in(c.x.begin() + 2, c.x.end());
      std::vector<int64_t> k(c.w.begin() + 2, c.w.end()), out, pb;
      convGeometry(in, k, c.strides, c.dil, c.pads, c.autoPad, out, pb);
      int64_t N = c.x[0], C = c.x[1], M = c.w[0], G = c.group, cg = C / G, mg = M / G;
      Shape ys = {N, M};
      ys.insert(ys.end(), out.begin(), out.end());
      Tensor X = randomT(DType::F32, c.x, ++seed), W = randomT(DType::F32, c.w, ++seed),
             B = randomT(DType::F32, {M}, ++seed);
      AttrMap at = {{"group", Attribute::ofInt(G)},
                    {"strides", Attribute::ofInts(c.strides)},
                    {"dilations", Attribute::ofInts(c.dil)}};
      if (c.autoPad.empty())
        at["pads"] = Attribute::ofInts(c.pads);
      else
        at["auto_pad"] = Attribute::ofString(c.autoPad);
      std::vector<TensorDesc> ins = {X.desc(), W.desc()};
      std::vector<Tensor> vals = {X, W};
      if (c.bias) {
        ins.push_back(B.desc());
        vals.push_back(B);
      }
      OpDesc d = makeDesc("Conv", ins, {{DType::F32, ys}}, at, 11);
      std::vector<Tensor> got = eval(d, vals);
      ASSERT_EQ(got.size(), 1u);
      std::vector<double> want(numElements(ys)), scale(want.size());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
          forEachIndex(out, [&](const std::vector<int64_t> &o) {
            double s = c.bias ? B.getDouble(m) : 0, t = std::fabs(s);
            int64_t g = m / mg;
            for (int64_t ci = 0; ci < cg; ++ci)
              forEachIndex(k, [&](const std::vector<int64_t> &kk) {
                std::vector<int64_t> ii(nd);
                for (size_t j = 0; j < nd; ++j) {
                  ii[j] = o[j] * c.strides[j] - pb[j] + kk[j] * c.dil[j];
                  if (ii[j] < 0 || ii[j] >= in[j])
                    return;
                }
                double p = X.getDouble((n * C + g * cg + ci) * numElements(in) + flat(ii, in)) *
                           W.getDouble((m * cg + ci) * numElements(k) + flat(kk, k));
                s += p;
                t += std::fabs(p);
              });
            int64_t yi = (n * M + m) * numElements(out) + flat(o, out);
            want[yi] = s;
            scale[yi] = t;
          });
      expectClose(got[0], want, scale, 1e-5,
                  cat("Conv (", path, ") ", shapeStr(c.x), " * ", shapeStr(c.w), " ", c.autoPad));
    }
  });
}

/// `t` NCHW -> NHWC, or NHWC -> NCHW with `back`.
Tensor relayout(const Tensor &t, bool back = false) {
  const Shape &s = t.shape();
  const int64_t N = s[0], C = back ? s[3] : s[1], S = t.numel() / N / C;
  Tensor r(DType::F32, back ? Shape{s[0], s[3], s[1], s[2]} : Shape{s[0], s[2], s[3], s[1]});
  const float *src = t.data<float>();
  float *dst = r.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        if (back)
          dst[(n * C + c) * S + i] = src[(n * S + i) * C + c];
        else
          dst[(n * S + i) * C + c] = src[(n * C + c) * S + i];
      }
  return r;
}

Shape nhwcOf(const Shape &s) { return {s[0], s[2], s[3], s[1]}; }

// pipec:NhwcConv (channels-last, passes/Layout.cpp) against Conv on the
// same data in NCHW, then the Relu, Clip or LeakyRelu its epilogue applies: oneDNN's
// primitive on NHWC and the loop on NCHW copies, to 1e-5 of the sum of
// the products' magnitudes (the two layouts' kernels add in different
// orders); the same bits on one and two threads.
TEST(LinalgKernels, NhwcConvEqualsConvThenActivation) {
  const ConvCase cases[] = {
      {{2, 4, 9, 8}, {6, 2, 3, 3}, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true},    // groups
      {{1, 3, 10, 7}, {5, 3, 3, 2}, 1, {2, 1}, {2, 1}, {0, 1, 2, 0}, "", false},  // dilated
      {{1, 2, 7, 7}, {3, 2, 3, 3}, 1, {2, 2}, {1, 1}, {}, "SAME_UPPER", true},
      {{2, 32, 6, 6}, {32, 1, 3, 3}, 32, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true}, // depthwise
      {{2, 32, 5, 5}, {64, 32, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", true}, // 1x1
      {{2, 3, 16, 16}, {16, 3, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}, "", true}, // a stem
      // 4 output pixels, channels in 16s: oneDNN on 16-channel blocks.
      {{2, 32, 2, 2}, {48, 32, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true},
      {{2, 16, 4, 4}, {32, 16, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}, "", false},
      // 1x3 and 3x1, as Keras models separate time and frequency.
      {{2, 8, 7, 9}, {8, 8, 1, 3}, 1, {1, 1}, {1, 1}, {0, 1, 0, 1}, "", true},
      {{2, 8, 7, 9}, {8, 8, 3, 1}, 1, {1, 1}, {1, 1}, {1, 0, 1, 0}, "", true},
  };
  bothPaths([&](const std::string &path) {
    uint32_t seed = 300;
    for (const ConvCase &c : cases)
      for (const char *act : {"", "Relu", "Clip", "LeakyRelu"}) {
        const std::string what = cat("NhwcConv (", path, ") ", shapeStr(c.x), " * ", shapeStr(c.w), " ", act);
        Tensor X = randomT(DType::F32, c.x, ++seed), W = randomT(DType::F32, c.w, ++seed),
               B = randomT(DType::F32, {c.w[0]}, ++seed);
        AttrMap at = {{"group", Attribute::ofInt(c.group)},
                      {"strides", Attribute::ofInts(c.strides)},
                      {"dilations", Attribute::ofInts(c.dil)}};
        if (c.autoPad.empty())
          at["pads"] = Attribute::ofInts(c.pads);
        else
          at["auto_pad"] = Attribute::ofString(c.autoPad);
        std::vector<Tensor> vals = {X, W};
        if (c.bias)
          vals.push_back(B);
        std::vector<TensorDesc> ins;
        for (const Tensor &v : vals)
          ins.push_back(v.desc());
        Shape in(c.x.begin() + 2, c.x.end());
        std::vector<int64_t> k(c.w.begin() + 2, c.w.end()), out, pb;
        convGeometry(in, k, c.strides, c.dil, c.pads, c.autoPad, out, pb);
        const Shape ys = {c.x[0], c.w[0], out[0], out[1]};
        std::vector<Tensor> ref = eval(makeDesc("Conv", ins, {{DType::F32, ys}}, at, 11), vals);
        ASSERT_EQ(ref.size(), 1u) << what;
        // |products| per output, for the tolerance: the Conv of |X| and |W|.
        std::vector<Tensor> absVals;
        for (const Tensor &v : vals) {
          Tensor a = v.clone();
          for (int64_t i = 0; i < a.numel(); ++i)
            a.data<float>()[i] = std::fabs(a.data<float>()[i]);
          absVals.push_back(a);
        }
        std::vector<Tensor> mag = eval(makeDesc("Conv", ins, {{DType::F32, ys}}, at, 11), absVals);
        const float lo = -0.25f, hi = 0.5f;
        std::vector<double> want(static_cast<size_t>(ref[0].numel())), scale(want.size());
        for (int64_t i = 0; i < ref[0].numel(); ++i) {
          float v = ref[0].data<float>()[i];
          if (std::string(act) == "Relu")
            v = std::max(v, 0.0f);
          else if (std::string(act) == "Clip")
            v = std::min(std::max(v, lo), hi);
          else if (std::string(act) == "LeakyRelu")
            v = v >= 0.0f ? v : 0.125f * v;
          want[static_cast<size_t>(i)] = v;
          scale[static_cast<size_t>(i)] = mag[0].data<float>()[i];
        }
        AttrMap nat = at;
        if (*act)
          nat["activation"] = Attribute::ofString(act);
        if (std::string(act) == "Clip") {
          nat["clip_min"] = Attribute::ofFloat(lo);
          nat["clip_max"] = Attribute::ofFloat(hi);
        }
        if (std::string(act) == "LeakyRelu")
          nat["leaky_alpha"] = Attribute::ofFloat(0.125f);
        std::vector<Tensor> nvals = vals;
        nvals[0] = relayout(X);
        std::vector<TensorDesc> nins = ins;
        nins[0] = nvals[0].desc();
        OpDesc nd = makeDesc("NhwcConv", nins, {{DType::F32, nhwcOf(ys)}}, nat);
        nd.domain = "pipec";
        nd.stepInvariant = {false, true, false};
        std::vector<Tensor> got = eval(nd, nvals);
        ASSERT_EQ(got.size(), 1u) << what;
        EXPECT_TRUE(sameWithThreads(nd, nvals)) << what;
        expectClose(relayout(got[0], true), want, scale, 1e-5, what);
      }
  });
}

// pipec:NhwcMaxPool and NhwcAveragePool against the ONNX pools on the same
// data in NCHW: the same values (a max, or a sum over the same window
// divided by the same count), on oneDNN's path and the loop's.
TEST(LinalgKernels, NhwcPoolsEqualTheirNchwPools) {
  struct Case {
    std::string op;
    Shape x;
    std::vector<int64_t> k, s, pads;
    bool ceil, includePad;
  };
  const Case cases[] = {{"MaxPool", {2, 16, 9, 8}, {3, 3}, {2, 2}, {1, 1, 1, 1}, false, false},
                        {"MaxPool", {1, 5, 9, 8}, {3, 2}, {2, 2}, {0, 0, 0, 0}, true, false},
                        {"AveragePool", {2, 16, 8, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}, false, false},
                        {"AveragePool", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1, 1, 1}, false, true},
                        {"AveragePool", {2, 3, 9, 8}, {3, 3}, {1, 1}, {1, 1, 1, 1}, false, false}};
  bothPaths([&](const std::string &path) {
    uint32_t seed = 500;
    for (const Case &c : cases) {
      const std::string what = cat("Nhwc", c.op, " (", path, ") ", shapeStr(c.x));
      Tensor X = randomT(DType::F32, c.x, ++seed);
      AttrMap at = {{"kernel_shape", Attribute::ofInts(c.k)},
                    {"strides", Attribute::ofInts(c.s)},
                    {"pads", Attribute::ofInts(c.pads)},
                    {"ceil_mode", Attribute::ofInt(c.ceil)}};
      if (c.op == "AveragePool")
        at["count_include_pad"] = Attribute::ofInt(c.includePad);
      std::vector<int64_t> out, pb;
      convGeometry(Shape(c.x.begin() + 2, c.x.end()), c.k, c.s, {1, 1}, c.pads, "", out, pb);
      if (c.ceil)
        for (size_t i = 0; i < 2; ++i) {
          const int64_t span = c.x[i + 2] + c.pads[i] + c.pads[i + 2] - c.k[i];
          out[i] = (span + c.s[i] - 1) / c.s[i] + 1;
          if ((out[i] - 1) * c.s[i] >= c.x[i + 2] + c.pads[i])
            --out[i];
        }
      const Shape ys = {c.x[0], c.x[1], out[0], out[1]};
      std::vector<Tensor> ref = eval(makeDesc(c.op, {X.desc()}, {{DType::F32, ys}}, at, 11), {X});
      ASSERT_EQ(ref.size(), 1u) << what;
      Tensor XT = relayout(X);
      OpDesc nd = makeDesc("Nhwc" + c.op, {XT.desc()}, {{DType::F32, nhwcOf(ys)}}, at);
      nd.domain = "pipec";
      std::vector<Tensor> got = eval(nd, {XT});
      ASSERT_EQ(got.size(), 1u) << what;
      std::vector<double> want(static_cast<size_t>(ref[0].numel()));
      for (int64_t i = 0; i < ref[0].numel(); ++i)
        want[static_cast<size_t>(i)] = ref[0].data<float>()[i];
      expectClose(relayout(got[0], true), want, {}, 1e-6, what);
    }
  });
}

TEST(LinalgKernels, ConvTransposeMatchesNaiveLoop) {
  struct Case {
    Shape x, w;
    int64_t group;
    std::vector<int64_t> strides, dil, pads, outPad;
  };
  const Case cases[] = {
      {{1, 2, 5}, {2, 3, 3}, 1, {2}, {1}, {0, 1}, {1}},
      {{2, 4, 4, 3}, {4, 2, 3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 0, 1}, {0, 0}},
      {{1, 3, 3, 3}, {3, 2, 3, 3}, 1, {3, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
      {{1, 2, 3, 2, 3}, {2, 2, 2, 2, 2}, 1, {2, 1, 2}, {1, 1, 1}, {0, 0, 1, 1, 0, 0}, {0, 0, 1}},
  };
  bothPaths([&](const std::string &path) {
    uint32_t seed = 300;
    for (const Case &c : cases) {
      size_t nd = c.x.size() - 2;
      int64_t N = c.x[0], C = c.x[1], G = c.group, cg = C / G, mg = c.w[1], M = mg * G;
      Shape in(c.x.begin() + 2, c.x.end());
      std::vector<int64_t> k(c.w.begin() + 2, c.w.end()), out(nd);
      for (size_t j = 0; j < nd; ++j)
        out[j] = c.strides[j] * (in[j] - 1) + c.outPad[j] + (k[j] - 1) * c.dil[j] + 1 - c.pads[j] -
                 c.pads[j + nd];
      Shape ys = {N, M};
      ys.insert(ys.end(), out.begin(), out.end());
      Tensor X = randomT(DType::F32, c.x, ++seed), W = randomT(DType::F32, c.w, ++seed),
             B = randomT(DType::F32, {M}, ++seed);
      AttrMap at = {{"group", Attribute::ofInt(G)},
                    {"strides", Attribute::ofInts(c.strides)},
                    {"dilations", Attribute::ofInts(c.dil)},
                    {"pads", Attribute::ofInts(c.pads)},
                    {"output_padding", Attribute::ofInts(c.outPad)}};
      OpDesc d =
          makeDesc("ConvTranspose", {X.desc(), W.desc(), B.desc()}, {{DType::F32, ys}}, at, 11);
      std::vector<Tensor> got = eval(d, {X, W, B});
      ASSERT_EQ(got.size(), 1u);
      std::vector<double> want(numElements(ys)), scale(want.size());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          int64_t g = m / mg, mm = m % mg;
          forEachIndex(out, [&](const std::vector<int64_t> &o) {
            int64_t yi = (n * M + m) * numElements(out) + flat(o, out);
            want[yi] = B.getDouble(m);
            scale[yi] = std::fabs(B.getDouble(m));
          });
          for (int64_t ci = 0; ci < cg; ++ci)
            forEachIndex(in, [&](const std::vector<int64_t> &ii) {
              forEachIndex(k, [&](const std::vector<int64_t> &kk) {
                std::vector<int64_t> o(nd);
                for (size_t j = 0; j < nd; ++j) {
                  o[j] = ii[j] * c.strides[j] + kk[j] * c.dil[j] - c.pads[j];
                  if (o[j] < 0 || o[j] >= out[j])
                    return;
                }
                double p = X.getDouble((n * C + g * cg + ci) * numElements(in) + flat(ii, in)) *
                           W.getDouble(((g * cg + ci) * mg + mm) * numElements(k) + flat(kk, k));
                int64_t yi = (n * M + m) * numElements(out) + flat(o, out);
                want[yi] += p;
                scale[yi] += std::fabs(p);
              });
            });
        }
      expectClose(got[0], want, scale, 1e-5,
                  cat("ConvTranspose (", path, ") ", shapeStr(c.x), " * ", shapeStr(c.w)));
    }
  });
}

TEST(LinalgKernels, PoolsMatchNaiveLoop) {
  struct Case {
    std::string op;
    Shape x;
    std::vector<int64_t> k, s, dl, pads;
    bool ceil, includePad, indices;
  };
  const Case cases[] = {
      {"MaxPool", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 1}, false, false, false},
      {"MaxPool", {1, 2, 9, 8}, {3, 2}, {2, 2}, {2, 1}, {0, 0, 0, 0}, true, false, false},
      {"MaxPool", {1, 2, 7, 7}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, true, false, true},
      {"MaxPool",
       {1, 2, 5, 6, 4},
       {2, 3, 2},
       {1, 2, 2},
       {1, 1, 1},
       {1, 0, 1, 0, 1, 0},
       false,
       false,
       false},
      {"AveragePool", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, false, true, false},
      {"AveragePool", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, false, false, false},
      {"AveragePool", {1, 2, 10, 7}, {3, 2}, {3, 2}, {1, 1}, {1, 0, 1, 0}, true, true, false},
      {"AveragePool", {1, 2, 10, 7}, {3, 2}, {3, 2}, {1, 1}, {1, 0, 1, 0}, true, false, false},
      {"AveragePool", {1, 2, 11}, {4}, {3}, {1}, {2, 1}, false, true, false},
  };
  bothPaths([&](const std::string &path) {
    uint32_t seed = 500;
    for (const Case &c : cases) {
      size_t nd = c.x.size() - 2;
      Shape in(c.x.begin() + 2, c.x.end());
      std::vector<int64_t> out(nd), pb(nd);
      for (size_t j = 0; j < nd; ++j) {
        int64_t ext = (c.k[j] - 1) * c.dl[j] + 1;
        int64_t span = in[j] + c.pads[j] + c.pads[j + nd] - ext;
        out[j] = (c.ceil ? (span + c.s[j] - 1) / c.s[j] : span / c.s[j]) + 1;
        if (c.ceil && (out[j] - 1) * c.s[j] >= in[j] + c.pads[j])
          --out[j];
        pb[j] = c.pads[j];
      }
      int64_t planes = c.x[0] * c.x[1];
      Shape ys = {c.x[0], c.x[1]};
      ys.insert(ys.end(), out.begin(), out.end());
      Tensor X = randomT(DType::F32, c.x, ++seed);
      AttrMap at = {{"kernel_shape", Attribute::ofInts(c.k)},
                    {"strides", Attribute::ofInts(c.s)},
                    {"pads", Attribute::ofInts(c.pads)},
                    {"ceil_mode", Attribute::ofInt(c.ceil)}};
      if (c.op == "MaxPool")
        at["dilations"] = Attribute::ofInts(c.dl);
      else
        at["count_include_pad"] = Attribute::ofInt(c.includePad);
      std::vector<TensorDesc> outs = {{DType::F32, ys}};
      if (c.indices)
        outs.push_back({DType::I64, ys});
      OpDesc d = makeDesc(c.op, {X.desc()}, outs, at, 12);
      std::vector<Tensor> got = eval(d, {X});
      ASSERT_EQ(got.size(), outs.size());
      std::vector<double> want(numElements(ys));
      std::vector<int64_t> wantIdx(want.size());
      for (int64_t p = 0; p < planes; ++p)
        forEachIndex(out, [&](const std::vector<int64_t> &o) {
          double best = -INFINITY, sum = 0;
          int64_t cnt = 0, padCnt = 1, bestIdx = 0;
          for (size_t j = 0; j < nd; ++j) {
            int64_t inside = 0;
            for (int64_t kk = 0; kk < c.k[j]; ++kk) {
              int64_t i = o[j] * c.s[j] - pb[j] + kk * c.dl[j];
              inside += i >= -pb[j] && i < in[j] + c.pads[j + nd];
            }
            padCnt *= inside;
          }
          forEachIndex(c.k, [&](const std::vector<int64_t> &kk) {
            std::vector<int64_t> ii(nd);
            for (size_t j = 0; j < nd; ++j) {
              ii[j] = o[j] * c.s[j] - pb[j] + kk[j] * c.dl[j];
              if (ii[j] < 0 || ii[j] >= in[j])
                return;
            }
            int64_t xi = p * numElements(in) + flat(ii, in);
            double v = X.getDouble(xi);
            if (v > best) {
              best = v;
              bestIdx = xi;
            }
            sum += v;
            ++cnt;
          });
          int64_t yi = p * numElements(out) + flat(o, out);
          want[yi] = c.op == "MaxPool" ? best : sum / (c.includePad ? padCnt : cnt);
          wantIdx[yi] = bestIdx;
        });
      std::string what = cat(c.op, " (", path, ") ", shapeStr(c.x), " ceil=", c.ceil,
                             " include_pad=", c.includePad);
      expectClose(got[0], want, {}, 1e-6, what);
      if (c.indices) {
        for (size_t i = 0; i < wantIdx.size(); ++i) {
          ASSERT_EQ(got[1].data<int64_t>()[i], wantIdx[i]) << what << " index " << i;
        }
      }
      EXPECT_TRUE(sameWithThreads(d, {X})) << what;
    }
  });
}

TEST(LinalgKernels, GlobalPools) {
  Tensor X = randomT(DType::F32, {2, 3, 5, 7}, 9);
  for (std::string op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    OpDesc d = makeDesc(op, {X.desc()}, {{DType::F32, {2, 3, 1, 1}}});
    std::vector<Tensor> got = eval(d, {X});
    ASSERT_EQ(got.size(), 1u);
    std::vector<double> want(6);
    for (int p = 0; p < 6; ++p) {
      double s = 0, m = -INFINITY;
      for (int i = 0; i < 35; ++i) {
        s += X.getDouble(p * 35 + i);
        m = std::max(m, X.getDouble(p * 35 + i));
      }
      want[p] = op == "GlobalMaxPool" ? m : s / 35;
    }
    expectClose(got[0], want, {}, 1e-6, op);
  }
}

// ---------------------------------------------------------------------------
// Normalizations

TEST(LinalgKernels, BatchNormTrainingAndInference) {
  Shape xs = {3, 4, 5, 2};
  Tensor X = randomT(DType::F32, xs, 21), scale = randomT(DType::F32, {4}, 22),
         bias = randomT(DType::F32, {4}, 23), mean = randomT(DType::F32, {4}, 24),
         var = randomT(DType::F32, {4}, 25, 0.5, 2.0);
  float eps = 1e-3f, mom = 0.8f;
  std::vector<TensorDesc> ins = {X.desc(), scale.desc(), bias.desc(), mean.desc(), var.desc()};
  std::vector<Tensor> vals = {X, scale, bias, mean, var};
  std::vector<double> bm(4), bv(4);
  for (int c = 0; c < 4; ++c) {
    double s = 0, q = 0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 10; ++i)
        s += X.getDouble((n * 4 + c) * 10 + i);
    bm[c] = s / 30;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 10; ++i)
        q += std::pow(X.getDouble((n * 4 + c) * 10 + i) - bm[c], 2);
    bv[c] = q / 30;
  }
  auto expectY = [&](const Tensor &y, bool training, const std::string &what) {
    std::vector<double> want(X.numel());
    for (int64_t i = 0; i < X.numel(); ++i) {
      int c = (i / 10) % 4;
      double m = training ? bm[c] : mean.getDouble(c), v = training ? bv[c] : var.getDouble(c);
      want[i] = (X.getDouble(i) - m) / std::sqrt(v + eps) * scale.getDouble(c) + bias.getDouble(c);
    }
    expectClose(y, want, {}, 1e-5, what);
  };
  AttrMap base = {{"epsilon", Attribute::ofFloat(eps)}, {"momentum", Attribute::ofFloat(mom)}};

  // Inference (opset 15, no training_mode; ctx.training false).
  OpDesc inf = makeDesc("BatchNormalization", ins, {X.desc()}, base, 15);
  expectY(eval(inf, vals)[0], false, "BN inference");

  // training_mode = 1 with running statistics.
  AttrMap tm = base;
  tm["training_mode"] = Attribute::ofInt(1);
  OpDesc tr = makeDesc("BatchNormalization", ins, {X.desc(), mean.desc(), var.desc()}, tm, 15);
  std::vector<Tensor> got = eval(tr, vals);
  ASSERT_EQ(got.size(), 3u);
  expectY(got[0], true, "BN training_mode");
  std::vector<double> rm(4), rv(4);
  for (int c = 0; c < 4; ++c) {
    rm[c] = mean.getDouble(c) * mom + bm[c] * (1 - mom);
    rv[c] = var.getDouble(c) * mom + bv[c] * (1 - mom);
  }
  expectClose(got[1], rm, {}, 1e-5, "BN running_mean");
  expectClose(got[2], rv, {}, 1e-5, "BN running_var");
  EXPECT_TRUE(sameWithThreads(tr, vals));

  // No training_mode attribute: ExecContext::training decides.
  ExecContext ctx;
  ctx.training = true;
  OpDesc ctxTr = makeDesc("BatchNormalization", ins, {X.desc(), mean.desc(), var.desc()}, base, 15);
  got = eval(ctxTr, vals, ctx);
  ASSERT_EQ(got.size(), 3u);
  expectY(got[0], true, "BN ctx.training");
  expectClose(got[1], rm, {}, 1e-5, "BN ctx.training running_mean");

  // training_mode = 0 wins over ctx.training.
  AttrMap t0 = base;
  t0["training_mode"] = Attribute::ofInt(0);
  expectY(eval(makeDesc("BatchNormalization", ins, {X.desc()}, t0, 15), vals, ctx)[0], false,
          "BN training_mode=0");

  // Opset 9 training outputs: running stats, then saved (batch) mean and var.
  OpDesc old = makeDesc("BatchNormalization", ins,
                        {X.desc(), mean.desc(), var.desc(), mean.desc(), var.desc()}, base, 9);
  got = eval(old, vals, ctx);
  ASSERT_EQ(got.size(), 5u);
  expectClose(got[3], bm, {}, 1e-5, "BN saved_mean");
  expectClose(got[4], bv, {}, 1e-5, "BN saved_var");

  // Opset 7 spatial = 0: statistics per activation.
  Tensor X2 = randomT(DType::F32, {4, 3, 2}, 30), s2 = randomT(DType::F32, {3, 2}, 31),
         b2 = randomT(DType::F32, {3, 2}, 32), m2 = randomT(DType::F32, {3, 2}, 33),
         v2 = randomT(DType::F32, {3, 2}, 34, 0.5, 2);
  OpDesc sp =
      makeDesc("BatchNormalization", {X2.desc(), s2.desc(), b2.desc(), m2.desc(), v2.desc()},
               {X2.desc()}, {{"spatial", Attribute::ofInt(0)}}, 7);
  got = eval(sp, {X2, s2, b2, m2, v2});
  ASSERT_EQ(got.size(), 1u);
  std::vector<double> want(X2.numel());
  for (int64_t i = 0; i < X2.numel(); ++i) {
    int64_t a = i % 6;
    want[i] =
        (X2.getDouble(i) - m2.getDouble(a)) / std::sqrt(v2.getDouble(a) + 1e-5) * s2.getDouble(a) +
        b2.getDouble(a);
  }
  expectClose(got[0], want, {}, 1e-5, "BN spatial=0");
}

TEST(LinalgKernels, LayerNormBroadcastAndStats) {
  bothPaths([](const std::string &path) {
    Shape xs = {2, 3, 4, 5};
    Tensor X = randomT(DType::F32, xs, 41), S = randomT(DType::F32, {1, 5}, 42),
           B = randomT(DType::F32, {4, 5}, 43);
    for (int64_t axis : {-2, 1, 3}) {
      int64_t ax = axis < 0 ? axis + 4 : axis;
      Shape norm(xs.begin() + ax, xs.end()), stat(xs.begin(), xs.begin() + ax);
      stat.resize(4, 1);
      Tensor s = S, b = B;
      if (ax == 3) {
        s = randomT(DType::F32, {5}, 44);
        b = randomT(DType::F32, {5}, 45);
      } else if (ax == 1) {
        b = randomT(DType::F32, {1, 4, 1}, 46);
      }
      OpDesc d =
          makeDesc("LayerNormalization", {X.desc(), s.desc(), b.desc()},
                   {X.desc(), {DType::F32, stat}, {DType::F32, stat}},
                   {{"axis", Attribute::ofInt(axis)}, {"epsilon", Attribute::ofFloat(1e-4f)}});
      std::vector<Tensor> got = eval(d, {X, s, b});
      ASSERT_EQ(got.size(), 3u);
      int64_t cols = numElements(norm), rows = X.numel() / cols;
      std::vector<double> want(X.numel()), wm(rows), wi(rows);
      auto bcast = [&](const Tensor &t, int64_t j) {
        // Index of element j of the normalized shape in t (right-aligned broadcast).
        std::vector<int64_t> st = rowMajorStrides(norm);
        int64_t off = 0, mul = 1;
        const Shape &ts = t.shape();
        for (size_t k = ts.size(); k-- > 0;) {
          size_t nk = norm.size() - ts.size() + k;
          int64_t i = j / st[nk] % norm[nk];
          off += (ts[k] == 1 ? 0 : i) * mul;
          mul *= ts[k];
        }
        return t.getDouble(off);
      };
      for (int64_t r = 0; r < rows; ++r) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < cols; ++j)
          m += X.getDouble(r * cols + j);
        m /= cols;
        for (int64_t j = 0; j < cols; ++j)
          v += std::pow(X.getDouble(r * cols + j) - m, 2);
        v /= cols;
        wm[r] = m;
        wi[r] = 1 / std::sqrt(v + 1e-4);
        for (int64_t j = 0; j < cols; ++j)
          want[r * cols + j] = (X.getDouble(r * cols + j) - m) * wi[r] * bcast(s, j) + bcast(b, j);
      }
      expectClose(got[0], want, {}, 1e-5, cat("LayerNorm (", path, ") axis ", axis));
      expectClose(got[1], wm, {}, 1e-5, cat("LayerNorm (", path, ") Mean axis ", axis));
      expectClose(got[2], wi, {}, 1e-5, cat("LayerNorm (", path, ") InvStdDev axis ", axis));
      EXPECT_TRUE(sameWithThreads(d, {X, s, b})) << path;
      // Without B and without the statistics outputs.
      OpDesc d2 =
          makeDesc("LayerNormalization", {X.desc(), s.desc()}, {X.desc()},
                   {{"axis", Attribute::ofInt(axis)}, {"epsilon", Attribute::ofFloat(1e-4f)}});
      got = eval(d2, {X, s});
      ASSERT_EQ(got.size(), 1u);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j)
          want[r * cols + j] -= bcast(b, j);
      expectClose(got[0], want, {}, 1e-5, cat("LayerNorm (", path, ") no B, axis ", axis));
    }
  });
}

TEST(LinalgKernels, InstanceNormAndLRN) {
  Tensor X = randomT(DType::F32, {2, 6, 5, 3}, 51), S = randomT(DType::F32, {6}, 52),
         B = randomT(DType::F32, {6}, 53);
  OpDesc in = makeDesc("InstanceNormalization", {X.desc(), S.desc(), B.desc()}, {X.desc()},
                       {{"epsilon", Attribute::ofFloat(1e-3f)}});
  std::vector<Tensor> got = eval(in, {X, S, B});
  ASSERT_EQ(got.size(), 1u);
  std::vector<double> want(X.numel());
  for (int p = 0; p < 12; ++p) {
    double m = 0, v = 0;
    for (int i = 0; i < 15; ++i)
      m += X.getDouble(p * 15 + i) / 15;
    for (int i = 0; i < 15; ++i)
      v += std::pow(X.getDouble(p * 15 + i) - m, 2) / 15;
    for (int i = 0; i < 15; ++i)
      want[p * 15 + i] = (X.getDouble(p * 15 + i) - m) / std::sqrt(v + 1e-3) * S.getDouble(p % 6) +
                         B.getDouble(p % 6);
  }
  expectClose(got[0], want, {}, 1e-5, "InstanceNormalization");
  EXPECT_TRUE(sameWithThreads(in, {X, S, B}));

  bothPaths([&](const std::string &path) {
    for (int64_t size : {1, 2, 3, 4, 5}) {
      OpDesc lrn = makeDesc("LRN", {X.desc()}, {X.desc()},
                            {{"size", Attribute::ofInt(size)},
                             {"alpha", Attribute::ofFloat(0.02f)},
                             {"beta", Attribute::ofFloat(0.6f)},
                             {"bias", Attribute::ofFloat(1.5f)}},
                            13);
      got = eval(lrn, {X});
      ASSERT_EQ(got.size(), 1u);
      for (int64_t i = 0; i < X.numel(); ++i) {
        int64_t c = (i / 15) % 6, n = i / 90, sp = i % 15;
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, c - (size - 1) / 2);
             j <= std::min<int64_t>(5, c + size / 2); ++j)
          sq += std::pow(X.getDouble((n * 6 + j) * 15 + sp), 2);
        want[i] = X.getDouble(i) / std::pow(1.5 + 0.02 / size * sq, 0.6);
      }
      expectClose(got[0], want, {}, 1e-5, cat("LRN (", path, ") size ", size));
      EXPECT_TRUE(sameWithThreads(lrn, {X})) << path;
    }
  });
}

// ---------------------------------------------------------------------------
// Threads and errors

TEST(LinalgKernels, ThreadCountBehaviour) {
  // GEMMs go through LinalgBatchedGemm, whose tiling depends on the shape
  // only, with single-threaded BLAS calls: required to be invariant (raw
  // OpenBLAS sgemm is not: its threaded driver blocks K differently).
  // oneDNN's reduction order is its own: reported, not required.
  Tensor A = randomT(DType::F32, {4, 200, 300}, 61), B = randomT(DType::F32, {300, 250}, 62);
  OpDesc mm = makeDesc("MatMul", {A.desc(), B.desc()}, {{DType::F32, {4, 200, 250}}});
  bool sgemmSame = sameWithThreads(mm, {A, B});
  Tensor A2 = randomT(DType::F32, {16, 40, 50}, 63), B2 = randomT(DType::F32, {16, 50, 30}, 64);
  OpDesc bmm = makeDesc("MatMul", {A2.desc(), B2.desc()}, {{DType::F32, {16, 40, 30}}});
  bool batchedSame = sameWithThreads(bmm, {A2, B2});
  Tensor X = randomT(DType::F32, {2, 16, 28, 28}, 65), W = randomT(DType::F32, {32, 16, 3, 3}, 66),
         Bc = randomT(DType::F32, {32}, 67);
  OpDesc conv = makeDesc("Conv", {X.desc(), W.desc(), Bc.desc()}, {{DType::F32, {2, 32, 28, 28}}},
                         {{"pads", Attribute::ofInts({1, 1, 1, 1})}}, 11);
  bool dnnlSame = sameWithThreads(conv, {X, W, Bc});
  useDnnl(false);
  bool im2colSame = sameWithThreads(conv, {X, W, Bc});
  useDnnl(true);
  std::printf("[ threads  ] 1 vs 2 threads bitwise identical: sgemm MatMul %s, batched "
              "MatMul %s, oneDNN conv %s, im2col+sgemm conv %s\n",
              sgemmSame ? "yes" : "NO", batchedSame ? "yes" : "NO", dnnlSame ? "yes" : "NO",
              im2colSame ? "yes" : "NO");
  RecordProperty("dnnl_conv_thread_invariant", dnnlSame);
  EXPECT_TRUE(sgemmSame);
  EXPECT_TRUE(batchedSame);
  EXPECT_TRUE(im2colSame);
  Tensor Ga = randomT(DType::F32, {300, 700}, 72), Gb = randomT(DType::F32, {500, 700}, 73),
         Gc = randomT(DType::F32, {500}, 74);
  EXPECT_TRUE(
      sameWithThreads(makeDesc("Gemm", {Ga.desc(), Gb.desc(), Gc.desc()},
                               {{DType::F32, {300, 500}}}, {{"transB", Attribute::ofInt(1)}}, 13),
                      {Ga, Gb, Gc}));
  Tensor Tx = randomT(DType::F32, {2, 8, 12, 12}, 75), Tw = randomT(DType::F32, {8, 6, 3, 3}, 76);
  OpDesc ct = makeDesc("ConvTranspose", {Tx.desc(), Tw.desc()}, {{DType::F32, {2, 6, 25, 25}}},
                       {{"strides", Attribute::ofInts({2, 2})}}, 11);
  bool dnnlDeconvSame = sameWithThreads(ct, {Tx, Tw});
  useDnnl(false);
  EXPECT_TRUE(sameWithThreads(ct, {Tx, Tw}));
  useDnnl(true);
  std::printf("[ threads  ] oneDNN deconvolution 1 vs 2 threads identical: %s\n",
              dnnlDeconvSame ? "yes" : "NO");

  Tensor I1 = randomT(DType::I64, {3, 70, 90}, 70), I2 = randomT(DType::I64, {90, 60}, 71);
  EXPECT_TRUE(sameWithThreads(
      makeDesc("MatMul", {I1.desc(), I2.desc()}, {{DType::I64, {3, 70, 60}}}), {I1, I2}));
}

TEST(LinalgKernels, BadDescsAreErrors) {
  TensorDesc f23{DType::F32, {2, 3}}, f34{DType::F32, {3, 4}}, f24{DType::F32, {2, 4}};
  Tensor t23(f23), t34(f34), t44(DType::F32, {4, 4});
  EXPECT_NE(evalError(makeDesc("MatMul", {f23, f23}, {f24}), {t23, t23}).find("inner"),
            std::string::npos);
  evalError(makeDesc("MatMul", {f23, f34}, {f23}), {t23, t34}); // wrong output shape
  evalError(makeDesc("MatMul", {f23}, {f24}), {t23});           // arity
  evalError(
      makeDesc("MatMul", {{DType::Bool, {2, 3}}, {DType::Bool, {3, 4}}}, {{DType::Bool, {2, 4}}}),
      {t23, t34}); // type
  evalError(makeDesc("Gemm", {f23, f34, {DType::F32, {3}}}, {f24}),
            {t23, t34, Tensor(DType::F32, {3})});             // C not broadcastable
  evalError(makeDesc("Gemm", {f23, f23}, {f24}), {t23, t23}); // K mismatch
  evalError(makeDesc("Einsum", {f23, f34}, {f24}, {{"equation", Attribute::ofString("ij,jk->iq")}}),
            {t23, t34});
  evalError(makeDesc("Einsum", {f23, f34}, {f24}, {{"equation", Attribute::ofString("ij->ij")}}),
            {t23, t34});
  evalError(makeDesc("Einsum", {f23}, {f24}, {{"equation", Attribute::ofString("i.j")}}), {t23});
  evalError(makeDesc("Einsum", {f23}, {f24}), {t23}); // no equation
  TensorDesc x{DType::F32, {1, 4, 5, 5}}, w{DType::F32, {6, 3, 3, 3}};
  evalError(makeDesc("Conv", {x, w}, {{DType::F32, {1, 6, 3, 3}}}, {}, 11),
            {Tensor(x), Tensor(w)}); // channels
  evalError(makeDesc("Conv", {x, {DType::F32, {6, 2, 3, 3}}}, {{DType::F32, {1, 6, 3, 3}}},
                     {{"group", Attribute::ofInt(3)}}, 11),
            {Tensor(x), Tensor(DType::F32, {6, 2, 3, 3})}); // group
  evalError(makeDesc("Conv", {x, {DType::F32, {6, 4, 3, 3}}}, {{DType::F32, {1, 6, 4, 4}}}, {}, 11),
            {Tensor(x), Tensor(DType::F32, {6, 4, 3, 3})}); // output shape
  evalError(makeDesc("Conv", {x, {DType::F32, {6, 4, 3, 3}}}, {{DType::F32, {1, 6, 3, 3}}},
                     {{"strides", Attribute::ofInts({0, 1})}}, 11),
            {Tensor(x), Tensor(DType::F32, {6, 4, 3, 3})}); // stride 0
  evalError(makeDesc("Conv", {x, {DType::F32, {6, 4, 3, 3}}}, {{DType::F32, {1, 6, 3, 3}}},
                     {{"auto_pad", Attribute::ofString("BOGUS")}}, 11),
            {Tensor(x), Tensor(DType::F32, {6, 4, 3, 3})});
  evalError(makeDesc("Conv", {{DType::I32, {1, 4, 5, 5}}, {DType::I32, {6, 4, 3, 3}}},
                     {{DType::I32, {1, 6, 3, 3}}}, {}, 11),
            {Tensor(DType::I32, {1, 4, 5, 5}), Tensor(DType::I32, {6, 4, 3, 3})});
  evalError(makeDesc("ConvTranspose", {x, {DType::F32, {3, 2, 3, 3}}}, {{DType::F32, {1, 2, 7, 7}}},
                     {}, 11),
            {Tensor(x), Tensor(DType::F32, {3, 2, 3, 3})}); // W channels
  evalError(makeDesc("MaxPool", {x}, {x}), {Tensor(x)});    // no kernel_shape
  evalError(makeDesc("MaxPool", {x}, {x}, {{"kernel_shape", Attribute::ofInts({9, 9})}}),
            {Tensor(x)}); // window > input
  evalError(makeDesc("AveragePool", {x}, {{DType::F32, {1, 4, 4, 4}}},
                     {{"kernel_shape", Attribute::ofInts({2})}}),
            {Tensor(x)});                                          // kernel rank
  evalError(makeDesc("GlobalAveragePool", {x}, {x}), {Tensor(x)}); // output shape
  evalError(
      makeDesc("BatchNormalization",
               {x, {DType::F32, {3}}, {DType::F32, {3}}, {DType::F32, {3}}, {DType::F32, {3}}}, {x},
               {}, 15),
      {Tensor(x), Tensor(DType::F32, {3}), Tensor(DType::F32, {3}), Tensor(DType::F32, {3}),
       Tensor(DType::F32, {3})});
  evalError(
      makeDesc("LayerNormalization", {x, {DType::F32, {5}}}, {x}, {{"axis", Attribute::ofInt(4)}}),
      {Tensor(x), Tensor(DType::F32, {5})});
  evalError(makeDesc("LayerNormalization", {x, {DType::F32, {4}}}, {x}),
            {Tensor(x), Tensor(DType::F32, {4})}); // scale not broadcastable
  evalError(makeDesc("InstanceNormalization", {x, {DType::F32, {3}}, {DType::F32, {3}}}, {x}),
            {Tensor(x), Tensor(DType::F32, {3}), Tensor(DType::F32, {3})});
  evalError(makeDesc("LRN", {x}, {x}), {Tensor(x)}); // no size
  // Declared inputs missing at run time: an error, not a crash.
  EXPECT_NE(
      evalError(makeDesc("Gemm", {f23, f34, f24}, {f24}), {t23, t34, Tensor()}).find("missing"),
      std::string::npos);
  bothPaths([&](const std::string &) {
    TensorDesc w6{DType::F32, {6, 4, 3, 3}}, b6{DType::F32, {6}};
    EXPECT_NE(evalError(makeDesc("Conv", {x, w6, b6}, {{DType::F32, {1, 6, 3, 3}}}, {}, 11),
                        {Tensor(x), Tensor(w6), Tensor()})
                  .find("missing"),
              std::string::npos);
  });
}

// ---------------------------------------------------------------------------
// Throughput (printed, not asserted: the machine may be shared)

/// Best times of `f` and `g` over `reps` alternating runs, in CPU time of
/// the calling thread: the work is single-threaded, CPU time is far less
/// disturbed than wall time when other jobs share the cores, and
/// alternating exposes both to the same drift.
std::pair<double, double> bestOf(const std::function<void()> &f, const std::function<void()> &g,
                                 int reps) {
  auto now = [] {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
  };
  f(); // warm up
  g();
  double bf = 1e30, bg = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    f();
    double t1 = now();
    g();
    double t2 = now();
    bf = std::min(bf, t1 - t0);
    bg = std::min(bg, t2 - t1);
  }
  return {bf, bg};
}

TEST(LinalgPerf, MatMulVsBlas) {
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const int64_t n = 1024;
  Tensor A = randomT(DType::F32, {n, n}, 81), B = randomT(DType::F32, {n, n}, 82),
         C(DType::F32, {n, n});
  OpDesc d = makeDesc("MatMul", {A.desc(), B.desc()}, {C.desc()});
  auto k = createKernel(d);
  ASSERT_TRUE(k.isOk());
  ExecContext ctx;
  const void *in[2] = {A.raw(), B.raw()};
  void *out[1] = {C.raw()};
  double flop = 2.0 * n * n * n;
  auto [tk, tb] =
      bestOf([&] { (void)(*k)->run(ctx, in, out); },
             [&] {
               cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                           A.data<float>(), n, B.data<float>(), n, 0.0f, C.data<float>(), n);
             },
             9);
  std::printf("[ gemm     ] 1024^3 sgemm, 1 thread: MatMul kernel %.1f GFLOP/s, cblas_sgemm "
              "%.1f GFLOP/s (%.0f%%)\n",
              flop / tk * 1e-9, flop / tb * 1e-9, 100.0 * tb / tk);

  // 8-layer MLP forward (batch 128, width 1024): Gemm kernels vs raw BLAS.
  const int64_t batch = 128, width = 1024, layers = 8;
  std::vector<Tensor> W, Bias, act;
  std::vector<KernelPtr> ks;
  act.push_back(randomT(DType::F32, {batch, width}, 90));
  for (int64_t l = 0; l < layers; ++l) {
    W.push_back(randomT(DType::F32, {width, width}, 91 + l));
    Bias.push_back(randomT(DType::F32, {width}, 191 + l));
    act.emplace_back(DType::F32, Shape{batch, width});
    OpDesc g =
        makeDesc("Gemm", {act[l].desc(), W[l].desc(), Bias[l].desc()}, {act[l + 1].desc()}, {}, 13);
    auto gk = createKernel(g);
    ASSERT_TRUE(gk.isOk());
    ks.push_back(gk.take());
  }
  auto [tm, tr] = bestOf(
      [&] {
        for (int64_t l = 0; l < layers; ++l) {
          const void *gi[3] = {act[l].raw(), W[l].raw(), Bias[l].raw()};
          void *go[1] = {act[l + 1].raw()};
          (void)ks[l]->run(ctx, gi, go);
        }
      },
      [&] {
        for (int64_t l = 0; l < layers; ++l)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, width, width, 1.0f,
                      act[l].data<float>(), width, W[l].data<float>(), width, 0.0f,
                      act[l + 1].data<float>(), width);
      },
      9);
  double mflop = 2.0 * batch * width * width * layers;
  std::printf("[ gemm     ] 8-layer MLP (128x1024, Gemm+bias), 1 thread: kernels %.1f GFLOP/s, "
              "raw sgemm %.1f GFLOP/s (%.0f%%)\n",
              mflop / tm * 1e-9, mflop / tr * 1e-9, 100.0 * tr / tm);
  omp_set_num_threads(saved);
}

} // namespace
