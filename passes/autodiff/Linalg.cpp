//===- passes/autodiff/Linalg.cpp - Gemm and MatMul gradient rules --------===//
//
// Gemm: Y = alpha * A' B' + beta * C with A' = transA ? A^T : A (same for
// B). The input gradients are Gemms again, with the transposes folded into
// the flags so that no Transpose node is needed:
//   dA  = alpha * dY B'^T      (transA: alpha * B' dY^T)
//   dB  = alpha * A'^T dY      (transB: alpha * dY^T A')
//   dC  = beta * dY summed to C's broadcast shape.
// MatMul (numpy semantics, batched and broadcast): 1-D operands are viewed
// as matrices ([K] -> [1,K] on the left, [K,1] on the right), then
//   dA = dY B^T, dB = A^T dY
// summed over broadcast batch dimensions and reshaped back.
// The common case of an activation times a weight matrix, A [..., M, K]
// and B [K, N], is two Gemms on A and dY viewed as [P, K] and [P, N]
// (P = the product of A's leading dimensions):
//   dA = Gemm(dY, B, transB) viewed as A,  dB = Gemm(A, dY, transA).
// The batched form would transpose A and B, run one GEMM per batch entry
// and sum the batch of weight gradients (ReduceSum): copies and sums that
// took a large part of the GPT-like sample's step (bench/results/log.md).
// When A and B have the same batch dimensions (attention), each gradient
// is an Einsum whose batched GEMM reads its operand transposed, without a
// Transpose node.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

namespace pipec::passes::autodiff {

namespace {

AttrMap gemmAttrs(bool ta, bool tb, double alpha) {
  AttrMap a;
  if (ta)
    a["transA"] = Attribute::ofInt(1);
  if (tb)
    a["transB"] = Attribute::ofInt(1);
  if (alpha != 1.0)
    a["alpha"] = Attribute::ofFloat(static_cast<float>(alpha));
  return a;
}

/// Swaps the last two dimensions.
Expected<ir::Value *> transposeLast2(GradContext &c, ir::Value *x) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < static_cast<int64_t>(x->shape().size()); ++i)
    perm.push_back(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return c.transpose(x, perm);
}

/// Gemm(x, y) with transposes folded into the flags, scaled by alpha.
/// Before opset 11 Gemm needs C: a scalar zero with beta 0 stands in.
Expected<ir::Value *> emitGemm(GradContext &c, ir::Value *x, ir::Value *y, bool tx, bool ty,
                               double alpha) {
  AttrMap attrs = gemmAttrs(tx, ty, alpha);
  if (c.opset() < 11) {
    attrs["beta"] = Attribute::ofFloat(0.0f);
    return c.emit("Gemm", {x, y, c.scalar(0.0, x->dtype())}, std::move(attrs));
  }
  return c.emit("Gemm", {x, y}, std::move(attrs));
}

/// MatMul of A [..., M, K] by a matrix B [K, N]: both gradients as Gemms
/// of the flattened A and dY (see the file comment).
Status matMulByMatrixGrad(GradContext &c) {
  ir::Value *a = c.input(0), *b = c.input(1), *dy = c.outGrad(0);
  const Shape &as = a->shape();
  const int64_t K = as.back(), N = b->shape().back();
  int64_t P = 1;
  for (size_t i = 0; i + 1 < as.size(); ++i)
    P *= as[i];
  PIPEC_ASSIGN(ir::Value * dy2, c.reshape(dy, {P, N}));
  if (c.needsGrad(0)) {
    PIPEC_ASSIGN(ir::Value * g, emitGemm(c, dy2, b, false, true, 1.0));
    PIPEC_ASSIGN(g, c.reshape(g, as));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) {
    PIPEC_ASSIGN(ir::Value * a2, c.reshape(a, {P, K}));
    PIPEC_ASSIGN(ir::Value * g, emitGemm(c, a2, dy2, true, false, 1.0));
    c.setGrad(1, g);
  }
  return Status::ok();
}

/// MatMul of A [..., M, K] by B [..., K, N] with the same batch dimensions
/// (attention's scores and context): each gradient is one Einsum whose
/// operand is read transposed by the batched GEMM, instead of a Transpose
/// node and a MatMul.
Status matMulSameBatchGrad(GradContext &c) {
  ir::Value *a = c.input(0), *b = c.input(1), *dy = c.outGrad(0);
  const size_t batch = a->shape().size() - 2;
  std::string lead;
  for (size_t i = 0; i < batch; ++i)
    lead += static_cast<char>('a' + i);
  auto spec = [&](const char *x, const char *y, const char *z) {
    return lead + x + "," + lead + y + "->" + lead + z;
  };
  auto einsum = [&](ir::Value *x, ir::Value *y, const std::string &eq) {
    AttrMap attrs;
    attrs["equation"] = Attribute::ofString(eq);
    return c.emit("Einsum", {x, y}, std::move(attrs));
  };
  if (c.needsGrad(0)) { // dA = dY B^T
    PIPEC_ASSIGN(ir::Value * g, einsum(dy, b, spec("mn", "kn", "mk")));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) { // dB = A^T dY
    PIPEC_ASSIGN(ir::Value * g, einsum(a, dy, spec("mk", "mn", "kn")));
    c.setGrad(1, g);
  }
  return Status::ok();
}

} // namespace

