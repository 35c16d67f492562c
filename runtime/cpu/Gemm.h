//===- runtime/cpu/Gemm.h - The f32 GEMM the CPU kernels use ----*- C++ -*-===//
//
// One row-major single-precision GEMM call, C = alpha op(A) op(B) + beta C,
// on the calling thread (kernels run it inside LinalgBatchedGemm, which sets
// a one-thread OpenMP budget around every call, so results do not depend on
// the thread count). From kOneDnnMinMacs multiply-adds up it is oneDNN's
// sgemm, below that OpenBLAS's:
//
//  - OpenBLAS 0.3.21 (Debian 12) does not know every CPU (AMD family 26
//    among them) and runs its AVX2 kernels there, where oneDNN's JIT uses
//    AVX-512, and oneDNN runs the larger products faster.
//  - OpenBLAS's buffer allocator takes a lock and writes shared state on
//    every call, so its calls slow each other down when two device threads
//    make them at once. oneDNN's calls do not contend, so it wins from
//    about 8K multiply-adds up when two devices compute, where OpenBLAS's
//    calls are cheaper alone.
//
// The figures behind both: docs/cpu-linalg-kernels.md.
//
// pipec --calibrate measures this function, so the cost model sees the GEMM
// the runtime runs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace pipec::cpu {

/// Multiply-adds (M * N * K) from which sgemm() calls oneDNN.
inline constexpr double kOneDnnMinMacs = 8192;

/// False when the environment sets PIPEC_LINALG_NO_DNNL (to anything but
/// "0"): kernels prepared then use their non-oneDNN paths (OpenBLAS for
/// GEMMs, loops elsewhere), which tests and benchmarks compare. Kernel
/// factories read it, so a prepared kernel keeps its choice.
bool oneDnnEnabled();

/// Caps oneDNN's instruction set at cpuIsa() (PIPEC_MAX_CPU_ISA,
/// runtime/cpu/CpuIsa.h) before it creates its first kernel; once per
/// process, and a no-op where nothing is capped. oneDnnEnabled() and the
/// kernels' oneDNN engine call it; code that calls oneDNN directly (the
/// benchmarks) calls it first.
void capOneDnnIsa();

/// oneDnnEnabled(), and when it is true, oneDNN's one-time GEMM setup done
/// on the first call (its JIT, long enough to show in a timed step), so
/// that kernels pay it when they are prepared, not in the first step a run
/// times.
bool prepareSgemm();

/// Row-major C = alpha op(A) op(B) + beta C (op: transpose when ta / tb),
/// with M, N >= 1 and K >= 1; leading dimensions as BLAS takes them.
/// `oneDnn` false keeps every size on OpenBLAS.
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
           bool oneDnn = true);

} // namespace pipec::cpu
