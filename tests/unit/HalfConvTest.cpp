//===- tests/unit/HalfConvTest.cpp - Convolutions on bf16/f16 operands ---===//
//
// Conv, pipec:NhwcConv, ConvTranspose, pipec:ConvGradInput and
// pipec:ConvGradWeight under output_dtype (16-bit operands 0 and 1, an f32
// result; support/FusedOps.h), as the mixed-precision pass makes them:
//  - the emulation (forced by turning oneDNN off; taken by ConvTranspose
//    and ConvGradWeight everywhere) is bitwise the f32 kernel run on the
//    operands widened to f32, what a Cast to f32 before the product gave;
//  - the path this machine takes (oneDNN's bf16 convolutions where it has
//    AVX512_BF16 or AMX, else the emulation) agrees with a double-precision
//    convolution of the same 16-bit values to f32 rounding, and is bitwise
//    the same with 1, 2 and 3 threads;
//  - bad type combinations are refused by name.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
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

struct Case {
  std::string label, op; ///< op: Conv, NhwcConv, ConvTranspose, ConvGradInput, ConvGradWeight
  Shape a, b;            ///< operands 0 and 1
  Shape out;
  bool bias = false;
  AttrMap attrs;
};

AttrMap window(int64_t group, std::vector<int64_t> strides, std::vector<int64_t> pads,
               std::vector<int64_t> dil = {}) {
  if (dil.empty())
    dil.assign(strides.size(), 1);
  return {{"group", Attribute::ofInt(group)},
          {"strides", Attribute::ofInts(std::move(strides))},
          {"dilations", Attribute::ofInts(std::move(dil))},
          {"pads", Attribute::ofInts(std::move(pads))}};
}

AttrMap withShape(AttrMap a, const Shape &s) {
  a["shape"] = Attribute::ofInts(s);
  return a;
}

/// A training step's convolutions (the CNN sample's stem and blocks, a
/// strided 1x1, grouped, 1-D and 3-D ones) and their gradients.
std::vector<Case> cases() {
  const AttrMap same3 = window(1, {1, 1}, {1, 1, 1, 1}), down3 = window(1, {2, 2}, {1, 1, 1, 1}),
                down1 = window(1, {2, 2}, {0, 0, 0, 0}), grouped = window(2, {1, 2}, {1, 0, 2, 1}, {2, 1});
  return {
      {"stem 3x3", "Conv", {2, 3, 16, 16}, {8, 3, 3, 3}, {2, 8, 16, 16}, true, same3},
      {"3x3 stride 2", "Conv", {2, 8, 16, 16}, {16, 8, 3, 3}, {2, 16, 8, 8}, false, down3},
      {"1x1 stride 2", "Conv", {2, 8, 16, 16}, {16, 8, 1, 1}, {2, 16, 8, 8}, true, down1},
      {"group 2 dilations", "Conv", {2, 4, 7, 9}, {6, 2, 3, 2}, {2, 6, 6, 5}, false, grouped},
      {"1-D", "Conv", {2, 4, 11}, {6, 4, 3}, {2, 6, 6}, true, window(1, {2}, {1, 1})},
      {"3-D", "Conv", {2, 4, 5, 6, 7}, {6, 4, 3, 3, 3}, {2, 6, 5, 6, 7}, false,
       window(1, {1, 1, 1}, {1, 1, 1, 1, 1, 1})},
      {"64 channels 3x3", "Conv", {2, 64, 12, 12}, {64, 64, 3, 3}, {2, 64, 12, 12}, true, same3},
      {"NHWC 3x3", "NhwcConv", {2, 16, 16, 8}, {16, 8, 3, 3}, {2, 16, 16, 16}, true, same3},
      {"transposed stride 2", "ConvTranspose", {2, 8, 5, 5}, {8, 4, 3, 3}, {2, 4, 11, 11}, true,
       window(1, {2, 2}, {0, 0, 0, 0})},
      {"dX stem", "ConvGradInput", {2, 8, 16, 16}, {8, 3, 3, 3}, {2, 3, 16, 16}, false,
       withShape(same3, {2, 3, 16, 16})},
      {"dX 3x3 stride 2", "ConvGradInput", {2, 16, 8, 8}, {16, 8, 3, 3}, {2, 8, 16, 16}, false,
       withShape(down3, {2, 8, 16, 16})},
      {"dX group 2", "ConvGradInput", {2, 6, 6, 5}, {6, 2, 3, 2}, {2, 4, 7, 9}, false,
       withShape(grouped, {2, 4, 7, 9})},
      {"dX 64 channels", "ConvGradInput", {2, 64, 12, 12}, {64, 64, 3, 3}, {2, 64, 12, 12}, false,
       withShape(same3, {2, 64, 12, 12})},
      {"dW stem", "ConvGradWeight", {2, 8, 16, 16}, {2, 3, 16, 16}, {8, 3, 3, 3}, false,
       withShape(same3, {8, 3, 3, 3})},
      {"dW 1x1 stride 2", "ConvGradWeight", {2, 16, 8, 8}, {2, 8, 16, 16}, {16, 8, 1, 1}, false,
       withShape(down1, {16, 8, 1, 1})},
  };
}

