//===- tests/unit/DataMovementKernelsTest.cpp - Data movement, shape, loss kernels ===//
//
// Checks of the kernels of runtime/cpu/kernels/DataMovement.def that ONNX's
// node tests do not cover: Transpose (both paths, all element sizes, odd and
// large shapes) against a naive loop, Slice/Pad/Split/Expand/Tile corner
// cases of newer opsets, Gather and loss targets out of range as errors,
// loss results bitwise independent of the OpenMP thread count and close to a
// float64 reference, and errors (not crashes) on bad descriptions.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using namespace pipec;
using namespace pipec::cpu;
using namespace pipec::test;

namespace {

Tensor ints(const std::vector<int64_t> &v) { return Tensor::fromInts(v); }

/// Naive transpose: output multi-index o reads input index with
/// in[perm[k]] = o[k].
Tensor naiveTranspose(const Tensor &x, const std::vector<int64_t> &perm) {
  const Shape &s = x.shape();
  Shape os;
  for (int64_t p : perm)
    os.push_back(s[p]);
  Tensor y(x.dtype(), os);
  const size_t es = dtypeSize(x.dtype());
  const std::vector<int64_t> is = rowMajorStrides(s);
  std::vector<int64_t> idx(os.size(), 0);
  for (int64_t o = 0; o < y.numel(); ++o) {
    int64_t r = o, src = 0;
    for (int64_t k = static_cast<int64_t>(os.size()) - 1; k >= 0; --k) {
      src += (r % os[k]) * is[perm[k]];
      r /= os[k];
    }
    std::memcpy(static_cast<char *>(y.raw()) + o * es,
                static_cast<const char *>(x.raw()) + src * es, es);
  }
  return y;
}

//===--- Transpose ----------------------------------------------------===//

TEST(DataMovementKernels, TransposeMatchesNaiveLoopOnOddShapes) {
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{33, 65}, {1, 0}},
      {{1, 1}, {1, 0}},
      {{7}, {0}},
      {{3, 5, 7}, {2, 0, 1}},
      {{3, 5, 7}, {1, 0, 2}}, // keeps the innermost axis: memcpy runs
      {{3, 5, 7}, {0, 2, 1}}, // batched 2-D
      {{1, 13, 1, 17}, {3, 2, 1, 0}},
      {{2, 3, 4, 5, 6}, {4, 1, 3, 0, 2}},
      {{2, 3, 4, 5, 6}, {0, 1, 4, 2, 3}},
      {{31, 1, 37}, {2, 1, 0}},
      {{0, 4, 3}, {2, 0, 1}},
      {{257, 513}, {1, 0}},        // large enough for the parallel path
      {{9, 129, 131}, {1, 2, 0}},  // large, innermost moves
      {{64, 3, 1031}, {1, 0, 2}},  // large, innermost stays
      {{2, 16, 128}, {0, 2, 1}},   // whole 16x16 blocks (the GPT-like logits)
      {{2, 16, 4, 16}, {0, 2, 3, 1}},
  };
  for (DType dt : {DType::F32, DType::I64, DType::U8, DType::F16, DType::Bool}) {
    uint32_t seed = 1;
    for (const Case &c : cases) {
      Tensor x = randomBytes(dt, c.shape, seed++);
      if (dt == DType::Bool)
        for (int64_t i = 0; i < x.numel(); ++i)
          x.data<uint8_t>()[i] &= 1;
      Tensor want = naiveTranspose(x, c.perm);
      OpDesc d = makeDesc("Transpose", {x.desc()}, {want.desc()});
      d.attrs["perm"] = Attribute::ofInts(c.perm);
      std::vector<Tensor> got = expectThreadInvariant(d, {x});
      ASSERT_EQ(got.size(), 1u);
      EXPECT_TRUE(got[0].identical(want))
          << dtypeName(dt) << shapeStr(c.shape) << " perm " << shapeStr(c.perm);
    }
  }
}

