//===- tests/unit/ElementwiseKernelsTest.cpp - Elementwise/reduction kernels ===//
//
// Checks of the elementwise and reduction CPU kernels that ONNX's node tests
// do not cover: broadcasting patterns against a naive reference, results
// bitwise independent of the OpenMP thread count, Dropout's counter-based
// masks, integer and cast corner cases, errors (not crashes) on bad
// descriptions, the accuracy of the float exp, tanh and erf
// approximations (VecMath.h) against double-precision libm, and the
// softmax row (SoftmaxRow.h) against its portable form.
// Over 700 lines: the family has the most kernels, and the
// approximations' accuracy sweeps live here.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/ElementwiseRandom.h"
#include "runtime/cpu/kernels/SoftmaxRow.h"
#include "runtime/cpu/kernels/VecMath.h"
#include "support/Half.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <bit>

#include <cmath>
#include <cstring>
#include <random>

using namespace pipec;
using namespace pipec::cpu;
using namespace pipec::test;

namespace {

/// Naive numpy broadcasting index: the input element for output index `o`.
int64_t bcastIndex(int64_t o, const Shape &out, const Shape &in) {
  int64_t idx = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1, e = static_cast<int64_t>(in.size()) - 1;
       d >= 0; --d, --e) {
    int64_t c = o % out[d];
    o /= out[d];
    if (e >= 0) {
      if (in[e] != 1)
        idx += c * stride;
      stride *= in[e];
    }
  }
  return idx;
}

// ---- Broadcasting.

struct BcastCase {
  Shape a, b, out;
};

TEST(ElementwiseBinary, BroadcastPatternsMatchNaiveReference) {
  const BcastCase cases[] = {
      {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},   {{2, 3, 4}, {}, {2, 3, 4}},
      {{}, {2, 3, 4}, {2, 3, 4}},          {{2, 3, 4}, {4}, {2, 3, 4}},
      {{2, 3, 4}, {3, 1}, {2, 3, 4}},      {{4, 1, 5}, {1, 3, 1}, {4, 3, 5}},
      {{1, 3, 1, 7}, {5, 1, 6, 1}, {5, 3, 6, 7}}, {{300, 1}, {1, 257}, {300, 257}},
      {{2, 1, 1, 40000}, {2, 1, 1, 1}, {2, 1, 1, 40000}},
  };
  for (const BcastCase &c : cases) {
    Tensor a = randomF32(c.a, 1, -2.f, 2.f), b = randomF32(c.b, 2, -2.f, 2.f);
    for (const char *op : {"Add", "Sub", "Mul", "Div"}) {
      OpDesc d = makeDesc(op, {a.desc(), b.desc()}, {{DType::F32, c.out}});
      std::vector<Tensor> y = eval(d, {a, b});
      ASSERT_EQ(y.size(), 1u);
      for (int64_t i = 0; i < y[0].numel(); ++i) {
        float x0 = a.data<float>()[bcastIndex(i, c.out, c.a)];
        float x1 = b.data<float>()[bcastIndex(i, c.out, c.b)];
        float want = op[0] == 'A' ? x0 + x1 : op[0] == 'S' ? x0 - x1 : op[0] == 'M' ? x0 * x1 : x0 / x1;
        ASSERT_EQ(y[0].data<float>()[i], want) << op << " " << shapeStr(c.a) << " "
                                               << shapeStr(c.b) << " at " << i;
      }
    }
  }
}

TEST(ElementwiseBinary, WhereBroadcastsThreeWays) {
  Shape sc = {3, 1, 1}, sx = {1, 4, 1}, sy = {5}, so = {3, 4, 5};
  Tensor c = fromVec<uint8_t>(DType::Bool, sc, {1, 0, 1});
  Tensor x = randomF32(sx, 3, -2.f, 2.f), y = randomF32(sy, 4, -2.f, 2.f);
  OpDesc d = makeDesc("Where", {c.desc(), x.desc(), y.desc()}, {{DType::F32, so}});
  std::vector<Tensor> r = eval(d, {c, x, y});
  ASSERT_EQ(r.size(), 1u);
  for (int64_t i = 0; i < 60; ++i) {
    bool cond = c.data<uint8_t>()[bcastIndex(i, so, sc)];
    float want = cond ? x.data<float>()[bcastIndex(i, so, sx)] : y.data<float>()[bcastIndex(i, so, sy)];
    ASSERT_EQ(r[0].data<float>()[i], want) << i;
  }
}

TEST(ElementwiseBinary, VariadicFoldsBroadcastInputsInOrder) {
  Tensor a = randomF32({2, 3}, 5, -2.f, 2.f), b = randomF32({3}, 6, -2.f, 2.f),
         c = randomF32({2, 1}, 7, -2.f, 2.f);
  for (const char *op : {"Sum", "Mean", "Max", "Min"}) {
    OpDesc d = makeDesc(op, {a.desc(), b.desc(), c.desc()}, {{DType::F32, {2, 3}}});
    std::vector<Tensor> y = eval(d, {a, b, c});
    ASSERT_EQ(y.size(), 1u);
    for (int64_t i = 0; i < 6; ++i) {
      float v0 = a.data<float>()[i], v1 = b.data<float>()[i % 3], v2 = c.data<float>()[i / 3];
      float want = std::string(op) == "Sum"    ? (v0 + v1) + v2
                   : std::string(op) == "Mean" ? ((v0 + v1) + v2) / 3.f
                   : std::string(op) == "Max"  ? std::max({v0, v1, v2})
                                               : std::min({v0, v1, v2});
      EXPECT_EQ(y[0].data<float>()[i], want) << op << " " << i;
    }
  }
}