bool pipecDomain(const Case &c) { return c.op == "NhwcConv" || c.op.rfind("ConvGrad", 0) == 0; }

/// The node of case `c` on operands of type `t` (under output_dtype when
/// 16-bit) with a result and bias of type `r`.
OpDesc descOf(const Case &c, DType t, DType r) {
  AttrMap at = c.attrs;
  if (t == DType::BF16 || t == DType::F16)
    at[kProductOutputDType] = Attribute::ofInt(static_cast<int64_t>(DType::F32));
  std::vector<TensorDesc> ins{{t, c.a}, {t, c.b}};
  if (c.bias)
    ins.push_back({r, {c.op == "ConvTranspose" ? c.out[1] : c.op == "NhwcConv" ? c.out.back() : c.out[1]}});
  OpDesc d = makeDesc(c.op, ins, {{r, c.out}}, at, 13);
  d.name = c.label;
  if (pipecDomain(c)) {
    d.domain = "pipec";
    d.opset = 1;
  }
  return d;
}

/// `f32` rounded to `t`, and its exact widening.
struct Operand {
  Tensor half, wide;
};

Operand operandOf(const Shape &s, uint32_t seed, DType t) {
  const Tensor f = randomF32(s, seed, -2.f, 2.f);
  Operand o{Tensor(t, s), Tensor(DType::F32, s)};
  for (int64_t i = 0; i < f.numel(); ++i) {
    const float v = f.data<float>()[i];
    const uint16_t h = t == DType::BF16 ? floatToBf16(v) : floatToHalf(v);
    static_cast<uint16_t *>(o.half.raw())[i] = h;
    const float w = t == DType::BF16 ? bf16ToFloat(h) : halfToFloat(h);
    o.wide.data<float>()[i] = w;
  }
  return o;
}

/// `t`'s values (or magnitudes) in a new tensor of type `dt` (F32 or F64).
Tensor copyAs(const Tensor &t, DType dt, bool abs) {
  Tensor r(dt, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = abs ? std::fabs(t.getDouble(i)) : t.getDouble(i);
    if (dt == DType::F64)
      r.data<double>()[i] = v;
    else
      r.data<float>()[i] = static_cast<float>(v);
  }
  return r;
}

std::string nameOf(const Case &c, DType t) { return cat(c.op, " ", c.label, " ", dtypeName(t)); }

TEST(HalfConv, EmulationIsBitwiseTheF32KernelOnTheWidenedOperands) {
  for (bool dnnl : {false, true})
    for (DType t : {DType::BF16, DType::F16})
      for (const Case &c : cases()) {
        // With oneDNN on, only the ops that always emulate are compared
        // bitwise; the others may run oneDNN's 16-bit kernels here.
        if (dnnl && c.op != "ConvTranspose" && c.op != "ConvGradWeight")
          continue;
        const std::string what = nameOf(c, t) + (dnnl ? "" : " (no oneDNN)");
        useDnnl(dnnl);
        Operand a = operandOf(c.a, 1, t), b = operandOf(c.b, 2, t);
        std::vector<Tensor> hin{a.half, b.half}, fin{a.wide, b.wide};
        if (c.bias) {
          const Tensor bias = randomF32(descOf(c, t, DType::F32).inputs[2].shape, 3);
          hin.push_back(bias);
          fin.push_back(bias);
        }
        const Tensor want = evalOne(descOf(c, DType::F32, DType::F32), fin);
        const Tensor got = evalOne(descOf(c, t, DType::F32), hin);
        ASSERT_EQ(got.bytes(), want.bytes()) << what;
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.bytes()), 0) << what;
      }
  useDnnl(true);
}

