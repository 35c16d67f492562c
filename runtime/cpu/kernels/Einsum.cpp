//===- runtime/cpu/kernels/Einsum.cpp - Einsum -----------------------------===//
//
// ONNX Einsum, opset 12+: numpy einsum with explicit ("ij,jk->ik") or
// implicit ("ij,jk": labels seen once, alphabetically, after the ellipsis
// dimensions) output, "..." broadcasting, repeated labels in one operand
// (diagonals) and summed labels.
//
// The factory turns the equation into a plan on strided views: a repeated
// label becomes one dimension whose stride is the sum of the strides, a
// broadcast dimension gets stride 0. Operands are contracted left to right;
// each contraction sums labels only its operand has, gathers both operands
// to [batch, M, K] / [batch, K, N] (skipped when the operand already has that
// layout, possibly transposed) and runs a batched GEMM whose result is laid
// out [batch, M, N]. A final gather permutes or reduces to the output. Every
// gather loops over output elements, so any thread count gives the same bits.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgGemm.h"
#include "support/Parallel.h"

#include <array>
#include <string>

namespace pipec::cpu {

namespace {

constexpr int kLetters = 52; ///< 'A'..'Z' then 'a'..'z'; ellipsis labels follow
constexpr int kMaxLabels = 128;

/// A strided view of one operand (or intermediate) with distinct labels.
struct EinsumView {
  std::vector<int> labels;
  std::vector<int64_t> sizes, strides;
  int src = 0; ///< slot in the run-time pointer table

  int find(int l) const {
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == l)
        return static_cast<int>(i);
    return -1;
  }
};

/// dst (contiguous, dims `outSizes`) = sum over the reduce dims of src.
struct EinsumGather {
  int src = 0, dst = 0;
  std::vector<int64_t> outSizes, outStrides, redSizes, redStrides;
};

template <typename T> struct EinsumContract {
  int a = 0, b = 0, c = 0;
  LinalgBatchedGemm<T> gemm;
};

template <typename T> void runGather(const EinsumGather &g, const T *src, T *dst) {
  int64_t total = numElements(g.outSizes), red = numElements(g.redSizes);
  size_t ro = g.outSizes.size(), rr = g.redSizes.size();
  bool parallel = total * std::max<int64_t>(red, 1) > 32768;
  parallelFor(total, parallel, [&](int64_t o) {
    int64_t off = 0, rem = o;
    for (size_t k = ro; k-- > 0;) {
      off += (rem % g.outSizes[k]) * g.outStrides[k];
      rem /= g.outSizes[k];
    }
    if (rr == 0) {
      dst[o] = src[off];
      return;
    }
    // Odometer over the reduce dims, innermost dim in a tight loop.
    LinalgAcc<T> acc = 0;
    int64_t idx[kMaxLabels];
    std::fill_n(idx, rr, 0);
    int64_t inner = g.redSizes[rr - 1], innerStride = g.redStrides[rr - 1];
    if (red > 0) {
      for (;;) {
        int64_t base = off;
        for (size_t k = 0; k + 1 < rr; ++k)
          base += idx[k] * g.redStrides[k];
        for (int64_t i = 0; i < inner; ++i)
          acc += src[base + i * innerStride];
        size_t k = rr - 1;
        while (k-- > 0) {
          if (++idx[k] < g.redSizes[k])
            break;
          idx[k] = 0;
        }
        if (k == static_cast<size_t>(-1))
          break;
      }
    }
    dst[o] = static_cast<T>(acc);
  });
}

template <typename T> class EinsumKernel final : public Kernel {
public:
  struct Step {
    bool isGemm = false;
    EinsumGather gather;
    EinsumContract<T> contract;
  };
  int numInputs = 0;
  std::vector<size_t> bufOffsets; ///< byte offsets of slots numInputs+1...
  size_t gemmScratch = 0;          ///< byte offset of the GEMMs' scratch memory
  size_t wsBytes = 0;
  std::vector<Step> steps;

  size_t workspaceBytes() const override { return wsBytes; }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    std::vector<T *> ptr(numInputs + 1 + bufOffsets.size());
    for (int i = 0; i < numInputs; ++i) {
      if (!in[i])
        return errorf("Einsum: input ", i, " is missing at run time");
      ptr[i] = const_cast<T *>(static_cast<const T *>(in[i]));
    }
    ptr[numInputs] = static_cast<T *>(out[0]);
    unsigned char *ws = linalgAlign(ctx.workspace);
    for (size_t i = 0; i < bufOffsets.size(); ++i)
      ptr[numInputs + 1 + i] = reinterpret_cast<T *>(ws + bufOffsets[i]);
    for (const Step &s : steps) {
      if (s.isGemm)
        PIPEC_TRY(s.contract.gemm.runPrepared(ptr[s.contract.a], ptr[s.contract.b],
                                              ptr[s.contract.c], ws + gemmScratch));
      else
        runGather<T>(s.gather, ptr[s.gather.src], ptr[s.gather.dst]);
    }
    return Status::ok();
  }
};

