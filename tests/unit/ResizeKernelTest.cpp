//===- tests/unit/ResizeKernelTest.cpp - Resize and pipec:ResizeGrad kernels ===//
//
// What ONNX's node tests and the gradient checks do not cover: results
// bitwise independent of the OpenMP thread count (forward and gradient,
// shapes large enough to split), nearest on integer and bool tensors
// against a naive loop, the gradient kernel as the exact adjoint of the
// forward (<A x, y> = <x, A^T y>) for every mode, and errors (not crashes)
// on inputs that are not constants.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "support/Resize.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace pipec;
using namespace pipec::cpu;
using namespace pipec::test;

namespace {

Tensor floats(const std::vector<float> &v) {
  return fromVec<float>(DType::F32, {int64_t(v.size())}, v);
}

/// Resize-`opset` of x with constant scales (or sizes when `sizes`).
OpDesc resizeDesc(const TensorDesc &x, const Shape &out, const Tensor &param, bool sizes,
                  AttrMap attrs, int64_t opset = 18, const Tensor *roi = nullptr) {
  std::vector<TensorDesc> in = {x, roi ? roi->desc() : TensorDesc{},
                                sizes ? TensorDesc{} : param.desc(),
                                sizes ? param.desc() : TensorDesc{}};
  OpDesc d = makeDesc("Resize", in, {{x.dtype, out}}, std::move(attrs), opset);
  if (roi)
    setConst(d, 1, *roi);
  setConst(d, sizes ? 3 : 2, param);
  return d;
}

/// The pipec:ResizeGrad of a Resize description (forward inputs as values).
OpDesc gradDesc(const OpDesc &fwd) {
  ResizeArgs a;
  a.opType = fwd.opType;
  a.opset = fwd.opset;
  a.attrs = &fwd.attrs;
  a.x = fwd.inputs[0].shape;
  a.roi = fwd.constInput(1);
  a.scales = fwd.constInput(2);
  a.sizes = fwd.constInput(3);
  return makeDesc("ResizeGrad", {fwd.outputs[0]}, {fwd.inputs[0]}, resizeGradAttrs(a), 1, "pipec");
}

std::vector<Tensor> fwdInputs(const OpDesc &d, const Tensor &x) {
  std::vector<Tensor> in = {x};
  for (size_t i = 1; i < d.inputs.size(); ++i)
    in.push_back(d.constInput(i) ? *d.constInput(i) : Tensor());
  return in;
}

double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    s += a.getDouble(i) * b.getDouble(i);
  return s;
}

TEST(ResizeKernel, ThreadCountDoesNotChangeTheBits) {
  struct Case {
    const char *mode;
    DType dt;
    std::vector<float> scales;
    AttrMap extra;
  };
  const std::vector<Case> cases = {
      {"linear", DType::F32, {1, 1, 1.7f, 0.55f}, {}},
      {"cubic", DType::F64, {1, 1, 0.6f, 2.f}, {}},
      {"linear", DType::F32, {1, 1, 0.3f, 0.45f}, {{"antialias", Attribute::ofInt(1)}}},
      {"nearest", DType::F32, {1, 1.5f, 2.f, 0.5f}, {}},
  };
  for (const Case &c : cases) {
    const Shape xs = {2, 8, 60, 70};
    Shape ys;
    for (size_t i = 0; i < xs.size(); ++i)
      ys.push_back(static_cast<int64_t>(std::floor(double(xs[i]) * double(c.scales[i]))));
    AttrMap attrs = c.extra;
    attrs["mode"] = Attribute::ofString(c.mode);
    OpDesc d = resizeDesc({c.dt, xs}, ys, floats(c.scales), false, attrs);
    Tensor x = randomT(c.dt, xs, 7);
    expectThreadInvariant(d, fwdInputs(d, x));
    expectThreadInvariant(gradDesc(d), {randomT(c.dt, ys, 8)});
  }
}

