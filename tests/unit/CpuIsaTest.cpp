//===- tests/unit/CpuIsaTest.cpp - Run-time choice of the instruction set -===//
//
// runtime/cpu/CpuIsa.h: level names, the PIPEC_MAX_CPU_ISA cap as the
// kernels, oneDNN and the LLVM JIT see it, and the kernels with paths of
// their own per level (the 16x16 transpose; the softmax row is in
// ElementwiseKernelsTest), each path the machine can run checked against
// the portable one. CI runs the whole suite once natively and once capped
// at AVX2 (.ci/run); this file checks that the cap took.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/CpuIsa.h"
#include "runtime/cpu/ElementwiseJit.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/kernels/LinalgGemm.h"
#include "runtime/cpu/kernels/Transpose16.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace pipec;
using namespace pipec::cpu;

namespace {

/// Sets an environment variable for the scope, then restores it.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

TEST(CpuIsa, NamesParseBack) {
  for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512}) {
    Expected<CpuIsa> back = parseCpuIsa(cpuIsaName(isa));
    ASSERT_TRUE(back.isOk()) << cpuIsaName(isa);
    EXPECT_EQ(*back, isa);
  }
  // oneDNN's spellings, any case.
  const std::pair<const char *, CpuIsa> spellings[] = {
      {"AVX2", CpuIsa::Avx2}, {"avx512_core", CpuIsa::Avx512}, {"AVX512_CORE_AMX", CpuIsa::Avx512}};
  for (const auto &[text, isa] : spellings) {
    Expected<CpuIsa> r = parseCpuIsa(text);
    ASSERT_TRUE(r.isOk()) << text << ": " << r.status().message();
    EXPECT_EQ(*r, isa) << text;
  }
  for (const char *bad : {"", "sse41", "avx", "avx512f", "avx-512", "neon"}) {
    Expected<CpuIsa> r = parseCpuIsa(bad);
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_NE(r.status().message().find("avx2, avx512"), std::string::npos) << r.status().message();
  }
}

TEST(CpuIsa, TheCapIsReadFromTheEnvironment) {
  {
    ScopedEnv e("PIPEC_MAX_CPU_ISA", nullptr);
    Expected<CpuIsa> cap = cpuIsaCap();
    ASSERT_TRUE(cap.isOk()) << cap.status().message();
    EXPECT_EQ(*cap, CpuIsa::Avx512);
    EXPECT_TRUE(checkCpuIsaEnvironment().isOk());
  }
  {
    ScopedEnv e("PIPEC_MAX_CPU_ISA", "avx2");
    Expected<CpuIsa> cap = cpuIsaCap();
    ASSERT_TRUE(cap.isOk()) << cap.status().message();
    EXPECT_EQ(*cap, CpuIsa::Avx2);
  }
  {
    ScopedEnv e("PIPEC_MAX_CPU_ISA", "pentium");
    Status s = checkCpuIsaEnvironment();
    ASSERT_FALSE(s.isOk());
    EXPECT_EQ(s.message().rfind("PIPEC_MAX_CPU_ISA: 'pentium' is not", 0), 0u) << s.message();
  }
}

// The level in force is the host's under the cap this process started
// with: under CI's capped run (PIPEC_MAX_CPU_ISA=avx2) the kernels, oneDNN
// and the JIT all stay on AVX2.
TEST(CpuIsa, TheKernelsOneDnnAndTheJitKeepTheCap) {
  Expected<CpuIsa> capped = cpuIsaCap();
  ASSERT_TRUE(capped.isOk()) << capped.status().message();
  const CpuIsa cap = *capped;
  const CpuIsa want = static_cast<int>(hostCpuIsa()) < static_cast<int>(cap) ? hostCpuIsa() : cap;
  EXPECT_EQ(cpuIsa(), want) << cpuIsaDescription();
  // oneDNN: brgemm (avx512_core and up in oneDNN 2.6) only above AVX2.
  if (oneDnnEnabled() && !cpuHas(CpuIsa::Avx512)) {
    EXPECT_FALSE(LinalgGemmMachine::host().brgemm);
  }
  // The JIT's features end without AVX-512 where the level is AVX2.
  const std::string target = codegenTarget();
  if (target.rfind("no JIT", 0) != 0 && !cpuHas(CpuIsa::Avx512)) {
    EXPECT_NE(target.find("-avx512f"), std::string::npos) << target;
  }
}

// Every path of the 16x16 transpose this machine can run moves the same
// bits as the element-by-element one, at strides wider than the tile.
TEST(Transpose16, EveryPathIsTheScalarOne) {
  std::mt19937 g(5);
  for (int64_t inStride : {16, 17, 40}) {
    const int64_t outStride = inStride + 3;
    std::vector<float> in(static_cast<size_t>(16 * inStride));
    for (float &v : in)
      v = static_cast<float>(g()) * 1e-3f;
    std::vector<float> ref(static_cast<size_t>(16 * outStride), -1.0f), got = ref;
    transpose16x16Scalar(in.data(), inStride, ref.data(), outStride);
    auto check = [&](const char *path, void (*f)(const float *, int64_t, float *, int64_t)) {
      std::fill(got.begin(), got.end(), -1.0f);
      f(in.data(), inStride, got.data(), outStride);
      EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0)
          << path << " stride " << inStride;
    };
    check("dispatched", transposeTile16);
    check("avx2", transpose16x16Avx2);
    if (hostCpuIsa() >= CpuIsa::Avx512)
      check("avx512", transpose16x16Avx512);
  }
}

} // namespace
