//===- runtime/cpu/CpuIsa.cpp - The instruction set the CPU kernels use --===//
//
// Compiled for plain x86-64 (runtime/cpu/CMakeLists.txt), not the build's
// x86-64-v3: its constructor runs before main and tells a CPU without AVX2
// and FMA why pipec cannot run there, instead of dying on an illegal
// instruction.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/CpuIsa.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace pipec::cpu {
namespace {

constexpr const char *kCapVariable = "PIPEC_MAX_CPU_ISA";

bool hostHasBaseline() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
#else
  return true;
#endif
}

/// Runs before any static constructor of the build's x86-64-v3 code.
__attribute__((constructor(101))) void requireBaselineIsa() {
  if (hostHasBaseline())
    return;
  static const char kMessage[] =
      "pipec: this CPU lacks AVX2 or FMA (x86-64-v3), which this build of pipec needs\n";
  (void)!write(2, kMessage, sizeof kMessage - 1);
  _exit(1);
}

} // namespace

const char *cpuIsaName(CpuIsa isa) {
  switch (isa) {
  case CpuIsa::Avx2: return "avx2";
  case CpuIsa::Avx512: return "avx512";
  }
  return "?";
}

Expected<CpuIsa> parseCpuIsa(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "avx2" || s == "avx2_vnni" || s == "avx2_vnni_2")
    return CpuIsa::Avx2;
  if (s == "avx512" || s == "avx512_core" || s == "avx512_core_vnni" || s == "avx512_core_bf16" ||
      s == "avx512_core_amx" || s == "all")
    return CpuIsa::Avx512;
  return errorf("'", std::string(name), "' is not an instruction set pipec knows (avx2, avx512)");
}

CpuIsa hostCpuIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // __builtin_cpu_supports also asks the OS (XCR0) whether it saves the
  // AVX-512 state, so a kernel that hides it reads as AVX2.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return CpuIsa::Avx512;
#endif
  return CpuIsa::Avx2;
}

Expected<CpuIsa> cpuIsaCap() {
  const char *v = std::getenv(kCapVariable);
  if (!v || !*v)
    return CpuIsa::Avx512;
  Expected<CpuIsa> cap = parseCpuIsa(v);
  if (!cap)
    return cap.status().withContext(kCapVariable);
  return cap;
}

Status checkCpuIsaEnvironment() { return cpuIsaCap().status(); }

CpuIsa cpuIsa() {
  static const CpuIsa isa = [] {
    Expected<CpuIsa> cap = cpuIsaCap();
    if (!cap) {
      std::fprintf(stderr, "pipec: %s\n", cap.status().message().c_str());
      std::exit(1);
    }
    return std::min(hostCpuIsa(), *cap);
  }();
  return isa;
}

std::string cpuIsaDescription() {
  const CpuIsa host = hostCpuIsa(), used = cpuIsa();
  std::string s = cat(cpuIsaName(used), " (host ", cpuIsaName(host));
  if (used != host)
    s += cat(", capped by ", kCapVariable);
  return s + ")";
}

} // namespace pipec::cpu
