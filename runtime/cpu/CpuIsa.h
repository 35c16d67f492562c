//===- runtime/cpu/CpuIsa.h - The instruction set the CPU kernels use -*- C++ -*-===//
//
// One build of pipec runs on any x86-64 CPU with AVX2 and FMA: it is
// compiled for x86-64-v3, and the kernels that have faster paths for wider
// instruction sets pick them when the process starts, as oneDNN and ONNX
// Runtime do. The level they run at is the host's, capped by the
// environment variable PIPEC_MAX_CPU_ISA (in the spirit of oneDNN's
// ONEDNN_MAX_CPU_ISA), so that one machine runs and tests every path up to
// its own:
//
//   PIPEC_MAX_CPU_ISA=avx2     pipec's kernels, oneDNN and the LLVM code
//                              generator use AVX2 and FMA only
//   PIPEC_MAX_CPU_ISA=avx512   up to AVX-512 F/BW/DQ/VL (oneDNN's
//                              avx512_core; x86-64-v4)
//
// The cap reaches oneDNN through dnnl_set_max_cpu_isa (applied by
// prepareSgemm(), before the first primitive) and the JIT through its
// target features (runtime/cpu/LlvmJit.h). OpenBLAS picks its kernels when
// it is loaded, before any code of ours runs: cap it with its own
// OPENBLAS_CORETYPE (Haswell for AVX2). A cap above the host's level
// changes nothing. Plans never name an ISA: the same plan runs anywhere.
//
// Results are the same on every path where the kernels say so (the softmax
// rows and transposes are bitwise alike on AVX2 and AVX-512); tests check
// results on each path the machine can run, never which path a machine
// takes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <string_view>

/// Marks a function whose body may use AVX-512 F/BW/DQ/VL (intrinsics, or
/// what the vectorizer makes of its loops) in a build whose baseline is
/// AVX2; call it only where cpuHas(CpuIsa::Avx512). The attribute, unlike
/// a file compiled with -mavx512f, keeps the inline functions it calls
/// (headers, the standard library) compiled for the baseline everywhere
/// else: one copy of each is kept at link time, and an AVX-512 one could
/// be the copy an AVX2 machine runs.
#define PIPEC_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

namespace pipec::cpu {

/// Instruction-set levels with paths of their own, in increasing order.
enum class CpuIsa : int {
  Avx2 = 0,   ///< x86-64-v3: AVX2, FMA, F16C, BMI2 (the build's baseline)
  Avx512 = 1, ///< x86-64-v4: AVX-512 F, BW, DQ and VL
};

/// "avx2", "avx512".
const char *cpuIsaName(CpuIsa isa);

/// Parses a level name (case-insensitive: "avx2", "avx512"; oneDNN's
/// spellings "avx512_core" and "avx2_vnni" are accepted as the level they
/// include).
Expected<CpuIsa> parseCpuIsa(std::string_view name);

/// The best level this CPU supports (CPUID), whatever the cap.
CpuIsa hostCpuIsa();

/// The cap PIPEC_MAX_CPU_ISA sets, or an error naming the value when it is
/// not a level; the highest level when the variable is unset or empty.
Expected<CpuIsa> cpuIsaCap();

/// The level the kernels use: min(hostCpuIsa(), cap), read once. Tools
/// call checkCpuIsaEnvironment() first, so that a bad PIPEC_MAX_CPU_ISA is
/// their one-line error; a library user who skips it gets the message on
/// stderr and exit status 1 at the first kernel that asks.
CpuIsa cpuIsa();

/// Whether the kernels may use `isa`: cpuIsa() >= isa.
inline bool cpuHas(CpuIsa isa) { return static_cast<int>(cpuIsa()) >= static_cast<int>(isa); }

/// Validates PIPEC_MAX_CPU_ISA (the tools' first check).
Status checkCpuIsaEnvironment();

/// A line for reports and --json: "avx512 (host avx512)", "avx2 (host
/// avx512, capped by PIPEC_MAX_CPU_ISA)".
std::string cpuIsaDescription();

} // namespace pipec::cpu
