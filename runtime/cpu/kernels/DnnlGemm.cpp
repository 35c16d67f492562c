//===- runtime/cpu/kernels/DnnlGemm.cpp - Batches of GEMMs as oneDNN matmuls ===//
//
// LinalgBatchedGemm<float>::prepare asks here for one oneDNN matmul
// primitive for its whole batch. The primitive is made where it beats the
// per-GEMM sgemm calls (the figures: docs/cpu-linalg-kernels.md):
//
//  - one GEMM with B transposed (input gradients of MatMul layers,
//    dA = dY B^T), from kOneDnnMinMacs multiply-adds: oneDNN's sgemm runs
//    it slower at a micro-batch's sizes, and over the shapes tried the
//    primitive was never slower. Without transB neither is clearly ahead,
//    so those stay on sgemm. A GEMM with B transposed that runs in tiles
//    gets a primitive per tile (LinalgBatchedGemm::prepare), on a dense
//    destination: oneDNN takes its brgemm kernel only there.
//  - a batch of two or more (attention's per-head products), where the
//    primitive's one call beats the per-GEMM calls on small products and
//    its lead shrinks as they grow. The primitive runs the batch on one
//    thread, where the sgemm path spreads the GEMMs over the device's
//    threads, so batches above 4 MFLOP stay on it.
//
// A GEMM whose B changes only between steps (a layer's weights:
// OpDesc::stepInvariant) runs in inference as a matmul on B reordered into
// oneDNN's blocked layout once and kept (linalgDnnlGemmPreparePacked): the
// sgemm call and the plain-layout primitive pack B on every call, so the
// packed primitive is the fastest of the three (bench/results/log.md). (In
// training the reorder would run every step and cost more than it saves.)
//
// LinalgBatchedGemm::prepare also asks for plain-layout primitives that
// oneDNN runs with its brgemm kernel (linalgDnnlGemmPrepareBrgemm, null
// where it would take another): blocks of whole rows of products that are
// not packed, and parts of weight gradients cut along K (LinalgCommon.h
// says where, docs/cpu-linalg-kernels.md has the timings).
//
// Every primitive is created for one thread (oneDNN picks its blocking
// from the thread count it sees then) and LinalgBatchedGemm runs it on one:
// results do not depend on the device's thread count. alpha is an output
// scale, beta a sum post-op.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "runtime/cpu/kernels/LinalgGemm.h"

#include <string_view>

namespace pipec::cpu {

struct LinalgDnnlGemm {
  LinalgDnnlPrim prim;
  /// linalgDnnlGemmPreparePacked: B in oneDNN's layout, reordered once
  /// while its address stays the same.
  LinalgDnnlBlocked packed;
};

void LinalgDnnlGemmDeleter::operator()(LinalgDnnlGemm *p) const { delete p; }

LinalgDnnlGemm *linalgDnnlGemmClone(const LinalgDnnlGemm &p) { return new LinalgDnnlGemm(p); }

size_t linalgDnnlGemmScratchBytes(const LinalgDnnlGemm &p) {
  return p.packed.valid() ? p.packed.bytes : p.prim.scratchBytes;
}

Status linalgDnnlGemmRun(const LinalgDnnlGemm &p, const float *A, const float *B, float *C,
                         void *scratch, const float *bias) {
  const void *ptrs[4] = {A, B, C, bias}; // the bias where the primitive has one
  if (p.packed.valid()) // B's packed copy is kept while its address stays (inference)
    return p.packed.run(ptrs, static_cast<unsigned char *>(linalgAlign(scratch)));
  return p.prim.run(ptrs, linalgAlign(scratch));
}

namespace {
/// alpha as an output scale, beta as a sum post-op, the epilogue's
/// activation as an eltwise post-op after it.
dnnl::primitive_attr gemmAttr(float alpha, float beta, FusedActivation act) {
  dnnl::primitive_attr attr = linalgDnnlAttr();
  if (alpha != 1.0f)
    attr.set_output_scales(0, {alpha});
  dnnl::post_ops po;
  if (beta != 0.0f)
    po.append_sum(beta);
  switch (act) {
  case FusedActivation::None: break;
  case FusedActivation::Relu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
  case FusedActivation::GeluErf: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
  case FusedActivation::GeluTanh:
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    break;
  }
  if (po.len() > 0)
    attr.set_post_ops(po);
  return attr;
}

/// The bias row of an epilogue: [1, N] of a 2-D product.
dnnl::memory::desc biasDesc(int64_t N) { return linalgDnnlPlain({1, N}); }
} // namespace

namespace {
/// The matmul primitive for a batch of `batch` GEMMs with plain operands
/// (DnnlGemm.cpp's callers decide where it pays), or null where oneDNN
/// refuses it or, with `brgemmOnly`, where it would not run its brgemm
/// kernel.
LinalgDnnlGemm *makeMatmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                           int64_t ldc, float alpha, float beta, int64_t batch, int64_t sa, int64_t sb,
                           int64_t sc, FusedActivation act, bool bias, bool brgemmOnly) {
  auto made = std::make_unique<LinalgDnnlGemm>();
  try {
    using namespace dnnl;
    using dims = memory::dims;
    const auto f32 = memory::data_type::f32;
    // Row-major operands, transposed ones described by their strides; a
    // batch dimension first, of size 1 where the operand is shared.
    auto desc = [&](int64_t rows, int64_t cols, bool trans, int64_t ld, int64_t stride) {
      dims d = {rows, cols}, st = {trans ? 1 : ld, trans ? ld : 1};
      if (batch > 1) {
        d.insert(d.begin(), stride ? batch : 1);
        st.insert(st.begin(), stride ? stride : rows * cols);
      }
      return memory::desc(d, f32, st);
    };
    memory::desc a = desc(M, K, ta, lda, sa), b = desc(K, N, tb, ldb, sb),
                 c = desc(M, N, false, ldc, sc);
    const primitive_attr attr = gemmAttr(alpha, beta, act);
    LinalgOneThread one;
    matmul::primitive_desc pd(bias ? matmul::desc(a, b, biasDesc(N), c) : matmul::desc(a, b, c), attr,
                              linalgDnnlEngine());
    if (brgemmOnly && std::string_view(pd.impl_info_str()).substr(0, 3) != "brg")
      return nullptr;
    made->prim.init<matmul>(pd);
    made->prim.args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (bias)
      made->prim.args.emplace_back(DNNL_ARG_BIAS, biasDesc(N));
  } catch (const dnnl::error &) {
    return nullptr;
  }
  return made.release();
}
} // namespace

