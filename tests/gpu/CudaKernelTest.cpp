//===- tests/gpu/CudaKernelTest.cpp - CUDA kernels against the CPU's ------===//
//
// Every CUDA kernel (runtime/cuda/CudaKernels.h) on random inputs against
// the CPU kernel of the same node, and the device update's kernels against
// their host run. ctest label `gpu`; without a GPU every test
// reports "skipped: no CUDA device (why)".
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/Dnn.h"
#include "runtime/cuda/Gpu.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/Update.h"
#include "runtime/train/Optimizer.h"
#include "support/Format.h"
#include "support/FusedOps.h"
#include "support/Half.h"
#include "support/ElementwiseProgram.h"
#include "support/Resize.h"
#include "tests/unit/KernelTestSupport.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace pipec;
using namespace pipec::test;

namespace {

#define SKIP_WITHOUT_GPU()                                                                         \
  do {                                                                                             \
    auto gpus = cuda::listGpus();                                                                  \
    if (!gpus)                                                                                     \
      GTEST_SKIP() << "skipped: " << gpus.status().message();                                     \
  } while (0)

struct DeviceBuffer {
  void *p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 4)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

/// Runs a node on the GPU and on the CPU; returns the largest difference
/// relative to max(|cpu|, 1), infinite where one side alone is NaN.
double compareWithCpu(const cpu::OpDesc &d, const std::vector<Tensor> &inputs) {
  auto ref = cpu::evaluate(d, inputs);
  EXPECT_TRUE(ref.isOk()) << (ref ? "" : ref.status().message());
  auto k = cuda::createKernel(d);
  EXPECT_TRUE(k.isOk()) << (k ? "" : k.status().message());
  if (!ref || !k)
    return HUGE_VAL;
  cudaStream_t stream;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<void *> in, out;
  for (const Tensor &t : inputs) {
    bufs.push_back(std::make_unique<DeviceBuffer>(t.bytes()));
    cudaMemcpy(bufs.back()->p, t.raw(), t.bytes(), cudaMemcpyHostToDevice);
    in.push_back(bufs.back()->p);
  }
  for (const TensorDesc &o : d.outputs) {
    bufs.push_back(std::make_unique<DeviceBuffer>(o.bytes()));
    out.push_back(bufs.back()->p);
  }
  cpu::ExecContext ctx;
  ctx.stream = stream;
  DeviceBuffer workspace((*k)->workspaceBytes());
  ctx.workspace = workspace.p;
  Status s = (*k)->run(ctx, in.data(), out.data());
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  double worst = 0;
  for (size_t o = 0; o < d.outputs.size(); ++o) {
    Tensor got(d.outputs[o]);
    cudaMemcpy(got.raw(), out[o], got.bytes(), cudaMemcpyDeviceToHost);
    const Tensor &r = (*ref)[o];
    if (r.dtype() != DType::F32) { // bool, integers: the bytes
      if (std::memcmp(got.raw(), r.raw(), r.bytes()) != 0)
        worst = HUGE_VAL;
      continue;
    }
    worst = std::max(worst, worstError(got.data<float>(), r.data<float>(), r.numel()));
  }
  return worst;
}

} // namespace