TEST(ElementwiseBinary, IntegerDivModPowSemantics) {
  Tensor a = fromVec<int32_t>(DType::I32, {6}, {7, -7, 7, -7, INT32_MIN, 5});
  Tensor b = fromVec<int32_t>(DType::I32, {6}, {2, 2, -2, -2, -1, 0});
  auto run = [&](const char *op, int64_t fmod) {
    OpDesc d = makeDesc(op, {a.desc(), b.desc()}, {{DType::I32, {6}}});
    if (fmod >= 0)
      d.attrs["fmod"] = Attribute::ofInt(fmod);
    std::vector<Tensor> y = eval(d, {a, b});
    return std::vector<int32_t>(y[0].data<int32_t>(), y[0].data<int32_t>() + 6);
  };
  // C truncation; x / 0 -> 0; INT_MIN / -1 wraps instead of trapping.
  EXPECT_EQ(run("Div", -1), (std::vector<int32_t>{3, -3, -3, 3, INT32_MIN, 0}));
  // Python mod takes the divisor's sign; fmod the dividend's.
  EXPECT_EQ(run("Mod", 0), (std::vector<int32_t>{1, 1, -1, -1, 0, 0}));
  EXPECT_EQ(run("Mod", 1), (std::vector<int32_t>{1, -1, 1, -1, 0, 0}));

  Tensor base = fromVec<int64_t>(DType::I64, {4}, {3, -2, 2, 10});
  Tensor ex = fromVec<int32_t>(DType::I32, {4}, {4, 3, -1, 0});
  OpDesc d = makeDesc("Pow", {base.desc(), ex.desc()}, {{DType::I64, {4}}}, {}, 15);
  std::vector<Tensor> y = eval(d, {base, ex});
  EXPECT_EQ(std::vector<int64_t>(y[0].data<int64_t>(), y[0].data<int64_t>() + 4),
            (std::vector<int64_t>{81, -8, 0, 1}));
}

TEST(ElementwiseBinary, PReluSlopeBroadcastsToX) {
  Tensor x = fromVec<float>(DType::F32, {2, 2}, {-1, 2, -3, 4});
  Tensor s = fromVec<float>(DType::F32, {2}, {0.5f, 0.25f});
  std::vector<Tensor> y = eval(makeDesc("PRelu", {x.desc(), s.desc()}, {x.desc()}), {x, s});
  EXPECT_EQ(std::vector<float>(y[0].data<float>(), y[0].data<float>() + 4),
            (std::vector<float>{-0.5f, 2, -1.5f, 4}));
  // A slope larger than X does not broadcast one way.
  Tensor big = randomF32({3, 2, 2}, 1, -2.f, 2.f);
  evalError(makeDesc("PRelu", {x.desc(), big.desc()}, {big.desc()}), {x, big});
}

// ---- Unary, Cast, Clip.

TEST(ElementwiseUnary, RoundHalfToEvenAndCastTruncation) {
  Tensor x = fromVec<float>(DType::F32, {6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.7f});
  std::vector<Tensor> r = eval(makeDesc("Round", {x.desc()}, {x.desc()}), {x});
  EXPECT_EQ(std::vector<float>(r[0].data<float>(), r[0].data<float>() + 6),
            (std::vector<float>{0, 2, 2, -0.f, -2, 3}));

  Tensor f = fromVec<float>(DType::F32, {5}, {-1.7f, 1.7f, 300.f, NAN, -1.f});
  auto cast = [&](DType to) {
    OpDesc d = makeDesc("Cast", {f.desc()}, {{to, {5}}});
    d.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(to));
    return eval(d, {f})[0];
  };
  Tensor i32 = cast(DType::I32);
  EXPECT_EQ(std::vector<int32_t>(i32.data<int32_t>(), i32.data<int32_t>() + 5),
            (std::vector<int32_t>{-1, 1, 300, 0, -1}));
  Tensor u8 = cast(DType::U8); // numpy: 300 -> 44, -1 -> 255
  EXPECT_EQ(std::vector<uint8_t>(u8.data<uint8_t>(), u8.data<uint8_t>() + 5),
            (std::vector<uint8_t>{255, 1, 44, 0, 255}));
  Tensor bl = cast(DType::Bool); // NaN is true
  EXPECT_EQ(std::vector<uint8_t>(bl.data<uint8_t>(), bl.data<uint8_t>() + 5),
            (std::vector<uint8_t>{1, 1, 1, 1, 1}));
}

