//===- runtime/cpu/kernels/DnnlHalfGemm.cpp - GEMMs on bf16/f16 operands ---===//
//
// LinalgHalfGemm (LinalgHalfGemm.h): oneDNN's 16-bit matmul with f32
// results where it runs as brgemm, else the operands widened to f32 for
// the f32 GEMM. On this project's Sapphire Rapids machine (AMX) one
// thread's bf16 matmul ran 750-970 GFLOP/s against 157-173 for f32 on
// 512x1024x256 products; capped to AVX-512 without bf16 instructions
// oneDNN takes its reference-speed gemm:jit (about 36 GFLOP/s), so the
// emulation runs there (docs/precision.md).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "runtime/cpu/kernels/ElementwiseCommon.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/Half.h"

#include <algorithm>
#include <array>
#include <map>
#include <string_view>

namespace pipec::cpu {

struct LinalgHalfPrims {
  /// Rows of C per block (the last block may have fewer) and blocks per
  /// GEMM of the batch.
  int64_t rows = 0, blocks = 1;
  /// Per thread slot: the full block's primitive and the last block's
  /// (invalid where the last block is full); each slot binds its own
  /// memory objects, so slots run at once.
  std::vector<std::array<LinalgDnnlPrim, 2>> slots;
  /// Scratch bytes per slot (64-byte multiples).
  size_t scratch = 0;
  std::string impl;
};

void LinalgHalfPrimsDeleter::operator()(LinalgHalfPrims *p) const { delete p; }

LinalgHalfGemm::LinalgHalfGemm(const LinalgHalfGemm &o)
    : operands(o.operands), aF32(o.aF32), bF32(o.bF32), aKeep(o.aKeep), bKeep(o.bKeep), f32(o.f32),
      prims_(o.prims_ ? new LinalgHalfPrims(*o.prims_) : nullptr) {}

LinalgHalfGemm &LinalgHalfGemm::operator=(const LinalgHalfGemm &o) {
  if (this != &o) {
    operands = o.operands;
    aF32 = o.aF32;
    bF32 = o.bF32;
    aKeep = o.aKeep;
    bKeep = o.bKeep;
    f32 = o.f32;
    held_[0] = Held();
    held_[1] = Held();
    prims_.reset(o.prims_ ? new LinalgHalfPrims(*o.prims_) : nullptr);
  }
  return *this;
}

namespace {
/// Elements from offset 0 through the last matrix of a batch at `off`,
/// each `rows` rows of `cols` elements `ld` apart.
int64_t extentOf(const std::vector<int64_t> &off, int64_t rows, int64_t cols, int64_t ld) {
  if (off.empty() || rows == 0 || cols == 0)
    return 0;
  return *std::max_element(off.begin(), off.end()) + (rows - 1) * ld + cols;
}
} // namespace

int64_t LinalgHalfGemm::extentA() const {
  return f32.cOff.empty() ? 0 : extentOf(f32.aOff, f32.ta ? f32.K : f32.M, f32.ta ? f32.M : f32.K, f32.lda);
}

int64_t LinalgHalfGemm::extentB() const {
  return f32.cOff.empty() ? 0 : extentOf(f32.bOff, f32.tb ? f32.N : f32.K, f32.tb ? f32.K : f32.N, f32.ldb);
}

namespace {

/// One block of `rows` rows of C: a 16-bit matmul with an f32 result,
/// alpha an output scale and beta a sum post-op, created for one thread;
/// throws dnnl::error where oneDNN has none. `impl`: oneDNN's name of the
/// implementation it chose.
LinalgDnnlPrim makeBlock(const LinalgBatchedGemm<float> &g, DType operands, int64_t rows, std::string &impl) {
  using namespace dnnl;
  const auto half = operands == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f16;
  auto desc = [](int64_t r, int64_t c, bool trans, int64_t ld, memory::data_type t) {
    return memory::desc({r, c}, t, memory::dims{trans ? 1 : ld, trans ? ld : 1});
  };
  const memory::desc a = desc(rows, g.K, g.ta, g.lda, half), b = desc(g.K, g.N, g.tb, g.ldb, half),
                     c = desc(rows, g.N, false, g.ldc, memory::data_type::f32);
  primitive_attr attr = linalgDnnlAttr();
  if (g.alpha != 1.0f)
    attr.set_output_scales(0, {g.alpha});
  if (g.beta != 0.0f) {
    post_ops po;
    po.append_sum(g.beta);
    attr.set_post_ops(po);
  }
  LinalgOneThread one;
  matmul::primitive_desc pd(matmul::desc(a, b, c), attr, linalgDnnlEngine());
  impl = pd.impl_info_str();
  LinalgDnnlPrim p;
  p.init<matmul>(pd);
  p.args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  return p;
}

} // namespace

// The conversions run in the elementwise kernels' fixed chunks: the loops
// are ew's functions, outside OpenMP's outlined region, where GCC would not
// vectorize them (runtime/cpu/kernels/ElementwiseCommon.h).
void linalgNarrowHalf(const float *src, uint16_t *dst, int64_t n, DType t) {
  ew::parallelChunks(n, ew::kChunk, [&](int64_t lo, int64_t hi) {
    (t == DType::BF16 ? ew::narrowToBf16 : ew::narrowToHalf)(src + lo, dst + lo, hi - lo);
  });
}

void linalgWidenHalf(const uint16_t *src, float *dst, int64_t n, DType t) {
  ew::parallelChunks(n, ew::kChunk, [&](int64_t lo, int64_t hi) {
    (t == DType::BF16 ? ew::widenBf16 : ew::widenHalf)(src + lo, dst + lo, hi - lo);
  });
}

void LinalgHalfGemm::prepare(bool allowNative) {
  prims_.reset();
  f32.bStepInvariant = false; // B is the widened copy in the workspace
  const int64_t batch = static_cast<int64_t>(f32.cOff.size());
  if (allowNative && oneDnnEnabled() && batch > 0 && f32.M > 0 && f32.N > 0 && f32.K > 0) {
    // Blocks of whole rows, as many as the f32 tiling has tiles (the shape
    // decides), 16-row multiples.
    const auto tl = f32.tiling();
    const int64_t count = tl.tm * tl.tn;
    const int64_t rows = ((f32.M + count - 1) / count + 15) / 16 * 16;
    auto made = std::make_unique<LinalgHalfPrims>();
    made->rows = std::min(rows, f32.M);
    made->blocks = (f32.M + made->rows - 1) / made->rows;
    try {
      std::array<LinalgDnnlPrim, 2> slot;
      std::string lastImpl;
      slot[0] = makeBlock(f32, operands, made->rows, made->impl);
      const int64_t lastRows = f32.M - (made->blocks - 1) * made->rows;
      if (lastRows != made->rows)
        slot[1] = makeBlock(f32, operands, lastRows, lastImpl);
      made->scratch = (std::max(slot[0].scratchBytes, slot[1].valid() ? slot[1].scratchBytes : size_t(0)) + 63) /
                      64 * 64;
      const bool brgemm =
          made->impl.rfind("brg", 0) == 0 && (!slot[1].valid() || lastImpl.rfind("brg", 0) == 0);
      if (brgemm) {
        const int64_t tasks = batch * made->blocks;
        const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(tasks, omp_get_num_procs()));
        made->slots.assign(static_cast<size_t>(slots), slot);
        prims_.reset(made.release());
        return;
      }
    } catch (const dnnl::error &) {
      // no 16-bit matmul here: the emulation
    }
  }
  f32.prepare();
}

