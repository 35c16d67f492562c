//===- runtime/cpu/kernels/Attention.cpp - pipec:Attention and its gradient ===//
//
// pipec:Attention(Q, KT, V[, mask]) {scale, mask, fill, fill_when}, made
// by fuse-attention (passes/Fusion.cpp) from MatMul(Q, KT), the scale and
// mask, Softmax and MatMul(P, V):
//
//   S = Q KT                  Q [..., s, d], KT [..., d, t]
//   P = Softmax over t of     S * scale           (mask "none")
//                             S * scale + mask    (mask "add": f32)
//                             fill where mask == fill_when, else S * scale
//                                                 (mask "bool")
//   O = P V                   V [..., t, dv], O [..., s, dv]
//
// With heads_inner = 1 the heads' transposes around it are absorbed: Q,
// K and V come as [n, s, h, d], [n, t, h, d] (K, not KT) and [n, t, h, dv],
// O goes out as [n, s, h, dv], each head's matrix read and written in
// place with its rows h x d apart (the products' leading dimensions).
//
// The mask broadcasts to [..., s, t] (right-aligned). Each batch entry
// (the leading axes, equal on Q, KT and V) is one task: its s x t scores
// live in a buffer of the task's thread, never in the arena, so the
// scores and probabilities of the unfused graph (two [..., s, t] tensors,
// written and read three times) cost no memory traffic.
//
// pipec:AttentionGrad(Q, KT, V[, mask], dO) -> dQ, dKT, dV recomputes P
// the same way (nothing of the forward is kept but its inputs) and then
//   dV = P^T dO,  dP = dO V^T,  dS = scale * P (dP - rowsum(dP P)),
//   dQ = dS KT^T,  dKT = Q^T dS;
// masked probabilities are exactly 0 (fills of -1e30 or below), so dS is
// 0 there too.
//
// Every GEMM is one BLAS call on the task's thread, a row's softmax the
// Softmax kernel's (SoftmaxRow.h), and tasks are independent: results do
// not depend on the thread count. f32 and f64 (the gradient checks).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cpu/kernels/SoftmaxRow.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

enum class MaskKind { None, Add, Bool };

/// Where one operand's matrix of batch entry b lies: entry b is head
/// b % heads of item b / heads, its rows ld elements apart.
struct OperandLayout {
  int64_t perItem = 0, perHead = 0, ld = 0;
};

/// Sizes and mask layout shared by the forward and the gradient.
struct AttentionShape {
  int64_t batch = 1, s = 0, d = 0, t = 0, dv = 0;
  /// heads_inner: Q, K, V and O are [n, rows, heads, cols] (the heads'
  /// transposes absorbed; K as rows [t, d] rather than KT [d, t]); else
  /// each batch entry's matrix is contiguous (heads 1).
  int64_t heads = 1;
  bool headsInner = false;
  OperandLayout q, k, v, o;
  int64_t at(const OperandLayout &x, int64_t b) const { return b / heads * x.perItem + b % heads * x.perHead; }
  MaskKind mask = MaskKind::None;
  std::vector<int64_t> maskRow; ///< per (batch entry, row of S): the mask row's offset
  int64_t maskStep = 0;         ///< the mask's stride along t (0 or 1)
  double scale = 1, fill = -INFINITY;
  bool fillWhen = true;
};

/// A buffer per thread, grown as needed (the scores and their gradients).
template <typename T> T *threadBuffer(int slot, size_t n) {
  thread_local std::vector<T> buf[2];
  if (buf[slot].size() < n)
    buf[slot].resize(n);
  return buf[slot].data();
}

/// P of batch entry b into `p` [s, t].
template <typename T>
void probabilities(const AttentionShape &a, const T *q, const T *kT, const void *mask, int64_t b, T *p) {
  linalgGemm<T>(false, a.headsInner, a.s, a.t, a.d, T(1), q + a.at(a.q, b), a.q.ld, kT + a.at(a.k, b), a.k.ld,
                T(0), p, a.t);
  const T scale = static_cast<T>(a.scale), fill = static_cast<T>(a.fill);
  for (int64_t i = 0; i < a.s; ++i) {
    T *row = p + i * a.t;
    const int64_t off = a.mask == MaskKind::None ? 0 : a.maskRow[static_cast<size_t>(b * a.s + i)];
    switch (a.mask) {
    case MaskKind::None:
      for (int64_t j = 0; j < a.t; ++j)
        row[j] = row[j] * scale;
      break;
    case MaskKind::Add: {
      const T *m = static_cast<const T *>(mask) + off;
      for (int64_t j = 0; j < a.t; ++j)
        row[j] = row[j] * scale + m[j * a.maskStep];
      break;
    }
    case MaskKind::Bool: {
      const bool *m = static_cast<const bool *>(mask) + off;
      for (int64_t j = 0; j < a.t; ++j)
        row[j] = m[j * a.maskStep] == a.fillWhen ? fill : row[j] * scale;
      break;
    }
    }
    softmaxRow<T, false>(row, row, a.t);
  }
}