TEST(DataMovementKernels, TransposeDefaultPermReverses) {
  Tensor x = randomBytes(DType::F32, {2, 3, 5}, 7);
  Tensor want = naiveTranspose(x, {2, 1, 0});
  OpDesc d = makeDesc("Transpose", {x.desc()}, {want.desc()});
  EXPECT_TRUE(eval(d, {x})[0].identical(want));
}

//===--- Gather -------------------------------------------------------===//

TEST(DataMovementKernels, GatherNegativeAndI32Indices) {
  Tensor x = fromVec<float>(DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor idx = fromVec<int32_t>(DType::I32, {2}, {-1, 0});
  OpDesc d = makeDesc("Gather", {x.desc(), idx.desc()}, {{DType::F32, {3, 2}}});
  d.attrs["axis"] = Attribute::ofInt(-1);
  EXPECT_EQ(toVec<float>(eval(d, {x, idx})[0]), (std::vector<float>{2, 1, 4, 3, 6, 5}));
}

TEST(DataMovementKernels, GatherOutOfRangeIsAnError) {
  Tensor x = randomBytes(DType::F32, {5, 4}, 3);
  for (int64_t bad : {5, -6, 1000000}) {
    Tensor idx = ints({0, 2, bad});
    OpDesc d = makeDesc("Gather", {x.desc(), idx.desc()}, {{DType::F32, {3, 4}}});
    d.name = "embed";
    std::string msg = evalError(d, {x, idx});
    EXPECT_NE(msg.find("node 'embed' (Gather)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("index " + std::to_string(bad)), std::string::npos) << msg;
  }
  Tensor idx = fromVec<int64_t>(DType::I64, {2, 2}, {0, 1, 3, -7});
  OpDesc d = makeDesc("GatherElements", {x.desc(), idx.desc()}, {{DType::F32, {2, 2}}});
  EXPECT_NE(evalError(d, {x, idx}).find("index -7"), std::string::npos);
}

TEST(DataMovementKernels, GatherElementsSmallerIndices) {
  Tensor x = fromVec<int64_t>(DType::I64, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor idx = fromVec<int64_t>(DType::I64, {2, 2}, {2, -3, 1, 2});
  OpDesc d = makeDesc("GatherElements", {x.desc(), idx.desc()}, {{DType::I64, {2, 2}}});
  EXPECT_EQ(toVec<int64_t>(eval(d, {x, idx})[0]), (std::vector<int64_t>{7, 2, 4, 8}));
  d.attrs["axis"] = Attribute::ofInt(1);
  EXPECT_EQ(toVec<int64_t>(eval(d, {x, idx})[0]), (std::vector<int64_t>{3, 1, 5, 6}));
}

//===--- Slice, Split, Concat, Pad, Expand, Tile, Trilu ------------------===//

TEST(DataMovementKernels, SliceNegativeStepsAndClamping) {
  Tensor x = fromVec<int32_t>(DType::I32, {2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // axis 1 from 100 (clamped to 4) down to -100 (clamped to -1) by -2;
  // axis 0 from -1 to the start.
  Tensor starts = ints({100, -1}), ends = ints({-100, -3}), axes = ints({1, 0}),
         steps = ints({-2, -1});
  OpDesc d = makeDesc("Slice", {x.desc(), starts.desc(), ends.desc(), axes.desc(), steps.desc()},
                      {{DType::I32, {2, 3}}}, {}, 13);
  for (size_t i = 1; i < 5; ++i)
    setConst(d, i, std::vector<Tensor>{x, starts, ends, axes, steps}[i]);
  EXPECT_EQ(toVec<int32_t>(eval(d, {x, starts, ends, axes, steps})[0]),
            (std::vector<int32_t>{9, 7, 5, 4, 2, 0}));
}

TEST(DataMovementKernels, LargeSliceAndPadMatchNaive) {
  // Big enough (> 256 KiB) for the parallel paths.
  const Shape xs{64, 50, 40};
  Tensor x = randomBytes(DType::F32, xs, 51);
  const float *px = x.data<float>();
  auto at = [&](int64_t a, int64_t b, int64_t c) { return px[(a * 50 + b) * 40 + c]; };

  // x[1::2, :, 38:0:-3]
  Tensor starts = ints({1, 38}), ends = ints({INT64_MAX, 0}), axes = ints({0, -1}),
         steps = ints({2, -3});
  OpDesc s = makeDesc("Slice", {x.desc(), starts.desc(), ends.desc(), axes.desc(), steps.desc()},
                      {{DType::F32, {32, 50, 13}}}, {}, 13);
  for (size_t i = 1; i < 5; ++i)
    setConst(s, i, std::vector<Tensor>{x, starts, ends, axes, steps}[i]);
  Tensor y = expectThreadInvariant(s, {x, starts, ends, axes, steps})[0];
  for (int64_t a = 0; a < 32; ++a)
    for (int64_t b = 0; b < 50; ++b)
      for (int64_t c = 0; c < 13; ++c)
        ASSERT_EQ(std::memcmp(&y.data<float>()[(a * 50 + b) * 13 + c], &px[((1 + 2 * a) * 50 + b) * 40 + 38 - 3 * c], 4), 0);

  // Reflect padding, numpy semantics (pads may exceed dim - 1).
  Tensor pads = ints({1, 2, 45, 3, 4, 5});
  OpDesc p = makeDesc("Pad", {x.desc(), pads.desc()}, {{DType::F32, {68, 56, 90}}}, {}, 13);
  p.attrs["mode"] = Attribute::ofString("reflect");
  setConst(p, 1, pads);
  Tensor z = expectThreadInvariant(p, {x, pads})[0];
  auto reflect = [](int64_t i, int64_t n) {
    const int64_t m = ((i % (2 * (n - 1))) + 2 * (n - 1)) % (2 * (n - 1));
    return m < n ? m : 2 * (n - 1) - m;
  };
  for (int64_t a = 0; a < 68; ++a)
    for (int64_t b = 0; b < 56; ++b)
      for (int64_t c = 0; c < 90; ++c) {
        const float want = at(reflect(a - 1, 64), reflect(b - 2, 50), reflect(c - 45, 40));
        ASSERT_EQ(std::memcmp(&z.data<float>()[(a * 56 + b) * 90 + c], &want, 4), 0)
            << a << "," << b << "," << c;
      }
}

TEST(DataMovementKernels, SliceOpset1Attributes) {
  Tensor x = fromVec<int32_t>(DType::I32, {2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  OpDesc d = makeDesc("Slice", {x.desc()}, {{DType::I32, {2, 2}}}, {}, 1);
  d.attrs["starts"] = Attribute::ofInts({1});
  d.attrs["ends"] = Attribute::ofInts({-2});
  d.attrs["axes"] = Attribute::ofInts({1});
  EXPECT_EQ(toVec<int32_t>(eval(d, {x})[0]), (std::vector<int32_t>{1, 2, 6, 7}));
}

TEST(DataMovementKernels, SplitNumOutputsUnevenLastChunk) {
  Tensor x = fromVec<int16_t>(DType::I16, {7}, {0, 1, 2, 3, 4, 5, 6});
  OpDesc d = makeDesc("Split", {x.desc()},
                      {{DType::I16, {3}}, {DType::I16, {3}}, {DType::I16, {1}}}, {}, 18);
  d.attrs["num_outputs"] = Attribute::ofInt(3);
  std::vector<Tensor> out = eval(d, {x});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(toVec<int16_t>(out[2]), (std::vector<int16_t>{6}));
  // Opset 11: 'split' attribute; opset 13: constant input.
  OpDesc a = makeDesc("Split", {x.desc()}, {{DType::I16, {2}}, {DType::I16, {5}}}, {}, 11);
  a.attrs["split"] = Attribute::ofInts({2, 5});
  EXPECT_EQ(toVec<int16_t>(eval(a, {x})[1]), (std::vector<int16_t>{2, 3, 4, 5, 6}));
  Tensor sizes = ints({2, 5});
  OpDesc b =
      makeDesc("Split", {x.desc(), sizes.desc()}, {{DType::I16, {2}}, {DType::I16, {5}}}, {}, 13);
  setConst(b, 1, sizes);
  EXPECT_EQ(toVec<int16_t>(eval(b, {x, sizes})[0]), (std::vector<int16_t>{0, 1}));
}

TEST(DataMovementKernels, ConcatSplitRoundTripLarge) {
  // Large enough for the parallel row copies, element type by size only.
  Tensor a = randomBytes(DType::F16, {64, 300, 5}, 11);
  Tensor b = randomBytes(DType::F16, {64, 200, 5}, 12);
  OpDesc c = makeDesc("Concat", {a.desc(), b.desc()}, {{DType::F16, {64, 500, 5}}});
  c.attrs["axis"] = Attribute::ofInt(1);
  Tensor ab = expectThreadInvariant(c, {a, b})[0];
  Tensor sizes = ints({300, 200});
  OpDesc s = makeDesc("Split", {ab.desc(), sizes.desc()}, {a.desc(), b.desc()}, {}, 13);
  s.attrs["axis"] = Attribute::ofInt(-2);
  setConst(s, 1, sizes);
  std::vector<Tensor> parts = expectThreadInvariant(s, {ab, sizes});
  EXPECT_TRUE(parts[0].identical(a));
  EXPECT_TRUE(parts[1].identical(b));
}

TEST(DataMovementKernels, PadModesWithAxesAndNegativePads) {
  Tensor x = fromVec<float>(DType::F32, {1, 4}, {1, 2, 3, 4});
  Tensor axes = ints({-1});
  auto pad = [&](const std::string &mode, std::vector<int64_t> p, int64_t outLen,
                 int64_t opset) {
    Tensor pads = ints(p);
    OpDesc d = makeDesc("Pad", {x.desc(), pads.desc(), {}, axes.desc()},
                        {{DType::F32, {1, outLen}}}, {}, opset);
    d.attrs["mode"] = Attribute::ofString(mode);
    setConst(d, 1, pads);
    setConst(d, 3, axes);
    return toVec<float>(eval(d, {x, pads, Tensor(), axes})[0]);
  };
  EXPECT_EQ(pad("reflect", {3, 2}, 9, 18), (std::vector<float>{4, 3, 2, 1, 2, 3, 4, 3, 2}));
  EXPECT_EQ(pad("edge", {2, 1}, 7, 18), (std::vector<float>{1, 1, 1, 2, 3, 4, 4}));
  EXPECT_EQ(pad("wrap", {5, 1}, 10, 19), (std::vector<float>{4, 1, 2, 3, 4, 1, 2, 3, 4, 1}));
  // Crop one element on the left, then pad relative to [2, 3, 4].
  EXPECT_EQ(pad("reflect", {-1, 2}, 5, 18), (std::vector<float>{2, 3, 4, 3, 2}));
  EXPECT_EQ(pad("constant", {1, -2}, 3, 18), (std::vector<float>{0, 1, 2}));
}

TEST(DataMovementKernels, PadConstantValueRuntimeAndAttribute) {
  Tensor x = fromVec<int64_t>(DType::I64, {2, 1}, {5, 6});
  Tensor pads = ints({1, 0, 0, 2});
  Tensor value = fromVec<int64_t>(DType::I64, {}, {-7});
  OpDesc d = makeDesc("Pad", {x.desc(), pads.desc(), value.desc()}, {{DType::I64, {3, 3}}}, {}, 13);
  setConst(d, 1, pads);
  EXPECT_EQ(toVec<int64_t>(eval(d, {x, pads, value})[0]),
            (std::vector<int64_t>{-7, -7, -7, 5, -7, -7, 6, -7, -7}));
  OpDesc old = makeDesc("Pad", {x.desc()}, {{DType::I64, {3, 3}}}, {}, 2);
  old.attrs["pads"] = Attribute::ofInts({1, 0, 0, 2});
  old.attrs["value"] = Attribute::ofFloat(1.5f);
  EXPECT_EQ(toVec<int64_t>(eval(old, {x})[0]),
            (std::vector<int64_t>{1, 1, 1, 5, 1, 1, 6, 1, 1}));
}

TEST(DataMovementKernels, ExpandAndTileMatchNaive) {
  Tensor x = randomBytes(DType::I32, {3, 1, 5}, 21);
  Tensor shape = ints({2, 1, 4, 1});
  OpDesc e = makeDesc("Expand", {x.desc(), shape.desc()}, {{DType::I32, {2, 3, 4, 5}}});
  setConst(e, 1, shape);
  Tensor y = eval(e, {x, shape})[0];
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t c = i / 20 % 3, w = i % 5;
    ASSERT_EQ(y.data<int32_t>()[i], x.data<int32_t>()[c * 5 + w]) << i;
  }
  // Innermost broadcast: [N, 1] -> [N, M] replicates one element per row.
  Tensor col = randomBytes(DType::F64, {300, 1}, 22);
  Tensor wide = ints({300, 200});
  OpDesc e2 = makeDesc("Expand", {col.desc(), wide.desc()}, {{DType::F64, {300, 200}}});
  setConst(e2, 1, wide);
  Tensor z = expectThreadInvariant(e2, {col, wide})[0];
  for (int64_t i = 0; i < z.numel(); ++i)
    ASSERT_EQ(std::memcmp(&z.data<double>()[i], &col.data<double>()[i / 200], 8), 0);

  Tensor reps = ints({2, 3});
  Tensor t = randomBytes(DType::U8, {3, 5}, 23);
  OpDesc tile = makeDesc("Tile", {t.desc(), reps.desc()}, {{DType::U8, {6, 15}}});
  setConst(tile, 1, reps);
  Tensor tiled = eval(tile, {t, reps})[0];
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 15; ++c)
      ASSERT_EQ(tiled.data<uint8_t>()[r * 15 + c], t.data<uint8_t>()[(r % 3) * 5 + c % 5]);
}

TEST(DataMovementKernels, TriluWithRuntimeK) {
  Tensor x = fromVec<float>(DType::F32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor k = fromVec<int64_t>(DType::I64, {}, {-1});
  OpDesc d = makeDesc("Trilu", {x.desc(), k.desc()}, {x.desc()}, {}, 14);
  EXPECT_EQ(toVec<float>(eval(d, {x, k})[0]), (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 8, 9}));
  d.attrs["upper"] = Attribute::ofInt(0);
  EXPECT_EQ(toVec<float>(eval(d, {x, k})[0]), (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  k.data<int64_t>()[0] = INT64_MAX;
  EXPECT_TRUE(eval(d, {x, k})[0].identical(x));
}

//===--- Losses -------------------------------------------------------===//

/// Float64 reference of SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss
/// (sum or mean) with weights and ignore_index.
double referenceLoss(const Tensor &x, const Tensor &target, const Tensor &w, bool softmax,
                     bool mean, int64_t ignore) {
  const int64_t n = x.shape()[0], c = x.shape()[1], dd = x.numel() / (n * c);
  double loss = 0, weight = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < dd; ++k) {
      const int64_t t = target.getInt(i * dd + k);
      if (t == ignore)
        continue;
      double lp = x.getDouble((i * c + t) * dd + k);
      if (softmax) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; ++j)
          mx = std::max(mx, x.getDouble((i * c + j) * dd + k));
        for (int64_t j = 0; j < c; ++j)
          s += std::exp(x.getDouble((i * c + j) * dd + k) - mx);
        lp -= mx + std::log(s);
      }
      loss -= lp * w.getDouble(t);
      weight += w.getDouble(t);
    }
  return mean ? loss / weight : loss;
}

TEST(DataMovementKernels, LossesAreThreadCountInvariant) {
  for (const char *op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    for (DType dt : {DType::F32, DType::F64}) {
      for (const char *reduction : {"sum", "mean"}) {
        // [N, C, D] with D not a multiple of the block and N * D large.
        const Shape xs{40, 7, 1000};
        Tensor x = randomT(dt, xs, 31, -3, 3);
        Tensor target(DType::I32, {40, 1000});
        std::mt19937 g(5);
        for (int64_t i = 0; i < target.numel(); ++i)
          target.data<int32_t>()[i] = static_cast<int32_t>(g() % 8); // 7 is ignored
        Tensor w = randomT(dt, {7}, 32, 0.1, 2.0);
        OpDesc d = makeDesc(op, {x.desc(), target.desc(), w.desc()}, {{dt, {}}}, {}, 13);
        d.attrs["reduction"] = Attribute::ofString(reduction);
        d.attrs["ignore_index"] = Attribute::ofInt(7);
        if (std::string(op) == "SoftmaxCrossEntropyLoss")
          d.outputs.push_back(x.desc());
        std::vector<Tensor> out = expectThreadInvariant(d, {x, target, w});
        ASSERT_FALSE(out.empty());
        const double want = referenceLoss(x, target, w, std::string(op) != "NegativeLogLikelihoodLoss",
                                          std::string(reduction) == "mean", 7);
        EXPECT_NEAR(out[0].getDouble(0), want, std::fabs(want) * (dt == DType::F32 ? 1e-5 : 1e-12))
            << op << " " << dtypeName(dt) << " " << reduction;
      }
    }
  }
}

// The loss gradients (pipec:SoftmaxCrossEntropyLossGrad and
// NegativeLogLikelihoodLossGrad) against a float64 reference of
//   dx[n,c,d] = g * w_t * (softmax(x)[n,c,d] - [c == t])   (NLL: no softmax)
// on [N, C] scores and on [N, C, D] with D = 65: a block of 64 positions and
// one of a single position, whose classes are D apart.
TEST(DataMovementKernels, LossGradientsMatchReference) {
  for (const char *op : {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
    const bool softmax = std::string(op) == "SoftmaxCrossEntropyLossGrad";
    for (const Shape &xs : {Shape{6, 5}, Shape{3, 5, 65}}) {
      const int64_t N = xs[0], C = xs[1], D = xs.size() > 2 ? xs[2] : 1;
      Tensor x = randomT(DType::F32, xs, 51, -3, 3);
      Shape ts = xs;
      ts.erase(ts.begin() + 1);
      Tensor target(DType::I64, ts);
      std::mt19937 g(9);
      for (int64_t i = 0; i < target.numel(); ++i)
        target.data<int64_t>()[i] = static_cast<int64_t>(g() % 6); // 5 is ignored
      Tensor w = randomT(DType::F32, {C}, 52, 0.1, 2.0);
      Tensor dl(DType::F32, {});
      dl.data<float>()[0] = 0.75f;
      OpDesc d = makeDesc(op, {dl.desc(), x.desc(), target.desc(), w.desc()}, {x.desc()}, {}, 13);
      d.domain = "pipec";
      d.attrs["reduction"] = Attribute::ofString("mean");
      d.attrs["ignore_index"] = Attribute::ofInt(5);
      std::vector<Tensor> out = eval(d, {dl, x, target, w});
      ASSERT_EQ(out.size(), 1u);
      double total = 0;
      for (int64_t p = 0; p < N * D; ++p)
        if (target.getInt(p) != 5)
          total += w.getDouble(target.getInt(p));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < D; ++k) {
          const int64_t t = target.getInt(n * D + k);
          const double wt = t == 5 ? 0.0 : w.getDouble(t), scale = 0.75 * wt / total;
          double mx = -INFINITY, s = 0;
          for (int64_t c = 0; c < C; ++c)
            mx = std::max(mx, x.getDouble((n * C + c) * D + k));
          for (int64_t c = 0; c < C; ++c)
            s += std::exp(x.getDouble((n * C + c) * D + k) - mx);
          for (int64_t c = 0; c < C; ++c) {
            const int64_t at = (n * C + c) * D + k;
            double want = softmax ? scale * std::exp(x.getDouble(at) - mx) / s : 0.0;
            if (c == t)
              want -= scale;
            EXPECT_NEAR(out[0].getDouble(at), want, 1e-6)
                << op << " " << shapeStr(xs) << " n " << n << " c " << c << " d " << k;
          }
        }
    }
  }
}

TEST(DataMovementKernels, LossTargetOutOfRangeIsAnError) {
  Tensor x = randomT(DType::F32, {2, 3}, 41, -3, 3);
  Tensor target = ints({1, 3});
  for (const char *op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    OpDesc d = makeDesc(op, {x.desc(), target.desc()}, {{DType::F32, {}}}, {}, 13);
    std::string msg = evalError(d, {x, target});
    EXPECT_NE(msg.find("target 3 at position 1"), std::string::npos) << msg;
    d.attrs["ignore_index"] = Attribute::ofInt(3);
    eval(d, {x, target});
  }
}

//===--- Bad descriptions ---------------------------------------------===//

TEST(DataMovementKernels, BadDescriptionsAreErrors) {
  const TensorDesc f23{DType::F32, {2, 3}};
  auto prepareError = [](const OpDesc &d) {
    auto k = createKernel(d);
    EXPECT_FALSE(k.isOk()) << d.opType << " prepared";
    return k.isOk() ? std::string() : k.status().message();
  };
  auto contains = [](const std::string &s, const std::string &part) {
    return s.find(part) != std::string::npos;
  };

  OpDesc concat = makeDesc("Concat", {f23, {DType::F32, {3, 3}}}, {{DType::F32, {5, 3}}});
  concat.attrs["axis"] = Attribute::ofInt(1);
  EXPECT_TRUE(contains(prepareError(concat), "agree except on axis 1"));
  concat.attrs.clear();
  EXPECT_TRUE(contains(prepareError(concat), "'axis' is required"));

  // Shape-deciding inputs must be compile-time constants.
  OpDesc reshape = makeDesc("Reshape", {f23, {DType::I64, {1}}}, {{DType::F32, {6}}});
  EXPECT_TRUE(contains(prepareError(reshape), "input 1 (shape) must be a compile-time constant"));
  setConst(reshape, 1, ints({4}));
  EXPECT_TRUE(contains(prepareError(reshape), "cannot reshape"));

  OpDesc slice =
      makeDesc("Slice", {f23, {DType::I64, {1}}, {DType::I64, {1}}, {}, {DType::I64, {1}}},
               {{DType::F32, {2, 3}}}, {}, 13);
  setConst(slice, 1, ints({0}));
  setConst(slice, 2, ints({2}));
  setConst(slice, 4, ints({0}));
  EXPECT_TRUE(contains(prepareError(slice), "step of axis 0 is 0"));

  OpDesc transpose = makeDesc("Transpose", {f23}, {{DType::F32, {3, 2}}});
  transpose.attrs["perm"] = Attribute::ofInts({0, 0});
  EXPECT_TRUE(contains(prepareError(transpose), "not a permutation"));
  transpose.attrs["perm"] = Attribute::ofInts({1, 0});
  transpose.outputs = {{DType::F32, {2, 3}}};
  EXPECT_TRUE(contains(prepareError(transpose), "the op computes f32[3,2]"));

  OpDesc split = makeDesc("Split", {f23}, {{DType::F32, {2, 1}}, {DType::F32, {2, 1}}}, {}, 11);
  split.attrs["axis"] = Attribute::ofInt(1);
  split.attrs["split"] = Attribute::ofInts({1, 1});
  EXPECT_TRUE(contains(prepareError(split), "summing to 3"));

  OpDesc gather = makeDesc("Gather", {f23, {DType::F32, {2}}}, {{DType::F32, {2, 3}}});
  EXPECT_TRUE(contains(prepareError(gather), "indices must be i32 or i64"));
  gather.inputs[1].dtype = DType::I64;
  gather.attrs["axis"] = Attribute::ofInt(2);
  EXPECT_TRUE(contains(prepareError(gather), "axis 2 is out of range"));

  OpDesc pad =
      makeDesc("Pad", {{DType::F32, {0, 3}}, {DType::I64, {4}}}, {{DType::F32, {2, 3}}}, {}, 13);
  pad.attrs["mode"] = Attribute::ofString("reflect");
  setConst(pad, 1, ints({1, 0, 1, 0}));
  EXPECT_TRUE(contains(prepareError(pad), "no elements left"));
  pad.attrs["mode"] = Attribute::ofString("mirror");
  EXPECT_TRUE(contains(prepareError(pad), "unknown mode"));

  OpDesc tile = makeDesc("Tile", {f23, {DType::I64, {1}}}, {{DType::F32, {4, 3}}});
  setConst(tile, 1, ints({2}));
  EXPECT_TRUE(contains(prepareError(tile), "one value per axis"));

  OpDesc range = makeDesc("Range", {{DType::F32, {}}, {DType::F32, {}}, {DType::F32, {}}},
                          {{DType::F32, {3}}}, {}, 11);
  EXPECT_TRUE(contains(prepareError(range), "compile-time constant"));

  OpDesc loss =
      makeDesc("NegativeLogLikelihoodLoss", {f23, {DType::I64, {3}}}, {{DType::F32, {}}}, {}, 13);
  EXPECT_TRUE(contains(prepareError(loss), "need a target of shape [2]"));
  loss.inputs[1].shape = {2};
  loss.attrs["reduction"] = Attribute::ofString("avg");
  EXPECT_TRUE(contains(prepareError(loss), "unknown reduction"));

  OpDesc constant = makeDesc("Constant", {}, {{DType::F32, {}}});
  constant.attrs["value_string"] = Attribute::ofString("x");
  EXPECT_TRUE(contains(prepareError(constant), "not supported"));

  OpDesc flatten = makeDesc("Flatten", {{DType::String, {2}}}, {{DType::String, {1, 2}}});
  EXPECT_TRUE(contains(prepareError(flatten), "cannot move"));
}

TEST(DataMovementKernels, ShapeOpsAndConstants) {
  OpDesc shape = makeDesc("Shape", {{DType::F32, {2, 3, 4, 5}}}, {{DType::I64, {2}}}, {}, 15);
  shape.attrs["start"] = Attribute::ofInt(-3);
  shape.attrs["end"] = Attribute::ofInt(-1);
  EXPECT_EQ(toVec<int64_t>(eval(shape, {Tensor(DType::F32, {2, 3, 4, 5})})[0]),
            (std::vector<int64_t>{3, 4}));

  Tensor dims = ints({2, 2});
  OpDesc cos = makeDesc("ConstantOfShape", {dims.desc()}, {{DType::F16, {2, 2}}}, {}, 9);
  setConst(cos, 0, dims);
  Tensor h(DType::F16, {1});
  h.data<uint16_t>()[0] = 0x3c00; // 1.0
  cos.attrs["value"] = Attribute::ofTensor(h);
  EXPECT_EQ(toVec<uint16_t>(eval(cos, {dims})[0]), (std::vector<uint16_t>(4, 0x3c00)));

  OpDesc c = makeDesc("Constant", {}, {{DType::I64, {3}}}, {}, 13);
  c.attrs["value_ints"] = Attribute::ofInts({4, 5, 6});
  EXPECT_EQ(toVec<int64_t>(eval(c, {})[0]), (std::vector<int64_t>{4, 5, 6}));

  Tensor start = fromVec<int32_t>(DType::I32, {}, {10}), limit = fromVec<int32_t>(DType::I32, {}, {1}),
         delta = fromVec<int32_t>(DType::I32, {}, {-4});
  OpDesc range =
      makeDesc("Range", {start.desc(), limit.desc(), delta.desc()}, {{DType::I32, {3}}}, {}, 11);
  setConst(range, 0, start);
  setConst(range, 1, limit);
  setConst(range, 2, delta);
  EXPECT_EQ(toVec<int32_t>(eval(range, {start, limit, delta})[0]),
            (std::vector<int32_t>{10, 6, 2}));
}

} // namespace