// Cast to and from bfloat16 and float16 (pipec --precision): round to
// nearest, ties to even; NaN stays NaN; float16 overflows to infinity and
// keeps its subnormals; the way back is exact.
TEST(ElementwiseUnary, CastToSixteenBitFloatsRoundsToNearestEven) {
  const float tieDown = std::bit_cast<float>(0x3f808000u); // 1 + 2^-8: between two bf16, even below
  const float tieUp = std::bit_cast<float>(0x3f818000u);   // 1 + 3 * 2^-8: even above
  const float above = std::bit_cast<float>(0x3f808001u);   // just past the tie: rounds up
  Tensor f = fromVec<float>(DType::F32, {8},
                            {tieDown, tieUp, above, NAN, INFINITY, -0.0f, 70000.0f, 3.0e-6f});
  auto cast = [](const Tensor &x, DType to) {
    OpDesc d = makeDesc("Cast", {x.desc()}, {{to, x.shape()}});
    d.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(to));
    return eval(d, {x})[0];
  };
  Tensor b = cast(f, DType::BF16);
  const uint16_t *bv = b.data<uint16_t>();
  EXPECT_EQ(bv[0], 0x3f80);
  EXPECT_EQ(bv[1], 0x3f82);
  EXPECT_EQ(bv[2], 0x3f81);
  EXPECT_EQ(bv[3] & 0x7fc0, 0x7fc0); // a quiet NaN
  EXPECT_EQ(bv[4], 0x7f80);
  EXPECT_EQ(bv[5], 0x8000);
  Tensor back = cast(b, DType::F32);
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  EXPECT_EQ(back.data<float>()[2], std::bit_cast<float>(0x3f810000u));
  EXPECT_TRUE(std::isnan(back.data<float>()[3]));
  Tensor h = cast(f, DType::F16);
  const uint16_t *hv = h.data<uint16_t>();
  EXPECT_EQ(hv[0], 0x3c04); // 1 + 2^-8: exact in float16 (10 mantissa bits)
  EXPECT_EQ(hv[4], 0x7c00);
  EXPECT_EQ(hv[6], 0x7c00); // 70000 overflows
  EXPECT_EQ(hv[7], 50);     // 3e-6 / 2^-24 = 50.3: a subnormal
  Tensor hback = cast(h, DType::F32);
  EXPECT_EQ(hback.data<float>()[7], 50 * std::ldexp(1.0f, -24));
  // Through double, and from one 16-bit float to the other.
  Tensor d = fromVec<double>(DType::F64, {2}, {1.0 + 1.0 / 1024, -2.5});
  EXPECT_EQ(cast(d, DType::F16).data<uint16_t>()[0], 0x3c01);
  EXPECT_EQ(cast(cast(d, DType::F16), DType::BF16).data<uint16_t>()[1], 0xc020);
  // Integers do not cast to 16-bit floats on the CPU: refused, named.
  Tensor i = fromVec<int64_t>(DType::I64, {1}, {3});
  OpDesc bad = makeDesc("Cast", {i.desc()}, {{DType::BF16, {1}}});
  bad.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(DType::BF16));
  EXPECT_NE(evalError(bad, {i}).find("float16 and bfloat16 to and from f32, f64, f16 and bf16 only"), std::string::npos);
}

// The f32 to bf16 Cast narrows with vector integer arithmetic (AVX-512 or
// AVX2, whichever this process runs: CI runs the suite on both), bit for
// bit support/Half.h's floatToBf16, over every sign, exponent and top
// mantissa (all 2^16 high halves: zeros, subnormals, infinities, NaNs with
// every top payload) and the low halves that decide a rounding (ties to
// odd and even, just below and above them), at a length that is no
// multiple of a vector and spans several chunks.
TEST(ElementwiseUnary, CastToBf16IsTheScalarRoundingBitForBit) {
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x4321u, 0xc0deu};
  std::vector<float> v;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : lows)
      v.push_back(std::bit_cast<float>(hi << 16 | lo));
  for (int i = 0; i < 13; ++i)
    v.push_back(std::bit_cast<float>(0x3f808000u + static_cast<uint32_t>(i) * 0x10000u));
  Tensor f = fromVec<float>(DType::F32, {static_cast<int64_t>(v.size())}, v);
  OpDesc d = makeDesc("Cast", {f.desc()}, {{DType::BF16, f.shape()}});
  d.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(DType::BF16));
  Tensor b = eval(d, {f})[0];
  const uint16_t *bv = b.data<uint16_t>();
  size_t wrong = 0, first = v.size();
  for (size_t i = 0; i < v.size(); ++i)
    if (bv[i] != floatToBf16(v[i]) && wrong++ == 0)
      first = i;
  EXPECT_EQ(wrong, 0u) << "first at " << first << ": 0x" << std::hex << std::bit_cast<uint32_t>(v[first])
                       << " gave 0x" << bv[first] << ", not 0x" << floatToBf16(v[first]);
}

// ONNX 1.12's node tests predate Gelu (opset 20) and Mish (opset 18).
TEST(ElementwiseUnary, GeluAndMishMatchDoubleReference) {
  Tensor x = fromVec<float>(DType::F32, {3}, {-1.f, 1.f, 3.f});
  auto run = [&](const char *op, const char *approx) {
    OpDesc d = makeDesc(op, {x.desc()}, {x.desc()}, {}, 20);
    if (approx)
      d.attrs["approximate"] = Attribute::ofString(approx);
    return eval(d, {x})[0];
  };
  Tensor gelu = run("Gelu", nullptr), geluTanh = run("Gelu", "tanh"), mish = run("Mish", nullptr);
  for (int i = 0; i < 3; ++i) {
    double v = x.data<float>()[i];
    double erfRef = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    double tanhRef = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    double mishRef = v * std::tanh(std::log1p(std::exp(v)));
    EXPECT_NEAR(gelu.data<float>()[i], erfRef, 1e-6) << v;
    EXPECT_NEAR(geluTanh.data<float>()[i], tanhRef, 1e-6) << v;
    EXPECT_NEAR(mish.data<float>()[i], mishRef, 1e-6) << v;
  }
  EXPECT_NE(gelu.data<float>()[0], geluTanh.data<float>()[0]);
}

