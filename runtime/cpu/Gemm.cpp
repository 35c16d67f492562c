//===- runtime/cpu/Gemm.cpp - The f32 GEMM the CPU kernels use ------------===//
#include "runtime/cpu/Gemm.h"

#include "runtime/cpu/CpuIsa.h"

#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace pipec::cpu {

void capOneDnnIsa() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The cap must come before oneDNN's first JIT kernel; it also answers
    // an error once oneDNN has read its own ONEDNN_MAX_CPU_ISA, which then
    // stands (and caps oneDNN alone).
    if (!cpuHas(CpuIsa::Avx512))
      (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
  });
}

bool oneDnnEnabled() {
  capOneDnnIsa();
  const char *v = std::getenv("PIPEC_LINALG_NO_DNNL");
  return !v || !*v || (v[0] == '0' && !v[1]);
}

bool prepareSgemm() {
  if (!oneDnnEnabled())
    return false;
  static std::once_flag once;
  std::call_once(once, [] {
    // Each transposition on the smallest product oneDNN gets (16x16x32).
    std::vector<float> a(16 * 32, 0.0f), b(32 * 16, 0.0f), c(16 * 16);
    for (char ta : {'N', 'T'})
      for (char tb : {'N', 'T'})
        (void)dnnl_sgemm(ta, tb, 16, 16, 32, 1.0f, a.data(), ta == 'N' ? 32 : 16, b.data(),
                         tb == 'N' ? 16 : 32, 0.0f, c.data(), 16);
  });
  return true;
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
           bool oneDnn) {
  // Both libraries require leading dimensions >= 1 even for 1-wide operands.
  lda = std::max<int64_t>(lda, 1);
  ldb = std::max<int64_t>(ldb, 1);
  ldc = std::max<int64_t>(ldc, 1);
  capOneDnnIsa(); // once; callers need not have prepared anything
  if (oneDnn &&
      static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kOneDnnMinMacs &&
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) ==
          dnnl_success)
    return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

} // namespace pipec::cpu
