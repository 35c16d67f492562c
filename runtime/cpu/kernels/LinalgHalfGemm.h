//===- runtime/cpu/kernels/LinalgHalfGemm.h - GEMMs on bf16/f16 operands -*- C++ -*-===//
//
// LinalgHalfGemm: a batch of GEMMs C[b] = alpha op(A[b]) op(B[b]) + beta
// C[b] whose operands A and B are 16-bit floats (bf16 or f16, both the
// same) and whose C is f32, the products accumulated in f32: MatMul, Gemm
// and pipec:FusedGemm under `output_dtype` (support/FusedOps.h), which the
// mixed-precision pass makes (docs/precision.md).
//
// Two ways, chosen in prepare() from the machine alone:
//
//  - native: where oneDNN runs the 16-bit matmul with its brgemm kernel
//    (AVX512_BF16, AMX: "brg:avx512_core_bf16", "brg:avx512_core_amx..."),
//    a primitive per block of rows of C (as many blocks as
//    LinalgBatchedGemm's tiling has tiles, fixed by the shape), each on one
//    thread, the blocks spread over the device's threads; the epilogue
//    (bias, activation) runs on each block after its product. Every
//    element is computed by the same primitive whatever the thread count.
//  - emulated: elsewhere (AVX2, AVX-512 without bf16, f16 operands), A and
//    B are widened to f32 in the workspace (exactly: every 16-bit value is
//    an f32 value) and the f32 LinalgBatchedGemm runs on them: the
//    arithmetic of a Cast to f32 followed by the f32 product, bit for bit.
//
// The two agree to f32 rounding (each product of two 16-bit values is
// exact in f32; only the order of the sums differs).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/LinalgGemm.h"

namespace pipec::cpu {

/// oneDNN matmul primitives of a LinalgHalfGemm's native path
/// (DnnlHalfGemm.cpp), behind a pointer so that kernels need not include
/// oneDNN's header.
struct LinalgHalfPrims;
struct LinalgHalfPrimsDeleter {
  void operator()(LinalgHalfPrims *p) const;
};

struct LinalgHalfGemm {
  /// BF16 or F16: the type the product computes in.
  DType operands = DType::BF16;
  /// Whether A (B) is f32, which run() rounds to `operands` first (to
  /// nearest even, support/Half.h), rather than of `operands` already.
  bool aF32 = false, bF32 = false;
  /// Whether an f32 A (B) changes only between steps
  /// (kernel::OpDesc::stepInvariant): its rounded copy is then made at the
  /// first run of a step and kept (heldBytes()) for the step's other runs.
  bool aKeep = false, bKeep = false;
  /// The geometry, alpha, beta, offsets and epilogue (act, bias): set
  /// these fields as for an f32 product; its bStepInvariant is ignored
  /// (the widened B lives in the workspace).
  LinalgBatchedGemm<float> f32;

  LinalgHalfGemm() = default;
  LinalgHalfGemm(const LinalgHalfGemm &o);
  LinalgHalfGemm(LinalgHalfGemm &&) = default;
  LinalgHalfGemm &operator=(const LinalgHalfGemm &o);
  LinalgHalfGemm &operator=(LinalgHalfGemm &&) = default;