TEST(ElementwiseUnary, ClipReadsRuntimeAndConstantBounds) {
  Tensor x = fromVec<float>(DType::F32, {4}, {-5, 0, 5, NAN});
  Tensor lo = Tensor::scalarF32(-1), hi = Tensor::scalarF32(2);
  OpDesc d = makeDesc("Clip", {x.desc(), lo.desc(), hi.desc()}, {x.desc()}, {}, 13);
  std::vector<Tensor> y = eval(d, {x, lo, hi}); // both at run time
  EXPECT_EQ(y[0].data<float>()[0], -1);
  EXPECT_EQ(y[0].data<float>()[2], 2);
  EXPECT_TRUE(std::isnan(y[0].data<float>()[3]));
  d.constInputs = {Tensor(), Tensor(), Tensor::scalarF32(1)}; // max constant
  y = eval(d, {x, lo, Tensor()});
  EXPECT_EQ(y[0].data<float>()[2], 1);
  // min > max: everything becomes max.
  Tensor lo9 = Tensor::scalarF32(9);
  y = eval(makeDesc("Clip", {x.desc(), lo9.desc(), hi.desc()}, {x.desc()}, {}, 13), {x, lo9, hi});
  EXPECT_EQ(y[0].data<float>()[0], 2);
}

// ---- Reductions.

/// Naive double reference of ReduceSum / ReduceMax over `axes`.
std::vector<double> naiveReduce(const Tensor &x, const std::vector<int64_t> &axes, bool max) {
  const Shape &s = x.shape();
  Shape out = s;
  for (int64_t a : axes)
    out[a] = 1;
  std::vector<double> r(static_cast<size_t>(numElements(out)),
                        max ? -INFINITY : 0.0);
  std::vector<int64_t> st = rowMajorStrides(out);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0;
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      int64_t c = rem % s[d];
      rem /= s[d];
      if (out[d] != 1)
        o += c * st[d];
    }
    double v = x.data<float>()[i];
    r[o] = max ? std::max(r[o], v) : r[o] + v;
  }
  return r;
}

TEST(Reduce, GeometriesMatchNaiveReference) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {
      {{7, 9}, {1}},          {{7, 9}, {0}},          {{4, 5, 6}, {0, 2}},
      {{4, 5, 6}, {1}},       {{3, 4, 5, 6}, {1, 3}}, {{3, 4, 5, 6}, {0, 2}},
      {{2, 1, 3}, {1}},       {{300000}, {0}},        {{2, 70000}, {1}},
      {{5}, {}},              {{2, 3, 200}, {0, 1, 2}},
      // One kept run over 64 rows or more: blocks of rows (a bias
      // gradient), rows over one and two reduced dims.
      {{200, 100}, {0}},      {{3, 70, 80}, {0, 1}},  {{64, 64}, {0}},
  };
  for (const Case &c : cases) {
    Tensor x = randomF32(c.shape, 11, -2.f, 2.f);
    std::vector<int64_t> axes = c.axes;
    if (axes.empty())
      for (int64_t i = 0; i < static_cast<int64_t>(c.shape.size()); ++i)
        axes.push_back(i);
    Shape out = c.shape;
    for (int64_t a : axes)
      out[a] = 1;
    for (const char *op : {"ReduceSum", "ReduceMax"}) {
      OpDesc d = makeDesc(op, {x.desc()}, {{DType::F32, out}}, {}, 11);
      if (!c.axes.empty())
        d.attrs["axes"] = Attribute::ofInts(c.axes);
      std::vector<Tensor> y = eval(d, {x});
      ASSERT_EQ(y.size(), 1u);
      std::vector<double> want = naiveReduce(x, axes, op[6] == 'M');
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y[0].data<float>()[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << op << " " << shapeStr(c.shape) << " at " << i;
    }
  }
}

TEST(Reduce, AxesInputMustBeConstant) {
  Tensor x = randomF32({2, 3}, 1, -2.f, 2.f);
  Tensor axes = Tensor::fromInts({1});
  OpDesc d = makeDesc("ReduceSum", {x.desc(), axes.desc()}, {{DType::F32, {2, 1}}}, {}, 13);
  std::string msg = evalError(d, {x, axes});
  EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
  d.constInputs = {Tensor(), axes};
  std::vector<Tensor> y = eval(d, {x, axes});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_FLOAT_EQ(y[0].data<float>()[0],
                  x.data<float>()[0] + x.data<float>()[1] + x.data<float>()[2]);
}

TEST(Reduce, ArgMaxSelectLastIndex) {
  Tensor x = fromVec<float>(DType::F32, {2, 3}, {1, 5, 5, 7, 2, 7});
  OpDesc d = makeDesc("ArgMax", {x.desc()}, {{DType::I64, {2}}}, {}, 12);
  d.attrs["axis"] = Attribute::ofInt(1);
  d.attrs["keepdims"] = Attribute::ofInt(0);
  std::vector<Tensor> y = eval(d, {x});
  EXPECT_EQ(y[0].data<int64_t>()[0], 1);
  EXPECT_EQ(y[0].data<int64_t>()[1], 0);
  d.attrs["select_last_index"] = Attribute::ofInt(1);
  y = eval(d, {x});
  EXPECT_EQ(y[0].data<int64_t>()[0], 2);
  EXPECT_EQ(y[0].data<int64_t>()[1], 2);
}

// ---- Thread-count invariance.