// The other elementwise ops (runtime/cuda/kernels/Math.cpp) against the CPU:
// bool results byte for byte, float ones within CUDA's libm's few ulp of
// glibc's (the exact ops: identical).
TEST(CudaKernels, MathOpsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = randomF32({300, 17}, 61, -3.f, 3.f), y = randomF32({17}, 62, -3.f, 3.f);
  x.data<float>()[0] = NAN;
  x.data<float>()[1] = INFINITY;
  x.data<float>()[2] = -INFINITY;
  x.data<float>()[3] = 0.5f;
  for (const char *op : {"Abs", "Sign", "Ceil", "Floor", "Round", "Reciprocal", "LeakyRelu", "ThresholdedRelu",
                         "HardSigmoid", "HardSwish", "Softsign"})
    EXPECT_LE(compareWithCpu(makeDesc(op, {x.desc()}, {x.desc()}), {x}), 1e-7) << op;
  for (const char *op : {"Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh", "Tan",
                         "Log", "Sqrt", "Softplus", "Mish", "Celu", "Elu", "Selu"})
    EXPECT_LE(compareWithCpu(makeDesc(op, {x.desc()}, {x.desc()}), {x}), 2e-6) << op;
  const TensorDesc bools{DType::Bool, x.shape()};
  for (const char *op : {"IsNaN", "IsInf"})
    EXPECT_EQ(compareWithCpu(makeDesc(op, {x.desc()}, {bools}, {}, 20), {x}), 0.0) << op;
  for (const char *op : {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"})
    EXPECT_EQ(compareWithCpu(makeDesc(op, {x.desc(), y.desc()}, {bools}), {x, y}), 0.0) << op;
  EXPECT_LE(compareWithCpu(makeDesc("Pow", {x.desc(), y.desc()}, {x.desc()}), {x, y}), 4e-6) << "Pow";
  EXPECT_EQ(compareWithCpu(makeDesc("PRelu", {x.desc(), y.desc()}, {x.desc()}), {x, y}), 0.0) << "PRelu";
  Tensor z = randomF32({300, 1}, 63);
  for (const char *op : {"Max", "Min", "Sum", "Mean"})
    EXPECT_EQ(compareWithCpu(makeDesc(op, {x.desc(), y.desc(), z.desc()}, {x.desc()}), {x, y, z}), 0.0) << op;
  Tensor a(DType::Bool, {300, 17}), b(DType::Bool, {17});
  for (int64_t i = 0; i < a.numel(); ++i)
    a.data<uint8_t>()[i] = (i * 7) % 3 == 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    b.data<uint8_t>()[i] = i % 2;
  for (const char *op : {"And", "Or", "Xor"})
    EXPECT_EQ(compareWithCpu(makeDesc(op, {a.desc(), b.desc()}, {a.desc()}), {a, b}), 0.0) << op;
  EXPECT_EQ(compareWithCpu(makeDesc("Not", {a.desc()}, {a.desc()}), {a}), 0.0) << "Not";
  EXPECT_EQ(compareWithCpu(makeDesc("Where", {b.desc(), x.desc(), z.desc()}, {x.desc()}, {}, 16), {b, x, z}), 0.0);
  EXPECT_EQ(compareWithCpu(makeDesc("Identity", {x.desc()}, {x.desc()}), {x}), 0.0);
  // LogSoftmaxGrad along the last axis.
  cpu::OpDesc lsg = makeDesc("LogSoftmaxGrad", {x.desc(), x.desc()}, {x.desc()}, {}, 17, "pipec");
  lsg.attrs["axis"] = Attribute::ofInt(-1);
  Tensor ly = randomF32({300, 17}, 65, -4.f, 0.f);
  EXPECT_LE(compareWithCpu(lsg, {x, ly}), 4e-6) << "LogSoftmaxGrad";
  // Clip with constant bounds, ArgMax, Cast to int64 and to bool.
  Tensor lo = Tensor::scalarF32(-1.0f), hi = Tensor::scalarF32(1.5f);
  cpu::OpDesc cl = makeDesc("Clip", {x.desc(), lo.desc(), hi.desc()}, {x.desc()}, {}, 13);
  cl.constInputs = {Tensor(), lo, hi};
  EXPECT_EQ(compareWithCpu(cl, {x, lo, hi}), 0.0) << "Clip";
  cpu::OpDesc am = makeDesc("ArgMax", {x.desc()}, {{DType::I64, {300}}}, {}, 13);
  am.attrs["axis"] = Attribute::ofInt(1);
  am.attrs["keepdims"] = Attribute::ofInt(0);
  EXPECT_EQ(compareWithCpu(am, {x}), 0.0) << "ArgMax";
  for (DType to : {DType::I64, DType::Bool}) {
    cpu::OpDesc ca = makeDesc("Cast", {x.desc()}, {{to, x.shape()}}, {}, 13);
    ca.attrs["to"] = Attribute::ofInt(static_cast<int64_t>(to));
    EXPECT_EQ(compareWithCpu(ca, {x}), 0.0) << "Cast";
  }
  // Slice with a negative step, Expand, Tile: strided views.
  Tensor starts(DType::I64, {1}), ends(DType::I64, {1}), sax(DType::I64, {1}), steps(DType::I64, {1});
  starts.data<int64_t>()[0] = -1;
  ends.data<int64_t>()[0] = -100;
  sax.data<int64_t>()[0] = 1;
  steps.data<int64_t>()[0] = -3;
  cpu::OpDesc sl = makeDesc("Slice", {x.desc(), starts.desc(), ends.desc(), sax.desc(), steps.desc()},
                            {{DType::F32, {300, 6}}}, {}, 13);
  sl.constInputs = {Tensor(), starts, ends, sax, steps};
  EXPECT_EQ(compareWithCpu(sl, {x, starts, ends, sax, steps}), 0.0) << "Slice";
  Tensor shape(DType::I64, {3}), reps(DType::I64, {2});
  shape.data<int64_t>()[0] = 2;
  shape.data<int64_t>()[1] = 300;
  shape.data<int64_t>()[2] = 17;
  reps.data<int64_t>()[0] = 2;
  reps.data<int64_t>()[1] = 3;
  cpu::OpDesc ex = makeDesc("Expand", {z.desc(), shape.desc()}, {{DType::F32, {2, 300, 17}}}, {}, 13);
  ex.constInputs = {Tensor(), shape};
  EXPECT_EQ(compareWithCpu(ex, {z, shape}), 0.0) << "Expand";
  cpu::OpDesc ti = makeDesc("Tile", {x.desc(), reps.desc()}, {{DType::F32, {600, 51}}}, {}, 13);
  ti.constInputs = {Tensor(), reps};
  EXPECT_EQ(compareWithCpu(ti, {x, reps}), 0.0) << "Tile";
  // The other reductions, over axis 1 (opset 18: axes as an input).
  Tensor axes(DType::I64, {1});
  axes.data<int64_t>()[0] = 1;
  Tensor pos = randomF32({300, 17}, 64, 0.5f, 1.5f);
  for (const char *op : {"ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceProd", "ReduceMax",
                         "ReduceMin", "ReduceLogSumExp"}) {
    cpu::OpDesc r = makeDesc(op, {pos.desc(), axes.desc()}, {{DType::F32, {300}}}, {}, 18);
    r.attrs["keepdims"] = Attribute::ofInt(0);
    r.constInputs = {Tensor(), axes};
    EXPECT_LE(compareWithCpu(r, {pos, axes}), 2e-6) << op;
  }
}

// Pad, GatherElements, Trilu, Mod and the outputs known at load
// (runtime/cuda/Move.cu, kernels/DataMovement.cpp) against the CPU, byte
// for byte; an index out of range is an error naming the node.
TEST(CudaKernels, IndexingOpsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  auto ints = [](std::vector<int64_t> v) {
    Tensor t(DType::I64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return t;
  };
  Tensor x = randomF32({5, 6, 7}, 71);
  for (const char *mode : {"constant", "reflect", "edge", "wrap"}) {
    Tensor pads = ints({1, -1, 3, 2, 4, 0}), value = Tensor::scalarF32(2.5f);
    cpu::OpDesc d = makeDesc("Pad", {x.desc(), pads.desc(), value.desc()}, {{DType::F32, {8, 9, 10}}}, {}, 19);
    d.attrs["mode"] = Attribute::ofString(mode);
    setConst(d, 1, pads);
    EXPECT_EQ(compareWithCpu(d, {x, pads, value}), 0.0) << "Pad " << mode;
  }
  Tensor idx(DType::I64, {5, 4, 7});
  for (int64_t i = 0; i < idx.numel(); ++i)
    idx.data<int64_t>()[i] = (i * 5) % 12 - 6;
  cpu::OpDesc ge = makeDesc("GatherElements", {x.desc(), idx.desc()}, {{DType::F32, {5, 4, 7}}}, {}, 13);
  ge.attrs["axis"] = Attribute::ofInt(1);
  EXPECT_EQ(compareWithCpu(ge, {x, idx}), 0.0) << "GatherElements";
  Tensor k(DType::I64, {});
  *k.data<int64_t>() = -2;
  for (int64_t upper : {0, 1}) {
    cpu::OpDesc tr = makeDesc("Trilu", {x.desc(), k.desc()}, {x.desc()}, {}, 14);
    tr.attrs["upper"] = Attribute::ofInt(upper);
    EXPECT_EQ(compareWithCpu(tr, {x, k}), 0.0) << "Trilu " << upper;
  }
  Tensor xi(DType::I64, {5, 6, 7}), yi = ints({3, -4, 0, -1, 7, -13, 5});
  for (int64_t i = 0; i < xi.numel(); ++i)
    xi.data<int64_t>()[i] = (i * 37 % 23) - 11;
  Tensor y = randomF32({7}, 72, -4.f, 4.f);
  for (int64_t fmod : {0, 1}) {
    cpu::OpDesc mi = makeDesc("Mod", {xi.desc(), yi.desc()}, {xi.desc()}, {}, 13);
    mi.attrs["fmod"] = Attribute::ofInt(fmod);
    EXPECT_EQ(compareWithCpu(mi, {xi, yi}), 0.0) << "Mod int64 fmod " << fmod;
    cpu::OpDesc mf = makeDesc("Mod", {x.desc(), y.desc()}, {x.desc()}, {}, 13);
    mf.attrs["fmod"] = Attribute::ofInt(fmod);
    EXPECT_EQ(compareWithCpu(mf, {x, y}), 0.0) << "Mod float32 fmod " << fmod;
  }
  EXPECT_EQ(compareWithCpu(makeDesc("Shape", {x.desc()}, {{DType::I64, {3}}}, {}, 15), {x}), 0.0) << "Shape";
  EXPECT_EQ(compareWithCpu(makeDesc("Size", {x.desc()}, {{DType::I64, {}}}, {}, 13), {x}), 0.0) << "Size";
  cpu::OpDesc co = makeDesc("Constant", {}, {{DType::I64, {3}}}, {}, 13);
  co.attrs["value_ints"] = Attribute::ofInts({4, -5, 6});
  EXPECT_EQ(compareWithCpu(co, {}), 0.0) << "Constant";
  Tensor start = Tensor::scalarF32(1.0f), limit = Tensor::scalarF32(9.5f), delta = Tensor::scalarF32(0.75f);
  cpu::OpDesc ra = makeDesc("Range", {start.desc(), limit.desc(), delta.desc()}, {{DType::F32, {12}}}, {}, 11);
  ra.constInputs = {start, limit, delta};
  EXPECT_EQ(compareWithCpu(ra, {start, limit, delta}), 0.0) << "Range";
  Tensor shape = ints({3, 1000});
  cpu::OpDesc cs = makeDesc("ConstantOfShape", {shape.desc()}, {{DType::I64, {3, 1000}}}, {}, 9);
  Tensor seven(DType::I64, {1});
  seven.data<int64_t>()[0] = 7;
  cs.attrs["value"] = Attribute::ofTensor(seven);
  setConst(cs, 0, shape);
  EXPECT_EQ(compareWithCpu(cs, {shape}), 0.0) << "ConstantOfShape";
  // Resize (linear, cubic, nearest) and its gradient.
  Tensor img = randomF32({2, 3, 9, 11}, 73), scales(DType::F32, {4});
  const float sv[] = {1, 1, 1.5f, 0.6f};
  std::copy(std::begin(sv), std::end(sv), scales.data<float>());
  for (const char *mode : {"linear", "cubic", "nearest"}) {
    cpu::OpDesc rs = makeDesc("Resize", {img.desc(), TensorDesc{}, scales.desc()}, {{DType::F32, {2, 3, 13, 6}}}, {},
                              18);
    rs.attrs["mode"] = Attribute::ofString(mode);
    setConst(rs, 2, scales);
    EXPECT_LE(compareWithCpu(rs, {img, Tensor(), scales}), 1e-6) << "Resize " << mode;
    ResizeArgs ra;
    ra.opType = "Resize";
    ra.opset = 18;
    ra.attrs = &rs.attrs;
    ra.x = img.shape();
    ra.scales = &scales;
    Tensor dy = randomF32({2, 3, 13, 6}, 74);
    cpu::OpDesc rg = makeDesc("ResizeGrad", {dy.desc()}, {img.desc()}, resizeGradAttrs(ra), 1, "pipec");
    EXPECT_LE(compareWithCpu(rg, {dy}), 1e-6) << "ResizeGrad " << mode;
  }
  // An index out of range: the run fails, naming the node.
  idx.data<int64_t>()[17] = 6;
  auto kernel = cuda::createKernel(ge);
  ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
  DeviceBuffer dx(x.bytes()), di(idx.bytes()), dout(ge.outputs[0].bytes()), ws((*kernel)->workspaceBytes());
  cudaMemcpy(dx.p, x.raw(), x.bytes(), cudaMemcpyHostToDevice);
  cudaMemcpy(di.p, idx.raw(), idx.bytes(), cudaMemcpyHostToDevice);
  cpu::ExecContext ctx;
  ctx.workspace = ws.p;
  const void *in[] = {dx.p, di.p};
  void *out[] = {dout.p};
  Status s = (*kernel)->run(ctx, in, out);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("'n'"), std::string::npos) << s.message();
}

TEST(CudaKernels, ElementwiseAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = randomF32({1000, 37}, 1, -10.f, 10.f);
  for (const char *op : {"Relu", "Neg"})
    EXPECT_EQ(compareWithCpu(makeDesc(op, {x.desc()}, {x.desc()}), {x}), 0.0) << op;
  // nvcc contracts multiply-adds (its default --fmad=true) where GCC may not.
  for (const char *op : {"Sigmoid", "Tanh", "Exp"})
    EXPECT_LE(compareWithCpu(makeDesc(op, {x.desc()}, {x.desc()}), {x}), 4e-7) << op;
  for (const char *approx : {"none", "tanh"}) {
    cpu::OpDesc d = makeDesc("Gelu", {x.desc()}, {x.desc()}, {}, 20);
    d.attrs["approximate"] = Attribute::ofString(approx);
    EXPECT_LE(compareWithCpu(d, {x}), 4e-7) << "Gelu " << approx;
  }
  Tensor dy = randomF32({1000, 37}, 2), y = randomF32({1000, 37}, 3);
  EXPECT_EQ(compareWithCpu(
                makeDesc("ReluGrad", {dy.desc(), y.desc()}, {dy.desc()}, {}, 17, "pipec"), {dy, y}),
            0.0);
}

TEST(CudaKernels, BroadcastBinaryAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor a = randomF32({4, 1, 33}, 4), b = randomF32({7, 1}, 5, 0.5f, 2.f);
  for (const char *op : {"Add", "Sub", "Mul", "Div"})
    EXPECT_EQ(compareWithCpu(makeDesc(op, {a.desc(), b.desc()}, {{DType::F32, {4, 7, 33}}}), {a, b}), 0.0) << op;
}

TEST(CudaKernels, SoftmaxAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = randomF32({8, 50, 12}, 6, -20.f, 20.f);
  // LogSoftmax is x - (max + log(sum)): a sum rounded differently (nvcc
  // contracts multiply-adds in exp, CUDA's logf is not glibc's) moves that
  // shift, up to 20 + log(50) here, by one of its ulps: 1.9e-6. The H100
  // gave 1.8e-6 on axis 1.
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {1, 2}) {
      cpu::OpDesc d = makeDesc(op, {x.desc()}, {x.desc()});
      d.attrs["axis"] = Attribute::ofInt(axis);
      EXPECT_LE(compareWithCpu(d, {x}), std::string(op) == "Softmax" ? 1e-6 : 4e-6) << op << " axis " << axis;
    }
  // pipec:MaskedSoftmax: a bool mask broadcast over batch and heads.
  Tensor s = randomF32({2, 3, 8, 8}, 7, -5.f, 5.f);
  Tensor m(DType::Bool, {8, 8});
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      m.data<uint8_t>()[i * 8 + j] = j > i ? 1 : 0;
  for (int64_t when : {1, 0}) {
    cpu::OpDesc d = makeDesc("MaskedSoftmax", {s.desc(), m.desc()}, {s.desc()}, {}, 17, "pipec");
    d.attrs = {{"scale", Attribute::ofFloat(0.5f)}, {"fill", Attribute::ofFloat(-1e4f)},
               {"fill_when", Attribute::ofInt(when)}};
    EXPECT_LE(compareWithCpu(d, {s, m}), 1e-6) << "MaskedSoftmax fill_when " << when;
  }
}

TEST(CudaKernels, GemmAndMatMulAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor a = randomF32({64, 96}, 7), b = randomF32({128, 96}, 8), c = randomF32({128}, 9);
  cpu::OpDesc g = makeDesc("Gemm", {a.desc(), b.desc(), c.desc()}, {{DType::F32, {64, 128}}});
  g.attrs["transB"] = Attribute::ofInt(1);
  g.attrs["alpha"] = Attribute::ofFloat(0.5f);
  // cuBLAS sums the K products in its own order: rounding, not bits.
  EXPECT_LE(compareWithCpu(g, {a, b, c}), 1e-5);
  Tensor x = randomF32({3, 16, 24}, 10), w = randomF32({24, 40}, 11);
  EXPECT_LE(compareWithCpu(makeDesc("MatMul", {x.desc(), w.desc()}, {{DType::F32, {3, 16, 40}}}), {x, w}), 1e-5);
  Tensor p = randomF32({3, 24, 40}, 12);
  EXPECT_LE(compareWithCpu(makeDesc("MatMul", {x.desc(), p.desc()}, {{DType::F32, {3, 16, 40}}}), {x, p}), 1e-5);
}

// Under output_dtype: 16-bit operands (cublasGemmEx, f32 compute), or one
// of them an f32 weight the kernel rounds first, against the CPU's bf16
// matmul or its emulation: the same exact products, summed in f32.
TEST(CudaKernels, GemmAndMatMulUnderOutputDtypeAgainstCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::BF16, DType::F16}) {
    auto half = [&](const Shape &s, uint32_t seed) {
      Tensor f = randomF32(s, seed), h(t, s);
      for (int64_t i = 0; i < f.numel(); ++i)
        static_cast<uint16_t *>(h.raw())[i] =
            t == DType::BF16 ? floatToBf16(f.data<float>()[i]) : floatToHalf(f.data<float>()[i]);
      return h;
    };
    const AttrMap at{{kProductOutputDType, Attribute::ofInt(static_cast<int64_t>(DType::F32))}};
    Tensor a = half({64, 96}, 21), b = half({128, 96}, 22), c = randomF32({128}, 23), bw = randomF32({128, 96}, 24);
    for (const Tensor *B : {&b, &bw}) {
      cpu::OpDesc g = makeDesc("Gemm", {a.desc(), B->desc(), c.desc()}, {{DType::F32, {64, 128}}}, at);
      g.attrs["transB"] = Attribute::ofInt(1);
      // 96 products, alpha 1 (the f32 case's 0.5 halves its error): 2e-5.
      EXPECT_LE(compareWithCpu(g, {a, *B, c}), 2e-5) << dtypeName(t) << " Gemm, B " << B->desc().str();
    }
    Tensor x = half({3, 16, 24}, 25), w = randomF32({24, 40}, 26), wh = half({24, 40}, 27);
    for (const Tensor *W : {&w, &wh})
      EXPECT_LE(compareWithCpu(makeDesc("MatMul", {x.desc(), W->desc()}, {{DType::F32, {3, 16, 40}}}, at), {x, *W}),
                1e-5)
          << dtypeName(t) << " MatMul, W " << W->desc().str();
  }
}