TEST(ResizeKernel, NearestMovesIntegersAndBools) {
  // asymmetric + floor: output (i, j) reads (floor(i / 2), floor(j / 3)).
  for (DType dt : {DType::I64, DType::U8, DType::Bool, DType::I16}) {
    const Shape xs = {3, 4}, ys = {6, 12};
    OpDesc d = resizeDesc({dt, xs}, ys, floats({2, 3}), false,
                          {{"coordinate_transformation_mode", Attribute::ofString("asymmetric")},
                           {"nearest_mode", Attribute::ofString("floor")}},
                          13);
    Tensor x = randomBytes(dt, xs, 3);
    if (dt == DType::Bool)
      for (int64_t i = 0; i < x.numel(); ++i)
        x.data<uint8_t>()[i] &= 1;
    Tensor y = evalOne(d, fwdInputs(d, x));
    const size_t es = dtypeSize(dt);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 12; ++j)
        EXPECT_EQ(0,
                  std::memcmp(static_cast<const char *>(y.raw()) + (i * 12 + j) * es,
                              static_cast<const char *>(x.raw()) + ((i / 2) * 4 + j / 3) * es, es))
            << dtypeName(dt) << " (" << i << ", " << j << ")";
  }
}

TEST(ResizeKernel, GradientIsTheAdjoint) {
  const Shape xs = {1, 2, 7, 5};
  const Tensor roi = fromVec<float>(DType::F32, {8}, {0, 0, -0.2f, 0.1f, 1, 1, 0.8f, 1.3f});
  struct Case {
    const char *label;
    AttrMap attrs;
    std::vector<float> scales;
    bool crop;
  };
  auto S = [](const char *s) { return Attribute::ofString(s); };
  const std::vector<Case> cases = {
      {"nearest", {}, {1, 1, 1.6f, 0.7f}, false},
      {"linear align_corners",
       {{"mode", S("linear")}, {"coordinate_transformation_mode", S("align_corners")}},
       {1, 1, 0.6f, 2.2f},
       false},
      {"cubic exclude_outside",
       {{"mode", S("cubic")}, {"exclude_outside", Attribute::ofInt(1)}},
       {1, 1, 2.5f, 0.8f},
       false},
      {"cubic antialias",
       {{"mode", S("cubic")}, {"antialias", Attribute::ofInt(1)}},
       {1, 1, 0.4f, 0.6f},
       false},
      {"linear tf_crop_and_resize",
       {{"mode", S("linear")}, {"coordinate_transformation_mode", S("tf_crop_and_resize")}},
       {1, 1, 1.5f, 1.4f},
       true},
  };
  for (const Case &c : cases) {
    Shape ys;
    for (size_t i = 0; i < xs.size(); ++i)
      ys.push_back(static_cast<int64_t>(std::floor(double(xs[i]) * double(c.scales[i]))));
    OpDesc d = resizeDesc({DType::F64, xs}, ys, floats(c.scales), false, c.attrs, 18,
                          c.crop ? &roi : nullptr);
    Tensor x = randomT(DType::F64, xs, 11), dy = randomT(DType::F64, ys, 12);
    Tensor y = evalOne(d, fwdInputs(d, x));
    Tensor dx = evalOne(gradDesc(d), {dy});
    const double lhs = dot(y, dy), rhs = dot(x, dx);
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::max(1.0, std::fabs(lhs))) << c.label;
  }
}

TEST(ResizeKernel, InputsThatAreNotConstantsAreRefused) {
  const TensorDesc x{DType::F32, {1, 1, 2, 2}};
  OpDesc d = makeDesc("Resize", {x, {}, {DType::F32, {4}}}, {{DType::F32, {1, 1, 4, 4}}}, {}, 13);
  EXPECT_NE(evalError(d, {randomF32({1, 1, 2, 2}, 1), Tensor(), floats({1, 1, 2, 2})})
                .find("node 'n' (Resize), opset 13: input 2 must be a compile-time constant"),
            std::string::npos);
  OpDesc g = makeDesc("ResizeGrad", {{DType::F32, {1, 1, 4, 4}}}, {x}, {}, 1, "pipec");
  EXPECT_NE(evalError(g, {randomF32({1, 1, 4, 4}, 2)}).find("attribute 'forward' is ''"),
            std::string::npos);
}

} // namespace