/// Runs `f(b)` for every batch entry, each on one thread.
template <typename F> void perBatch(const AttentionShape &a, F &&f) {
  parallelTasks(a.batch, a.batch * a.s * a.t * (a.d + a.dv), [&](int64_t b) {
    LinalgOneThread one;
    f(b);
  });
}

template <typename T> class AttentionKernel final : public Kernel {
public:
  explicit AttentionKernel(AttentionShape a) : a_(std::move(a)) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *q = static_cast<const T *>(in[0]), *kT = static_cast<const T *>(in[1]),
            *v = static_cast<const T *>(in[2]);
    const void *mask = a_.mask == MaskKind::None ? nullptr : in[3];
    T *o = static_cast<T *>(out[0]);
    perBatch(a_, [&](int64_t b) {
      T *p = threadBuffer<T>(0, static_cast<size_t>(a_.s * a_.t));
      probabilities(a_, q, kT, mask, b, p);
      linalgGemm<T>(false, false, a_.s, a_.dv, a_.t, T(1), p, a_.t, v + a_.at(a_.v, b), a_.v.ld, T(0),
                    o + a_.at(a_.o, b), a_.o.ld);
    });
    return Status::ok();
  }

private:
  AttentionShape a_;
};

template <typename T> class AttentionGradKernel final : public Kernel {
public:
  explicit AttentionGradKernel(AttentionShape a) : a_(std::move(a)) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *q = static_cast<const T *>(in[0]), *kT = static_cast<const T *>(in[1]),
            *v = static_cast<const T *>(in[2]);
    const bool masked = a_.mask != MaskKind::None;
    const void *mask = masked ? in[3] : nullptr;
    const T *dO = static_cast<const T *>(in[masked ? 4 : 3]);
    T *dQ = static_cast<T *>(out[0]), *dKT = static_cast<T *>(out[1]), *dV = static_cast<T *>(out[2]);
    const AttentionShape &a = a_;
    const T scale = static_cast<T>(a.scale);
    perBatch(a, [&](int64_t b) {
      T *p = threadBuffer<T>(0, static_cast<size_t>(a.s * a.t));
      T *dp = threadBuffer<T>(1, static_cast<size_t>(a.s * a.t));
      probabilities(a, q, kT, mask, b, p);
      const T *dOb = dO + a.at(a.o, b), *vb = v + a.at(a.v, b);
      // dV = P^T dO, dP = dO V^T.
      linalgGemm<T>(true, false, a.t, a.dv, a.s, T(1), p, a.t, dOb, a.o.ld, T(0), dV + a.at(a.v, b), a.v.ld);
      linalgGemm<T>(false, true, a.s, a.t, a.dv, T(1), dOb, a.o.ld, vb, a.v.ld, T(0), dp, a.t);
      // dS = scale * P (dP - sum_j dP P), in place of dP.
      for (int64_t i = 0; i < a.s; ++i) {
        T *pr = p + i * a.t, *gr = dp + i * a.t;
        const T dot = static_cast<T>(laneSum(a.t, [&](int64_t j) { return double(gr[j]) * double(pr[j]); }));
        for (int64_t j = 0; j < a.t; ++j)
          gr[j] = scale * (pr[j] * (gr[j] - dot));
      }
      // dQ = dS KT^T, dKT = Q^T dS (K as rows: dQ = dS K, dK = dS^T Q).
      const T *qb = q + a.at(a.q, b), *kb = kT + a.at(a.k, b);
      linalgGemm<T>(false, !a.headsInner, a.s, a.d, a.t, T(1), dp, a.t, kb, a.k.ld, T(0), dQ + a.at(a.q, b), a.q.ld);
      if (a.headsInner)
        linalgGemm<T>(true, false, a.t, a.d, a.s, T(1), dp, a.t, qb, a.q.ld, T(0), dKT + a.at(a.k, b), a.k.ld);
      else
        linalgGemm<T>(true, false, a.d, a.t, a.s, T(1), qb, a.q.ld, dp, a.t, T(0), dKT + a.at(a.k, b), a.k.ld);
    });
    return Status::ok();
  }