// A weight read by a bf16 product through the GPU's roundings of the step
// (ExecContext::halfWeights, runtime/cuda/Roundings.h): the CPU's result;
// within a step the rounding made at the first read serves (a weight
// written in the middle of the step is not seen), at the next step it is
// made again from the weight as it is.
TEST(CudaKernels, ProductsReadTheStepsWeightRoundings) {
  SKIP_WITHOUT_GPU();
  auto backend = cuda::makeCudaBackend(0, false);
  ASSERT_TRUE(backend.isOk()) << backend.status().message();
  kernel::Backend &b = **backend;
  ASSERT_NE(b.halfWeights(), nullptr);
  Tensor x(DType::BF16, {3, 16, 24}), w = randomF32({24, 40}, 31), w2 = randomF32({24, 40}, 32);
  Tensor xf = randomF32({3, 16, 24}, 33);
  for (int64_t i = 0; i < x.numel(); ++i)
    static_cast<uint16_t *>(x.raw())[i] = floatToBf16(xf.data<float>()[i]);
  const AttrMap at{{kProductOutputDType, Attribute::ofInt(static_cast<int64_t>(DType::F32))}};
  cpu::OpDesc d = makeDesc("MatMul", {x.desc(), w.desc()}, {{DType::F32, {3, 16, 40}}}, at);
  d.stepInvariant = {false, true};
  auto k = cuda::createKernel(d);
  ASSERT_TRUE(k.isOk()) << k.status().message();
  DeviceBuffer dx(x.bytes()), dw(w.bytes()), dy(static_cast<size_t>(3 * 16 * 40) * sizeof(float)),
      ws((*k)->workspaceBytes());
  cudaMemcpy(dx.p, x.raw(), x.bytes(), cudaMemcpyHostToDevice);
  auto stream = static_cast<cudaStream_t>(b.stream());
  auto runAt = [&](uint64_t step, const Tensor &expectWeight) {
    cpu::ExecContext ctx;
    ctx.stream = stream;
    ctx.workspace = ws.p;
    ctx.training = true;
    ctx.step = step;
    ctx.halfWeights = b.halfWeights();
    void *in[] = {dx.p, dw.p}, *out[] = {dy.p};
    Status s = (*k)->run(ctx, in, out);
    ASSERT_TRUE(s.isOk()) << s.message();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    auto ref = cpu::evaluate(d, {x, expectWeight});
    ASSERT_TRUE(ref.isOk()) << ref.status().message();
    Tensor got((*ref)[0].desc());
    cudaMemcpy(got.raw(), dy.p, got.bytes(), cudaMemcpyDeviceToHost);
    EXPECT_LE(worstError(got.data<float>(), (*ref)[0].data<float>(), got.numel()), 1e-5) << "step " << step;
  };
  // A copy from pageable memory may return before its bytes land; the
  // backend's stream does not wait for it (non-blocking): the device does.
  cudaMemcpy(dw.p, w.raw(), w.bytes(), cudaMemcpyHostToDevice);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  runAt(1, w);
  cudaMemcpy(dw.p, w2.raw(), w2.bytes(), cudaMemcpyHostToDevice);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  runAt(1, w);  // the step's rounding
  runAt(2, w2); // made again
  EXPECT_EQ(b.halfWeights()->bytes(), static_cast<size_t>(w.numel()) * sizeof(uint16_t));
}

TEST(CudaKernels, UnsupportedNodesAreRefusedByName) {
  // Needs no GPU: the table is host code.
  Tensor x = randomF32({4}, 1);
  auto k = cuda::createKernel(makeDesc("Hardmax", {x.desc()}, {x.desc()}, {}, 13));
  ASSERT_FALSE(k.isOk());
  EXPECT_NE(k.status().message().find("node 'n' (op type 'Hardmax', domain ai.onnx, opset 13) has no CUDA kernel"),
            std::string::npos)
      << k.status().message();
}

// The device update's kernels (runtime/cuda/Update.cu, built without
// multiply-add contraction) are its host run bit for bit, and so
// train::StepUpdate's (CudaBodiesTest): Adam with AMSGrad, Nesterov SGD and
// centered RMSprop over parameters of one element to several chunks, with
// the mean over micro-batches, clipping, a skipped NaN step and the
// gradient sums of micro-batches.
TEST(CudaKernels, DeviceUpdateKernelsAreTheHostRunBitwise) {
  SKIP_WITHOUT_GPU();
  const std::vector<int64_t> sizes = {1, 7, 1000, cuda::update::kChunk, 2 * cuda::update::kChunk + 5};
  for (const char *spec : {"adam:lr=0.001,weight_decay=0.1,amsgrad=true", "sgd:lr=0.1,momentum=0.9,nesterov=true",
                           "rmsprop:lr=0.01,momentum=0.9,centered=true,weight_decay=0.01", "adamw:lr=0.001"})
    for (double clip : {0.0, 0.5})
      for (bool nan : {false, true}) {
        const std::string what = cat(spec, " clip ", clip, nan ? " NaN" : "");
        auto cfg = train::parseOptimizer(spec);
        ASSERT_TRUE(cfg.isOk());
        auto opt = train::Optimizer::create(*cfg);
        ASSERT_TRUE(opt.isOk());
        const size_t S = opt->stateTensors();
        // Host: weights, gradients, states; the device's copies of them.
        std::vector<std::vector<float>> w, g, mbGrad;
        std::vector<std::vector<std::vector<float>>> st;
        std::vector<std::unique_ptr<DeviceBuffer>> mem;
        std::vector<kernel::ParamBuffers> hostB, devB;
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (int64_t n : sizes) {
          w.emplace_back(static_cast<size_t>(n));
          g.emplace_back(static_cast<size_t>(n));
          for (auto &x : w.back())
            x = u(rng);
          st.emplace_back(S, std::vector<float>(static_cast<size_t>(n), 0.0f));
          kernel::ParamBuffers h, d;
          h.param = w.back().data();
          h.grad = g.back().data();
          h.n = d.n = n;
          mem.push_back(std::make_unique<DeviceBuffer>(n * 4));
          d.param = static_cast<float *>(mem.back()->p);
          cudaMemcpy(d.param, h.param, n * 4, cudaMemcpyHostToDevice);
          mem.push_back(std::make_unique<DeviceBuffer>(n * 4));
          d.grad = static_cast<float *>(mem.back()->p);
          for (size_t k = 0; k < S; ++k) {
            h.state[k] = st.back()[k].data();
            mem.push_back(std::make_unique<DeviceBuffer>(n * 4));
            d.state[k] = static_cast<float *>(mem.back()->p);
            cudaMemset(d.state[k], 0, n * 4);
          }
          hostB.push_back(h);
          devB.push_back(d);
        }
        auto ht = cuda::makeUpdateTable(hostB);
        auto dt = cuda::makeUpdateTable(devB);
        ASSERT_TRUE(ht.isOk() && dt.isOk());
        const int32_t C = static_cast<int32_t>(dt->chunks.size()), P = dt->params();
        DeviceBuffer chunks(C * sizeof(cuda::update::Chunk)), first((P + 1) * 4), lanes(C * 8 * 8), sq(P * 8),
            control(sizeof(cuda::update::Control)), mb(sizes.back() * 4);
        cudaMemcpy(chunks.p, dt->chunks.data(), C * sizeof(cuda::update::Chunk), cudaMemcpyHostToDevice);
        cudaMemcpy(first.p, dt->firstChunk.data(), (P + 1) * 4, cudaMemcpyHostToDevice);
        std::vector<double> hostLanes(static_cast<size_t>(C) * 8), hostSq(static_cast<size_t>(P)), gotSq(hostSq);
        const unsigned M = 3;
        for (int64_t step = 1; step <= 3; ++step) {
          // M micro-batches' gradients, summed on each side.
          for (unsigned m = 0; m < M; ++m)
            for (size_t i = 0; i < sizes.size(); ++i) {
              std::vector<float> part(static_cast<size_t>(sizes[i]));
              for (auto &x : part)
                x = u(rng);
              if (nan && step == 2 && m == 1 && i == 2)
                part[5] = std::nanf("");
              cuda::hostAccumulate(g[i].data(), part.data(), sizes[i], m == 0);
              cudaMemcpy(mb.p, part.data(), sizes[i] * 4, cudaMemcpyHostToDevice);
              ASSERT_TRUE(cuda::launchAccumulate(devB[i].grad, static_cast<float *>(mb.p), sizes[i], m == 0, nullptr)
                              .isOk());
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            }
          const float lr = static_cast<float>(opt->baseLr());
          const float scale = 1.0f / static_cast<float>(M);
          cuda::hostSquares(*ht, scale, hostLanes.data(), hostSq.data());
          const cuda::update::Control k = cuda::update::decide(hostSq.data(), P, clip, true);
          cuda::hostApply(*ht, k, opt->scalars(step, lr), true);
          auto *dc = static_cast<cuda::update::Chunk *>(chunks.p);
          ASSERT_TRUE(cuda::launchUpdateSquares(dc, C, static_cast<int32_t *>(first.p), P, scale,
                                                static_cast<double *>(lanes.p), static_cast<double *>(sq.p), nullptr)
                          .isOk());
          ASSERT_TRUE(cuda::launchUpdateDecide(static_cast<double *>(sq.p), P, clip, true,
                                               static_cast<cuda::update::Control *>(control.p), nullptr)
                          .isOk());
          ASSERT_TRUE(cuda::launchUpdateApply(dc, C, static_cast<cuda::update::Control *>(control.p),
                                              opt->scalars(step, lr), true, nullptr)
                          .isOk());
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          cudaMemcpy(gotSq.data(), sq.p, P * 8, cudaMemcpyDeviceToHost);
          for (int32_t p = 0; p < P; ++p)
            EXPECT_TRUE(gotSq[p] == hostSq[p] || (std::isnan(gotSq[p]) && std::isnan(hostSq[p])))
                << what << " step " << step << " squares " << p;
          for (size_t i = 0; i < sizes.size(); ++i) {
            std::vector<float> got(static_cast<size_t>(sizes[i]));
            cudaMemcpy(got.data(), devB[i].param, sizes[i] * 4, cudaMemcpyDeviceToHost);
            EXPECT_EQ(std::memcmp(got.data(), w[i].data(), sizes[i] * 4), 0) << what << " step " << step << " param " << i;
            cudaMemcpy(got.data(), devB[i].grad, sizes[i] * 4, cudaMemcpyDeviceToHost);
            EXPECT_EQ(std::memcmp(got.data(), g[i].data(), sizes[i] * 4), 0) << what << " step " << step << " grad " << i;
            for (size_t s = 0; s < S; ++s) {
              cudaMemcpy(got.data(), devB[i].state[s], sizes[i] * 4, cudaMemcpyDeviceToHost);
              EXPECT_EQ(std::memcmp(got.data(), st[i][s].data(), sizes[i] * 4), 0)
                  << what << " step " << step << " state " << s << " of " << i;
            }
          }
        }
      }
}