std::string LinalgHalfGemm::implementation() const { return prims_ ? prims_->impl : std::string(); }

size_t LinalgHalfGemm::workspaceBytes() const {
  // Rounded copies of f32 operands not kept, then the path's own.
  const size_t rounded = (aF32 && !aKeep ? linalgRoundUp(static_cast<size_t>(extentA()) * sizeof(uint16_t)) : 0) +
                         (bF32 && !bKeep ? linalgRoundUp(static_cast<size_t>(extentB()) * sizeof(uint16_t)) : 0);
  if (prims_)
    return rounded + prims_->slots.size() * prims_->scratch + 64;
  return rounded + linalgRoundUp(static_cast<size_t>(extentA()) * sizeof(float)) +
         linalgRoundUp(static_cast<size_t>(extentB()) * sizeof(float)) + f32.workspaceBytes() + 64;
}

size_t LinalgHalfGemm::heldBytes() const {
  return (aKeep ? static_cast<size_t>(extentA()) * sizeof(uint16_t) : 0) +
         (bKeep ? static_cast<size_t>(extentB()) * sizeof(uint16_t) : 0);
}

namespace {
class CpuHalfWeights final : public kernel::HalfWeights {
public:
  const uint16_t *rounded(const float *src, int64_t n, DType t, uint64_t step) override {
    Entry &e = entries_[{src, t}];
    const size_t room = static_cast<size_t>(n) + 32;
    if (e.data.size() != room) {
      bytes_ += room * sizeof(uint16_t);
      bytes_ -= e.data.size() * sizeof(uint16_t);
      e.data.assign(room, 0);
      e.made = false;
    }
    auto *dst = reinterpret_cast<uint16_t *>(linalgAlign(e.data.data()));
    if (!e.made || e.step != step) {
      linalgNarrowHalf(src, dst, n, t);
      e.made = true;
      e.step = step;
    }
    return dst;
  }
  size_t bytes() const override { return bytes_; }

private:
  struct Entry {
    std::vector<uint16_t> data;
    bool made = false;
    uint64_t step = 0;
  };
  std::map<std::pair<const float *, DType>, Entry> entries_;
  size_t bytes_ = 0;
};
} // namespace

