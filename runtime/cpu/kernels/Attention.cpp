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
// place with its rows h x d apart (the products' leading dimensions). With
// packed_qkv as well (pack-qkv) Q, K and V are the thirds of one
// [n, s, 3 h d] tensor, rows 3 h d apart, and the gradient writes dQ, dK
// and dV into the thirds of one dQKV: the Split before and the Concat
// after are gone.
//
// The mask broadcasts to [..., s, t] (right-aligned). Each batch entry
// (the leading axes, equal on Q, KT and V) is one task: its s x t scores
// live in a buffer of the task's thread, never in the arena, so the
// scores and probabilities of the unfused graph (two [..., s, t] tensors,
// written and read three times) cost no memory traffic.
//
// pipec:AttentionGrad(Q, KT, V[, mask], dO[, P]) -> dQ, dKT, dV reads P
// where the forward wrote it as its second output (keep-attention-probs,
// passes/AttentionProbs.cpp: where P takes no more memory than Q, KT and
// V), else recomputes it the same way, bit for bit; and then
//   dV = P^T dO,  dP = dO V^T,  dS = scale * P (dP - rowsum(dP P)),
//   dQ = dS KT^T,  dKT = Q^T dS;
// masked probabilities are exactly 0 (fills of -1e30 or below), so dS is
// 0 there too.
//
// Every GEMM is one BLAS call on the task's thread, a row's softmax the
// Softmax kernel's (SoftmaxRow.h), and tasks are independent: results do
// not depend on the thread count. f32 and f64 (the gradient checks).
//
// Where the mask leaves whole blocks of the scores masked (causal masks),
// the products go by blocks of rows and keys and skip them
// (causalBlocks(); docs/passes.md has the rule and the timings).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cpu/kernels/SoftmaxRow.h"
#include "support/FusedOps.h"

#include <cmath>