private:
  AttentionShape a_;
};

/// The logical shapes of Q [..., s, d], KT [..., d, t] and V [..., t, dv]
/// (and O [..., s, dv]) from the inputs'; with heads_inner the inputs are
/// [n, s, h, d], [n, t, h, d] and [n, t, h, dv] (the output [n, s, h, dv]).
struct AttentionDims {
  Shape q, kT, v, o;
  bool headsInner = false;
};
Expected<AttentionDims> attentionDims(const Shape &q, const Shape &k, const Shape &v, bool headsInner) {
  AttentionDims r;
  r.headsInner = headsInner;
  if (headsInner) {
    if (q.size() != 4 || k.size() != 4 || v.size() != 4 || k[0] != q[0] || v[0] != q[0] || k[2] != q[2] ||
        v[2] != q[2] || k[3] != q[3] || v[1] != k[1])
      return errorf("Q ", shapeStr(q), ", K ", shapeStr(k), " and V ", shapeStr(v),
                    " are not [n, s, h, d], [n, t, h, d] and [n, t, h, dv]");
    r.q = {q[0], q[2], q[1], q[3]};
    r.kT = {k[0], k[2], k[3], k[1]};
    r.v = {v[0], v[2], v[1], v[3]};
    r.o = {q[0], q[1], q[2], v[3]};
    return r;
  }
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size() || !std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()) || k[k.size() - 2] != q.back() || v[v.size() - 2] != k.back())
    return errorf("Q ", shapeStr(q), ", KT ", shapeStr(k), " and V ", shapeStr(v),
                  " are not [..., s, d], [..., d, t] and [..., t, dv]");
  r.q = q;
  r.kT = k;
  r.v = v;
  r.o = Shape(q.begin(), q.end() - 1);
  r.o.push_back(v.back());
  return r;
}

