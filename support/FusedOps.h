//===- support/FusedOps.h - Geometry of the fused GEMM and attention nodes -*- C++ -*-===//
//
// pipec:FusedGemm and pipec:Attention (made by passes/Fusion.cpp) and
// pipec:NhwcConv (passes/Layout.cpp) read their attributes and shapes in
// four places: the shape rules
// (ir/shape/Grad.cpp), the cost model, the CPU kernels and the CUDA
// kernels. One reader each, here, so that the four agree; like
// support/ElementwiseProgram.h it is shared by the compiler and the
// runtime, which share nothing else. Errors name no node: callers add it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Attribute.h"
#include "support/Error.h"
#include "support/Tensor.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace pipec {

/// pipec:FusedGemm's `activation`: "" none, "Relu", "Gelu" (erf) or
/// "GeluTanh".
enum class FusedActivation { None, Relu, GeluErf, GeluTanh };

inline Expected<FusedActivation> fusedActivationOf(const AttrMap &attrs) {
  const std::string a = attrString(attrs, "activation", "");
  if (a.empty())
    return FusedActivation::None;
  if (a == "Relu")
    return FusedActivation::Relu;
  if (a == "Gelu")
    return FusedActivation::GeluErf;
  if (a == "GeluTanh")
    return FusedActivation::GeluTanh;
  return errorf("unknown activation '", a, "' (Relu, Gelu or GeluTanh)");
}

/// A product (MatMul, Gemm, pipec:FusedGemm, the convolutions and their
/// gradients) whose operands are 16-bit floats and whose result is f32,
/// the product accumulated in f32: what the mixed-precision pass makes
/// (passes/MixedPrecision.cpp; bf16 tensor cores, oneDNN's bf16 matmul).
/// Marked by the attribute `output_dtype` (the ONNX type number of the
/// result, f32's 1); without it, ONNX's rule holds (the operands' type).
/// Under it one operand may be f32 (a weight): the product reads it
/// rounded to the other's 16-bit type (to nearest even), which kernels do
/// once a step where the operand changes only between steps
/// (kernel::OpDesc::stepInvariant). Gemm's C, FusedGemm's and the
/// convolutions' bias have the result's type.
inline constexpr const char *kProductOutputDType = "output_dtype";

/// The 16-bit type a product under output_dtype computes in: that of its
/// 16-bit operand(s) (`a` and `b` are its operands' types).
inline DType productOperandType(DType a, DType b) { return a == DType::F32 ? b : a; }

/// The result type of a product on operands of types `a` and `b` under
/// `attrs`, or why there is none. Errors name no node: callers add it.
inline Expected<DType> productResultType(DType a, DType b, const AttrMap &attrs) {
  if (!attrs.count(kProductOutputDType)) {
    if (a != b)
      return errorf("the operands differ in type: ", dtypeName(a), " and ", dtypeName(b));
    return a;
  }
  const int64_t out = attrInt(attrs, kProductOutputDType, 0);
  if (out != static_cast<int64_t>(DType::F32))
    return errorf(kProductOutputDType, " must be 1 (f32), got ", out);
  const DType t = productOperandType(a, b);
  if (t != DType::BF16 && t != DType::F16)
    return errorf(kProductOutputDType, " needs bf16 or f16 operands, they are ", dtypeName(a),
                  a == b ? "" : " and ", a == b ? "" : dtypeName(b));
  if ((a != t && a != DType::F32) || (b != t && b != DType::F32))
    return errorf("the operands differ in type: ", dtypeName(a), " and ", dtypeName(b));
  return DType::F32;
}

/// pipec:FusedGemm(A, B[, bias]) {transA, transB}: A [..., K] (the leading
/// axes folded into M; [K, M] with transA, rank 2 only), B [K, N] ([N, K]
/// with transB); Y [..., N] ([M, N] with transA).
struct FusedGemmDims {
  bool ta = false, tb = false;
  int64_t M = 0, K = 0, N = 0;
  Shape out;
};

inline Expected<FusedGemmDims> fusedGemmDims(const Shape &a, const Shape &b, const AttrMap &attrs) {
  FusedGemmDims g;
  g.ta = attrInt(attrs, "transA", 0) != 0;
  g.tb = attrInt(attrs, "transB", 0) != 0;
  if (a.size() < 2 || b.size() != 2 || (g.ta && a.size() != 2))
    return errorf("A must have rank 2 or more (2 with transA) and B rank 2, got ", shapeStr(a), " and ",
                  shapeStr(b));
  g.K = g.ta ? a[0] : a.back();
  g.N = g.tb ? b[0] : b[1];
  if ((g.tb ? b[1] : b[0]) != g.K)
    return errorf("inner dimensions differ: ", shapeStr(a), " x ", shapeStr(b));
  g.out = g.ta ? Shape{a[1]} : Shape(a.begin(), a.end() - 1);
  g.M = numElements(g.out);
  g.out.push_back(g.N);
  return g;
}