/// Parses one term into labels, with -1 marking the ellipsis.
Status parseTerm(const OpDesc &d, const std::string &t, std::vector<int> &labels) {
  labels.clear();
  bool ellipsis = false;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (c >= 'A' && c <= 'Z')
      labels.push_back(c - 'A');
    else if (c >= 'a' && c <= 'z')
      labels.push_back(26 + c - 'a');
    else if (c == '.' && t.compare(i, 3, "...") == 0 && !ellipsis) {
      labels.push_back(-1);
      ellipsis = true;
      i += 2;
    } else {
      return errorf(d.where(), ": bad equation term '", t, "'");
    }
  }
  return Status::ok();
}

template <typename T> class EinsumBuilder {
public:
  explicit EinsumBuilder(const OpDesc &d) : d_(d) {}

  Expected<KernelPtr> build() {
    std::string eq;
    for (char c : attrString(d_.attrs, "equation", ""))
      if (c != ' ')
        eq += c;
    size_t arrow = eq.find("->");
    std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> terms;
    for (size_t p = 0;;) {
      size_t q = lhs.find(',', p);
      terms.push_back(lhs.substr(p, q == std::string::npos ? q : q - p));
      if (q == std::string::npos)
        break;
      p = q + 1;
    }
    int n = static_cast<int>(d_.inputs.size());
    if (static_cast<int>(terms.size()) != n)
      return errorf(d_.where(), ": equation '", eq, "' has ", terms.size(), " terms for ", n,
                    " inputs");

    // Labels per term; the ellipsis expands right-aligned to E labels.
    std::vector<std::vector<int>> termLabels(n);
    int E = 0;
    bool anyEllipsis = false;
    for (int i = 0; i < n; ++i) {
      if (!d_.hasInput(i) || d_.inputs[i].dtype != d_.outputs[0].dtype)
        return errorf(d_.where(), ": input ", i, " is missing or has another element type");
      std::vector<int> raw;
      PIPEC_TRY(parseTerm(d_, terms[i], raw));
      int letters =
          static_cast<int>(std::count_if(raw.begin(), raw.end(), [](int l) { return l >= 0; }));
      bool ell = letters != static_cast<int>(raw.size());
      int rank = static_cast<int>(d_.inputs[i].rank());
      if (ell ? rank < letters : rank != letters)
        return errorf(d_.where(), ": term '", terms[i], "' does not fit input ", i, " of shape ",
                      shapeStr(d_.inputs[i].shape));
      anyEllipsis |= ell;
      E = std::max(E, rank - letters);
    }
    for (int i = 0; i < n; ++i) {
      std::vector<int> raw;
      PIPEC_TRY(parseTerm(d_, terms[i], raw));
      int letters =
          static_cast<int>(std::count_if(raw.begin(), raw.end(), [](int l) { return l >= 0; }));
      int e = static_cast<int>(d_.inputs[i].rank()) - letters;
      for (int l : raw) {
        if (l >= 0) {
          termLabels[i].push_back(l);
          continue;
        }
        for (int j = 0; j < e; ++j)
          termLabels[i].push_back(kLetters + E - e + j);
      }
    }

    if (kLetters + E > kMaxLabels)
      return errorf(d_.where(), ": ellipsis of rank ", E, " is too large");
    // Sizes per label (size 1 broadcasts).
    sizes_.assign(kLetters + E, -1);
    std::array<int, kLetters> count{};
    for (int i = 0; i < n; ++i)
      for (size_t k = 0; k < termLabels[i].size(); ++k) {
        int l = termLabels[i][k];
        int64_t s = d_.inputs[i].shape[k];
        if (l < kLetters)
          ++count[l];
        if (sizes_[l] == -1 || sizes_[l] == 1)
          sizes_[l] = s;
        else if (s != 1 && s != sizes_[l])
          return errorf(d_.where(), ": label of input ", i, " dimension ", k, " has size ", s,
                        ", elsewhere ", sizes_[l]);
      }

    // Output labels.
    std::vector<int> outLabels;
    if (arrow == std::string::npos) {
      if (anyEllipsis)
        for (int j = 0; j < E; ++j)
          outLabels.push_back(kLetters + j);
      for (int l = 0; l < kLetters; ++l)
        if (count[l] == 1)
          outLabels.push_back(l);
    } else {
      std::vector<int> raw;
      PIPEC_TRY(parseTerm(d_, eq.substr(arrow + 2), raw));
      for (int l : raw) {
        if (l < 0) {
          for (int j = 0; j < E; ++j)
            outLabels.push_back(kLetters + j);
          continue;
        }
        if (count[l] == 0 || std::count(outLabels.begin(), outLabels.end(), l) != 0)
          return errorf(d_.where(), ": output label ", char(l < 26 ? 'A' + l : 'a' + l - 26),
                        " is not in the inputs or repeats");
        outLabels.push_back(l);
      }
    }
    Shape outShape;
    for (int l : outLabels)
      outShape.push_back(sizes_[l]);
    if (d_.outputs[0].shape != outShape)
      return errorf(d_.where(), ": output shape ", shapeStr(d_.outputs[0].shape), ", expected ",
                    shapeStr(outShape));

    // Views of the inputs.
    std::vector<EinsumView> views(n);
    for (int i = 0; i < n; ++i) {
      EinsumView &v = views[i];
      v.src = i;
      std::vector<int64_t> st = rowMajorStrides(d_.inputs[i].shape);
      for (size_t k = 0; k < termLabels[i].size(); ++k) {
        int l = termLabels[i][k];
        int64_t s = d_.inputs[i].shape[k];
        int p = v.find(l);
        if (p >= 0) {
          if (v.sizes[p] != s)
            return errorf(d_.where(), ": repeated label of input ", i, " has sizes ", v.sizes[p],
                          " and ", s);
          v.strides[p] += st[k];
          continue;
        }
        v.labels.push_back(l);
        v.sizes.push_back(s);
        v.strides.push_back(st[k]);
      }
      for (size_t k = 0; k < v.labels.size(); ++k)
        if (v.sizes[k] == 1 && sizes_[v.labels[k]] != 1) {
          v.sizes[k] = sizes_[v.labels[k]];
          v.strides[k] = 0;
        }
    }

    kernel_ = std::make_unique<EinsumKernel<T>>();
    kernel_->numInputs = n;
    numInputs_ = n;
    EinsumView cur = views[0];
    for (int i = 1; i < n; ++i) {
      std::vector<int> keep = outLabels;
      for (int j = i + 1; j < n; ++j)
        for (int l : views[j].labels)
          if (std::find(keep.begin(), keep.end(), l) == keep.end())
            keep.push_back(l);
      cur = contract(cur, views[i], keep, i == n - 1 && keep == outLabels);
    }
    if (cur.src != n || cur.labels != outLabels)
      gather(cur, outLabels, n);
    // The GEMMs run one after the other: one scratch area serves them all.
    size_t scratch = 0;
    for (const auto &st : kernel_->steps)
      if (st.isGemm)
        scratch = std::max(scratch, st.contract.gemm.workspaceBytes());
    kernel_->gemmScratch = wsBytes_;
    kernel_->wsBytes = wsBytes_ + linalgRoundUp(scratch);
    return KernelPtr(std::move(kernel_));
  }

private:
  /// A new workspace buffer of `elems` elements; returns its slot.
  int newBuffer(int64_t elems) {
    kernel_->bufOffsets.push_back(wsBytes_);
    wsBytes_ += linalgRoundUp(static_cast<size_t>(std::max<int64_t>(elems, 1)) * sizeof(T));
    return numInputs_ + static_cast<int>(kernel_->bufOffsets.size());
  }

  /// Gathers `v` into slot `dst` (-1: a new buffer) laid out in `order`,
  /// summing every label of `v` not in `order`; returns the contiguous view.
  EinsumView gather(const EinsumView &v, const std::vector<int> &order, int dst = -1) {
    typename EinsumKernel<T>::Step s;
    EinsumGather &g = s.gather;
    g.src = v.src;
    EinsumView r;
    r.labels = order;
    for (int l : order) {
      int p = v.find(l);
      g.outSizes.push_back(sizes_[l]);
      g.outStrides.push_back(p >= 0 ? v.strides[p] : 0);
      r.sizes.push_back(sizes_[l]);
    }
    for (size_t k = 0; k < v.labels.size(); ++k)
      if (std::find(order.begin(), order.end(), v.labels[k]) == order.end()) {
        g.redSizes.push_back(v.sizes[k]);
        g.redStrides.push_back(v.strides[k]);
      }
    r.strides = rowMajorStrides(r.sizes);
    g.dst = dst >= 0 ? dst : newBuffer(numElements(r.sizes));
    r.src = g.dst;
    kernel_->steps.push_back(std::move(s));
    return r;
  }

  /// Whether `v` is exactly a row-major tensor with dims `order`.
  bool contiguousAs(const EinsumView &v, const std::vector<int> &order) const {
    if (v.labels.size() != order.size())
      return false;
    int64_t expect = 1;
    for (size_t k = order.size(); k-- > 0;) {
      int p = v.find(order[k]);
      if (p < 0)
        return false;
      if (v.sizes[p] != 1 && v.strides[p] != expect)
        return false;
      expect *= v.sizes[p];
    }
    return true;
  }

  static std::vector<int> concat(std::initializer_list<const std::vector<int> *> parts) {
    std::vector<int> r;
    for (const auto *p : parts)
      r.insert(r.end(), p->begin(), p->end());
    return r;
  }

  EinsumView contract(const EinsumView &x, const EinsumView &y, const std::vector<int> &keep,
                      bool last) {
    auto inKeep = [&](int l) { return std::find(keep.begin(), keep.end(), l) != keep.end(); };
    std::vector<int> batch, m, nl, contr;
    for (int l : keep) {
      bool inX = x.find(l) >= 0, inY = y.find(l) >= 0;
      if (inX && inY)
        batch.push_back(l);
      else if (inX)
        m.push_back(l);
      else if (inY)
        nl.push_back(l);
    }
    for (int l : x.labels)
      if (y.find(l) >= 0 && !inKeep(l))
        contr.push_back(l);
    auto prod = [&](const std::vector<int> &ls) {
      int64_t p = 1;
      for (int l : ls)
        p *= sizes_[l];
      return p;
    };
    int64_t B = prod(batch), M = prod(m), N = prod(nl), K = prod(contr);

    EinsumContract<T> c;
    std::vector<int> aOrder = concat({&batch, &m, &contr}), aOrderT = concat({&batch, &contr, &m});
    if (contiguousAs(x, aOrder)) {
      c.a = x.src;
    } else if (contiguousAs(x, aOrderT)) {
      c.a = x.src;
      c.gemm.ta = true;
    } else {
      c.a = gather(x, aOrder).src;
    }
    std::vector<int> bOrder = concat({&batch, &contr, &nl}),
                     bOrderT = concat({&batch, &nl, &contr});
    if (contiguousAs(y, bOrder)) {
      c.b = y.src;
    } else if (contiguousAs(y, bOrderT)) {
      c.b = y.src;
      c.gemm.tb = true;
    } else {
      c.b = gather(y, bOrder).src;
    }

    EinsumView r;
    r.labels = concat({&batch, &m, &nl});
    for (int l : r.labels)
      r.sizes.push_back(sizes_[l]);
    r.strides = rowMajorStrides(r.sizes);
    // The last contraction writes the output directly when its layout is
    // already the output's.
    r.src = last && r.labels == keep ? numInputs_ : newBuffer(B * M * N);
    c.c = r.src;
    LinalgBatchedGemm<T> &g = c.gemm;
    g.M = M;
    g.N = N;
    g.K = K;
    g.lda = g.ta ? M : K;
    g.ldb = g.tb ? K : N;
    g.ldc = N;
    for (int64_t b = 0; b < B; ++b) {
      g.aOff.push_back(b * M * K);
      g.bOff.push_back(b * K * N);
      g.cOff.push_back(b * M * N);
    }
    g.prepare();
    typename EinsumKernel<T>::Step s;
    s.isGemm = true;
    s.contract = std::move(c);
    kernel_->steps.push_back(std::move(s));
    return r;
  }

  const OpDesc &d_;
  std::vector<int64_t> sizes_;
  std::unique_ptr<EinsumKernel<T>> kernel_;
  int numInputs_ = 0;
  size_t wsBytes_ = 0;
};

} // namespace

Expected<KernelPtr> makeEinsumKernel(const OpDesc &d) {
  if (d.inputs.empty() || d.outputs.size() != 1)
    return errorf(d.where(), ": expects at least 1 input and 1 output, got ", d.inputs.size(),
                  " and ", d.outputs.size());
  if (!attrHas(d.attrs, "equation"))
    return errorf(d.where(), ": attribute 'equation' is missing");
  return linalgDispatchNumeric(d, d.outputs[0].dtype,
                               [&](auto tag) { return EinsumBuilder<decltype(tag)>(d).build(); });
}

} // namespace pipec::cpu