TEST(ThreadInvariance, ReductionsSoftmaxAndElementwise) {
  Tensor big = randomF32({1 << 20}, 21, -2.f, 2.f);
  Tensor mat = randomF32({512, 1024}, 22, -2.f, 2.f);
  Tensor t4 = randomF32({16, 64, 8, 64}, 23, -2.f, 2.f);
  auto reduce = [](const char *op, const Tensor &x, std::vector<int64_t> axes, Shape out) {
    OpDesc d = makeDesc(op, {x.desc()}, {{DType::F32, std::move(out)}}, {}, 11);
    d.attrs["axes"] = Attribute::ofInts(std::move(axes));
    return d;
  };
  expectThreadInvariant(reduce("ReduceSum", big, {0}, {1}), {big});
  expectThreadInvariant(reduce("ReduceSum", mat, {0}, {1, 1024}), {mat});
  expectThreadInvariant(reduce("ReduceMean", mat, {1}, {512, 1}), {mat});
  expectThreadInvariant(reduce("ReduceLogSumExp", t4, {1, 3}, {16, 1, 8, 1}), {t4});
  expectThreadInvariant(reduce("ReduceL2", t4, {0, 2}, {1, 64, 1, 64}), {t4});
  Tensor rows = randomF32({3, 70, 80}, 24, -2.f, 2.f);
  expectThreadInvariant(reduce("ReduceLogSumExp", rows, {0, 1}, {1, 1, 80}), {rows});
  expectThreadInvariant(reduce("ReduceMax", rows, {0, 1}, {1, 1, 80}), {rows});
  for (const char *op : {"Softmax", "LogSoftmax"}) {
    OpDesc d = makeDesc(op, {t4.desc()}, {t4.desc()}, {}, 13);
    d.attrs["axis"] = Attribute::ofInt(1);
    expectThreadInvariant(d, {t4});
    d.attrs["axis"] = Attribute::ofInt(-1);
    expectThreadInvariant(d, {t4});
  }
  expectThreadInvariant(makeDesc("Exp", {mat.desc()}, {mat.desc()}), {mat});
  Tensor row = randomF32({1024}, 24, -2.f, 2.f);
  expectThreadInvariant(makeDesc("Sum", {mat.desc(), row.desc(), mat.desc()}, {mat.desc()}),
                        {mat, row, mat});
  OpDesc arg = makeDesc("ArgMin", {mat.desc()}, {{DType::I64, {1, 1024}}}, {}, 13);
  expectThreadInvariant(arg, {mat});
}

// ---- Dropout.

OpDesc dropoutDesc(const Shape &s, bool mask = true) {
  std::vector<TensorDesc> outs = {{DType::F32, s}};
  if (mask)
    outs.push_back({DType::Bool, s});
  OpDesc d = makeDesc("Dropout", {{DType::F32, s}, {DType::F32, {}}}, outs, {}, 13);
  d.constInputs = {Tensor(), Tensor::scalarF32(0.3f)};
  return d;
}

TEST(Dropout, PhiloxMatchesRandom123KnownAnswers) {
  auto r = ew::philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  r = ew::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                        {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Dropout, InferenceIsIdentityWithTrueMask) {
  Tensor x = randomF32({100}, 31, -2.f, 2.f);
  std::vector<Tensor> y = eval(dropoutDesc({100}), {x, Tensor::scalarF32(0.3f)});
  EXPECT_TRUE(y[0].identical(x));
  for (int64_t i = 0; i < 100; ++i)
    EXPECT_EQ(y[1].data<uint8_t>()[i], 1);
}

TEST(Dropout, MaskIsKeyedDeterministicAndNearRatio) {
  const int64_t n = 200003;
  Tensor x = randomF32({n}, 32, 0.5f, 1.5f);
  OpDesc d = dropoutDesc({n});
  ExecContext ctx;
  ctx.training = true;
  ctx.seed = 42;
  ctx.step = 7;
  ctx.microBatch = 1;
  auto run = [&](ExecContext c, uint64_t node = 0) {
    Tensor y(DType::F32, {n}), m(DType::Bool, {n});
    auto k = createKernel(d);
    EXPECT_TRUE(k.isOk()) << k.status().message();
    if (!k.isOk())
      return std::make_pair(y, m);
    (*k)->nodeId = node;
    Tensor ratio = Tensor::scalarF32(0.3f);
    const void *in[] = {x.raw(), ratio.raw()};
    void *out[] = {y.raw(), m.raw()};
    Status s = (*k)->run(c, in, out);
    EXPECT_TRUE(s.isOk()) << s.message();
    return std::make_pair(y, m);
  };
  auto [y1, m1] = run(ctx);
  auto [y2, m2] = run(ctx);
  EXPECT_TRUE(y1.identical(y2));
  EXPECT_TRUE(m1.identical(m2));

  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool keep = m1.data<uint8_t>()[i];
    dropped += !keep;
    float want = keep ? x.data<float>()[i] * static_cast<float>(1.0 / 0.7) : 0.f;
    ASSERT_EQ(y1.data<float>()[i], want) << i;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, 0.3, 0.005);

  auto differs = [&](const Tensor &a, const Tensor &b) {
    int64_t diff = 0;
    for (int64_t i = 0; i < n; ++i)
      diff += a.data<uint8_t>()[i] != b.data<uint8_t>()[i];
    return diff > n / 10; // independent masks differ in ~42% of elements
  };
  ExecContext other = ctx;
  other.microBatch = 2;
  EXPECT_TRUE(differs(m1, run(other).second));
  other = ctx;
  other.step = 8;
  EXPECT_TRUE(differs(m1, run(other).second));
  other = ctx;
  other.seed = 43;
  EXPECT_TRUE(differs(m1, run(other).second));
  EXPECT_TRUE(differs(m1, run(ctx, 5).second));

  // Thread count does not change the mask.
  expectThreadInvariant(d, {x, Tensor::scalarF32(0.3f)}, ctx);
}

TEST(Dropout, TrainingModeInputOverridesContext) {
  Tensor x = randomF32({1000}, 33, -2.f, 2.f);
  OpDesc d = dropoutDesc({1000});
  d.inputs.push_back({DType::Bool, {}});
  Tensor no = fromVec<uint8_t>(DType::Bool, {}, {0});
  d.constInputs.push_back(no);
  ExecContext ctx;
  ctx.training = true;
  std::vector<Tensor> y = eval(d, {x, Tensor::scalarF32(0.3f), no}, ctx);
  EXPECT_TRUE(y[0].identical(x)); // constant false wins over ctx.training
  Tensor yes = fromVec<uint8_t>(DType::Bool, {}, {1});
  d.constInputs[2] = Tensor(); // now read at run time
  y = eval(d, {x, Tensor::scalarF32(0.3f), yes}, ExecContext{});
  EXPECT_FALSE(y[0].identical(x));
}

