//===- tests/unit/KernelTestSupport.h - What the kernel tests share -------===//
//
// The helpers of the kernel tests (tests/unit/*Kernel*Test.cpp,
// CudaBodiesTest, ElementwiseJitTest, tests/gpu/CudaKernelTest), written
// once, in namespace pipec::test:
//   makeDesc             the OpDesc of one node ("n"): attributes, opset, domain
//   setConst             marks an input of an OpDesc a compile-time constant
//   randomF32            an f32 tensor of floats drawn uniformly from [lo, hi)
//   randomT              an f32, f64, i32 or i64 tensor of doubles drawn
//                        uniformly from [lo, hi) (integers: 10 x, rounded)
//   randomBytes          a tensor of any dtype filled with random bytes
//   fromVec, toVec       a tensor from a vector and back
//   eval, evalOne        runs a node on the CPU kernels, failing the test on error
//   evalError            the message of a node that must fail
//   withThreads          runs a function with n OpenMP threads
//   sameWithThreads      whether 1 and 2 threads give bitwise the same outputs
//   expectThreadInvariant  expects bitwise the same outputs with 1, 2 and 3
//                        threads
//   useDnnl, bothPaths   the Linalg kernels' oneDNN path or their loops
//                        (PIPEC_LINALG_NO_DNNL)
//   worstError           the largest |a - b| / max(|b|, 1) of two float arrays
// The random tensors are fixed by their seed (std::mt19937): tests compare
// with values drawn so. Helpers report through GoogleTest's non-fatal
// expectations, so a failing helper never ends a test early.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Kernel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace pipec::test {

/// The description of one node "n" of `op`.
inline cpu::OpDesc makeDesc(const std::string &op, std::vector<TensorDesc> in,
                            std::vector<TensorDesc> out, AttrMap attrs = {}, int64_t opset = 17,
                            const std::string &domain = "") {
  // Aggregate initialisation: assigning the name trips GCC 12's -Wrestrict
  // false positive (PR105329) at -O3.
  return cpu::OpDesc{.name = "n",
                     .opType = op,
                     .domain = domain,
                     .opset = opset,
                     .attrs = std::move(attrs),
                     .inputs = std::move(in),
                     .outputs = std::move(out),
                     .constInputs = {},
                     .stepInvariant = {}};
}

/// Marks input `i` of `d` as the compile-time constant `t`.
inline void setConst(cpu::OpDesc &d, size_t i, const Tensor &t) {
  d.constInputs.resize(d.inputs.size());
  d.constInputs[i] = t;
}

/// An f32 tensor of floats drawn uniformly from [lo, hi).
inline Tensor randomF32(Shape s, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  Tensor t(DType::F32, std::move(s));
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = u(g);
  return t;
}

/// A tensor of doubles drawn uniformly from [lo, hi): rounded to f32, or
/// f64 as drawn, or for i32 and i64 ten times the draw rounded. Not the
/// values of randomF32 for the same seed (a double takes two draws of the
/// generator, a float one).
inline Tensor randomT(DType dt, Shape s, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t(dt, std::move(s));
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = u(g);
    switch (dt) {
    case DType::F32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    case DType::F64:
      t.data<double>()[i] = v;
      break;
    case DType::I32:
      t.data<int32_t>()[i] = static_cast<int32_t>(std::lround(v * 10));
      break;
    case DType::I64:
      t.data<int64_t>()[i] = std::lround(v * 10);
      break;
    default:
      break;
    }
  }
  return t;
}

/// A tensor of `dt` whose bytes are a deterministic pseudo-random pattern.
inline Tensor randomBytes(DType dt, Shape s, uint32_t seed) {
  Tensor t(dt, std::move(s));
  std::mt19937 g(seed);
  auto *p = static_cast<unsigned char *>(t.raw());
  for (size_t i = 0; i < t.bytes(); ++i)
    p[i] = static_cast<unsigned char>(g());
  return t;
}

/// A tensor of `dt` and shape `s` holding `v` (expects as many elements).
template <typename T> Tensor fromVec(DType dt, Shape s, const std::vector<T> &v) {
  Tensor t(dt, std::move(s));
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(T));
  return t;
}