TEST(CudaKernels, ReduceSumAndLossAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = randomF32({64, 100}, 30);
  Tensor axes(DType::I64, {1});
  axes.data<int64_t>()[0] = 0;
  cpu::OpDesc r = makeDesc("ReduceSum", {x.desc(), axes.desc()}, {{DType::F32, {100}}});
  r.attrs["keepdims"] = Attribute::ofInt(0);
  r.constInputs = {Tensor(), axes};
  EXPECT_LE(compareWithCpu(r, {x, axes}), 1e-5); // index order against the CPU's lanes
  // Long sums, in chunks of 256 terms (runtime/cuda/Bodies.h, reduceChunks):
  // a bias gradient of GPT-2-small's micro-batch (2048 rows of 768), and
  // 4 x 512 rows merged into one axis. A misplaced chunk is off by O(1).
  for (const Shape &ls : {Shape{2048, 768}, Shape{4, 512, 96}}) {
    Tensor lx = randomF32(ls, 35, -1.f, 1.f);
    const bool merged = ls.size() == 3;
    Tensor la(DType::I64, {merged ? 2 : 1});
    la.data<int64_t>()[0] = 0;
    if (merged)
      la.data<int64_t>()[1] = 1;
    cpu::OpDesc lr = makeDesc("ReduceSum", {lx.desc(), la.desc()}, {{DType::F32, {ls.back()}}});
    lr.attrs["keepdims"] = Attribute::ofInt(0);
    lr.constInputs = {Tensor(), la};
    EXPECT_LE(compareWithCpu(lr, {lx, la}), 1e-4) << "ReduceSum of " << shapeStr(ls);
  }
  const int64_t N = 32, C = 10;
  Tensor s = randomF32({N, C}, 31), t(DType::I64, {N});
  for (int64_t i = 0; i < N; ++i)
    t.data<int64_t>()[i] = (i * 7) % C;
  for (const char *red : {"mean", "sum", "none"}) {
    cpu::OpDesc l = makeDesc("SoftmaxCrossEntropyLoss", {s.desc(), t.desc()},
                             {{DType::F32, std::string(red) == "none" ? Shape{N} : Shape{}}});
    l.attrs["reduction"] = Attribute::ofString(red);
    EXPECT_LE(compareWithCpu(l, {s, t}), 1e-6) << red;
  }
  Tensor g = Tensor::scalarF32(1.0f);
  EXPECT_LE(compareWithCpu(makeDesc("SoftmaxCrossEntropyLossGrad", {g.desc(), s.desc(), t.desc()},
                                    {s.desc()}, {}, 17, "pipec"),
                           {g, s, t}),
            1e-6);
  // Both losses with class weights, an ignore index and int32 targets
  // over [N, C, D] scores, and their gradients.
  const int64_t D = 3;
  Tensor x3 = randomF32({N, C, D}, 32), w = randomF32({C}, 33, 0.25f, 2.0f), t32(DType::I32, {N, D});
  for (int64_t i = 0; i < N * D; ++i)
    t32.data<int32_t>()[i] = i % 9 == 4 ? -1 : static_cast<int32_t>((i * 3) % C);
  for (const char *op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})
    for (const char *red : {"mean", "sum", "none"}) {
      const Shape ls = std::string(red) == "none" ? Shape{N, D} : Shape{};
      cpu::OpDesc l = makeDesc(op, {x3.desc(), t32.desc(), w.desc()}, {{DType::F32, ls}}, {}, 13);
      l.attrs["reduction"] = Attribute::ofString(red);
      l.attrs["ignore_index"] = Attribute::ofInt(-1);
      EXPECT_LE(compareWithCpu(l, {x3, t32, w}), 1e-6) << op << " " << red;
      Tensor dl = randomF32(ls, 34, 0.5f, 1.5f);
      cpu::OpDesc lg = makeDesc(std::string(op) + "Grad", {dl.desc(), x3.desc(), t32.desc(), w.desc()}, {x3.desc()},
                                {}, 13, "pipec");
      lg.attrs = l.attrs;
      EXPECT_LE(compareWithCpu(lg, {dl, x3, t32, w}), 1e-6) << op << "Grad " << red;
    }
}

TEST(CudaKernels, GptOpsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  // Data movement: exact.
  Tensor x = randomF32({4, 16, 4, 16}, 40);
  cpu::OpDesc t = makeDesc("Transpose", {x.desc()}, {{DType::F32, {4, 4, 16, 16}}});
  t.attrs["perm"] = Attribute::ofInts({0, 2, 1, 3});
  EXPECT_EQ(compareWithCpu(t, {x}), 0.0) << "Transpose";
  Tensor a = randomF32({4, 16, 64}, 41), b = randomF32({4, 16, 64}, 42), c = randomF32({4, 16, 64}, 43);
  cpu::OpDesc cat = makeDesc("Concat", {a.desc(), b.desc(), c.desc()}, {{DType::F32, {4, 16, 192}}});
  cat.attrs["axis"] = Attribute::ofInt(2);
  EXPECT_EQ(compareWithCpu(cat, {a, b, c}), 0.0) << "Concat";
  Tensor whole = randomF32({4, 16, 192}, 44), sizes(DType::I64, {3});
  for (int i = 0; i < 3; ++i)
    sizes.data<int64_t>()[i] = 64;
  cpu::OpDesc sp = makeDesc("Split", {whole.desc(), sizes.desc()}, {a.desc(), b.desc(), c.desc()});
  sp.attrs["axis"] = Attribute::ofInt(-1);
  sp.constInputs = {Tensor(), sizes};
  EXPECT_EQ(compareWithCpu(sp, {whole, sizes}), 0.0) << "Split";
  Tensor table = randomF32({128, 64}, 45), idx(DType::I64, {4, 16});
  for (int64_t i = 0; i < 64; ++i)
    idx.data<int64_t>()[i] = (i * 37) % 128 - (i % 5 == 0 ? 128 : 0); // some negative
  cpu::OpDesc ga = makeDesc("Gather", {table.desc(), idx.desc()}, {{DType::F32, {4, 16, 64}}});
  EXPECT_EQ(compareWithCpu(ga, {table, idx}), 0.0) << "Gather";
  Tensor dy = randomF32({4, 16, 64}, 46);
  cpu::OpDesc gg = makeDesc("GatherGrad", {dy.desc(), idx.desc()}, {table.desc()}, {}, 17, "pipec");
  gg.attrs["shape"] = Attribute::ofInts({128, 64});
  EXPECT_LE(compareWithCpu(gg, {dy, idx}), 1e-6) << "GatherGrad";
  // Normalization, attention and activation.
  Tensor h = randomF32({4, 16, 64}, 47), scale = randomF32({64}, 48, 0.5f, 1.5f), bias = randomF32({64}, 49);
  cpu::OpDesc ln = makeDesc("LayerNormalization", {h.desc(), scale.desc(), bias.desc()}, {h.desc()});
  EXPECT_LE(compareWithCpu(ln, {h, scale, bias}), 1e-6) << "LayerNormalization";
  cpu::OpDesc lg = makeDesc("LayerNormalizationGrad", {dy.desc(), h.desc(), scale.desc()},
                            {h.desc()}, {}, 17, "pipec");
  lg.attrs["axis"] = Attribute::ofInt(2);
  EXPECT_LE(compareWithCpu(lg, {dy, h, scale}), 1e-6) << "LayerNormalizationGrad";
  // With dScale and dBias (autodiff's form when X, scale and bias train):
  // the CPU adds its rows in blocks in double, the GPU sums dBias's 64
  // rows in float (ReduceSum's kernel).
  cpu::OpDesc lg3 = lg;
  lg3.outputs = {h.desc(), scale.desc(), scale.desc()};
  EXPECT_LE(compareWithCpu(lg3, {dy, h, scale}), 5e-5) << "LayerNormalizationGrad with dScale, dBias";
  cpu::OpDesc ls = makeDesc("LayerNormalizationScaleGrad", {dy.desc(), h.desc()}, {scale.desc()},
                            {}, 17, "pipec");
  ls.attrs["axis"] = Attribute::ofInt(2);
  ls.attrs["shape"] = Attribute::ofInts({64});
  EXPECT_LE(compareWithCpu(ls, {dy, h}), 1e-6) << "LayerNormalizationScaleGrad";
  // Over 2048 rows: the scale gradient's sums in chunks of 256 rows.
  Tensor hl = randomF32({4, 512, 64}, 52), dyl = randomF32({4, 512, 64}, 53);
  cpu::OpDesc lsl = ls;
  lsl.inputs = {dyl.desc(), hl.desc()};
  EXPECT_LE(compareWithCpu(lsl, {dyl, hl}), 1e-5) << "LayerNormalizationScaleGrad over 2048 rows";
  Tensor p = randomF32({4, 4, 16, 16}, 50, 0.f, 1.f), q = randomF32({4, 4, 16, 16}, 51);
  cpu::OpDesc sg = makeDesc("SoftmaxGrad", {q.desc(), p.desc()}, {p.desc()}, {}, 17, "pipec");
  sg.attrs["axis"] = Attribute::ofInt(3);
  // Y (dY - sum(dY Y)): the sum (up to 48 here) rounded with or without
  // contracted multiply-adds differs by its ulp, 3.8e-6 at most; the H100
  // gave 1.01e-6.
  EXPECT_LE(compareWithCpu(sg, {q, p}), 4e-6) << "SoftmaxGrad";
  for (const char *eq : {"abmk,abmn->abkn", "abmn,abkn->abmk", "abij,abjk->abik", "abjk,abij->abik"}) {
    cpu::OpDesc e = makeDesc("Einsum", {p.desc(), q.desc()}, {p.desc()}, {}, 12);
    e.attrs["equation"] = Attribute::ofString(eq);
    EXPECT_LE(compareWithCpu(e, {p, q}), 1e-5) << eq;
  }
  Tensor z = randomF32({4, 16, 256}, 52, -5.f, 5.f);
  EXPECT_LE(compareWithCpu(makeDesc("Erf", {z.desc()}, {z.desc()}), {z}), 4e-7) << "Erf";
}