/// Reads and checks the shapes and attributes of a node whose first three
/// inputs are Q, KT, V and whose mask (if any) is input 3.
Expected<AttentionShape> attentionShape(const OpDesc &d, size_t numInputsWithoutMask) {
  AttentionShape a;
  const std::string kind = attrString(d.attrs, "mask", "none");
  a.mask = kind == "add" ? MaskKind::Add : kind == "bool" ? MaskKind::Bool : MaskKind::None;
  if (kind != "none" && kind != "add" && kind != "bool")
    return errorf(d.where(), ": unknown mask kind '", kind, "' (none, add or bool)");
  const size_t want = numInputsWithoutMask + (a.mask == MaskKind::None ? 0 : 1);
  if (d.inputs.size() != want)
    return errorf(d.where(), ": expects ", want, " inputs with mask '", kind, "', got ", d.inputs.size());
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (!d.hasInput(i))
      return errorf(d.where(), ": input ", i, " is missing");
  auto madeDims = attentionDims(d.inputs[0].shape, d.inputs[1].shape, d.inputs[2].shape,
                                attrInt(d.attrs, "heads_inner", 0) != 0);
  if (!madeDims)
    return errorf(d.where(), ": ", madeDims.status().message());
  const AttentionDims &dims = *madeDims;
  const Shape &q = dims.q, &kT = dims.kT;
  const DType dt = d.inputs[0].dtype;
  if (d.inputs[1].dtype != dt || d.inputs[2].dtype != dt)
    return errorf(d.where(), ": Q, K and V differ in type");
  const size_t r = q.size();
  a.s = q[r - 2];
  a.d = q[r - 1];
  a.t = kT[r - 1];
  a.dv = dims.v[r - 1];
  a.batch = numElements(Shape(q.begin(), q.end() - 2));
  a.headsInner = dims.headsInner;
  if (a.headsInner) { // [n, rows, heads, cols]
    a.heads = q[1];
    a.q = {a.s * a.heads * a.d, a.d, a.heads * a.d};
    a.k = {a.t * a.heads * a.d, a.d, a.heads * a.d};
    a.v = {a.t * a.heads * a.dv, a.dv, a.heads * a.dv};
    a.o = {a.s * a.heads * a.dv, a.dv, a.heads * a.dv};
  } else {
    a.q = {a.s * a.d, 0, a.d};
    a.k = {a.d * a.t, 0, a.t};
    a.v = {a.t * a.dv, 0, a.dv};
    a.o = {a.s * a.dv, 0, a.dv};
  }
  // One head's scores live in a buffer of the thread that runs it.
  if (a.s > 0 && a.t > (int64_t{1} << 28) / a.s)
    return errorf(d.where(), ": one head's scores (", a.s, " x ", a.t, ") have more than 2^28 elements");
  a.scale = attrFloat(d.attrs, "scale", 1.0f);
  a.fill = attrFloat(d.attrs, "fill", -INFINITY);
  a.fillWhen = attrInt(d.attrs, "fill_when", 1) != 0;
  if (a.mask == MaskKind::None)
    return a;
  const TensorDesc &m = d.inputs[3];
  if ((a.mask == MaskKind::Bool) != (m.dtype == DType::Bool) || (a.mask == MaskKind::Add && m.dtype != dt))
    return errorf(d.where(), ": a '", kind, "' mask of type ", m.str());
  // The mask's strides along the scores' axes [..., s, t] (0 where it
  // broadcasts), then the offset of each row.
  Shape scores(q.begin(), q.end() - 1);
  scores.push_back(a.t);
  const int64_t rank = static_cast<int64_t>(scores.size());
  if (m.rank() > rank)
    return errorf(d.where(), ": the mask ", m.str(), " does not broadcast to ", shapeStr(scores));
  std::vector<int64_t> st(static_cast<size_t>(rank), 0);
  int64_t stride = 1;
  for (int64_t x = m.rank() - 1; x >= 0; --x) {
    const int64_t sa = x + rank - m.rank();
    if (m.shape[x] != 1 && m.shape[x] != scores[sa])
      return errorf(d.where(), ": the mask ", m.str(), " does not broadcast to ", shapeStr(scores));
    st[static_cast<size_t>(sa)] = m.shape[x] == 1 ? 0 : stride;
    stride *= m.shape[x];
  }
  a.maskStep = st[static_cast<size_t>(rank - 1)];
  const int64_t rows = a.batch * a.s;
  a.maskRow.assign(static_cast<size_t>(rows), 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = 0;
    for (int64_t x = rank - 2; x >= 0; --x) {
      off += rem % scores[x] * st[static_cast<size_t>(x)];
      rem /= scores[x];
    }
    a.maskRow[static_cast<size_t>(row)] = off;
  }
  return a;
}

} // namespace

/// The output's shape: O [..., s, dv], or [n, s, h, dv] with heads_inner.
Shape outputShape(const OpDesc &d, const AttentionShape &a) {
  Shape o(d.inputs[0].shape.begin(), d.inputs[0].shape.end() - 1);
  o.push_back(a.dv);
  return o;
}

Expected<KernelPtr> makeAttentionKernel(const OpDesc &d) {
  PIPEC_ASSIGN(AttentionShape a, attentionShape(d, 3));
  const Shape o = outputShape(d, a);
  if (d.outputs.size() != 1)
    return errorf(d.where(), ": expects 1 output, got ", d.outputs.size());
  PIPEC_TRY(checkOutput(d, 0, d.inputs[0].dtype, o));
  return dispatchKernel<kFloats>(d, d.inputs[0].dtype, "input", [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    return KernelPtr(new AttentionKernel<T>(a));
  });
}

Expected<KernelPtr> makeAttentionGradKernel(const OpDesc &d) {
  PIPEC_ASSIGN(AttentionShape a, attentionShape(d, 4));
  if (d.outputs.size() != 3)
    return errorf(d.where(), ": expects 3 outputs (dQ, dKT, dV), got ", d.outputs.size());
  const size_t dOAt = d.inputs.size() - 1;
  const Shape o = outputShape(d, a);
  if (d.inputs[dOAt].shape != o || d.inputs[dOAt].dtype != d.inputs[0].dtype)
    return errorf(d.where(), ": dO is ", d.inputs[dOAt].str(), ", expected the output's shape ", shapeStr(o));
  for (size_t i = 0; i < 3; ++i)
    PIPEC_TRY(checkOutput(d, i, d.inputs[i].dtype, d.inputs[i].shape));
  return dispatchKernel<kFloats>(d, d.inputs[0].dtype, "input", [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    return KernelPtr(new AttentionGradKernel<T>(a));
  });
}

} // namespace pipec::cpu