// ---- Bad descriptions are errors, not crashes.

TEST(BadDesc, FactoriesReturnErrors) {
  TensorDesc f23{DType::F32, {2, 3}}, i23{DType::I32, {2, 3}}, f3{DType::F32, {3}};
  // Input types differ.
  evalError(makeDesc("Add", {f23, i23}, {f23}), {Tensor(f23), Tensor(i23)});
  // Output shape is not the broadcast shape.
  evalError(makeDesc("Mul", {f23, f3}, {f3}), {Tensor(f23), Tensor(f3)});
  // Shapes do not broadcast.
  TensorDesc f4{DType::F32, {4}};
  evalError(makeDesc("Sub", {f23, f4}, {f23}), {Tensor(f23), Tensor(f4)});
  // Missing input / output.
  evalError(makeDesc("Add", {f23}, {f23}), {Tensor(f23)});
  evalError(makeDesc("Relu", {f23}, {}), {Tensor(f23)});
  // Float-only op on integers; bool-only op on floats.
  evalError(makeDesc("Exp", {i23}, {i23}), {Tensor(i23)});
  evalError(makeDesc("And", {f23, f23}, {{DType::Bool, {2, 3}}}), {Tensor(f23), Tensor(f23)});
  // Comparison output must be bool.
  evalError(makeDesc("Less", {f23, f23}, {f23}), {Tensor(f23), Tensor(f23)});
  // Unsupported element type.
  TensorDesc h23{DType::F16, {2, 3}};
  evalError(makeDesc("Abs", {h23}, {h23}), {Tensor(h23)});
  TensorDesc s23{DType::I16, {2, 3}};
  OpDesc cast = makeDesc("Cast", {s23}, {h23}); // integers to float16: not on the CPU
  cast.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(DType::F16));
  evalError(cast, {Tensor(s23)});
  OpDesc castNoTo = makeDesc("Cast", {f23}, {i23});
  evalError(castNoTo, {Tensor(f23)});
  // Axis out of range.
  OpDesc sm = makeDesc("Softmax", {f23}, {f23}, {}, 13);
  sm.attrs["axis"] = Attribute::ofInt(2);
  evalError(sm, {Tensor(f23)});
  OpDesc rs = makeDesc("ReduceSum", {f23}, {{DType::F32, {2, 1}}}, {}, 11);
  rs.attrs["axes"] = Attribute::ofInts({1, -1}); // the same axis twice
  evalError(rs, {Tensor(f23)});
  rs.attrs["axes"] = Attribute::ofInts({1});
  rs.outputs = {{DType::F32, {2}}}; // keepdims=1 keeps the axis
  evalError(rs, {Tensor(f23)});
  // ArgMax over an empty axis has no answer.
  TensorDesc e{DType::F32, {2, 0}};
  OpDesc am = makeDesc("ArgMax", {e}, {{DType::I64, {2, 1}}});
  am.attrs["axis"] = Attribute::ofInt(1);
  evalError(am, {Tensor(e)});
  // Clip bound of another type.
  TensorDesc i0{DType::I32, {}};
  evalError(makeDesc("Clip", {f23, i0}, {f23}, {}, 13), {Tensor(f23), Tensor(i0)});
  // Dropout ratio outside [0, 1], given at run time.
  OpDesc dr = dropoutDesc({2, 3}, false);
  dr.constInputs.clear();
  ExecContext ctx;
  ctx.training = true;
  std::string msg = evalError(dr, {Tensor(f23), Tensor::scalarF32(1.5f)}, ctx);
  EXPECT_NE(msg.find("ratio"), std::string::npos) << msg;
  // Gelu with an unknown approximation.
  OpDesc g = makeDesc("Gelu", {f23}, {f23}, {}, 20);
  g.attrs["approximate"] = Attribute::ofString("fast");
  evalError(g, {Tensor(f23)});
}

} // namespace

TEST(ElementwiseUnary, FloatErfIsWithinFourTenMillionthsOfDoubleErf) {
  // The float Erf kernel uses a rational approximation (vectorizable); its
  // error against erf in double must stay below 4e-7 over [-10, 10].
  const int64_t n = 4000001;
  Tensor x(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.data<float>()[i] = static_cast<float>(-10.0 + 20.0 * static_cast<double>(i) / (n - 1));
  for (const char *op : {"Erf", "Gelu"}) {
    std::vector<Tensor> y = eval(makeDesc(op, {x.desc()}, {x.desc()}, {}, 20), {x});
    ASSERT_EQ(y.size(), 1u);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v = x.data<float>()[i];
      double ref = std::string(op) == "Erf" ? std::erf(v) : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      double tol = std::string(op) == "Erf" ? 4e-7 : 4e-7 * std::fabs(v) + 1e-6;
      worst = std::max(worst, std::fabs(y[0].data<float>()[i] - ref) / tol);
    }
    EXPECT_LE(worst, 1.0) << op << ": error reaches " << worst << " times the tolerance";
  }
}

// ---- VecMath.h: float exp and tanh against double-precision libm.