// The fused nodes' kernels (pipec:FusedGemm, pipec:Attention and its
// gradient, both layouts and every mask kind) against the CPU's.
TEST(CudaKernels, FusedOpsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  Tensor a = randomF32({4, 16, 64}, 60), w = randomF32({32, 64}, 61), bias = randomF32({32}, 62);
  for (const char *act : {"", "Relu", "Gelu", "GeluTanh"}) {
    cpu::OpDesc d = makeDesc("FusedGemm", {a.desc(), w.desc(), bias.desc()},
                             {{DType::F32, {4, 16, 32}}}, {}, 17, "pipec");
    d.attrs["transB"] = Attribute::ofInt(1);
    if (*act)
      d.attrs["activation"] = Attribute::ofString(act);
    EXPECT_LE(compareWithCpu(d, {a, w, bias}), 1e-5) << "FusedGemm " << act;
  }
  for (bool inner : {false, true})
    for (const char *kind : {"none", "add", "bool"}) {
      // Logical Q [2, 3, 8, 16], KT [2, 3, 16, 8], V [2, 3, 8, 4].
      const Shape q = inner ? Shape{2, 8, 3, 16} : Shape{2, 3, 8, 16};
      const Shape k = inner ? Shape{2, 8, 3, 16} : Shape{2, 3, 16, 8};
      const Shape v = inner ? Shape{2, 8, 3, 4} : Shape{2, 3, 8, 4};
      const Shape o = inner ? Shape{2, 8, 3, 4} : Shape{2, 3, 8, 4};
      Tensor tq = randomF32(q, 63), tk = randomF32(k, 64), tv = randomF32(v, 65), dO = randomF32(o, 66);
      std::vector<Tensor> in{tq, tk, tv};
      if (std::string(kind) == "add") {
        in.push_back(randomF32({8, 8}, 67));
      } else if (std::string(kind) == "bool") {
        Tensor m(DType::Bool, {8, 8});
        for (int i = 0; i < 8; ++i)
          for (int j = 0; j < 8; ++j)
            m.data<uint8_t>()[i * 8 + j] = j > i ? 1 : 0;
        in.push_back(m);
      }
      std::vector<TensorDesc> descs;
      for (const Tensor &t : in)
        descs.push_back(t.desc());
      cpu::OpDesc f = makeDesc("Attention", descs, {{DType::F32, o}}, {}, 17, "pipec");
      f.attrs = {{"scale", Attribute::ofFloat(0.25f)}, {"mask", Attribute::ofString(kind)},
                 {"heads_inner", Attribute::ofInt(inner)}};
      EXPECT_LE(compareWithCpu(f, in), 1e-5) << "Attention " << kind << " heads_inner " << inner;
      in.push_back(dO);
      descs.push_back(dO.desc());
      cpu::OpDesc g =
          makeDesc("AttentionGrad", descs, {tq.desc(), tk.desc(), tv.desc()}, {}, 17, "pipec");
      g.attrs = f.attrs;
      EXPECT_LE(compareWithCpu(g, in), 1e-5) << "AttentionGrad " << kind << " heads_inner " << inner;
      // keep-attention-probs: the forward also writes P [2, 3, 8, 8]; the
      // gradient reads it (the CPU's P, as the plan would hand it over).
      const TensorDesc probs{DType::F32, {2, 3, 8, 8}};
      std::vector<Tensor> fwdIn(in.begin(), in.end() - 1);
      cpu::OpDesc fp = f;
      fp.outputs.push_back(probs);
      EXPECT_LE(compareWithCpu(fp, fwdIn), 1e-5) << "Attention with P " << kind << " heads_inner " << inner;
      auto p = cpu::evaluate(fp, fwdIn);
      ASSERT_TRUE(p.isOk()) << p.status().message();
      in.push_back((*p)[1]);
      descs.push_back(probs);
      cpu::OpDesc gp =
          makeDesc("AttentionGrad", descs, {tq.desc(), tk.desc(), tv.desc()}, {}, 17, "pipec");
      gp.attrs = f.attrs;
      EXPECT_LE(compareWithCpu(gp, in), 1e-5) << "AttentionGrad given P " << kind << " heads_inner " << inner;
      if (!inner)
        continue;
      // pack-qkv: Q, K and V the thirds of one [2, 8, 3 x 3 x 16] tensor,
      // the gradient's one output dQKV.
      Tensor qkv = randomF32({2, 8, 144}, 68);
      std::vector<Tensor> pin{qkv, qkv, qkv};
      if (std::string(kind) != "none")
        pin.push_back(in[3]);
      std::vector<TensorDesc> pdescs;
      for (const Tensor &t : pin)
        pdescs.push_back(t.desc());
      cpu::OpDesc pf =
          makeDesc("Attention", pdescs, {{DType::F32, {2, 8, 3, 16}}}, {}, 17, "pipec");
      pf.attrs = f.attrs;
      pf.attrs["packed_qkv"] = Attribute::ofInt(1);
      pf.attrs["heads"] = Attribute::ofInt(3);
      EXPECT_LE(compareWithCpu(pf, pin), 1e-5) << "packed Attention " << kind;
      Tensor pdO = randomF32({2, 8, 3, 16}, 69);
      pin.push_back(pdO);
      pdescs.push_back(pdO.desc());
      cpu::OpDesc pg = makeDesc("AttentionGrad", pdescs, {qkv.desc()}, {}, 17, "pipec");
      pg.attrs = pf.attrs;
      EXPECT_LE(compareWithCpu(pg, pin), 1e-5) << "packed AttentionGrad " << kind;
    }
}

// pipec:FusedElementwise: random programs over broadcast inputs. Every op
// is rounded once (the body uses rounded intrinsics: no contraction), so
// the GPU's values are the CPU kernel's, NaNs and infinities included.
TEST(CudaKernels, FusedElementwiseAgainstCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(70);
  const Shape out{3, 5, 40};
  const Shape shapes[] = {out, {40}, {5, 1}, {3, 1, 1}}; // each a (i / div) % mod of the output
  for (int trial = 0; trial < 40; ++trial) {
    EwProgram p;
    p.numInputs = 1 + static_cast<int32_t>(rng() % 4);
    std::vector<Tensor> in;
    std::vector<TensorDesc> descs;
    for (int32_t k = 0; k < p.numInputs; ++k) {
      in.push_back(randomF32(shapes[k], 71 + static_cast<uint32_t>(trial * 4 + k)));
      descs.push_back(in.back().desc());
    }
    // A chain through the full-shape values (input 0, then each step).
    const int steps = 1 + static_cast<int>(rng() % 8);
    for (int s = 0; s < steps; ++s) {
      const auto op = static_cast<EwOp>(rng() % kEwOpCount);
      const int32_t a = s == 0 ? 0 : p.numInputs + s - 1;
      const int32_t b = ewArity(op) == 2 ? static_cast<int32_t>(rng() % static_cast<uint32_t>(p.numInputs + s)) : 0;
      p.steps.push_back({op, a, b});
    }
    cpu::OpDesc d = makeDesc("FusedElementwise", descs, {{DType::F32, out}}, {}, 17, "pipec");
    d.attrs["program"] = Attribute::ofInts(p.encode());
    EXPECT_EQ(compareWithCpu(d, in), 0.0) << p.str();
  }
}

// ---- The CNN ops (runtime/cuda/kernels/Conv.cpp, Pool.cpp, BatchNorm.cpp).