TEST(HalfConv, MatchesADoubleConvolutionOfTheSameValuesWithAnyThreadCount) {
  for (DType t : {DType::BF16, DType::F16})
    for (const Case &c : cases()) {
      const std::string what = nameOf(c, t);
      Operand a = operandOf(c.a, 11, t), b = operandOf(c.b, 12, t);
      std::vector<Tensor> in{a.half, b.half};
      // The reference: the same op on the widened values in double where
      // the op has an f64 kernel (NhwcConv has none: f32), and on their
      // magnitudes for the size of the terms.
      const DType ref = c.op == "NhwcConv" ? DType::F32 : DType::F64;
      std::vector<Tensor> rin{copyAs(a.wide, ref, false), copyAs(b.wide, ref, false)};
      std::vector<Tensor> mag{copyAs(a.wide, ref, true), copyAs(b.wide, ref, true)};
      if (c.bias) {
        const Tensor bias = randomF32(descOf(c, t, DType::F32).inputs[2].shape, 13);
        in.push_back(bias);
        rin.push_back(copyAs(bias, ref, false));
        mag.push_back(copyAs(bias, ref, true));
      }
      const std::vector<Tensor> got = expectThreadInvariant(descOf(c, t, DType::F32), in);
      ASSERT_EQ(got.size(), 1u) << what;
      ASSERT_EQ(got[0].shape(), c.out) << what;
      const Tensor want = evalOne(descOf(c, ref, ref), rin), scale = evalOne(descOf(c, ref, ref), mag);
      int bad = 0;
      for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
        const double g = got[0].getDouble(i), w = want.getDouble(i), s = scale.getDouble(i);
        if (!(std::fabs(g - w) <= 1e-5 * s + 1e-6)) {
          ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
          ++bad;
        }
      }
    }
}

TEST(HalfConv, RoundsAnF32WeightAsACastWould) {
  // Operand 1 given in f32 and step-invariant (the weight a convolution
  // reads as it is under output_dtype): bitwise the result of its 16-bit
  // copy, through oneDNN's reorder or the emulation's rounding, run after
  // run.
  for (bool dnnl : {true, false})
    for (DType t : {DType::BF16, DType::F16})
      for (const Case &c : cases()) {
        const std::string what = nameOf(c, t) + (dnnl ? "" : " (no oneDNN)");
        useDnnl(dnnl);
        const Tensor w32 = randomF32(c.b, 22, -2.f, 2.f);
        Operand a = operandOf(c.a, 21, t), b = operandOf(c.b, 22, t);
        std::vector<Tensor> hin{a.half, b.half};
        if (c.bias)
          hin.push_back(randomF32(descOf(c, t, DType::F32).inputs[2].shape, 23));
        const Tensor want = evalOne(descOf(c, t, DType::F32), hin);
        OpDesc wd = descOf(c, t, DType::F32);
        wd.inputs[1].dtype = DType::F32;
        wd.stepInvariant.assign(wd.inputs.size(), false);
        wd.stepInvariant[1] = true;
        std::vector<Tensor> win = hin;
        win[1] = w32;
        auto k = cpu::createKernel(wd);
        ASSERT_TRUE(k.isOk()) << what << ": " << k.status().message();
        std::vector<unsigned char> ws((*k)->workspaceBytes() + 64);
        for (uint64_t step : {0, 0, 1}) {
          Tensor y(DType::F32, c.out);
          ExecContext ctx;
          ctx.training = true;
          ctx.step = step;
          ctx.workspace = ws.data();
          std::vector<const void *> in;
          for (const Tensor &x : win)
            in.push_back(x.raw());
          void *out[1] = {y.raw()};
          ASSERT_TRUE((*k)->run(ctx, in.data(), out).isOk()) << what;
          EXPECT_TRUE(y.identical(want)) << what << ", step " << step;
        }
      }
  useDnnl(true);
}

TEST(HalfConv, RefusesOperandsThatDoNotFit) {
  const Case c = cases()[1];
  // Mixed 16-bit types.
  OpDesc mixed = descOf(c, DType::BF16, DType::F32);
  mixed.inputs[1].dtype = DType::F16;
  const Operand a = operandOf(c.a, 1, DType::BF16), b = operandOf(c.b, 2, DType::F16);
  EXPECT_NE(evalError(mixed, {a.half, b.half}).find("operands differ in type"), std::string::npos);
  // output_dtype on f32 operands.
  OpDesc f32 = descOf(c, DType::F32, DType::F32);
  f32.attrs[kProductOutputDType] = Attribute::ofInt(static_cast<int64_t>(DType::F32));
  EXPECT_NE(evalError(f32, {a.wide, a.wide}).find("needs bf16 or f16 operands"), std::string::npos);
  // A 16-bit result under output_dtype.
  OpDesc half = descOf(c, DType::BF16, DType::BF16);
  const Operand bb = operandOf(c.b, 2, DType::BF16);
  EXPECT_NE(evalError(half, {a.half, bb.half}).find("the result must be f32"), std::string::npos);
}

} // namespace
