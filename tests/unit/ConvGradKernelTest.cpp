//===- tests/unit/ConvGradKernelTest.cpp - pipec:ConvGradInput/ConvGradWeight
//
// The Conv gradient kernels (runtime/cpu/kernels/GradConv.cpp) on random
// 1-D, 2-D and 3-D cases (strides, pads, dilations, groups): the f32 oneDNN
// path and the f32 loop fallback (PIPEC_LINALG_NO_DNNL) against the f64
// loops, to a relative 1e-5 of the sum of the magnitudes of the terms (that
// sum is the f64 kernel run on |dY| and |W| or |X|). Then determinism: both
// paths give bitwise the same result when run again and with 1, 2 and 3
// threads. ConvGradPerf.* prints per-call times of both f32 paths on the
// sample CNN's convolutions (bench/run-train.sh's cnn model, batch 32).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

using namespace pipec;
using namespace pipec::cpu;
using namespace pipec::test;

namespace {

struct Case {
  const char *label;
  Shape x, w;
  int64_t group;
  std::vector<int64_t> strides, dil, pads;
};

const Case kCases[] = {
    {"1-D stride 2 pads 1", {2, 4, 11}, {6, 4, 3}, 1, {2}, {1}, {1, 1}},
    {"1-D depthwise dilation 2", {1, 3, 9}, {3, 1, 3}, 3, {1}, {2}, {2, 0}},
    {"2-D stem 3x3", {2, 3, 16, 16}, {8, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
    {"2-D 3x3 stride 2", {2, 8, 16, 16}, {16, 8, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},
    {"2-D 1x1 stride 2", {2, 8, 16, 16}, {16, 8, 1, 1}, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}},
    {"2-D group 2 dilations asymmetric pads", {2, 4, 7, 9}, {6, 2, 3, 2}, 2, {1, 2}, {2, 1},
     {1, 0, 2, 1}},
    {"2-D depthwise stride 2", {1, 6, 8, 8}, {6, 1, 3, 3}, 6, {2, 2}, {1, 1}, {1, 1, 1, 1}},
    {"2-D stride 3 (uncovered rows)", {1, 2, 7, 8}, {3, 2, 2, 2}, 1, {3, 3}, {1, 1}, {0, 0, 0, 0}},
    {"3-D 3x3x3 pads 1", {2, 4, 5, 6, 7}, {6, 4, 3, 3, 3}, 1, {1, 1, 1}, {1, 1, 1},
     {1, 1, 1, 1, 1, 1}},
    {"3-D group 2 strides dilations", {1, 4, 6, 5, 6}, {4, 2, 2, 3, 2}, 2, {2, 1, 2}, {1, 2, 1},
     {0, 1, 1, 1, 0, 0}},
    {"3-D 1x1x1", {2, 3, 4, 4, 4}, {5, 3, 1, 1, 1}, 1, {1, 1, 1}, {1, 1, 1}, {0, 0, 0, 0, 0, 0}},
    // dW larger than the activations: cut into blocks of output channels
    // (the last one short), whole groups, and images x channels.
    {"2-D 3x3 on 2x2, channel blocks", {3, 40, 2, 2}, {56, 40, 3, 3}, 1, {1, 1}, {1, 1},
     {1, 1, 1, 1}},
    {"2-D depthwise 48 channels on 3x3", {2, 48, 3, 3}, {48, 1, 3, 3}, 48, {1, 1}, {1, 1},
     {1, 1, 1, 1}},
    {"2-D group 4 on 4x4", {5, 32, 4, 4}, {64, 8, 3, 3}, 4, {1, 1}, {1, 1}, {1, 1, 1, 1}},
    {"2-D images and channels", {9, 16, 12, 12}, {64, 16, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
    // 1x1 with both channel counts multiples of 16: dW leaves oneDNN's
    // 16x16 tiles through pipec's own transpose.
    {"2-D 1x1 32->48, 16x16 tiles", {4, 32, 4, 4}, {48, 32, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},
    {"2-D 1x1 64->64 on 2x2, tiles and channel blocks", {3, 64, 2, 2}, {64, 64, 1, 1}, 1, {1, 1},
     {1, 1}, {0, 0, 0, 0}},
};

Shape outShape(const Case &c) {
  const size_t n = c.x.size() - 2;
  Shape y = {c.x[0], c.w[0]};
  for (size_t i = 0; i < n; ++i) {
    const int64_t ext = (c.w[i + 2] - 1) * c.dil[i] + 1;
    y.push_back((c.x[i + 2] + c.pads[i] + c.pads[i + n] - ext) / c.strides[i] + 1);
  }
  return y;
}

/// The same values in another dtype, optionally as magnitudes.
Tensor convert(const Tensor &t, DType dt, bool abs = false) {
  Tensor r(dt, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.getDouble(i);
    v = abs ? std::fabs(v) : v;
    if (dt == DType::F32)
      r.data<float>()[i] = static_cast<float>(v);
    else
      r.data<double>()[i] = v;
  }
  return r;
}

/// ConvGradInput (`weight` false: inputs dY, W, result X's shape) or
/// ConvGradWeight (inputs dY, X, result W's shape).
OpDesc gradDesc(const Case &c, bool weight, DType dt) {
  OpDesc d;
  d.name = c.label;
  d.opType = weight ? "ConvGradWeight" : "ConvGradInput";
  d.domain = "pipec";
  d.opset = 1;
  const Shape &result = weight ? c.w : c.x;
  d.attrs = {{"group", Attribute::ofInt(c.group)},
             {"strides", Attribute::ofInts(c.strides)},
             {"dilations", Attribute::ofInts(c.dil)},
             {"pads", Attribute::ofInts(c.pads)},
             {"shape", Attribute::ofInts(result)}};
  d.inputs = {{dt, outShape(c)}, {dt, weight ? c.x : c.w}};
  d.outputs = {{dt, result}};
  return d;
}

/// Evaluates with the oneDNN path (`dnnl`) or the loops.
Tensor evalPath(const OpDesc &d, const std::vector<Tensor> &in, bool dnnl) {
  useDnnl(dnnl);
  Tensor t = evalOne(d, in);
  useDnnl(true);
  return t;
}

TEST(ConvGradKernel, DnnlAndLoopsMatchF64) {
  uint32_t seed = 11;
  for (const Case &c : kCases)
    for (bool weight : {false, true}) {
      const std::string what = cat(weight ? "dW " : "dX ", c.label);
      Tensor dy = randomT(DType::F64, outShape(c), ++seed);
      Tensor other = randomT(DType::F64, weight ? c.x : c.w, ++seed);
      const OpDesc d64 = gradDesc(c, weight, DType::F64), d32 = gradDesc(c, weight, DType::F32);
      const Tensor want = evalOne(d64, {dy, other});
      const Tensor scale =
          evalOne(d64, {convert(dy, DType::F64, true), convert(other, DType::F64, true)});
      const std::vector<Tensor> in32 = {convert(dy, DType::F32), convert(other, DType::F32)};
      for (bool dnnl : {true, false}) {
        const Tensor got = evalPath(d32, in32, dnnl);
        ASSERT_EQ(got.numel(), want.numel()) << what;
        double worst = 0;
        int bad = 0;
        for (int64_t i = 0; i < got.numel(); ++i) {
          const double err = std::fabs(got.getDouble(i) - want.getDouble(i));
          const double rel = err / (scale.getDouble(i) + 1e-30);
          worst = std::max(worst, scale.getDouble(i) > 0 ? rel : err);
          if (!(err <= 1e-5 * scale.getDouble(i) + 1e-12) && bad++ < 5)
            ADD_FAILURE() << what << " (" << (dnnl ? "dnnl" : "loop") << "): element " << i
                          << " got " << got.getDouble(i) << " want " << want.getDouble(i);
        }
        std::printf("%-48s %-4s max error / magnitude %.2e\n", what.c_str(), dnnl ? "dnnl" : "loop",
                    worst);
      }
    }
}

TEST(ConvGradKernel, Deterministic) {
  uint32_t seed = 101;
  for (const Case &c : kCases)
    for (bool weight : {false, true}) {
      const std::string what = cat(weight ? "dW " : "dX ", c.label);
      const OpDesc d = gradDesc(c, weight, DType::F32);
      const std::vector<Tensor> in = {randomT(DType::F32, outShape(c), ++seed),
                                      randomT(DType::F32, weight ? c.x : c.w, ++seed)};
      for (int threads : {1, 2}) {
        Tensor a = withThreads(threads, [&] { return evalPath(d, in, true); });
        Tensor b = withThreads(threads, [&] { return evalPath(d, in, true); });
        EXPECT_TRUE(a.identical(b)) << what << ": oneDNN differs between runs on " << threads
                                    << " thread(s)";
      }
      Tensor l1 = withThreads(1, [&] { return evalPath(d, in, false); });
      Tensor l2 = withThreads(2, [&] { return evalPath(d, in, false); });
      EXPECT_TRUE(l1.identical(l2)) << what << ": the loops differ between 1 and 2 threads";
      Tensor d1 = withThreads(1, [&] { return evalPath(d, in, true); });
      for (int threads : {2, 3}) {
        Tensor dn = withThreads(threads, [&] { return evalPath(d, in, true); });
        EXPECT_TRUE(d1.identical(dn)) << what << ": oneDNN differs between 1 and " << threads
                                      << " threads";
      }
    }
}

/// Mean seconds per run of a prepared kernel, over `reps` runs after one
/// warm-up.
double timeKernel(const OpDesc &d, const std::vector<Tensor> &in, bool dnnl, int reps) {
  useDnnl(dnnl);
  auto k = createKernel(d);
  useDnnl(true);
  EXPECT_TRUE(k.isOk()) << k.status().message();
  if (!k.isOk())
    return 0;
  Tensor out(d.outputs[0].dtype, d.outputs[0].shape);
  std::vector<unsigned char> ws((*k)->workspaceBytes() + 64);
  ExecContext ctx;
  ctx.workspace = ws.data();
  const void *ins[2] = {in[0].raw(), in[1].raw()};
  void *outs[1] = {out.raw()};
  EXPECT_TRUE((*k)->run(ctx, ins, outs).isOk());
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    (void)(*k)->run(ctx, ins, outs);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

TEST(ConvGradPerf, SampleCnnShapes) {
  // The convolutions of samples/cnn-train.onnx (width 8, image 16) at batch 32.
  const Case cases[] = {
      {"stem 3->8 3x3", {32, 3, 16, 16}, {8, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {"8->8 3x3", {32, 8, 16, 16}, {8, 8, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {"8->16 3x3 stride 2", {32, 8, 16, 16}, {16, 8, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {"16->16 3x3", {32, 16, 8, 8}, {16, 16, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {"8->16 1x1 stride 2", {32, 8, 16, 16}, {16, 8, 1, 1}, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}},
  };
  uint32_t seed = 500;
  for (int threads : {1, 2})
    for (const Case &c : cases)
      for (bool weight : {false, true}) {
        const OpDesc d = gradDesc(c, weight, DType::F32);
        const std::vector<Tensor> in = {randomT(DType::F32, outShape(c), ++seed),
                                        randomT(DType::F32, weight ? c.x : c.w, ++seed)};
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        const double loop = timeKernel(d, in, false, 5), dnnl = timeKernel(d, in, true, 20);
        omp_set_num_threads(saved);
        std::printf("%d thread(s) %s %-20s loop %8.3f ms  oneDNN %8.3f ms  %5.1fx\n", threads,
                    weight ? "dW" : "dX", c.label, loop * 1e3, dnnl * 1e3, loop / dnnl);
        if (threads == 2) {
          Tensor d1 = withThreads(1, [&] { return evalPath(d, in, true); });
          Tensor d2 = withThreads(2, [&] { return evalPath(d, in, true); });
          EXPECT_TRUE(d1.identical(d2)) << c.label << ": oneDNN differs between 1 and 2 threads";
        }
      }
}

} // namespace
/// Long reductions: dW sums dY * X over every image and output position.
/// Inputs as a BatchNorm in training mode sees them: X of positive mean
/// (image pixels, or post-ReLU activations), dY of zero mean per channel
/// (BatchNorm's backward removes it), so the terms cancel and dW is much
/// smaller than the sum of their magnitudes. The f32 kernel, against the
/// f64 loops on the same (f32) inputs, must stay within 12 float32 epsilons
/// of it, relative in L2 norm, however long the sum: it sums pieces of at
/// most 1024 terms in float and the pieces in double. One primitive over a
/// whole image chunk (before) measured 3.6e-6 to 4.1e-6 on the 224 px and
/// 112 px cases and 5.7e-6 on the 448 px image (30 to 47 epsilons; 1.0e-6
/// on the 1x1, whose primitive blocks its sum); pieces, 1.1e-6 to 1.2e-6.
/// PyTorch 1.13 on such inputs: 5e-6 to 8e-6 with oneDNN, 8e-7 to 9e-7
/// without.
TEST(ConvGradKernel, LongReductionsKeepDigits) {
  const Case cases[] = {
      {"ImageNet stem 7x7 stride 2, 224 px", {4, 3, 224, 224}, {64, 3, 7, 7}, 1, {2, 2}, {1, 1},
       {3, 3, 3, 3}},
      {"ImageNet stem 7x7 stride 2, one 448 px image", {1, 3, 448, 448}, {64, 3, 7, 7}, 1, {2, 2},
       {1, 1}, {3, 3, 3, 3}},
      {"3x3 on 112x112", {8, 16, 112, 112}, {16, 16, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {"1x1 on 56x56, batch 32", {32, 32, 56, 56}, {32, 32, 1, 1}, 1, {1, 1}, {1, 1},
       {0, 0, 0, 0}},
      {"depthwise 3x3 on 112x112", {8, 32, 112, 112}, {32, 1, 3, 3}, 32, {1, 1}, {1, 1},
       {1, 1, 1, 1}},
      // Bands of other geometries: strides, dilations and asymmetric pads
      // (each band's own pads), 1-D (bands of positions), 3-D (of depth
      // slices), groups.
      {"2-D bands, stride 2x1, dilation 2, pads 3/0 1/2", {2, 3, 150, 70}, {8, 3, 3, 3}, 1,
       {2, 1}, {2, 1}, {3, 1, 0, 2}},
      {"1-D k5 stride 3, pads 2/4", {2, 8, 9000}, {16, 8, 5}, 1, {3}, {1}, {2, 4}},
      {"3-D 3x3x3 group 2 on 24x24x24", {2, 8, 24, 24, 24}, {8, 4, 3, 3, 3}, 2, {1, 1, 1},
       {1, 1, 1}, {1, 1, 1, 1, 1, 1}},
  };
  uint32_t seed = 900;
  for (const Case &c : cases) {
    Tensor x = randomT(DType::F32, c.x, ++seed, 0.0, 1.0);
    Tensor dy = randomT(DType::F32, outShape(c), ++seed);
    // Zero mean per channel, in double, rounded to f32 once.
    const Shape ys = outShape(c);
    const int64_t n = ys[0], m = ys[1], sp = dy.numel() / (n * m);
    for (int64_t ch = 0; ch < m; ++ch) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < sp; ++p)
          s += dy.data<float>()[(i * m + ch) * sp + p];
      const double mean = s / static_cast<double>(n * sp);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < sp; ++p) {
          float &v = dy.data<float>()[(i * m + ch) * sp + p];
          v = static_cast<float>(v - mean);
        }
    }
    const Tensor want = evalOne(gradDesc(c, true, DType::F64),
                                {convert(dy, DType::F64), convert(x, DType::F64)});
    const OpDesc d32 = gradDesc(c, true, DType::F32);
    const Tensor got = withThreads(2, [&] { return evalPath(d32, {dy, x}, true); });
    // Pieces and bands keep the result independent of the thread count.
    for (int threads : {1, 3})
      EXPECT_TRUE(got.identical(withThreads(threads, [&] { return evalPath(d32, {dy, x}, true); })))
          << c.label << ": 2 and " << threads << " threads differ";
    double num = 0, den = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double e = got.getDouble(i) - want.getDouble(i);
      num += e * e;
      den += want.getDouble(i) * want.getDouble(i);
    }
    const double rel = std::sqrt(num / den);
    std::printf("%-40s dW relative L2 error %.2e (f32 epsilon %.2e)\n", c.label, rel,
                static_cast<double>(std::numeric_limits<float>::epsilon()));
    EXPECT_LE(rel, 12 * std::numeric_limits<float>::epsilon()) << c.label;
  }
}

TEST(ConvGradPerf, LongReductionShapes) {
  // ConvGradWeight per call, one and two threads: the long sums above, and the
  // zoo's early layers at bench/run-zoo.sh's batch 16 (64 px images).
  const Case cases[] = {
      {"ImageNet stem, 224 px, batch 4", {4, 3, 224, 224}, {64, 3, 7, 7}, 1, {2, 2}, {1, 1},
       {3, 3, 3, 3}},
      {"3x3 16->16 on 112x112, batch 8", {8, 16, 112, 112}, {16, 16, 3, 3}, 1, {1, 1}, {1, 1},
       {1, 1, 1, 1}},
      {"1x1 32->32 on 56x56, batch 32", {32, 32, 56, 56}, {32, 32, 1, 1}, 1, {1, 1}, {1, 1},
       {0, 0, 0, 0}},
      {"depthwise 3x3 on 112x112, batch 8", {8, 32, 112, 112}, {32, 1, 3, 3}, 32, {1, 1}, {1, 1},
       {1, 1, 1, 1}},
      {"zoo stem 7x7 s2 3->64, 64 px, b16", {16, 3, 64, 64}, {64, 3, 7, 7}, 1, {2, 2}, {1, 1},
       {3, 3, 3, 3}},
      {"zoo 3x3 64->64 on 16x16, b16", {16, 64, 16, 16}, {64, 64, 3, 3}, 1, {1, 1}, {1, 1},
       {1, 1, 1, 1}},
      {"zoo 1x1 128->32 on 16x16, b16", {16, 128, 16, 16}, {32, 128, 1, 1}, 1, {1, 1}, {1, 1},
       {0, 0, 0, 0}},
      {"zoo 3x3 s2 3->24 on 64x64, b16", {16, 3, 64, 64}, {24, 3, 3, 3}, 1, {2, 2}, {1, 1},
       {1, 1, 1, 1}},
  };
  uint32_t seed = 700;
  for (const Case &c : cases) {
    const OpDesc d = gradDesc(c, true, DType::F32);
    const std::vector<Tensor> in = {randomT(DType::F32, outShape(c), ++seed),
                                    randomT(DType::F32, c.x, ++seed)};
    // The fastest of 20 single calls: the machine may be shared.
    for (int threads : {1, 2}) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      double best = 1e30;
      for (int r = 0; r < 20; ++r)
        best = std::min(best, timeKernel(d, in, true, 1));
      omp_set_num_threads(saved);
      std::printf("%d thread(s) dW %-36s oneDNN %8.3f ms\n", threads, c.label, best * 1e3);
    }
  }
}