namespace {

/// Runs a node on the GPU with `ctx`'s training flag, on a stream in TF32
/// math where `tf32`; outputs and workspace are NaN-filled first (a value
/// the kernel forgets to write shows), out[0] starts as `initial` where
/// given (ExecContext::accumulate). The outputs, or none where the kernel
/// could not be made or run.
std::vector<Tensor> runOnGpu(const cpu::OpDesc &d, const std::vector<Tensor> &inputs, cpu::ExecContext ctx,
                             bool tf32 = false, const Tensor *initial = nullptr) {
  auto k = cuda::createKernel(d);
  EXPECT_TRUE(k.isOk()) << d.opType << ": " << (k ? "" : k.status().message());
  if (!k)
    return {};
  cudaStream_t stream;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::setStreamMath(stream, tf32 ? cuda::MathMode::Tf32 : cuda::MathMode::Exact);
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<const void *> in;
  std::vector<void *> out;
  for (const Tensor &t : inputs) {
    bufs.push_back(std::make_unique<DeviceBuffer>(t.bytes()));
    cudaMemcpy(bufs.back()->p, t.raw(), t.bytes(), cudaMemcpyHostToDevice);
    in.push_back(bufs.back()->p);
  }
  for (const TensorDesc &o : d.outputs) {
    bufs.push_back(std::make_unique<DeviceBuffer>(o.bytes()));
    cudaMemset(bufs.back()->p, 0xff, o.bytes());
    out.push_back(o.dtype == DType::Undefined ? nullptr : bufs.back()->p);
  }
  if (initial)
    cudaMemcpy(out[0], initial->raw(), initial->bytes(), cudaMemcpyHostToDevice);
  DeviceBuffer workspace((*k)->workspaceBytes());
  cudaMemset(workspace.p, 0xff, std::max<size_t>((*k)->workspaceBytes(), 4));
  ctx.stream = stream;
  ctx.workspace = workspace.p;
  ctx.accumulate = initial != nullptr;
  Status s = (*k)->run(ctx, in.data(), out.data());
  EXPECT_TRUE(s.isOk()) << d.opType << ": " << s.message();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << d.opType << ": " << cudaGetErrorString(cudaGetLastError());
  cuda::setStreamMath(stream, cuda::MathMode::Exact); // the next stream may get this one's address
  cudaStreamDestroy(stream);
  std::vector<Tensor> got;
  for (size_t o = 0; o < d.outputs.size(); ++o) {
    if (d.outputs[o].dtype == DType::Undefined) {
      got.emplace_back();
      continue;
    }
    got.emplace_back(d.outputs[o]);
    cudaMemcpy(got.back().raw(), out[o], got.back().bytes(), cudaMemcpyDeviceToHost);
  }
  return s.isOk() ? got : std::vector<Tensor>{};
}

/// The largest difference of the GPU's outputs from the CPU kernel's
/// (worstError; other types byte for byte), both run with `training`.
double cnnCompare(const cpu::OpDesc &d, const std::vector<Tensor> &inputs, bool training = false, bool tf32 = false) {
  cpu::ExecContext ctx;
  ctx.training = training;
  auto ref = cpu::evaluate(d, inputs, ctx);
  EXPECT_TRUE(ref.isOk()) << d.opType << ": " << (ref ? "" : ref.status().message());
  std::vector<Tensor> got = runOnGpu(d, inputs, ctx, tf32);
  if (!ref || got.size() != d.outputs.size())
    return HUGE_VAL;
  double worst = 0;
  for (size_t o = 0; o < got.size(); ++o) {
    if (d.outputs[o].dtype == DType::Undefined)
      continue;
    const Tensor &r = (*ref)[o];
    if (r.dtype() != DType::F32) {
      if (std::memcmp(got[o].raw(), r.raw(), r.bytes()) != 0)
        worst = HUGE_VAL;
      continue;
    }
    worst = std::max(worst, worstError(got[o].data<float>(), r.data<float>(), r.numel()));
  }
  return worst;
}

struct CnnConvCase {
  Shape x, w;
  AttrMap attrs;
};

/// Conv geometries: groups (depthwise too), strides, dilations, symmetric,
/// asymmetric and automatic pads, 1-D, 2-D and 3-D.
std::vector<CnnConvCase> cnnConvCases() {
  auto ints = [](std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); };
  return {
      {{2, 8, 12, 12}, {16, 8, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}},
      {{2, 8, 11, 10},
       {6, 4, 3, 3},
       {{"pads", ints({1, 0, 2, 1})}, {"strides", ints({2, 2})}, {"group", Attribute::ofInt(2)}}},
      {{2, 8, 10, 10},
       {8, 1, 3, 3},
       {{"auto_pad", Attribute::ofString("SAME_UPPER")}, {"strides", ints({2, 2})}, {"group", Attribute::ofInt(8)}}},
      {{1, 4, 13, 11}, {5, 4, 3, 3}, {{"pads", ints({2, 2, 2, 2})}, {"dilations", ints({2, 2})}}},
      {{3, 5, 20}, {7, 5, 4}, {{"pads", ints({1, 2})}, {"strides", ints({2})}}},
      {{1, 3, 6, 7, 8}, {4, 3, 3, 2, 3}, {{"pads", ints({1, 0, 1, 1, 1, 1})}, {"strides", ints({1, 2, 2})}}},
      {{4, 16, 7, 7}, {32, 16, 1, 1}, {}},
      {{2, 3, 16, 16}, {8, 3, 7, 7}, {{"auto_pad", Attribute::ofString("SAME_LOWER")}, {"strides", ints({2, 2})}}},
      {{2, 6, 9, 9},
       {6, 2, 3, 3},
       {{"pads", ints({2, 1, 1, 2})},
        {"strides", ints({2, 2})},
        {"dilations", ints({1, 2})},
        {"group", Attribute::ofInt(3)}}},
  };
}

/// The output shape of a Conv case.
Shape convOut(const CnnConvCase &c) {
  cpu::OpDesc d = makeDesc("Conv", {{DType::F32, c.x}, {DType::F32, c.w}}, {}, c.attrs, 11);
  std::vector<cpu::LinalgWindowDim> dims;
  EXPECT_TRUE(cpu::linalgResolveWindow(d, Shape(c.x.begin() + 2, c.x.end()),
                                       std::vector<int64_t>(c.w.begin() + 2, c.w.end()), false, nullptr, dims)
                  .isOk());
  Shape y = {c.x[0], c.w[0]};
  for (const cpu::LinalgWindowDim &w : dims)
    y.push_back(w.out);
  return y;
}

} // namespace

// Conv (with a bias), ConvGradInput and ConvGradWeight (also adding into
// dW) against the CPU's on every geometry. cuDNN sums the products in its
// own order: rounding, not bits; dW sums N x the output's positions.
TEST(CudaKernels, ConvolutionsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 1100;
  for (const CnnConvCase &c : cnnConvCases()) {
    const Shape ys = convOut(c);
    const std::string what = cat(shapeStr(c.x), " * ", shapeStr(c.w));
    Tensor x = randomF32(c.x, ++seed), w = randomF32(c.w, ++seed), b = randomF32({c.w[0]}, ++seed);
    Tensor dy = randomF32(ys, ++seed);
    cpu::OpDesc conv = makeDesc("Conv", {x.desc(), w.desc(), b.desc()}, {{DType::F32, ys}}, c.attrs, 11);
    // Sums of up to 147 products of U(-3, 3) terms (partials of 20-50,
    // whose ulps are 2-4e-6) in cuDNN's order and the CPU's: a few ulps
    // apart, which a simulation of both orders in f32 put at up to 2.3e-5.
    EXPECT_LE(cnnCompare(conv, {x, w, b}), 5e-5) << "Conv " << what;
    cpu::OpDesc noBias = makeDesc("Conv", {x.desc(), w.desc()}, {{DType::F32, ys}}, c.attrs, 11);
    EXPECT_LE(cnnCompare(noBias, {x, w}), 5e-5) << "Conv without bias " << what;
    AttrMap gi = c.attrs, gw = c.attrs;
    gi["shape"] = Attribute::ofInts(c.x);
    gw["shape"] = Attribute::ofInts(c.w);
    cpu::OpDesc dX = makeDesc("ConvGradInput", {dy.desc(), w.desc()}, {x.desc()}, gi, 17, "pipec");
    EXPECT_LE(cnnCompare(dX, {dy, w}), 5e-5) << "ConvGradInput " << what;
    cpu::OpDesc dW = makeDesc("ConvGradWeight", {dy.desc(), x.desc()}, {w.desc()}, gw, 17, "pipec");
    EXPECT_LE(cnnCompare(dW, {dy, x}), 1e-4) << "ConvGradWeight " << what;
    // Accumulating: dW += the gradient (cuDNN's beta = 1).
    Tensor prior = randomF32(c.w, ++seed);
    Tensor ref = evalOne(dW, {dy, x});
    std::vector<Tensor> got = runOnGpu(dW, {dy, x}, {}, false, &prior);
    ASSERT_EQ(got.size(), 1u) << what;
    for (int64_t i = 0; i < ref.numel(); ++i)
      ref.data<float>()[i] += prior.data<float>()[i];
    EXPECT_LE(worstError(got[0].data<float>(), ref.data<float>(), ref.numel()), 1e-4) << "ConvGradWeight += " << what;
  }
}

// Under output_dtype (the mixed-precision pass's products: bf16 or f16
// activations, the weight f32 and rounded by the product, an f32 result)
// the GPU widens the operands for its f32 cuDNN kernels; the CPU runs
// oneDNN's bf16 kernels or the same emulation. Both accumulate the same
// exact products in f32: rounding apart.
TEST(CudaKernels, ConvolutionsUnderOutputDtypeAgainstCpu) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 1400;
  for (DType t : {DType::BF16, DType::F16})
    for (const CnnConvCase &c : cnnConvCases()) {
      const Shape ys = convOut(c);
      const std::string what = cat(dtypeName(t), " ", shapeStr(c.x), " * ", shapeStr(c.w));
      auto half = [&](const Shape &s) {
        Tensor f = randomF32(s, ++seed), h(t, s);
        for (int64_t i = 0; i < f.numel(); ++i)
          static_cast<uint16_t *>(h.raw())[i] =
              t == DType::BF16 ? floatToBf16(f.data<float>()[i]) : floatToHalf(f.data<float>()[i]);
        return h;
      };
      Tensor x = half(c.x), dy = half(ys), w = randomF32(c.w, ++seed), b = randomF32({c.w[0]}, ++seed);
      AttrMap at = c.attrs, gi = c.attrs, gw = c.attrs;
      for (AttrMap *m : {&at, &gi, &gw})
        (*m)[kProductOutputDType] = Attribute::ofInt(static_cast<int64_t>(DType::F32));
      gi["shape"] = Attribute::ofInts(c.x);
      gw["shape"] = Attribute::ofInts(c.w);
      cpu::OpDesc conv = makeDesc("Conv", {x.desc(), w.desc(), b.desc()}, {{DType::F32, ys}}, at, 11);
      EXPECT_LE(cnnCompare(conv, {x, w, b}), 5e-5) << "Conv " << what; // as the f32 case's
      cpu::OpDesc dX =
          makeDesc("ConvGradInput", {dy.desc(), w.desc()}, {{DType::F32, c.x}}, gi, 17, "pipec");
      EXPECT_LE(cnnCompare(dX, {dy, w}), 5e-5) << "ConvGradInput " << what;
      cpu::OpDesc dW =
          makeDesc("ConvGradWeight", {dy.desc(), x.desc()}, {{DType::F32, c.w}}, gw, 17, "pipec");
      EXPECT_LE(cnnCompare(dW, {dy, x}), 1e-4) << "ConvGradWeight " << what;
    }
}