namespace {

/// Error of `a` against the exact `ref` in units in the last place of float
/// at `ref` (2^-149 below 2^-126, where floats are denormal). Infinity
/// counts as +-2^128, one ulp past FLT_MAX; a `ref` beyond it needs an
/// infinite `a`.
double ulpError(float a, double ref) {
  if (std::isnan(a) || std::isnan(ref))
    return std::isnan(a) && std::isnan(ref) ? 0 : HUGE_VAL;
  const double mag = std::fabs(ref);
  if (mag >= 0x1p128)
    return std::isinf(a) && std::signbit(a) == std::signbit(ref) ? 0 : HUGE_VAL;
  const double av = std::isinf(a) ? std::copysign(0x1p128, a) : a;
  int e = 0;
  std::frexp(mag, &e);
  const double ulp = mag < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, e - 24);
  return std::fabs(av - ref) / ulp;
}

float floatOfBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Worst ulp error of `approx` against `exact` (double), kept apart for
/// results in the normal and in the denormal range.
struct UlpSweep {
  double normal = 0, denormal = 0;
  float normalAt = 0, denormalAt = 0;

  template <typename F, typename G> void check(F approx, G exact, float x) {
    const double ref = exact(static_cast<double>(x));
    const double err = ulpError(approx(x), ref);
    if (ref != 0 && std::fabs(ref) < 0x1p-126) {
      if (err > denormal) {
        denormal = err;
        denormalAt = x;
      }
    } else if (err > normal || std::isnan(err)) {
      normal = err;
      normalAt = x;
    }
  }
  /// Every `stride`-th float bit pattern (an odd stride visits every
  /// residue of the low mantissa bits), then every float in each of
  /// `dense`, then the single inputs `points`.
  template <typename F, typename G>
  void run(F approx, G exact, uint32_t stride, std::vector<std::pair<float, float>> dense,
           std::vector<float> points) {
    for (uint64_t u = 0; u < (uint64_t(1) << 32); u += stride)
      check(approx, exact, floatOfBits(static_cast<uint32_t>(u)));
    for (auto [lo, hi] : dense)
      for (float x = lo; x <= hi; x = std::nextafter(x, HUGE_VALF))
        check(approx, exact, x);
    for (float x : points)
      check(approx, exact, x);
  }
};

double expRef(double x) { return std::exp(x); }
double tanhRef(double x) { return std::tanh(x); }

} // namespace

// Every path of softmaxRow this machine can run (AVX2 registers, AVX-512
// ones where the CPU has them, and the one dispatched under the process's
// cap) is bitwise softmaxRowGeneric, the lanes-and-tree loops of other
// types: every length from 1 to 300 (full registers and every tail), in
// place and not, Softmax and LogSoftmax, on rows with ties, signed zeros,
// infinities, NaNs and entries far enough below the maximum to underflow.
// A NaN is any NaN: which operand's sign and payload an x86 operation
// passes on depends on the order the compiler put them in.
TEST(SoftmaxRow, IsBitwiseThePortableRow) {
  auto same = [](const std::vector<float> &a, const std::vector<float> &b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0)
        return false;
    return true;
  };
  std::mt19937 g(11);
  std::uniform_real_distribution<float> u(-30.f, 30.f);
  const float specials[] = {0.0f, -0.0f, HUGE_VALF, -HUGE_VALF, NAN, 88.0f, -120.0f, 1e-40f};
  int compared = 0;
  for (int64_t n = 1; n <= 300; ++n)
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float &v : x)
        v = u(g);
      if (variant == 1) // ties: the maximum several times, in different lanes
        for (int64_t i = 0; i < n; i += 5)
          x[static_cast<size_t>(i)] = 30.0f;
      if (variant >= 2) // one or two special values at random places
        for (int k = 0; k < variant - 1; ++k)
          x[static_cast<size_t>(g() % static_cast<uint32_t>(n))] = specials[g() % 8];
      std::vector<float> ref(x.size()), logRef(x.size());
      softmaxRowGeneric<float, false>(x.data(), ref.data(), n);
      softmaxRowGeneric<float, true>(x.data(), logRef.data(), n);
      using Row = void (*)(const float *, float *, int64_t);
      struct Path {
        const char *name;
        Row plain, log;
      };
      std::vector<Path> paths = {{"dispatched", softmaxRow<float, false>, softmaxRow<float, true>},
                                 {"avx2", softmaxRowAvx2<false>, softmaxRowAvx2<true>}};
      if (hostCpuIsa() >= CpuIsa::Avx512)
        paths.push_back({"avx512", softmaxRowAvx512<false>, softmaxRowAvx512<true>});
      for (const Path &p : paths) {
        std::vector<float> got(x.size()), inPlace = x, logGot(x.size());
        p.plain(x.data(), got.data(), n);
        p.plain(inPlace.data(), inPlace.data(), n);
        p.log(x.data(), logGot.data(), n);
        ASSERT_TRUE(same(ref, got)) << p.name << " n " << n << " variant " << variant;
        ASSERT_TRUE(same(ref, inPlace)) << p.name << " n " << n << " variant " << variant << " in place";
        ASSERT_TRUE(same(logRef, logGot)) << p.name << " n " << n << " variant " << variant << " log";
      }
      ++compared;
    }
  EXPECT_EQ(compared, 1200);
  // The row is a distribution: a plain row sums to 1 within rounding.
  std::vector<float> x(77), y(77);
  for (float &v : x)
    v = u(g);
  softmaxRow<float, false>(x.data(), y.data(), 77);
  double total = 0;
  for (float v : y)
    total += v;
  EXPECT_NEAR(total, 1.0, 1e-5);
}