Status gemmGrad(GradContext &c) {
  const bool ta = attrInt(c.attrs(), "transA", 0) != 0;
  const bool tb = attrInt(c.attrs(), "transB", 0) != 0;
  const double alpha = attrFloat(c.attrs(), "alpha", 1.0f);
  const double beta = attrFloat(c.attrs(), "beta", 1.0f);
  ir::Value *dy = c.outGrad(0), *a = c.input(0), *b = c.input(1);
  auto gemm = [&](ir::Value *x, ir::Value *y, bool tx, bool ty) {
    return emitGemm(c, x, y, tx, ty, alpha);
  };
  if (c.needsGrad(0)) {
    PIPEC_ASSIGN(ir::Value * g, ta ? gemm(b, dy, tb, true) : gemm(dy, b, false, !tb));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) {
    PIPEC_ASSIGN(ir::Value * g, tb ? gemm(dy, a, true, ta) : gemm(a, dy, !ta, false));
    c.setGrad(1, g);
  }
  if (c.needsGrad(2)) {
    PIPEC_ASSIGN(ir::Value * r, c.sumToShape(dy, c.input(2)->shape()));
    PIPEC_ASSIGN(ir::Value * g, c.scale(r, beta));
    c.setGrad(2, g);
  }
  return Status::ok();
}

Status matMulGrad(GradContext &c) {
  ir::Value *a = c.input(0), *b = c.input(1), *dy = c.outGrad(0);
  Shape as = a->shape(), bs = b->shape(), ys = dy->shape();
  if (as.size() >= 2 && bs.size() == 2)
    return matMulByMatrixGrad(c);
  // Einsum is ONNX from opset 12; its letters cap the batch rank.
  if (as.size() >= 3 && as.size() == bs.size() && as.size() <= 12 && c.opset() >= 12 &&
      std::equal(as.begin(), as.end() - 2, bs.begin()))
    return matMulSameBatchGrad(c);
  // View 1-D operands as matrices and dY with the dropped dimensions back.
  if (as.size() == 1) {
    as = {1, as[0]};
    ys.insert(ys.end() - (bs.size() == 1 ? 0 : 1), 1);
  }
  if (bs.size() == 1) {
    bs = {bs[0], 1};
    ys.push_back(1);
  }
  PIPEC_ASSIGN(ir::Value * a2, c.reshape(a, as));
  PIPEC_ASSIGN(ir::Value * b2, c.reshape(b, bs));
  PIPEC_ASSIGN(ir::Value * dy2, c.reshape(dy, ys));
  if (c.needsGrad(0)) {
    PIPEC_ASSIGN(ir::Value * bt, transposeLast2(c, b2));
    PIPEC_ASSIGN(ir::Value * g, c.emit("MatMul", {dy2, bt}));
    // Sum over broadcast batch dimensions, then drop the 1-D view.
    Shape target = as;
    PIPEC_ASSIGN(g, c.sumToShape(g, target));
    PIPEC_ASSIGN(g, c.reshape(g, a->shape()));
    c.setGrad(0, g);
  }
  if (c.needsGrad(1)) {
    PIPEC_ASSIGN(ir::Value * at, transposeLast2(c, a2));
    PIPEC_ASSIGN(ir::Value * g, c.emit("MatMul", {at, dy2}));
    PIPEC_ASSIGN(g, c.sumToShape(g, bs));
    PIPEC_ASSIGN(g, c.reshape(g, b->shape()));
    c.setGrad(1, g);
  }
  return Status::ok();
}

} // namespace pipec::passes::autodiff