// ConvTranspose: output_padding, output_shape, groups, asymmetric and
// negative pads, 1-D, 2-D and 3-D.
TEST(CudaKernels, ConvTransposeAgainstCpu) {
  SKIP_WITHOUT_GPU();
  auto ints = [](std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); };
  struct Case {
    Shape x, w, y;
    AttrMap attrs;
  };
  const Case cases[] = {
      {{2, 6, 5, 5},
       {6, 4, 3, 3},
       {2, 4, 10, 10},
       {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"output_padding", ints({1, 1})}}},
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {2, 6, 6, 7}, {{"pads", ints({0, 1, 1, 0})}, {"group", Attribute::ofInt(2)}}},
      {{1, 3, 4, 4}, {3, 2, 3, 3}, {1, 2, 10, 10}, {{"strides", ints({2, 2})}, {"output_shape", ints({10, 10})}}},
      {{2, 3, 7},
       {3, 2, 4},
       {2, 2, 21},
       {{"strides", ints({3})}, {"pads", ints({2, 1})}, {"output_padding", ints({2})}}},
      {{1, 2, 3, 4, 3},
       {2, 2, 2, 3, 2},
       {1, 2, 6, 5, 5},
       {{"strides", ints({2, 1, 2})}, {"pads", ints({0, 1, 1, 1, 0, 0})}, {"output_padding", ints({1, 0, 0})}}},
      {{1, 4, 5, 6},
       {4, 3, 3, 2},
       {1, 3, 8, 12},
       {{"strides", ints({1, 2})},
        {"dilations", ints({2, 1})},
        {"pads", ints({2, 0, -1, 1})},
        {"output_padding", ints({0, 1})}}},
      {{2, 8, 6, 6},
       {8, 1, 4, 4},
       {2, 8, 12, 12},
       {{"strides", ints({2, 2})}, {"auto_pad", Attribute::ofString("SAME_UPPER")}, {"group", Attribute::ofInt(8)}}},
  };
  uint32_t seed = 1200;
  for (const Case &c : cases) {
    Tensor x = randomF32(c.x, ++seed), w = randomF32(c.w, ++seed), b = randomF32({c.y[1]}, ++seed);
    cpu::OpDesc d = makeDesc("ConvTranspose", {x.desc(), w.desc(), b.desc()}, {{DType::F32, c.y}}, c.attrs, 11);
    EXPECT_LE(cnnCompare(d, {x, w, b}), 1e-5) << "ConvTranspose " << shapeStr(c.x) << " -> " << shapeStr(c.y);
  }
}

// --math tf32: the same kernels on TF32 tensor cores (where cuDNN's
// heuristics take them), within TF32's rounding (10 bits of mantissa per
// operand: about 1e-3 of a product) of the CPU's exact sums, measured
// against the largest output (a sum near zero keeps the error of its
// terms).
TEST(CudaKernels, ConvolutionsInTf32) {
  SKIP_WITHOUT_GPU();
  const CnnConvCase c = cnnConvCases()[0];
  const Shape ys = convOut(c);
  Tensor x = randomF32(c.x, 1300), w = randomF32(c.w, 1301), dy = randomF32(ys, 1302);
  AttrMap gw = c.attrs;
  gw["shape"] = Attribute::ofInts(c.w);
  for (const cpu::OpDesc &d : {makeDesc("Conv", {x.desc(), w.desc()}, {{DType::F32, ys}}, c.attrs, 11),
                               makeDesc("ConvGradWeight", {dy.desc(), x.desc()}, {w.desc()}, gw, 17, "pipec")}) {
    const std::vector<Tensor> in = d.opType == "Conv" ? std::vector<Tensor>{x, w} : std::vector<Tensor>{dy, x};
    Tensor ref = evalOne(d, in);
    std::vector<Tensor> got = runOnGpu(d, in, {}, true);
    ASSERT_EQ(got.size(), 1u) << d.opType;
    double worst = 0, largest = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[0].data<float>()[i]) - ref.data<float>()[i]));
      largest = std::max(largest, std::fabs(static_cast<double>(ref.data<float>()[i])));
    }
    EXPECT_LE(worst, 5e-3 * largest) << d.opType << " in TF32";
  }
}

// Algorithms are chosen when a kernel is made, by cuDNN's heuristics: two
// kernels of one node choose alike (and the choice is printed, for the
// GPU run's log).
TEST(CudaKernels, ConvolutionAlgorithmsAreChosenAlike) {
  SKIP_WITHOUT_GPU();
  for (const CnnConvCase &c : cnnConvCases()) {
    const Shape ys = convOut(c);
    AttrMap gi = c.attrs, gw = c.attrs;
    gi["shape"] = Attribute::ofInts(c.x);
    gw["shape"] = Attribute::ofInts(c.w);
    const TensorDesc x{DType::F32, c.x}, w{DType::F32, c.w}, y{DType::F32, ys};
    for (const cpu::OpDesc &d :
         {makeDesc("Conv", {x, w}, {y}, c.attrs, 11), makeDesc("ConvGradInput", {y, w}, {x}, gi, 17, "pipec"),
          makeDesc("ConvGradWeight", {y, x}, {w}, gw, 17, "pipec")}) {
      auto a = cuda::createKernel(d), b = cuda::createKernel(d);
      ASSERT_TRUE(a.isOk() && b.isOk()) << (a ? b.status().message() : a.status().message());
      const auto *ca = dynamic_cast<const cuda::DnnChoice *>(a->get());
      const auto *cb = dynamic_cast<const cuda::DnnChoice *>(b->get());
      ASSERT_TRUE(ca && cb) << d.opType;
      EXPECT_EQ(ca->dnnChoice(), cb->dnnChoice()) << d.opType << " " << shapeStr(c.x);
      EXPECT_EQ((*a)->workspaceBytes(), (*b)->workspaceBytes()) << d.opType << " " << shapeStr(c.x);
      std::cout << d.opType << " " << shapeStr(c.x) << " * " << shapeStr(c.w) << ": " << ca->dnnChoice() << "\n";
    }
  }
}

// The pools and their gradients are the CPU loops' sums and picks, bit for
// bit (the CPU's oneDNN paths round their own way: the loops here).
TEST(CudaKernels, PoolsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  useDnnl(false);
  auto ints = [](std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); };
  auto one = [](int64_t v) { return Attribute::ofInt(v); };
  struct Case {
    const char *op;
    Shape x, y;
    AttrMap attrs;
    int64_t opset = 12;
  };
  const Case cases[] = {
      {"MaxPool",
       {4, 16, 33, 32},
       {4, 16, 17, 16},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 0, 1, 2})},
        {"ceil_mode", one(1)}}},
      {"MaxPool",
       {2, 3, 9, 10},
       {2, 3, 9, 5},
       {{"kernel_shape", ints({2, 3})},
        {"strides", ints({1, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"dilations", ints({2, 1})}}},
      {"MaxPool", {2, 3, 17}, {2, 3, 6}, {{"kernel_shape", ints({4})}, {"strides", ints({3})}, {"pads", ints({2, 1})}}},
      {"MaxPool",
       {1, 2, 5, 6, 7},
       {1, 2, 3, 4, 7},
       {{"kernel_shape", ints({2, 3, 2})},
        {"strides", ints({2, 2, 1})},
        {"pads", ints({0, 1, 1, 1, 1, 0})},
        {"ceil_mode", one(1)}}},
      {"AveragePool",
       {4, 8, 15, 16},
       {4, 8, 8, 9},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"ceil_mode", one(1)},
        {"count_include_pad", one(1)}}},
      {"AveragePool",
       {4, 8, 15, 16},
       {4, 8, 8, 9},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"ceil_mode", one(1)}}},
      {"AveragePool",
       {1, 2, 5, 6, 7},
       {1, 2, 3, 6, 3},
       {{"kernel_shape", ints({3, 2, 3})},
        {"strides", ints({2, 1, 2})},
        {"pads", ints({1, 0, 1, 1, 1, 0})},
        {"count_include_pad", one(1)}}},
      {"AveragePool",
       {2, 3, 9, 9},
       {2, 3, 8, 8},
       {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}, {"pads", ints({1, 0, 0, 1})}},
       19},
  };
  uint32_t seed = 1400;
  for (const Case &c : cases) {
    Tensor x = randomF32(c.x, ++seed), dy = randomF32(c.y, ++seed);
    x.data<float>()[3] = NAN;
    const bool isMax = std::string(c.op) == "MaxPool";
    cpu::OpDesc d = makeDesc(c.op, {x.desc()}, {{DType::F32, c.y}}, c.attrs, c.opset);
    EXPECT_EQ(cnnCompare(d, {x}), 0.0) << c.op << " " << shapeStr(c.x);
    if (isMax)
      for (int64_t order : {0, 1}) {
        cpu::OpDesc di = d;
        di.outputs.push_back({DType::I64, c.y});
        di.attrs["storage_order"] = Attribute::ofInt(order);
        EXPECT_EQ(cnnCompare(di, {x}), 0.0) << "MaxPool with Indices " << shapeStr(c.x) << " storage_order " << order;
      }
    cpu::OpDesc g = isMax ? makeDesc("MaxPoolGrad", {dy.desc(), x.desc()}, {x.desc()}, c.attrs, 17, "pipec")
                          : makeDesc("AveragePoolGrad", {dy.desc()}, {x.desc()}, c.attrs, 17, "pipec");
    if (!isMax)
      g.attrs["shape"] = Attribute::ofInts(c.x);
    EXPECT_EQ(isMax ? cnnCompare(g, {dy, x}) : cnnCompare(g, {dy}), 0.0) << g.opType << " " << shapeStr(c.x);
  }
  for (const Shape &s : {Shape{8, 64, 7, 7}, Shape{3, 4, 300}, Shape{2, 5, 2, 3, 4}}) {
    Tensor x = randomF32(s, ++seed);
    Shape ys = {s[0], s[1]};
    ys.resize(s.size(), 1);
    for (const char *op : {"GlobalAveragePool", "GlobalMaxPool"})
      EXPECT_EQ(cnnCompare(makeDesc(op, {x.desc()}, {{DType::F32, ys}}), {x}), 0.0) << op << " " << shapeStr(s);
  }
  useDnnl(true);
}