LinalgDnnlGemm *linalgDnnlGemmPrepare(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                      int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                                      float beta, int64_t batch, int64_t sa, int64_t sb,
                                      int64_t sc, FusedActivation act, bool bias) {
  const double macs = double(M) * double(N) * double(K);
  const bool epilogue = bias || act != FusedActivation::None;
  if (epilogue && batch != 1)
    return nullptr; // the sgemm path's tiles run the epilogue
  if (batch == 1) {
    if (!tb || macs < kOneDnnMinMacs)
      return nullptr;
  } else if (batch < 1 || sc == 0 || 2.0 * macs * double(batch) > kBatchPrimitiveMaxFlops) {
    return nullptr;
  }
  return makeMatmul(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, batch, sa, sb, sc, act, bias, false);
}

bool linalgDnnlHasBrgemm() {
  // A product of the training step's kind, 128x256x256 with B plain: its
  // primitive is brgemm (avx512_core and up in oneDNN 2.6) or not (its
  // sgemm, gemm:jit, on AVX2), under whatever cap the engine applied.
  static const bool has = [] {
    std::unique_ptr<LinalgDnnlGemm> p(makeMatmul(false, false, 128, 256, 256, 256, 256, 256, 1.0f, 0.0f, 1, 0, 0,
                                                 0, FusedActivation::None, false, true));
    return p != nullptr;
  }();
  return has;
}

LinalgDnnlGemm *linalgDnnlGemmPrepareBrgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                            int64_t ldb, int64_t ldc, float alpha, float beta, FusedActivation act,
                                            bool bias) {
  return makeMatmul(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, 1, 0, 0, 0, act, bias, true);
}

LinalgDnnlGemm *linalgDnnlGemmPreparePacked(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                            int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                                            float beta, FusedActivation act, bool bias) {
  if (double(M) * double(N) * double(K) < kPackedMinMacs)
    return nullptr;
  auto made = std::make_unique<LinalgDnnlGemm>();
  try {
    using namespace dnnl;
    const auto f32 = memory::data_type::f32;
    auto plain = [&](int64_t rows, int64_t cols, bool trans, int64_t ld) {
      return memory::desc({rows, cols}, f32, memory::dims{trans ? 1 : ld, trans ? ld : 1});
    };
    memory::desc a = plain(M, K, ta, lda), b = plain(K, N, tb, ldb), c = plain(M, N, false, ldc);
    memory::desc any({K, N}, f32, memory::format_tag::any);
    const primitive_attr attr = gemmAttr(alpha, beta, act);
    LinalgOneThread one;
    matmul::primitive_desc pd(bias ? matmul::desc(a, any, biasDesc(N), c) : matmul::desc(a, any, c), attr,
                              linalgDnnlEngine());
    if (pd.weights_desc() == b)
      return nullptr; // oneDNN keeps the plain layout: nothing to gain
    made->packed.main.init<matmul>(pd);
    made->packed.main.args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}, {DNNL_ARG_DST, c}};
    if (bias) {
      made->packed.main.args.emplace_back(DNNL_ARG_BIAS, biasDesc(N));
      made->packed.addReorders({a, b, c, biasDesc(N)}, {false, false, true, false});
    } else {
      made->packed.addReorders({a, b, c}, {false, false, true});
    }
    made->packed.keepReordered(1);
    if (made->packed.kept != 1)
      return nullptr;
  } catch (const dnnl::error &) {
    return nullptr;
  }
  return made.release();
}

LinalgDnnlGemm *linalgDnnlGemmFollower(const LinalgDnnlGemm &leader, bool ta, bool tb, int64_t M, int64_t N,
                                       int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta,
                                       FusedActivation act, bool bias) {
  if (!leader.packed.valid() || leader.packed.kept != 1)
    return nullptr;
  std::unique_ptr<LinalgDnnlGemm> f(
      linalgDnnlGemmPreparePacked(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, act, bias));
  // B's blocked layout may depend on M: only the leader's layout is shared.
  if (!f || f->packed.main.args[1].second != leader.packed.main.args[1].second)
    return nullptr;
  f->packed.follow();
  return f.release();
}

Status linalgDnnlGemmHold(const LinalgDnnlGemm &leader, const float *B, void *scratch, const float **held) {
  const void *h = nullptr;
  PIPEC_TRY(leader.packed.hold(B, linalgAlign(scratch), 0, &h));
  *held = static_cast<const float *>(h);
  return Status::ok();
}

Status linalgDnnlGemmRunOnHeld(const LinalgDnnlGemm &p, const float *A, const float *heldB, float *C,
                               void *scratch, const float *bias) {
  const void *ptrs[4] = {A, heldB, C, bias};
  return p.packed.run(ptrs, linalgAlign(scratch), 1u << 1);
}

} // namespace pipec::cpu