namespace pipec::cpu {

namespace {
using namespace ew;

/// The geometry (support/FusedOps.h) and the mask's layout, shared by the
/// forward and the gradient.
struct AttentionShape : AttentionDims {
  AttentionMask mask = AttentionMask::None;
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

/// Row i of batch entry b's scores, its first `w` columns (already Q KT),
/// scaled, masked and turned into probabilities in place; the columns from
/// w on are masked ones (causalBlocks()) and become exactly 0.
template <typename T>
void probabilityRow(const AttentionShape &a, const void *mask, int64_t b, int64_t i, T *row, int64_t w) {
  const T scale = static_cast<T>(a.scale), fill = static_cast<T>(a.fill);
  const int64_t off = a.mask == AttentionMask::None ? 0 : a.maskRow[static_cast<size_t>(b * a.s + i)];
  switch (a.mask) {
  case AttentionMask::None:
    for (int64_t j = 0; j < w; ++j)
      row[j] = row[j] * scale;
    break;
  case AttentionMask::Add: {
    const T *m = static_cast<const T *>(mask) + off;
    for (int64_t j = 0; j < w; ++j)
      row[j] = row[j] * scale + m[j * a.maskStep];
    break;
  }
  case AttentionMask::Bool: {
    const bool *m = static_cast<const bool *>(mask) + off;
    for (int64_t j = 0; j < w; ++j)
      row[j] = m[j * a.maskStep] == a.fillWhen ? fill : row[j] * scale;
    break;
  }
  }
  softmaxRow<T, false>(row, row, w);
  std::fill(row + w, row + a.t, T(0));
}

/// Where a mask leaves whole blocks of a batch entry's scores masked (a
/// causal mask: row i sees columns up to i), the products skip them. Rows
/// go in blocks of kAttentionBlock; block r computes the columns up to
/// width[r], the last one a row of it leaves unmasked, rounded up to the
/// block; its probabilities beyond are exactly 0, as the masked ones are
/// (a bool mask's fill, or an added value, of -1e30 or below). Column
/// block c of P^T's products (dV, dK) reads the rows from firstRow[c] on,
/// the first whose block's width passes the column block's start. A block
/// with a row masked all through keeps every column (its row comes out
/// NaN, as unblocked). Depends on the mask's values and the shape only.
constexpr int64_t kAttentionBlock = 64;
struct AttentionBlocks {
  bool active = false;
  std::vector<int64_t> width;    ///< per (batch entry, block of rows)
  std::vector<int64_t> firstRow; ///< per (batch entry, block of columns)
};

template <typename T> AttentionBlocks causalBlocks(const AttentionShape &a, const void *mask) {
  AttentionBlocks r;
  const bool fillMasks = a.mask == AttentionMask::Bool && a.fill <= -1e30;
  if ((!fillMasks && a.mask != AttentionMask::Add) || a.t <= kAttentionBlock)
    return r;
  const int64_t rowBlocks = (a.s + kAttentionBlock - 1) / kAttentionBlock;
  const int64_t colBlocks = (a.t + kAttentionBlock - 1) / kAttentionBlock;
  const int64_t batch = a.batch();
  r.width.assign(static_cast<size_t>(batch * rowBlocks), a.t);
  r.firstRow.assign(static_cast<size_t>(batch * colBlocks), 0);
  // One past the last column row i of entry b leaves unmasked (0: none).
  auto seen = [&](int64_t b, int64_t i) -> int64_t {
    const int64_t off = a.maskRow[static_cast<size_t>(b * a.s + i)];
    for (int64_t j = a.t - 1; j >= 0; --j) {
      const bool masked = a.mask == AttentionMask::Bool
                              ? static_cast<const bool *>(mask)[off + j * a.maskStep] == a.fillWhen
                              : static_cast<const T *>(mask)[off + j * a.maskStep] <= T(-1e30);
      if (!masked)
        return j + 1;
    }
    return 0;
  };
  for (int64_t b = 0; b < batch; ++b) {
    // Entries of a broadcast mask repeat entry 0's rows.
    const bool same = b > 0 && std::equal(a.maskRow.begin() + b * a.s, a.maskRow.begin() + (b + 1) * a.s,
                                          a.maskRow.begin());
    int64_t *width = r.width.data() + b * rowBlocks;
    if (same) {
      std::copy(r.width.begin(), r.width.begin() + rowBlocks, width);
    } else {
      for (int64_t blk = 0; blk < rowBlocks; ++blk) {
        int64_t w = 0;
        for (int64_t i = blk * kAttentionBlock; i < std::min(a.s, (blk + 1) * kAttentionBlock); ++i) {
          const int64_t seenI = seen(b, i);
          if (seenI == 0) {
            w = a.t;
            break;
          }
          w = std::max(w, seenI);
        }
        width[blk] = std::min(a.t, (w + kAttentionBlock - 1) / kAttentionBlock * kAttentionBlock);
        r.active = r.active || width[blk] < a.t;
      }
    }
    for (int64_t c = 0; c < colBlocks; ++c) {
      int64_t first = a.s;
      for (int64_t blk = 0; blk < rowBlocks && first == a.s; ++blk)
        if (width[blk] > c * kAttentionBlock)
          first = blk * kAttentionBlock;
      r.firstRow[static_cast<size_t>(b * colBlocks + c)] = first;
    }
  }
  return r;
}

/// P of batch entry b into `p` [s, t], by blocks of rows where `blocks`
/// is active.
template <typename T>
void probabilities(const AttentionShape &a, const T *q, const T *kT, const void *mask, int64_t b, T *p,
                   const AttentionBlocks &blocks) {
  if (!blocks.active) {
    linalgGemm<T>(false, a.headsInner, a.s, a.t, a.d, T(1), q + a.offset(a.q, b), a.q.ld, kT + a.offset(a.k, b),
                  a.k.ld, T(0), p, a.t);
    for (int64_t i = 0; i < a.s; ++i)
      probabilityRow(a, mask, b, i, p + i * a.t, a.t);
    return;
  }
  const int64_t rowBlocks = (a.s + kAttentionBlock - 1) / kAttentionBlock;
  for (int64_t blk = 0; blk < rowBlocks; ++blk) {
    const int64_t r0 = blk * kAttentionBlock, rows = std::min(kAttentionBlock, a.s - r0);
    const int64_t w = blocks.width[static_cast<size_t>(b * rowBlocks + blk)];
    linalgGemm<T>(false, a.headsInner, rows, w, a.d, T(1), q + a.offset(a.q, b) + r0 * a.q.ld, a.q.ld,
                  kT + a.offset(a.k, b), a.k.ld, T(0), p + r0 * a.t, a.t);
    for (int64_t i = r0; i < r0 + rows; ++i)
      probabilityRow(a, mask, b, i, p + i * a.t, w);
  }
}

/// Runs `f(b)` for every batch entry, each on one thread.
template <typename F> void perBatch(const AttentionShape &a, F &&f) {
  parallelTasks(a.batch(), a.batch() * a.s * a.t * (a.d + a.dv), [&](int64_t b) {
    LinalgOneThread one;
    f(b);
  });
}

template <typename T> class AttentionKernel final : public Kernel {
public:
  AttentionKernel(AttentionShape a, bool keepProbs) : a_(std::move(a)), keepProbs_(keepProbs) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *q = static_cast<const T *>(in[0]), *kT = static_cast<const T *>(in[1]),
            *v = static_cast<const T *>(in[2]);
    const void *mask = a_.mask == AttentionMask::None ? nullptr : in[3];
    T *o = static_cast<T *>(out[0]);
    T *keep = keepProbs_ ? static_cast<T *>(out[1]) : nullptr; // P [batch, s, t]
    const AttentionBlocks blocks = causalBlocks<T>(a_, mask);
    const int64_t rowBlocks = (a_.s + kAttentionBlock - 1) / kAttentionBlock;
    perBatch(a_, [&](int64_t b) {
      T *p = keep ? keep + b * a_.s * a_.t : threadBuffer<T>(0, static_cast<size_t>(a_.s * a_.t));
      probabilities(a_, q, kT, mask, b, p, blocks);
      const T *vb = v + a_.offset(a_.v, b);
      T *ob = o + a_.offset(a_.o, b);
      if (!blocks.active) {
        linalgGemm<T>(false, false, a_.s, a_.dv, a_.t, T(1), p, a_.t, vb, a_.v.ld, T(0), ob, a_.o.ld);
        return;
      }
      for (int64_t blk = 0; blk < rowBlocks; ++blk) {
        const int64_t r0 = blk * kAttentionBlock, rows = std::min(kAttentionBlock, a_.s - r0);
        linalgGemm<T>(false, false, rows, a_.dv, blocks.width[static_cast<size_t>(b * rowBlocks + blk)], T(1),
                      p + r0 * a_.t, a_.t, vb, a_.v.ld, T(0), ob + r0 * a_.o.ld, a_.o.ld);
      }
    });
    return Status::ok();
  }

private:
  AttentionShape a_;
  bool keepProbs_; ///< P is output 1
};

template <typename T> class AttentionGradKernel final : public Kernel {
public:
  AttentionGradKernel(AttentionShape a, bool givenProbs) : a_(std::move(a)), givenProbs_(givenProbs) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *q = static_cast<const T *>(in[0]), *kT = static_cast<const T *>(in[1]),
            *v = static_cast<const T *>(in[2]);
    const bool masked = a_.mask != AttentionMask::None;
    const void *mask = masked ? in[3] : nullptr;
    const T *dO = static_cast<const T *>(in[masked ? 4 : 3]);
    const T *given = givenProbs_ ? static_cast<const T *>(in[masked ? 5 : 4]) : nullptr;
    // Packed: dQ, dK and dV are the thirds of dQKV (their layouts' bases).
    T *dQ = static_cast<T *>(out[0]), *dKT = static_cast<T *>(out[a_.packed ? 0 : 1]),
      *dV = static_cast<T *>(out[a_.packed ? 0 : 2]);
    const AttentionShape &a = a_;
    const T scale = static_cast<T>(a.scale);
    const AttentionBlocks blocks = causalBlocks<T>(a, mask);
    const int64_t rowBlocks = (a.s + kAttentionBlock - 1) / kAttentionBlock;
    const int64_t colBlocks = (a.t + kAttentionBlock - 1) / kAttentionBlock;
    perBatch(a, [&](int64_t b) {
      const T *p = given ? given + b * a.s * a.t : nullptr;
      if (!p) {
        T *buf = threadBuffer<T>(0, static_cast<size_t>(a.s * a.t));
        probabilities(a, q, kT, mask, b, buf, blocks);
        p = buf;
      }
      T *dp = threadBuffer<T>(1, static_cast<size_t>(a.s * a.t));
      const T *dOb = dO + a.offset(a.o, b), *vb = v + a.offset(a.v, b);
      const T *qb = q + a.offset(a.q, b), *kb = kT + a.offset(a.k, b);
      T *dVb = dV + a.offset(a.v, b), *dQb = dQ + a.offset(a.q, b), *dKb = dKT + a.offset(a.k, b);
      // dS = scale * P (dP - sum_j dP P) of rows [r0, r0 + rows), their
      // first w columns, in place of dP; the columns from w on are 0.
      auto scores = [&](int64_t r0, int64_t rows, int64_t w) {
        for (int64_t i = r0; i < r0 + rows; ++i) {
          const T *pr = p + i * a.t;
          T *gr = dp + i * a.t;
          const T dot = static_cast<T>(laneSum(w, [&](int64_t j) { return double(gr[j]) * double(pr[j]); }));
          for (int64_t j = 0; j < w; ++j)
            gr[j] = scale * (pr[j] * (gr[j] - dot));
          std::fill(gr + w, gr + a.t, T(0));
        }
      };
      if (!blocks.active) {
        // dV = P^T dO, dP = dO V^T.
        linalgGemm<T>(true, false, a.t, a.dv, a.s, T(1), p, a.t, dOb, a.o.ld, T(0), dVb, a.v.ld);
        linalgGemm<T>(false, true, a.s, a.t, a.dv, T(1), dOb, a.o.ld, vb, a.v.ld, T(0), dp, a.t);
        scores(0, a.s, a.t);
        // dQ = dS KT^T, dKT = Q^T dS (K as rows: dQ = dS K, dK = dS^T Q).
        linalgGemm<T>(false, !a.headsInner, a.s, a.d, a.t, T(1), dp, a.t, kb, a.k.ld, T(0), dQb, a.q.ld);
        if (a.headsInner)
          linalgGemm<T>(true, false, a.t, a.d, a.s, T(1), dp, a.t, qb, a.q.ld, T(0), dKb, a.k.ld);
        else
          linalgGemm<T>(true, false, a.d, a.t, a.s, T(1), qb, a.q.ld, dp, a.t, T(0), dKb, a.k.ld);
        return;
      }
      // By blocks: rows of P, dP, dS and dQ up to their block's width;
      // columns of dV and dK from the first row whose block reaches them
      // (zero where none does).
      for (int64_t blk = 0; blk < rowBlocks; ++blk) {
        const int64_t r0 = blk * kAttentionBlock, rows = std::min(kAttentionBlock, a.s - r0);
        const int64_t w = blocks.width[static_cast<size_t>(b * rowBlocks + blk)];
        linalgGemm<T>(false, true, rows, w, a.dv, T(1), dOb + r0 * a.o.ld, a.o.ld, vb, a.v.ld, T(0), dp + r0 * a.t,
                      a.t);
        scores(r0, rows, w);
        linalgGemm<T>(false, !a.headsInner, rows, a.d, w, T(1), dp + r0 * a.t, a.t, kb, a.k.ld, T(0),
                      dQb + r0 * a.q.ld, a.q.ld);
      }
      for (int64_t c = 0; c < colBlocks; ++c) {
        const int64_t k0 = c * kAttentionBlock, cols = std::min(kAttentionBlock, a.t - k0);
        const int64_t i0 = blocks.firstRow[static_cast<size_t>(b * colBlocks + c)], rows = a.s - i0;
        if (rows == 0) {
          for (int64_t j = k0; j < k0 + cols; ++j) {
            std::fill(dVb + j * a.v.ld, dVb + j * a.v.ld + a.dv, T(0));
            if (a.headsInner)
              std::fill(dKb + j * a.k.ld, dKb + j * a.k.ld + a.d, T(0));
          }
          if (!a.headsInner)
            for (int64_t i = 0; i < a.d; ++i)
              std::fill(dKb + i * a.k.ld + k0, dKb + i * a.k.ld + k0 + cols, T(0));
          continue;
        }
        const T *pc = p + i0 * a.t + k0, *sc = dp + i0 * a.t + k0;
        linalgGemm<T>(true, false, cols, a.dv, rows, T(1), pc, a.t, dOb + i0 * a.o.ld, a.o.ld, T(0),
                      dVb + k0 * a.v.ld, a.v.ld);
        if (a.headsInner)
          linalgGemm<T>(true, false, cols, a.d, rows, T(1), sc, a.t, qb + i0 * a.q.ld, a.q.ld, T(0),
                        dKb + k0 * a.k.ld, a.k.ld);
        else
          linalgGemm<T>(true, false, a.d, cols, rows, T(1), qb + i0 * a.q.ld, a.q.ld, sc, a.t, T(0), dKb + k0,
                        a.k.ld);
      }
    });
    return Status::ok();
  }

private:
  AttentionShape a_;
  bool givenProbs_; ///< P is the input after dO
};

/// Reads and checks the shapes and attributes of a node whose first three
/// inputs are Q, KT (or K), V and whose mask (if any) is input 3
/// (support/FusedOps.h).
Expected<AttentionShape> attentionShape(const OpDesc &d, bool grad) {
  AttentionShape a;
  auto kind = attentionMaskOf(d.attrs);
  if (!kind)
    return errorf(d.where(), ": ", kind.status().message());
  a.mask = *kind;
  const size_t want = attentionOperands(a.mask) + (grad ? 1 : 0);
  if (d.inputs.size() != want && (!grad || d.inputs.size() != want + 1))
    return errorf(d.where(), ": expects ", want, grad ? " or " + std::to_string(want + 1) : std::string(),
                  " inputs with mask '", attrString(d.attrs, "mask", "none"), "', got ", d.inputs.size());
  for (size_t i = 0; i < d.inputs.size(); ++i)
    if (!d.hasInput(i))
      return errorf(d.where(), ": input ", i, " is missing");
  auto dims = attentionDims(d.inputs[0].shape, d.inputs[1].shape, d.inputs[2].shape, d.attrs);
  if (!dims)
    return errorf(d.where(), ": ", dims.status().message());
  const DType dt = d.inputs[0].dtype;
  if (d.inputs[1].dtype != dt || d.inputs[2].dtype != dt)
    return errorf(d.where(), ": Q, K and V differ in type");
  static_cast<AttentionDims &>(a) = *dims;
  // One head's scores live in a buffer of the thread that runs it.
  if (a.s > 0 && a.t > (int64_t{1} << 28) / a.s)
    return errorf(d.where(), ": one head's scores (", a.s, " x ", a.t, ") have more than 2^28 elements");
  a.scale = attrFloat(d.attrs, "scale", 1.0f);
  a.fill = attrFloat(d.attrs, "fill", -INFINITY);
  a.fillWhen = attrInt(d.attrs, "fill_when", 1) != 0;
  if (a.mask == AttentionMask::None)
    return a;
  const TensorDesc &m = d.inputs[3];
  if ((a.mask == AttentionMask::Bool) != (m.dtype == DType::Bool) || (a.mask == AttentionMask::Add && m.dtype != dt))
    return errorf(d.where(), ": a '", attrString(d.attrs, "mask", "none"), "' mask of type ", m.str());
  if (!maskRows(m.shape, dims->scores, a.maskRow, a.maskStep))
    return errorf(d.where(), ": the mask ", m.str(), " does not broadcast to ", shapeStr(dims->scores));
  return a;
}

} // namespace