std::unique_ptr<kernel::HalfWeights> makeCpuHalfWeights() { return std::make_unique<CpuHalfWeights>(); }

Status LinalgHalfGemm::run(const void *a16, const void *b16, float *C, void *workspace, const float *bias,
                           uint64_t step, kernel::HalfWeights *shared) const {
  const auto &g = f32;
  const int64_t batch = static_cast<int64_t>(g.cOff.size());
  if (batch == 0 || g.M == 0 || g.N == 0)
    return Status::ok();
  unsigned char *ws = static_cast<unsigned char *>(linalgAlign(workspace));
  // f32 operands rounded to `operands`: kept from the step's first run
  // (aKeep, bKeep) or made in the workspace.
  auto rounded = [&](const void *src, bool isF32, bool keep, int64_t n, Held &h) -> const uint16_t * {
    if (!isF32)
      return static_cast<const uint16_t *>(src);
    if (!keep) {
      auto *dst = reinterpret_cast<uint16_t *>(ws);
      linalgNarrowHalf(static_cast<const float *>(src), dst, n, operands);
      ws += linalgRoundUp(static_cast<size_t>(n) * sizeof(uint16_t));
      return dst;
    }
    if (shared)
      return shared->rounded(static_cast<const float *>(src), n, operands, step);
    // 64-byte aligned, as the arena's and the workspace's buffers.
    const size_t room = static_cast<size_t>(n) + 32;
    uint16_t *dst = reinterpret_cast<uint16_t *>(linalgAlign(h.data.data()));
    if (h.from != src || h.step != step || h.data.size() != room) {
      h.data.resize(room);
      dst = reinterpret_cast<uint16_t *>(linalgAlign(h.data.data()));
      h.from = nullptr;
      linalgNarrowHalf(static_cast<const float *>(src), dst, n, operands);
      h.from = src;
      h.step = step;
    }
    return dst;
  };
  const uint16_t *A = rounded(a16, aF32, aKeep, extentA(), held_[0]);
  const uint16_t *B = rounded(b16, bF32, bKeep, extentB(), held_[1]);
  if (!prims_) {
    float *a = reinterpret_cast<float *>(ws);
    float *b = reinterpret_cast<float *>(ws + linalgRoundUp(static_cast<size_t>(extentA()) * sizeof(float)));
    linalgWidenHalf(A, a, extentA(), operands);
    linalgWidenHalf(B, b, extentB(), operands);
    unsigned char *rest = reinterpret_cast<unsigned char *>(b) + linalgRoundUp(static_cast<size_t>(extentB()) * sizeof(float));
    return g.runPrepared(a, b, C, rest, false, bias);
  }
  const LinalgHalfPrims &p = *prims_;
  const int64_t tasks = batch * p.blocks;
  auto task = [&](int64_t t, size_t slot) -> Status {
    const int64_t b = t / p.blocks, m0 = t % p.blocks * p.rows, rows = std::min(p.rows, g.M - m0);
    const LinalgDnnlPrim &prim = p.slots[slot][rows == p.rows ? 0 : 1];
    float *c = C + g.cOff[static_cast<size_t>(b)] + m0 * g.ldc;
    const void *ptrs[3] = {A + g.aOff[static_cast<size_t>(b)] + (g.ta ? m0 : m0 * g.lda),
                           B + g.bOff[static_cast<size_t>(b)], c};
    PIPEC_TRY(prim.run(ptrs, ws + slot * p.scratch));
    if (g.act != FusedActivation::None || (g.bias && bias))
      linalgEpilogue<float>(c, rows, g.N, g.ldc, g.bias ? bias : nullptr, g.act);
    return Status::ok();
  };
  const int team = static_cast<int>(std::min<int64_t>({omp_get_max_threads(), tasks,
                                                       static_cast<int64_t>(p.slots.size())}));
  if (team <= 1) {
    LinalgOneThread one;
    for (int64_t t = 0; t < tasks; ++t)
      PIPEC_TRY(task(t, 0));
    return Status::ok();
  }
  std::vector<Status> st(static_cast<size_t>(tasks), Status::ok());
#pragma omp parallel num_threads(team)
  {
    omp_set_num_threads(1);
    const size_t slot = static_cast<size_t>(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t)
      st[static_cast<size_t>(t)] = task(t, slot);
  }
  for (Status &s : st)
    PIPEC_TRY(std::move(s));
  return Status::ok();
}

} // namespace pipec::cpu