/// pipec:Attention's `mask`: "none", "add" (f32, added to the scaled
/// scores) or "bool" (fill where it equals fill_when).
enum class AttentionMask { None, Add, Bool };

inline Expected<AttentionMask> attentionMaskOf(const AttrMap &attrs) {
  const std::string kind = attrString(attrs, "mask", "none");
  if (kind == "none")
    return AttentionMask::None;
  if (kind == "add")
    return AttentionMask::Add;
  if (kind == "bool")
    return AttentionMask::Bool;
  return errorf("unknown mask kind '", kind, "' (none, add or bool)");
}

/// pipec:Attention(Q, KT, V[, mask]) and its gradient: Q [..., s, d], KT
/// [..., d, t], V [..., t, dv] with one batch, O [..., s, dv]; with
/// heads_inner, Q [n, s, h, d], K [n, t, h, d] (not KT), V [n, t, h, dv]
/// and O [n, s, h, dv]. Batch entry b is head b % heads of item b / heads
/// (heads inner), or the b-th contiguous matrix (one item).
///
/// With packed_qkv (and heads_inner; made by pack-qkv, passes/PackQkv.cpp)
/// Q, K and V are one tensor [n, s, 3 h d] read three times, the thirds of
/// its last axis (a projection's output split in three, as
/// torch.nn.functional's attention and nanoGPT-style models do), `heads` h;
/// t = s, dv = d. The gradient's one output is then dQKV, of the input's
/// shape.
struct AttentionDims {
  bool headsInner = false, packed = false;
  int64_t items = 1, heads = 1, s = 0, d = 0, t = 0, dv = 0;
  Shape scores; ///< the logical scores [..., s, t] ([n, h, s, t]) a mask broadcasts to
  Shape out;    ///< O as the node writes it
  /// Where an operand's matrix of a batch entry lies: the operand's first
  /// element (its third of a packed QKV), an item's step, a head's step,
  /// the rows' leading dimension.
  struct Layout {
    int64_t perItem = 0, perHead = 0, ld = 0, base = 0;
  };
  Layout q, k, v, o; ///< Q [s, d], KT [d, t] (K [t, d] heads inner), V [t, dv], O [s, dv]
  int64_t batch() const { return items * heads; }
  /// The first element of batch entry b's matrix of an operand.
  int64_t offset(const Layout &x, int64_t b) const {
    return x.base + b / heads * x.perItem + b % heads * x.perHead;
  }
};

/// pipec:Attention(Q, KT, V[, mask]) -> O[, P] and pipec:AttentionGrad(Q,
/// KT, V[, mask], dO[, P]): the inputs before dO (the mask unless "none").
/// P, the probabilities [..., s, t] (the scores' shape, batch entries in
/// order), is the forward's second output where keep-attention-probs
/// (passes/AttentionProbs.cpp) kept it for the gradient, which then reads
/// it last instead of recomputing it.
inline size_t attentionOperands(AttentionMask kind) { return kind == AttentionMask::None ? 3 : 4; }