/// The elements of `t` as T.
template <typename T> std::vector<T> toVec(const Tensor &t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.raw(), t.bytes());
  return v;
}

/// Runs the node, failing the test on error (then: no outputs).
inline std::vector<Tensor> eval(const cpu::OpDesc &d, const std::vector<Tensor> &in,
                                cpu::ExecContext ctx = {}) {
  auto r = cpu::evaluate(d, in, ctx);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r.take() : std::vector<Tensor>{};
}

/// The first output of the node, failing the test on error (then: an empty
/// tensor).
inline Tensor evalOne(const cpu::OpDesc &d, const std::vector<Tensor> &in,
                      cpu::ExecContext ctx = {}) {
  auto r = cpu::evaluate(d, in, ctx);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? (*r)[0] : Tensor();
}

/// The error message of a node that must fail to prepare or run.
inline std::string evalError(const cpu::OpDesc &d, const std::vector<Tensor> &in,
                             cpu::ExecContext ctx = {}) {
  auto r = cpu::evaluate(d, in, ctx);
  EXPECT_FALSE(r.isOk()) << d.opType << " unexpectedly succeeded";
  return r.isOk() ? "" : r.status().message();
}

/// `f()` run with `n` OpenMP threads.
template <typename F> auto withThreads(int n, F &&f) -> decltype(f()) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  auto r = f();
  omp_set_num_threads(saved);
  return r;
}

/// Evaluates with 1 and with 2 threads; true if there are outputs and each
/// is bitwise identical (for properties a test reports rather than requires).
inline bool sameWithThreads(const cpu::OpDesc &d, const std::vector<Tensor> &in,
                            cpu::ExecContext ctx = {}) {
  std::vector<Tensor> one = withThreads(1, [&] { return eval(d, in, ctx); });
  std::vector<Tensor> two = withThreads(2, [&] { return eval(d, in, ctx); });
  if (one.size() != two.size() || one.empty())
    return false;
  for (size_t i = 0; i < one.size(); ++i)
    if (!one[i].identical(two[i]))
      return false;
  return true;
}

/// Runs `d` with 1, 2 and 3 OpenMP threads; expects identical bytes.
/// Returns the outputs of the run with 1 thread.
inline std::vector<Tensor> expectThreadInvariant(const cpu::OpDesc &d,
                                                 const std::vector<Tensor> &in,
                                                 cpu::ExecContext ctx = {}) {
  std::vector<Tensor> ref = withThreads(1, [&] { return eval(d, in, ctx); });
  for (int threads : {2, 3}) {
    std::vector<Tensor> got = withThreads(threads, [&] { return eval(d, in, ctx); });
    EXPECT_EQ(ref.size(), got.size());
    for (size_t i = 0; i < ref.size() && i < got.size(); ++i)
      EXPECT_TRUE(ref[i].identical(got[i]))
          << d.opType << " output " << i << " differs with " << threads << " threads";
  }
  return ref;
}

/// Selects the Linalg kernels' oneDNN path (`dnnl`) or their loop
/// fallback (PIPEC_LINALG_NO_DNNL) for the kernels created next.
inline void useDnnl(bool dnnl) {
  if (dnnl)
    unsetenv("PIPEC_LINALG_NO_DNNL");
  else
    setenv("PIPEC_LINALG_NO_DNNL", "1", 1);
}

/// Runs `f` with the oneDNN path enabled, then with the loop fallback.
template <typename F> void bothPaths(F &&f) {
  useDnnl(true);
  f(std::string("dnnl"));
  useDnnl(false);
  f(std::string("loop"));
  useDnnl(true);
}

/// The largest |a[i] - b[i]| / max(|b[i]|, 1) over n elements; equal values
/// (infinities too) and two NaNs count as 0, a NaN on one side alone as
/// infinite.
inline double worstError(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    if (x == y || (std::isnan(x) && std::isnan(y)))
      continue;
    worst = std::isnan(x) || std::isnan(y)
                ? HUGE_VAL
                : std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  }
  return worst;
}

} // namespace pipec::test