  /// Chooses the path (native where `allowNative`, oneDNN is enabled and
  /// runs these operands with brgemm; else emulated) and prepares it. Call
  /// once the fields are set.
  void prepare(bool allowNative = true);
  /// Whether prepare() chose the native path.
  bool native() const { return prims_ != nullptr; }
  /// The native path's implementation as oneDNN names it ("" when
  /// emulated), for reports and tests.
  std::string implementation() const;
  /// Scratch memory run() needs (64-byte aligned).
  size_t workspaceBytes() const;
  /// Memory kept from run to run: the rounded copies of aKeep and bKeep
  /// (where run() is given no `shared` roundings).
  size_t heldBytes() const;
  /// A, B: values of `operands`, or f32 ones (aF32, bF32); `bias`: the
  /// epilogue's N values; `step`: what aKeep and bKeep copies are kept
  /// for (ExecContext::step in training; 0 in inference, where weights
  /// never change); `shared`: the device's roundings (ExecContext::
  /// halfWeights), which then hold the aKeep and bKeep copies.
  Status run(const void *A, const void *B, float *C, void *workspace, const float *bias = nullptr,
             uint64_t step = 0, kernel::HalfWeights *shared = nullptr) const;

private:
  /// Elements of A and B that the batch reads (from offset 0).
  int64_t extentA() const;
  int64_t extentB() const;
  /// Rounding of an f32 operand kept from run to run.
  struct Held {
    std::vector<uint16_t> data;
    const void *from = nullptr;
    uint64_t step = 0;
  };
  mutable Held held_[2];
  std::unique_ptr<LinalgHalfPrims, LinalgHalfPrimsDeleter> prims_;
};

/// dst[i] = the f32 value of the 16-bit (`t`: BF16 or F16) src[i], for
/// i < n, over the calling thread's budget.
void linalgWidenHalf(const uint16_t *src, float *dst, int64_t n, DType t);
/// dst[i] = src[i] rounded to `t` (BF16 or F16) to nearest even
/// (support/Half.h), for i < n, over the calling thread's budget.
void linalgNarrowHalf(const float *src, uint16_t *dst, int64_t n, DType t);

/// The CPU's HalfWeights: roundings in 64-byte aligned host memory.
std::unique_ptr<kernel::HalfWeights> makeCpuHalfWeights();

/// Sets `g`'s operands, aF32, bF32, aKeep and bKeep from the types and
/// step invariance of `d`'s operands 0 and 1 (a product under
/// output_dtype).
inline void linalgHalfOperandsOf(const OpDesc &d, LinalgHalfGemm &g) {
  g.operands = productOperandType(d.inputs[0].dtype, d.inputs[1].dtype);
  g.aF32 = d.inputs[0].dtype == DType::F32;
  g.bF32 = d.inputs[1].dtype == DType::F32;
  g.aKeep = g.aF32 && d.isStepInvariant(0);
  g.bKeep = g.bF32 && d.isStepInvariant(1);
}

/// Whether `d` is a product under output_dtype (support/FusedOps.h): 16-bit
/// operands 0 and 1, an f32 result.
bool linalgIsHalfProduct(const OpDesc &d);
/// `d` (a product under output_dtype) as the f32 product of its widened
/// operands: operands 0 and 1 f32, without output_dtype; a widened 16-bit
/// operand is not step-invariant (it lives in the workspace), a rounded
/// f32 one keeps its step invariance. Fails on other type mixes, naming
/// the node.
Expected<OpDesc> linalgWidenedProduct(const OpDesc &d);
/// The emulation of a product under output_dtype that has no 16-bit kernel
/// of its own on this machine (the convolutions' where oneDNN has no bf16
/// instructions to use): operands 0 and 1 widened to f32 in the workspace
/// (exactly), then `f32` of linalgWidenedProduct(d) on them; bit for bit a
/// Cast to f32 followed by the f32 product.
Expected<KernelPtr> makeLinalgWidenedProductKernel(const OpDesc &d, KernelFactory f32);

/// MatMul or pipec:FusedGemm under output_dtype: A and B 16-bit, Y (and
/// FusedGemm's bias, input 2 where `bias` is set) f32.
class LinalgHalfGemmKernel final : public Kernel {
public:
  /// `d`: the node, whose operand types and step invariance set the
  /// product's (LinalgHalfGemm::aF32, aKeep, ...).
  LinalgHalfGemmKernel(LinalgBatchedGemm<float> g, const OpDesc &d) {
    g_.f32 = std::move(g);
    linalgHalfOperandsOf(d, g_);
    g_.prepare();
  }
  size_t workspaceBytes() const override { return g_.workspaceBytes(); }
  size_t heldBytes() const override { return g_.heldBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    return g_.run(in[0], in[1], static_cast<float *>(out[0]), ctx.workspace,
                  g_.f32.bias ? static_cast<const float *>(in[2]) : nullptr, ctx.training ? ctx.step : 0,
                  ctx.halfWeights);
  }

private:
  LinalgHalfGemm g_;
};

} // namespace pipec::cpu