inline Expected<AttentionDims> attentionDims(const Shape &q, const Shape &k, const Shape &v, const AttrMap &attrs) {
  AttentionDims r;
  r.headsInner = attrInt(attrs, "heads_inner", 0) != 0;
  r.packed = attrInt(attrs, "packed_qkv", 0) != 0;
  const size_t n = q.size();
  if (r.packed) {
    const int64_t h = attrInt(attrs, "heads", 0);
    if (!r.headsInner || n != 3 || k != q || v != q || h < 1 || q[2] % (3 * h) != 0)
      return errorf("packed_qkv needs heads_inner, heads >= 1 and Q, K and V one [n, s, 3 heads d] tensor, got ",
                    shapeStr(q), ", ", shapeStr(k), " and ", shapeStr(v), " with heads ", h);
    r.items = q[0];
    r.heads = h;
    r.s = r.t = q[1];
    r.d = r.dv = q[2] / (3 * h);
    r.scores = {q[0], h, r.s, r.t};
    const int64_t hd = h * r.d, row = 3 * hd;
    r.q = {r.s * row, r.d, row, 0};
    r.k = {r.s * row, r.d, row, hd};
    r.v = {r.s * row, r.d, row, 2 * hd};
    r.o = {r.s * hd, r.d, hd, 0};
    r.out = {q[0], r.s, h, r.d};
    return r;
  }
  if (r.headsInner) {
    if (n != 4 || k.size() != 4 || v.size() != 4 || k[0] != q[0] || v[0] != q[0] || k[2] != q[2] || v[2] != q[2] ||
        k[3] != q[3] || v[1] != k[1])
      return errorf("Q ", shapeStr(q), ", K ", shapeStr(k), " and V ", shapeStr(v),
                    " are not [n, s, h, d], [n, t, h, d] and [n, t, h, dv] (heads_inner)");
    r.items = q[0];
    r.heads = q[2];
    r.s = q[1];
    r.d = q[3];
    r.t = k[1];
    r.dv = v[3];
    r.scores = {q[0], q[2], q[1], r.t};
    // [n, rows, heads, cols]: each head's rows heads x cols apart.
    r.q = {r.s * r.heads * r.d, r.d, r.heads * r.d, 0};
    r.k = {r.t * r.heads * r.d, r.d, r.heads * r.d, 0};
    r.v = {r.t * r.heads * r.dv, r.dv, r.heads * r.dv, 0};
    r.o = {r.s * r.heads * r.dv, r.dv, r.heads * r.dv, 0};
  } else {
    if (n < 2 || k.size() != n || v.size() != n || !std::equal(q.begin(), q.end() - 2, k.begin()) ||
        !std::equal(q.begin(), q.end() - 2, v.begin()) || k[n - 2] != q[n - 1] || v[n - 2] != k[n - 1])
      return errorf("Q ", shapeStr(q), ", KT ", shapeStr(k), " and V ", shapeStr(v),
                    " are not [..., s, d], [..., d, t] and [..., t, dv]");
    r.heads = numElements(Shape(q.begin(), q.end() - 2));
    r.s = q[n - 2];
    r.d = q[n - 1];
    r.t = k[n - 1];
    r.dv = v[n - 1];
    r.scores = Shape(q.begin(), q.end() - 1);
    r.scores.push_back(r.t);
    // One item of contiguous matrices.
    r.q = {0, r.s * r.d, r.d, 0};
    r.k = {0, r.d * r.t, r.t, 0};
    r.v = {0, r.t * r.dv, r.dv, 0};
    r.o = {0, r.s * r.dv, r.dv, 0};
  }
  r.out = Shape(q.begin(), q.end() - 1);
  r.out.push_back(r.dv);
  return r;
}

/// pipec:NhwcConv's epilogue: `activation` "" (none), "Relu", "Clip" (to
/// [clip_min, clip_max]) or "LeakyRelu" (x >= 0 ? x : leaky_alpha x, as the
/// LeakyRelu kernel computes it), applied to each output after the bias.
struct ConvEpilogue {
  enum Kind { None, Relu, Clip, LeakyRelu } kind = None;
  float lo = 0, hi = 0;
  float alpha = 0;
};

inline Expected<ConvEpilogue> convEpilogueOf(const AttrMap &attrs) {
  ConvEpilogue e;
  const std::string a = attrString(attrs, "activation", "");
  if (a == "Relu") {
    e.kind = ConvEpilogue::Relu;
  } else if (a == "Clip") {
    e.kind = ConvEpilogue::Clip;
    e.lo = attrFloat(attrs, "clip_min", 0.0f);
    e.hi = attrFloat(attrs, "clip_max", 0.0f);
    if (!(e.lo <= e.hi))
      return errorf("clip_min ", e.lo, " is above clip_max ", e.hi);
  } else if (a == "LeakyRelu") {
    e.kind = ConvEpilogue::LeakyRelu;
    e.alpha = attrFloat(attrs, "leaky_alpha", 0.01f);
  } else if (!a.empty()) {
    return errorf("unknown activation '", a, "' (Relu, Clip or LeakyRelu)");
  }
  return e;
}

/// The permutations between NCHW and NHWC (Transpose's perm: output axis i
/// is input axis perm[i]).
inline const std::vector<int64_t> &toNhwcPerm() {
  static const std::vector<int64_t> p = {0, 2, 3, 1};
  return p;
}
inline const std::vector<int64_t> &toNchwPerm() {
  static const std::vector<int64_t> p = {0, 3, 1, 2};
  return p;
}

/// `s` with its axes permuted as Transpose(perm) would.
inline Shape permuteShape(const Shape &s, const std::vector<int64_t> &perm) {
  Shape r(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    r[i] = s[static_cast<size_t>(perm[i])];
  return r;
}

} // namespace pipec