TEST(VecMath, ExpApproxIsWithinOneUlpOfDoubleExp) {
  // Measured over all 2^32 floats: at most 1.009 ulp where exp(x) is a
  // normal float (at x = -27.3791351, listed below) and 0.749 ulp of 2^-149
  // where it is denormal. The bounds leave a little room for other compilers.
  UlpSweep s;
  s.run(expApprox, expRef, 257, {{-104.5f, -86.5f}, {88.5f, 89.0f}, {0.3f, 0.4f}},
        {-27.3791351f, -88.0257721f});
  EXPECT_LE(s.normal, 1.1) << "at x = " << s.normalAt;
  EXPECT_LE(s.denormal, 0.8) << "at x = " << s.denormalAt;
  EXPECT_GT(s.normal, 0.5) << "the sweep should find an incorrectly rounded result";

  // Overflow and underflow happen exactly where the correctly rounded float
  // becomes inf or 0.
  for (float x = 88.5f; x <= 89.0f; x = std::nextafter(x, HUGE_VALF))
    ASSERT_EQ(std::isinf(expApprox(x)), std::isinf(static_cast<float>(std::exp(double(x))))) << x;
  for (float x = -104.5f; x <= -103.0f; x = std::nextafter(x, HUGE_VALF))
    ASSERT_EQ(expApprox(x) == 0, static_cast<float>(std::exp(double(x))) == 0) << x;
  EXPECT_EQ(expApprox(88.7228317f), 0x1.ffff08p+127f); // the largest finite
  EXPECT_EQ(expApprox(88.7228394f), HUGE_VALF);
  EXPECT_EQ(expApprox(-103.972076f), 0x1p-149f); // the last nonzero
  EXPECT_EQ(expApprox(std::nextafter(-103.972076f, -HUGE_VALF)), 0.0f);

  EXPECT_EQ(expApprox(0.0f), 1.0f);
  EXPECT_EQ(expApprox(-0.0f), 1.0f);
  EXPECT_EQ(expApprox(1.0f), 0x1.5bf0a8p+1f); // e, correctly rounded
  EXPECT_EQ(expApprox(HUGE_VALF), HUGE_VALF);
  EXPECT_EQ(expApprox(-HUGE_VALF), 0.0f);
  EXPECT_FALSE(std::signbit(expApprox(-HUGE_VALF)));
  EXPECT_TRUE(std::isnan(expApprox(NAN)));
  EXPECT_TRUE(std::isnan(expApprox(-NAN)));
}

TEST(VecMath, TanhApproxIsWithinOneAndAHalfUlpOfDoubleTanh) {
  // Measured over all 2^32 floats: at most 1.332 ulp (at x = 0.631044209,
  // just past the switch from the polynomial to the exp form at 0.625).
  UlpSweep s;
  s.run(tanhApprox, tanhRef, 257, {{0.55f, 0.7f}, {-0.7f, -0.55f}, {8.9f, 9.1f}},
        {0.631044209f, -0.631044209f});
  EXPECT_LE(s.normal, 1.5) << "at x = " << s.normalAt;
  EXPECT_LE(s.denormal, 0.5) << "at x = " << s.denormalAt;
  EXPECT_GT(s.normal, 0.5) << "the sweep should find an incorrectly rounded result";

  EXPECT_EQ(tanhApprox(0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(tanhApprox(0.0f)));
  EXPECT_TRUE(std::signbit(tanhApprox(-0.0f)));
  EXPECT_EQ(tanhApprox(1e-30f), 1e-30f);
  EXPECT_EQ(tanhApprox(0x1p-149f), 0x1p-149f);
  EXPECT_EQ(tanhApprox(9.1f), 1.0f);
  EXPECT_EQ(tanhApprox(-20.0f), -1.0f);
  EXPECT_EQ(tanhApprox(HUGE_VALF), 1.0f);
  EXPECT_EQ(tanhApprox(-HUGE_VALF), -1.0f);
  EXPECT_TRUE(std::isnan(tanhApprox(NAN)));
  EXPECT_TRUE(std::isnan(tanhApprox(-NAN)));
}

TEST(VecMath, FloatKernelsUseTheApproximations) {
  // Exp, Tanh and Sigmoid on f32 compute exactly the VecMath.h functions,
  // special values included; on f64 they stay std::exp / std::tanh.
  const std::vector<float> v = {0.f, -0.f, 0.5f, -3.f, 40.f, 100.f, -100.f, -110.f,
                                HUGE_VALF, -HUGE_VALF, NAN};
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor x = fromVec<float>(DType::F32, {n}, v);
  Tensor e = eval(makeDesc("Exp", {x.desc()}, {x.desc()}), {x})[0];
  Tensor t = eval(makeDesc("Tanh", {x.desc()}, {x.desc()}), {x})[0];
  Tensor sg = eval(makeDesc("Sigmoid", {x.desc()}, {x.desc()}), {x})[0];
  auto same = [](float a, float b) {
    return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0;
  };
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same(e.data<float>()[i], expApprox(v[i]))) << "Exp " << v[i];
    EXPECT_TRUE(same(t.data<float>()[i], tanhApprox(v[i]))) << "Tanh " << v[i];
    EXPECT_TRUE(same(sg.data<float>()[i], 1.0f / (1.0f + expApprox(-v[i])))) << "Sigmoid " << v[i];
  }
  std::vector<double> dv(v.begin(), v.end());
  Tensor xd = fromVec<double>(DType::F64, {n}, dv);
  Tensor ed = eval(makeDesc("Exp", {xd.desc()}, {xd.desc()}), {xd})[0];
  for (int64_t i = 0; i + 1 < n; ++i)
    EXPECT_EQ(ed.data<double>()[i], std::exp(dv[i])) << dv[i];
}