Expected<KernelPtr> makeAttentionKernel(const OpDesc &d) {
  PIPEC_ASSIGN(AttentionShape a, attentionShape(d, false));
  const Shape &o = a.out;
  if (d.outputs.size() != 1 && d.outputs.size() != 2)
    return errorf(d.where(), ": expects 1 or 2 outputs (O, P), got ", d.outputs.size());
  PIPEC_TRY(checkOutput(d, 0, d.inputs[0].dtype, o));
  const bool keep = d.outputs.size() == 2;
  if (keep)
    PIPEC_TRY(checkOutput(d, 1, d.inputs[0].dtype, a.scores));
  return dispatchKernel<kFloats>(d, d.inputs[0].dtype, "input", [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    return KernelPtr(new AttentionKernel<T>(a, keep));
  });
}

Expected<KernelPtr> makeAttentionGradKernel(const OpDesc &d) {
  PIPEC_ASSIGN(AttentionShape a, attentionShape(d, true));
  const size_t outputs = a.packed ? 1 : 3;
  if (d.outputs.size() != outputs)
    return errorf(d.where(), ": expects ", outputs, outputs == 1 ? " output (dQKV)" : " outputs (dQ, dKT, dV)",
                  ", got ", d.outputs.size());
  const size_t dOAt = attentionOperands(a.mask);
  const bool given = d.inputs.size() == dOAt + 2;
  const Shape &o = a.out;
  if (d.inputs[dOAt].shape != o || d.inputs[dOAt].dtype != d.inputs[0].dtype)
    return errorf(d.where(), ": dO is ", d.inputs[dOAt].str(), ", expected the output's shape ", shapeStr(o));
  if (given && (d.inputs[dOAt + 1].shape != a.scores || d.inputs[dOAt + 1].dtype != d.inputs[0].dtype))
    return errorf(d.where(), ": P is ", d.inputs[dOAt + 1].str(), ", expected the scores' shape ",
                  shapeStr(a.scores));
  for (size_t i = 0; i < outputs; ++i)
    PIPEC_TRY(checkOutput(d, i, d.inputs[i].dtype, d.inputs[i].shape));
  return dispatchKernel<kFloats>(d, d.inputs[0].dtype, "input", [&]<typename T>(TypeTag<T>) -> Expected<KernelPtr> {
    return KernelPtr(new AttentionGradKernel<T>(a, given));
  });
}

} // namespace pipec::cpu