// BatchNormalization in every mode (training by attribute, by the five
// outputs of opset 9 and by ExecContext::training; inference), the running
// statistics included, its three gradients, InstanceNormalization and LRN.
TEST(CudaKernels, NormalizationsAgainstCpu) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 1500;
  const Shape xs = {8, 16, 14, 14};
  // X off zero; not so far that one multiply-add contracted on one side
  // only (nvcc and GCC decide apart) moves Y by more than 1e-6.
  Tensor x = randomF32(xs, ++seed, -1.f, 3.f), scale = randomF32({16}, ++seed, 0.5f, 1.5f),
         bias = randomF32({16}, ++seed), mean = randomF32({16}, ++seed, 0.f, 2.f),
         var = randomF32({16}, ++seed, 0.5f, 2.f);
  const std::vector<TensorDesc> in = {x.desc(), scale.desc(), bias.desc(), mean.desc(), var.desc()};
  const AttrMap attrs = {{"momentum", Attribute::ofFloat(0.9f)}, {"epsilon", Attribute::ofFloat(1e-5f)}};
  // Training by attribute: Y, running mean and variance.
  cpu::OpDesc t15 = makeDesc("BatchNormalization", in, {x.desc(), scale.desc(), scale.desc()}, attrs, 15);
  t15.attrs["training_mode"] = Attribute::ofInt(1);
  EXPECT_LE(cnnCompare(t15, {x, scale, bias, mean, var}), 1e-6) << "BatchNormalization-15 training_mode 1";
  // Opset 9's five outputs: training, the saved mean and variance too.
  cpu::OpDesc t9 =
      makeDesc("BatchNormalization", in, {x.desc(), scale.desc(), scale.desc(), scale.desc(), scale.desc()}, attrs, 9);
  EXPECT_LE(cnnCompare(t9, {x, scale, bias, mean, var}), 1e-6) << "BatchNormalization-9 five outputs";
  // One output: ExecContext::training decides.
  cpu::OpDesc y1 = makeDesc("BatchNormalization", in, {x.desc()}, attrs, 15);
  EXPECT_LE(cnnCompare(y1, {x, scale, bias, mean, var}, true), 1e-6) << "BatchNormalization training by context";
  EXPECT_LE(cnnCompare(y1, {x, scale, bias, mean, var}, false), 1e-6) << "BatchNormalization inference";
  // [N, C] after a dense layer.
  Tensor x2 = randomF32({32, 16}, ++seed);
  cpu::OpDesc t2 = makeDesc("BatchNormalization", {x2.desc(), scale.desc(), bias.desc(), mean.desc(), var.desc()},
                            {x2.desc(), scale.desc(), scale.desc()}, attrs, 15);
  t2.attrs["training_mode"] = Attribute::ofInt(1);
  EXPECT_LE(cnnCompare(t2, {x2, scale, bias, mean, var}), 1e-6) << "BatchNormalization [N, C]";
  // The gradients, from the CPU's statistics.
  Tensor dy = randomF32(xs, ++seed);
  for (bool training : {true, false}) {
    cpu::ExecContext ctx;
    ctx.training = training;
    cpu::OpDesc st = makeDesc("BatchNormalizationStats", {x.desc(), mean.desc(), var.desc()},
                              {scale.desc(), scale.desc()}, {}, 17, "pipec");
    EXPECT_LE(cnnCompare(st, {x, mean, var}, training), 1e-6) << "BatchNormalizationStats, training " << training;
    std::vector<Tensor> mr = eval(st, {x, mean, var}, ctx);
    ASSERT_EQ(mr.size(), 2u);
    cpu::OpDesc gd = makeDesc("BatchNormalizationGrad", {dy.desc(), x.desc(), scale.desc(), scale.desc(), scale.desc()},
                              {x.desc(), {DType::F32, {2, 16}}}, {}, 17, "pipec");
    EXPECT_LE(cnnCompare(gd, {dy, x, scale, mr[0], mr[1]}, training), 1e-6)
        << "BatchNormalizationGrad, training " << training;
    cpu::OpDesc g1 = gd;
    g1.outputs.resize(1);
    EXPECT_LE(cnnCompare(g1, {dy, x, scale, mr[0], mr[1]}, training), 1e-6)
        << "BatchNormalizationGrad without sums, training " << training;
    cpu::OpDesc sg = makeDesc("BatchNormalizationScaleGrad", {dy.desc(), x.desc(), scale.desc(), scale.desc()},
                              {scale.desc(), scale.desc()}, {}, 17, "pipec");
    EXPECT_LE(cnnCompare(sg, {dy, x, mr[0], mr[1]}, training), 1e-6) << "BatchNormalizationScaleGrad";
    std::vector<Tensor> sums = eval(gd, {dy, x, scale, mr[0], mr[1]}, ctx);
    ASSERT_EQ(sums.size(), 2u);
    cpu::OpDesc fromSums =
        makeDesc("BatchNormalizationScaleGrad", {sums[1].desc()}, {scale.desc(), scale.desc()}, {}, 17, "pipec");
    EXPECT_EQ(cnnCompare(fromSums, {sums[1]}, training), 0.0) << "BatchNormalizationScaleGrad from the sums";
  }
  Tensor xi = randomF32({4, 6, 17, 19}, ++seed, -1.f, 3.f), si = randomF32({6}, ++seed, 0.5f, 1.5f),
         bi = randomF32({6}, ++seed);
  EXPECT_LE(cnnCompare(makeDesc("InstanceNormalization", {xi.desc(), si.desc(), bi.desc()}, {xi.desc()}), {xi, si, bi}),
            1e-6)
      << "InstanceNormalization";
  // LRN against the CPU's loop: CUDA's powf is within a few ulps of glibc's.
  useDnnl(false);
  for (int64_t size : {5, 4}) {
    Tensor xl = randomF32({4, 12, 9, 9}, ++seed);
    cpu::OpDesc d = makeDesc("LRN", {xl.desc()}, {xl.desc()},
                             {{"size", Attribute::ofInt(size)},
                              {"alpha", Attribute::ofFloat(1e-3f)},
                              {"beta", Attribute::ofFloat(0.75f)},
                              {"bias", Attribute::ofFloat(2.0f)}},
                             13);
    EXPECT_LE(cnnCompare(d, {xl}), 4e-6) << "LRN size " << size;
  }
  useDnnl(true);
}

// The channels-last nodes (runtime/cuda/kernels/Nhwc.cpp) against the CPU's
// oneDNN kernels: NhwcConv with each folded activation, strides, pads and
// groups; NhwcMaxPool and NhwcAveragePool.
TEST(CudaKernels, ChannelsLastNodesAgainstCpu) {
  SKIP_WITHOUT_GPU();
  auto ints = [](std::vector<int64_t> v) { return Attribute::ofInts(std::move(v)); };
  Tensor x = randomF32({2, 9, 10, 6}, 1301), w = randomF32({8, 3, 3, 3}, 1302), b = randomF32({8}, 1303);
  for (const char *act : {"", "Relu", "Clip", "LeakyRelu"}) {
    AttrMap a = {{"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 1})}, {"group", Attribute::ofInt(2)}};
    if (*act)
      a["activation"] = Attribute::ofString(act);
    if (std::string(act) == "Clip") {
      a["clip_min"] = Attribute::ofFloat(-0.5f);
      a["clip_max"] = Attribute::ofFloat(1.0f);
    }
    if (std::string(act) == "LeakyRelu")
      a["leaky_alpha"] = Attribute::ofFloat(0.1f);
    cpu::OpDesc d = makeDesc("NhwcConv", {x.desc(), w.desc(), b.desc()}, {{DType::F32, {2, 5, 9, 8}}}, a, 1, "pipec");
    EXPECT_LE(compareWithCpu(d, {x, w, b}), 1e-5) << "NhwcConv " << act;
  }
  AttrMap p = {{"kernel_shape", ints({3, 2})}, {"strides", ints({2, 2})}, {"pads", ints({1, 0, 1, 0})}};
  for (const char *op : {"NhwcMaxPool", "NhwcAveragePool"}) {
    cpu::OpDesc d = makeDesc(op, {x.desc()}, {{DType::F32, {2, 5, 5, 6}}}, p, 1, "pipec");
    EXPECT_LE(compareWithCpu(d, {x}), 1e-6) << op;
  }
}

// Dropout in training draws the CPU kernel's masks bitwise, its step from
// ExecContext::step or, as the executor gives it, from device memory
// (ExecContext::deviceStep); a launch recorded once in a CUDA graph then
// draws each step's own mask when the step in device memory changes.
TEST(CudaKernels, DropoutMasksFollowTheStepInDeviceMemory) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1003;
  Tensor x(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.data<float>()[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  Tensor ratio = Tensor::scalarF32(0.3f);
  cpu::OpDesc d = makeDesc("Dropout", {x.desc(), ratio.desc()}, {x.desc(), {DType::Bool, {n}}}, {}, 13);
  d.constInputs = {Tensor(), ratio};
  auto cpuKernel = cpu::createKernel(d);
  ASSERT_TRUE(cpuKernel.isOk()) << cpuKernel.status().message();
  auto k = cuda::createKernel(d);
  ASSERT_TRUE(k.isOk()) << k.status().message();
  EXPECT_TRUE((*k)->replayable());
  (*cpuKernel)->nodeId = (*k)->nodeId = 9;
  auto cpuRun = [&](uint64_t step) {
    std::vector<Tensor> outs = {Tensor(x.desc()), Tensor(DType::Bool, {n})};
    cpu::ExecContext ctx;
    ctx.training = true;
    ctx.seed = 3;
    ctx.step = step;
    ctx.microBatch = 2;
    const void *in[2] = {x.raw(), ratio.raw()};
    void *out[2] = {outs[0].raw(), outs[1].raw()};
    EXPECT_TRUE((*cpuKernel)->run(ctx, in, out).isOk());
    return outs;
  };
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer dx(x.bytes()), dy(x.bytes()), dmask(static_cast<size_t>(n)), dstep(sizeof(uint64_t));
  // Copies from pageable memory may return before their bytes land; the
  // stream is non-blocking: the device waits for them.
  cudaMemcpy(dx.p, x.raw(), x.bytes(), cudaMemcpyHostToDevice);
  auto setStep = [&](uint64_t s) {
    cudaMemcpy(dstep.p, &s, sizeof s, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  };
  auto same = [&](const std::vector<Tensor> &ref, const std::string &what) {
    Tensor y(x.desc()), mask(DType::Bool, {n});
    cudaMemcpy(y.raw(), dy.p, y.bytes(), cudaMemcpyDeviceToHost);
    cudaMemcpy(mask.raw(), dmask.p, mask.bytes(), cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::memcmp(y.raw(), ref[0].raw(), y.bytes()), 0) << what;
    EXPECT_EQ(std::memcmp(mask.raw(), ref[1].raw(), mask.bytes()), 0) << what;
  };
  cpu::ExecContext ctx;
  ctx.training = true;
  ctx.seed = 3;
  ctx.microBatch = 2;
  ctx.stream = stream;
  const void *in[2] = {dx.p, nullptr};
  void *out[2] = {dy.p, dmask.p};
  // The step from the context.
  ctx.step = 5;
  ASSERT_TRUE((*k)->run(ctx, in, out).isOk());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  same(cpuRun(5), "step 5 from the context");
  // From device memory: the context's step is not read.
  ctx.step = 77;
  ctx.deviceStep = static_cast<const uint64_t *>(dstep.p);
  setStep(5);
  ASSERT_TRUE((*k)->run(ctx, in, out).isOk());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  same(cpuRun(5), "step 5 from device memory");
  // Recorded once, replayed at steps 6 and 7.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE((*k)->run(ctx, in, out).isOk());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (uint64_t s : {6u, 7u}) {
    setStep(s);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    same(cpuRun(s), cat("step ", s, " replayed"));
  }
  const auto five = cpuRun(5), six = cpuRun(6);
  EXPECT_NE(std::memcmp(five[1].raw(), six[1].raw(), static_cast<size_t>(n)), 0) << "steps draw different masks";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}
