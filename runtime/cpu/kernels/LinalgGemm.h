//===- runtime/cpu/kernels/LinalgGemm.h - The GEMM front end of the kernels -*- C++ -*-===//
//
// LinalgBatchedGemm: every GEMM of the CPU kernels (MatMul, Gemm, Einsum,
// attention, convolution gradients) goes through it. It chooses, from the
// machine's facts alone (LinalgGemmChoice, LinalgGemmMachine: brgemm or
// not, threads), between cpu::sgemm tiles (oneDNN, OpenBLAS), prepared
// oneDNN matmul primitives (DnnlGemm.cpp), packed weights, blocks of rows
// and cuts along K, and realizes the choice in prepare();
// docs/cpu-linalg-kernels.md has the measurements behind each rule. A
// class template (float, double and the integer types), hence this long
// header.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/LinalgCommon.h"

namespace pipec::cpu {

/// A oneDNN matmul primitive for a whole batch of f32 GEMMs, defined in
/// runtime/cpu/kernels/DnnlGemm.cpp so that the kernels using
/// LinalgBatchedGemm need not include oneDNN's header.
struct LinalgDnnlGemm;
struct LinalgDnnlGemmDeleter {
  void operator()(LinalgDnnlGemm *p) const;
};
LinalgDnnlGemm *linalgDnnlGemmClone(const LinalgDnnlGemm &p);
size_t linalgDnnlGemmScratchBytes(const LinalgDnnlGemm &p);
/// `bias`: the N values of an epilogue prepared with one (else unused).
Status linalgDnnlGemmRun(const LinalgDnnlGemm &p, const float *A, const float *B, float *C,
                         void *scratch, const float *bias = nullptr);
/// Multiply-adds from which a GEMM with a step-invariant B runs packed.
inline constexpr double kPackedMinMacs = 1 << 20;
/// Total FLOPs of a batch of one-tile GEMMs above which the sgemm calls,
/// spread over the device's threads, beat one primitive (which runs the
/// batch on one thread): DnnlGemm.cpp.
inline constexpr double kBatchPrimitiveMaxFlops = 4e6;
/// The fewest rows a packed GEMM's blocks of whole rows may have
/// (LinalgBatchedGemm::prepare); below, it is cut into blocks of columns.
/// Each block reads all of B, so thinner blocks read B from memory more
/// often: the MLP's 128x1024x1024 layers ran slower in two blocks of 64
/// rows than in blocks of columns (docs/cpu-linalg-kernels.md).
inline constexpr int64_t kPackedBlockRows = 128;
/// The fewest rows of K each part of a GEMM cut along K has
/// (LinalgBatchedGemm::prepare).
inline constexpr int64_t kSplitMinK = 256;
/// The most bytes of C's partial sums a GEMM cut along K keeps.
inline constexpr size_t kSplitMaxBytes = size_t(16) << 20;
/// The largest dense buffer a tile's primitive writes before its copy into
/// C (LinalgBatchedGemm::prepare): the workspace holds one per tile.
inline constexpr size_t kTileBufferBytes = size_t(1) << 20;
/// One GEMM as a oneDNN matmul on B in oneDNN's layout, B reordered only
/// when its address changes (inference weights: once); null where oneDNN
/// keeps B's plain layout or the product is small (DnnlGemm.cpp). An
/// epilogue (`act`, a bias with `bias`) runs as the primitive's bias and
/// eltwise post-op.
LinalgDnnlGemm *linalgDnnlGemmPreparePacked(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                            int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                                            float beta, FusedActivation act = FusedActivation::None,
                                            bool bias = false);
/// A primitive for M rows of the leader's product (a packed one) that
/// takes B in the leader's blocked layout from linalgDnnlGemmHold instead
/// of holding a copy of its own; null where its layout would differ.
LinalgDnnlGemm *linalgDnnlGemmFollower(const LinalgDnnlGemm &leader, bool ta, bool tb, int64_t M, int64_t N,
                                       int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta,
                                       FusedActivation act, bool bias);
/// The leader's copy of B in its blocked layout, reordered now unless it is
/// current (B's address unchanged). Not concurrently with itself.
Status linalgDnnlGemmHold(const LinalgDnnlGemm &leader, const float *B, void *scratch, const float **held);
/// A leader's or follower's product on B already in the blocked layout.
Status linalgDnnlGemmRunOnHeld(const LinalgDnnlGemm &p, const float *A, const float *heldB, float *C,
                               void *scratch, const float *bias = nullptr);
/// The primitive for a batch of `batch` GEMMs whose operands lie sa, sb and
/// sc elements apart, or null where it would not be faster than the sgemm
/// calls or is not one primitive (DnnlGemm.cpp says which). An epilogue
/// (one GEMM only) as in linalgDnnlGemmPreparePacked.
LinalgDnnlGemm *linalgDnnlGemmPrepare(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                      int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                                      float beta, int64_t batch, int64_t sa, int64_t sb,
                                      int64_t sc, FusedActivation act = FusedActivation::None,
                                      bool bias = false);

/// One GEMM as a matmul on plain operands (a part of a GEMM cut along K,
/// a block of its rows: LinalgBatchedGemm::prepare), with an epilogue as
/// in linalgDnnlGemmPreparePacked, or null unless oneDNN runs it with its
/// brgemm kernel.
LinalgDnnlGemm *linalgDnnlGemmPrepareBrgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                            int64_t ldb, int64_t ldc, float alpha, float beta,
                                            FusedActivation act = FusedActivation::None, bool bias = false);

/// Owns a LinalgDnnlGemm; a copy holds a copy of its own (a primitive's
/// memory objects are bound per object, and copies of a kernel's GEMM may
/// run on different threads at once).
class LinalgDnnlGemmHolder {
public:
  LinalgDnnlGemmHolder() = default;
  LinalgDnnlGemmHolder(const LinalgDnnlGemmHolder &o)
      : p_(o.p_ ? linalgDnnlGemmClone(*o.p_) : nullptr) {}
  LinalgDnnlGemmHolder(LinalgDnnlGemmHolder &&) = default;
  LinalgDnnlGemmHolder &operator=(const LinalgDnnlGemmHolder &o) {
    if (this != &o)
      p_.reset(o.p_ ? linalgDnnlGemmClone(*o.p_) : nullptr);
    return *this;
  }
  LinalgDnnlGemmHolder &operator=(LinalgDnnlGemmHolder &&) = default;
  void reset(LinalgDnnlGemm *p) { p_.reset(p); }
  const LinalgDnnlGemm *get() const { return p_.get(); }

private:
  std::unique_ptr<LinalgDnnlGemm, LinalgDnnlGemmDeleter> p_;
};

/// The facts of a machine that LinalgBatchedGemm::choose decides on,
/// passed in, so that a test checks the choice for any machine on its own.
struct LinalgGemmMachine {
  /// f32 GEMMs may go to oneDNN (oneDnnEnabled()).
  bool oneDnn = false;
  /// oneDNN runs a plain-layout f32 matmul with its brgemm kernel and
  /// offers a blocked layout of B for one: oneDNN 2.6 does from
  /// avx512_core on; on AVX2 its matmul is its sgemm (gemm:jit) with B as
  /// it is. Probed once (DnnlGemm.cpp), so it follows PIPEC_MAX_CPU_ISA.
  bool brgemm = false;
  /// This process's machine.
  static LinalgGemmMachine host();
};
/// oneDNN's brgemm probe of LinalgGemmMachine::host (DnnlGemm.cpp).
bool linalgDnnlHasBrgemm();
inline LinalgGemmMachine LinalgGemmMachine::host() {
  LinalgGemmMachine m;
  m.oneDnn = prepareSgemm();
  m.brgemm = m.oneDnn && linalgDnnlHasBrgemm();
  return m;
}

/// The paths of one LinalgBatchedGemm (choose(), prepare()); all empty:
/// the sgemm tiles.
struct LinalgGemmChoice {
  int64_t packedRows = 0;      ///< blocks of whole rows on B packed once (inference)
  bool packedColumns = false;  ///< a primitive per column block on B packed once
  int64_t plainRows = 0;       ///< blocks of whole rows on B as it is
  bool tilePrimitives = false; ///< a plain-layout primitive per tile (B transposed)
  int64_t splitDepth = 0;      ///< parts along K of this depth (weight gradients)
  bool batchPrimitive = false; ///< one primitive for the whole batch
  bool openBlasTiles = false;  ///< the sgemm tiles call OpenBLAS, not oneDNN
  bool operator==(const LinalgGemmChoice &) const = default;
};

/// A batch of GEMMs C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] with
/// per-batch element offsets, run deterministically in parallel.
///
/// OpenBLAS's own threading changes results with the thread count (its
/// threaded driver blocks K differently; LinalgKernelsTest measures this),
/// so every BLAS call made here is single-threaded, and the parallelism is
/// ours: each GEMM is cut into tiles of C whose sizes depend on the shape
/// only (tiling(): about 128 MFLOP a tile, an even count from 32 MFLOP on,
/// at most 8, a grid as square as tiles of >= 128 rows and columns allow),
/// and the tiles of all batches are spread over the threads. Each output
/// element is then computed by the same BLAS call whatever the thread
/// count.
template <typename T> struct LinalgBatchedGemm {
  bool ta = false, tb = false;
  /// Whether f32 calls may go to oneDNN (runtime/cpu/Gemm.h), fixed when
  /// the kernel is prepared (which also runs oneDNN's one-time setup).
  bool oneDnn = std::is_same_v<T, float> ? prepareSgemm() : oneDnnEnabled();
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  T alpha = T(1), beta = T(0);
  std::vector<int64_t> aOff, bOff, cOff;
  /// B changes only between steps (OpDesc::stepInvariant): prepare() may
  /// prepare one GEMM on B packed once (runPrepared's `packed`).
  bool bStepInvariant = false;
  /// The epilogue (f32, one GEMM): a bias row (runPrepared's `bias`) and
  /// an activation applied to C after the product.
  FusedActivation act = FusedActivation::None;
  bool bias = false;

  /// Tiles of C: tm x tn tiles of mc x nc elements (edge tiles smaller).
  struct Tiling {
    int64_t tm = 1, tn = 1, mc = 0, nc = 0;
  };
  /// About one tile per 128 MFLOP, an even number from 32 MFLOP on (an
  /// odd count leaves one of two threads idle for a third to a half of the
  /// product), at most 8; the grid of tiles as square as the shape allows
  /// (tiles at least 128 rows and columns), the longer side cut more.
  /// Each tile call packs its own panels of A and B, so fewer and squarer
  /// grids pack less (a layer's weight gradients ran faster in fewer or
  /// squarer tiles: docs/cpu-linalg-kernels.md). The tiling depends on the
  /// shape alone, never on the thread count.
  Tiling tiling() const {
    double work = 2.0 * double(M) * double(N) * double(K);
    int64_t target = static_cast<int64_t>(std::clamp(work / 128e6, 1.0, 8.0));
    if (target % 2 == 1 && work >= 32e6)
      ++target;
    Tiling t;
    if (M == 0 || N == 0)
      return t;
    const int64_t maxM = std::max<int64_t>(1, M / 128), maxN = std::max<int64_t>(1, N / 128);
    // The largest even count up to the target that a grid fits (else one
    // tile), in its most square grid; a tie cuts the longer side more.
    auto skew = [](int64_t a, int64_t b) { return std::max(a, b) / std::min(a, b); };
    int64_t bestM = 1, bestN = 1;
    for (int64_t count = target - target % 2; count >= 2 && bestM * bestN == 1; count -= 2)
      for (int64_t tm = 1; tm <= count; ++tm) {
        const int64_t tn = count / tm;
        if (count % tm != 0 || tm > maxM || tn > maxN)
          continue;
        if (bestM * bestN == 1 || skew(tm, tn) < skew(bestM, bestN) ||
            (skew(tm, tn) == skew(bestM, bestN) && (M >= N ? tm > bestM : tn > bestN))) {
          bestM = tm;
          bestN = tn;
        }
      }
    t.mc = roundUp16((M + bestM - 1) / bestM);
    t.nc = roundUp16((N + bestN - 1) / bestN);
    t.tm = (M + t.mc - 1) / t.mc;
    t.tn = (N + t.nc - 1) / t.nc;
    return t;
  }

  /// Whether each GEMM of the batch is one call on the whole of C (which
  /// then runs on one thread, whatever the device's thread count).
  bool oneTile() const {
    Tiling t = tiling();
    return t.tm == 1 && t.tn == 1;
  }

  /// The paths prepare() takes for these fields on `machine`: the shape,
  /// the flags and the machine's facts decide, nothing else (tests ask it
  /// for machines other than their own). Each rule is in a comment below;
  /// docs/cpu-linalg-kernels.md has the timings behind them.
  LinalgGemmChoice choose(const LinalgGemmMachine &machine) const {
    LinalgGemmChoice c;
    if constexpr (std::is_same_v<T, float>) {
      const int64_t batch = static_cast<int64_t>(cOff.size());
      if (!machine.oneDnn || batch == 0 || M <= 0 || N <= 0 || K <= 0)
        return c;
      // The sgemm tiles' library. Without brgemm (AVX2), oneDNN 2.6's
      // sgemm runs products with B plain (NN, and A transposed: TN) well
      // below OpenBLAS's rate on some of the training step's shapes, where
      // B is 64-byte aligned (the runtime's buffers are); OpenBLAS held its
      // rate on every shape and transposition timed, and with B transposed
      // (NT, the forward layers) oneDNN was as fast or faster
      // (docs/cpu-linalg-kernels.md). With brgemm (avx512_core) oneDNN's
      // sgemm beats OpenBLAS's AVX2 kernels (Gemm.h).
      c.openBlasTiles = !machine.brgemm && !(tb && !ta);
      const Tiling tl = tiling();
      const int64_t count = tl.tm * tl.tn, mc = (M + count - 1) / count;
      // Every path but the batch's one primitive needs oneDNN's brgemm:
      // without it (AVX2) a primitive is oneDNN's sgemm with B as it is,
      // and a tile's primitive would only add the copy out of its dense
      // buffer.
      const bool brgemm = machine.brgemm && batch == 1;
      // One GEMM on step-invariant B (a layer's weights in inference), in
      // oneDNN's blocked layout, packed once. Where the tiling cuts the
      // rows (tm > 1), C's rows are whole (ldc == N) and the tiles would
      // hold at least kPackedBlockRows rows each: as many blocks of whole
      // rows as there are tiles, each a dense destination (oneDNN's
      // brgemm), run by one primitive each that reads B in the blocked
      // layout the first one holds (one copy of B; each block rereads all
      // of B, so blocks have at least kPackedBlockRows rows: 32
      // multiply-adds a byte of B). A GELU runs after each block as the
      // sgemm tiles' epilogue computes it: oneDNN's post-op cost more.
      // The blocks beat the sgemm tiles (docs/cpu-linalg-kernels.md).
      // oneDNN keeps B's plain layout where A is transposed: those keep
      // the tiles. Where the tiles span all rows (tm == 1): a packed
      // primitive per column block, each holding its block of B (blocks
      // of 64 whole rows, the MLP's 128x1024x1024 in two, ran slower:
      // kPackedBlockRows), each block at least kPackedMinMacs.
      const bool packable = brgemm && bStepInvariant;
      if (packable && tl.tm > 1 && ldc == N && !ta && mc >= kPackedBlockRows)
        c.packedRows = mc;
      c.packedColumns = packable && tl.tm == 1 && !ta &&
                        double(M) * double(N - (tl.tn - 1) * tl.nc) * double(K) >= kPackedMinMacs;
      // The same blocks of whole rows on B as it is, for the runs that do
      // not pack it (training, where B changes every step), where C is at
      // least four times as wide as K is deep (a layer that widens its
      // input, and the input gradient of one that narrows it): each
      // block's primitive packs B itself, and its dense destination takes
      // oneDNN's brgemm. The blocks won on products this wide; on narrower
      // ones the tiles were as fast or faster (docs/cpu-linalg-kernels.md).
      if (brgemm && !ta && N >= 4 * K && ldc == N && tl.tm > 1 && mc >= kPackedBlockRows)
        c.plainRows = mc;
      // One GEMM of several tiles with B transposed: a plain-layout
      // primitive per tile (oneDNN's brgemm matmul), each with its own
      // scratch, since tiles run on different threads at once. oneDNN 2.6
      // takes brgemm only for a dense destination (a tile of a wider C runs
      // as its sgemm), so a tile narrower than C's rows is written into a
      // dense buffer of at most kTileBufferBytes and then copied into C;
      // larger ones keep the sgemm path (prepare()).
      c.tilePrimitives = brgemm && tb && count > 1 && c.plainRows == 0;
      // One GEMM of several tiles with A transposed and B plain (a weight
      // gradient, X^T dY) whose C is at least as tall as wide: cut along
      // K instead, into 2 parts (4 from 8 tiles on), at least kSplitMinK
      // deep. Each part is a whole M x N product on contiguous rows of A
      // and B, which oneDNN runs as brgemm; cut into tiles, A's columns
      // are strided and it does not. Part 0 writes C (with beta), the
      // others a dense buffer each, and C then adds them in part order:
      // the sums depend on the shape only. The parts beat 2x2 sgemm tiles
      // where C is at least as tall as wide (docs/cpu-linalg-kernels.md).
      // Where C is wider than tall A is the smaller operand, the tiles
      // read it well, and the partial sums cost more than brgemm saves.
      if (brgemm && ta && !tb && M >= N && ldc == N && count > 1 && act == FusedActivation::None && !bias) {
        int64_t parts = std::min<int64_t>(count >= 8 ? 4 : 2, K / kSplitMinK);
        const int64_t kc = parts >= 2 ? roundUp16((K + parts - 1) / parts) : K;
        parts = (K + kc - 1) / kc;
        const size_t buffer = linalgRoundUp(static_cast<size_t>(M * N) * sizeof(float));
        if (parts >= 2 && size_t(parts - 1) * buffer <= kSplitMaxBytes)
          c.splitDepth = kc;
      }
      // One tile per GEMM: the whole batch as one primitive where its
      // operands are equally far apart and linalgDnnlGemmPrepare finds it
      // faster than the sgemm calls (a batch of small products; one GEMM
      // with B transposed, where oneDNN has brgemm).
      const double macs = double(M) * double(N) * double(K);
      const bool epilogue = bias || act != FusedActivation::None;
      if (count == 1 && (batch > 1 ? !epilogue && 2.0 * macs * double(batch) <= kBatchPrimitiveMaxFlops
                                   : machine.brgemm && tb && macs >= kOneDnnMinMacs)) {
        const int64_t sa = batch > 1 ? aOff[1] - aOff[0] : 0;
        const int64_t sb = batch > 1 ? bOff[1] - bOff[0] : 0;
        const int64_t sc = batch > 1 ? cOff[1] - cOff[0] : 0;
        bool even = sa >= 0 && sb >= 0 && sc >= 0;
        for (int64_t b = 0; b < batch && even; ++b)
          even = aOff[b] == aOff[0] + b * sa && bOff[b] == bOff[0] + b * sb && cOff[b] == cOff[0] + b * sc;
        c.batchPrimitive = even && (batch == 1 || sc != 0);
      }
    }
    return c;
  }

  /// For f32 with oneDNN enabled, prepares the oneDNN primitives of
  /// choose()'s paths on this machine; runPrepared() then uses them. A
  /// path whose primitive oneDNN declines (null) falls back to the sgemm
  /// tiles. Call once the fields are set; a later change of them needs
  /// another prepare().
  void prepare() {
    dnnl_.reset(nullptr);
    packed_.clear();
    packedWs_.clear();
    packedRows_ = 0;
    blockAct_ = FusedActivation::None;
    tilePrims_.clear();
    tileWs_.clear();
    splitPrims_.clear();
    splitWs_.clear();
    splitK_ = 0;
    rowPrims_.clear();
    rowWs_.clear();
    rowRows_ = 0;
    packedWsBytes_ = tileWsBytes_ = splitWsBytes_ = rowWsBytes_ = 0;
    tilesOnOneDnn_ = oneDnn;
    if constexpr (std::is_same_v<T, float>) {
      const LinalgGemmChoice choice = choose(LinalgGemmMachine::host());
      tilesOnOneDnn_ = oneDnn && !choice.openBlasTiles;
      const Tiling tl = tiling();
      // A GELU runs after each block of rows (blockAct_), not as a post-op.
      const bool ours = act == FusedActivation::GeluErf || act == FusedActivation::GeluTanh;
      if (const int64_t mc = choice.packedRows) {
        const FusedActivation primAct = ours ? FusedActivation::None : act;
        size_t ws = 0;
        for (int64_t m0 = 0; m0 < M; m0 += mc) {
          const int64_t rows = std::min(mc, M - m0);
          LinalgDnnlGemmHolder h;
          h.reset(m0 == 0 ? linalgDnnlGemmPreparePacked(false, tb, rows, N, K, lda, ldb, ldc, alpha,
                                                        beta, primAct, bias)
                          : linalgDnnlGemmFollower(*packed_[0].get(), false, tb, rows, N, K, lda,
                                                   ldb, ldc, alpha, beta, primAct, bias));
          if (!appendPrim(packed_, packedWs_, ws, std::move(h)))
            break;
        }
        if (!packed_.empty()) {
          packedRows_ = mc;
          blockAct_ = ours ? act : FusedActivation::None;
        }
        packedWsBytes_ = ws;
      }
      if (const int64_t mc = choice.plainRows) {
        size_t ws = 0;
        for (int64_t m0 = 0; m0 < M; m0 += mc) {
          LinalgDnnlGemmHolder h;
          h.reset(linalgDnnlGemmPrepareBrgemm(false, tb, std::min(mc, M - m0), N, K, lda, ldb, ldc, alpha, beta,
                                              ours ? FusedActivation::None : act, bias));
          if (!appendPrim(rowPrims_, rowWs_, ws, std::move(h)))
            break;
        }
        if (!rowPrims_.empty()) {
          rowRows_ = mc;
          blockAct_ = ours ? act : FusedActivation::None;
        }
        rowWsBytes_ = ws;
      }
      if (choice.packedColumns) {
        size_t ws = 0;
        for (int64_t j = 0; j < tl.tn; ++j) {
          const int64_t nc = std::min(tl.nc, N - j * tl.nc);
          LinalgDnnlGemmHolder h;
          h.reset(
              linalgDnnlGemmPreparePacked(ta, tb, M, nc, K, lda, ldb, ldc, alpha, beta, act, bias));
          if (!appendPrim(packed_, packedWs_, ws, std::move(h)))
            break;
        }
        packedWsBytes_ = ws;
      }
      if (choice.tilePrimitives) {
        size_t ws = 0;
        for (int64_t t = 0; t < tl.tm * tl.tn; ++t) {
          const int64_t m0 = t / tl.tn * tl.mc, n0 = t % tl.tn * tl.nc;
          const int64_t rows = std::min(tl.mc, M - m0), cols = std::min(tl.nc, N - n0);
          const bool direct = cols == ldc;
          const size_t buffer =
              direct ? 0 : linalgRoundUp(static_cast<size_t>(rows * cols) * sizeof(float));
          LinalgDnnlGemmHolder h;
          if (buffer <= kTileBufferBytes)
            h.reset(linalgDnnlGemmPrepare(ta, tb, rows, cols, K, lda, ldb, direct ? ldc : cols,
                                          alpha, beta, 1, 0, 0, 0, act, bias));
          if (!appendPrim(tilePrims_, tileWs_, ws, std::move(h), buffer))
            break;
        }
        tileWsBytes_ = ws;
      }
      if (const int64_t kc = choice.splitDepth) {
        const int64_t parts = (K + kc - 1) / kc;
        const size_t buffer = linalgRoundUp(static_cast<size_t>(M * N) * sizeof(float));
        size_t ws = 0;
        for (int64_t p = 0; p < parts; ++p) {
          const int64_t depth = std::min(kc, K - p * kc);
          LinalgDnnlGemmHolder h;
          h.reset(linalgDnnlGemmPrepareBrgemm(ta, tb, M, N, depth, lda, ldb, ldc, alpha,
                                              p == 0 ? beta : 0.0f));
          if (!appendPrim(splitPrims_, splitWs_, ws, std::move(h), p == 0 ? 0 : buffer))
            break;
        }
        if (!splitPrims_.empty())
          splitK_ = kc;
        splitWsBytes_ = ws;
      }
      if (choice.batchPrimitive) {
        const int64_t batch = static_cast<int64_t>(cOff.size());
        const int64_t sa = batch > 1 ? aOff[1] - aOff[0] : 0;
        const int64_t sb = batch > 1 ? bOff[1] - bOff[0] : 0;
        const int64_t sc = batch > 1 ? cOff[1] - cOff[0] : 0;
        dnnlOffsets_[0] = aOff[0];
        dnnlOffsets_[1] = bOff[0];
        dnnlOffsets_[2] = cOff[0];
        dnnl_.reset(linalgDnnlGemmPrepare(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, batch, sa, sb,
                                          sc, act, bias));
      }
    }
  }

  /// The paths prepare() built: choose()'s, less those whose primitives
  /// oneDNN declined.
  LinalgGemmChoice prepared() const {
    LinalgGemmChoice c;
    c.packedRows = packedRows_;
    c.packedColumns = packedRows_ == 0 && !packed_.empty();
    c.plainRows = rowRows_;
    c.tilePrimitives = !tilePrims_.empty();
    c.splitDepth = splitK_;
    c.batchPrimitive = dnnl_.get() != nullptr;
    c.openBlasTiles = oneDnn && !tilesOnOneDnn_;
    return c;
  }

  /// Rows of each packed block of rows (prepare()), 0 where none.
  int64_t packedRowBlock() const { return packedRows_; }
  /// Rows of each block of rows on B as it is (prepare()), 0 where none.
  int64_t plainRowBlock() const { return rowRows_; }
  /// Depth of each part of a GEMM cut along K (prepare()), 0 where none.
  int64_t splitDepth() const { return splitK_; }

  /// Scratch memory runPrepared() needs (its `workspace`, 64-byte aligned).
  size_t workspaceBytes() const {
    return std::max({packedWsBytes_, tileWsBytes_, splitWsBytes_, rowWsBytes_,
                     dnnl_.get() ? linalgDnnlGemmScratchBytes(*dnnl_.get()) : size_t(0)});
  }

  /// run(), through the prepared primitive when there is one, on one
  /// thread (the primitive was made for one: each element is reduced in
  /// the same order whatever the device's thread count).
  /// `packed`: B never changes (inference), so a packed primitive's
  /// reorder of it runs once; in training B changes every step, and its
  /// reorder costs more than packing saves (bench/results/log.md), so the
  /// plain path runs.
  /// `biasData`: the epilogue's bias (N values) when `bias` is set.
  Status runPrepared(const T *A, const T *B, T *C, void *workspace, bool packed = false,
                     const T *biasData = nullptr) const {
    if constexpr (std::is_same_v<T, float>) {
      if (packed && packedRows_ > 0) {
        // Blocks of rows on B packed once (prepare()): the first block's
        // primitive reorders it unless its copy is current, before the
        // blocks run at once.
        unsigned char *ws = static_cast<unsigned char *>(workspace);
        const float *held = nullptr;
        {
          LinalgOneThread one;
          PIPEC_TRY(linalgDnnlGemmHold(*packed_[0].get(), B + bOff[0], ws + packedWs_[0], &held));
        }
        return runRowBlocks(packed_, packedWs_, packedRows_, C, ws, [&](const LinalgDnnlGemm &p, int64_t m0,
                                                                         float *c, unsigned char *scratch) {
          return linalgDnnlGemmRunOnHeld(p, A + aOff[0] + m0 * lda, held, c, scratch, biasData);
        });
      }
      if (packed && !packed_.empty()) {
        const int64_t nc = tiling().nc, blocks = static_cast<int64_t>(packed_.size());
        auto block = [&](int64_t j) {
          const int64_t n0 = j * nc;
          return linalgDnnlGemmRun(*packed_[static_cast<size_t>(j)].get(), A + aOff[0],
                                   B + bOff[0] + (tb ? n0 * ldb : n0), C + cOff[0] + n0,
                                   static_cast<unsigned char *>(workspace) + packedWs_[static_cast<size_t>(j)],
                                   biasData ? biasData + n0 : nullptr);
        };
        return runBlocks(blocks, block);
      }
      if (!rowPrims_.empty() && workspace)
        return runRowBlocks(rowPrims_, rowWs_, rowRows_, C, static_cast<unsigned char *>(workspace),
                            [&](const LinalgDnnlGemm &p, int64_t m0, float *c, unsigned char *scratch) {
                              return linalgDnnlGemmRun(p, A + aOff[0] + m0 * lda, B + bOff[0], c, scratch, biasData);
                            });
      if (!splitPrims_.empty() && workspace)
        return runSplit(A, B, C, static_cast<unsigned char *>(workspace));
      if (const LinalgDnnlGemm *p = dnnl_.get()) {
        LinalgOneThread one;
        return linalgDnnlGemmRun(*p, A + dnnlOffsets_[0], B + dnnlOffsets_[1],
                                 C + dnnlOffsets_[2], workspace, biasData);
      }
    }
    return runTiles(A, B, C, biasData, workspace);
  }

  /// The sgemm path: the epilogue (act, biasData) runs on each tile of C
  /// after its product, while the tile is in cache.
  void run(const T *A, const T *B, T *C, const T *biasData = nullptr) const {
    (void)runTiles(A, B, C, biasData, nullptr); // no primitive: cannot fail
  }

private:
  /// Appends the prepared primitive `h` to `prims` at workspace offset
  /// `ws`, which grows by `extra` bytes of its own and its scratch; where
  /// `h` is null (oneDNN offered nothing better), empties `prims`,
  /// `offsets` and `ws` and returns false.
  static bool appendPrim(std::vector<LinalgDnnlGemmHolder> &prims, std::vector<size_t> &offsets, size_t &ws,
                         LinalgDnnlGemmHolder h, size_t extra = 0) {
    if (!h.get()) {
      prims.clear();
      offsets.clear();
      ws = 0;
      return false;
    }
    offsets.push_back(ws);
    ws += extra + (linalgDnnlGemmScratchBytes(*h.get()) + 127) / 64 * 64;
    prims.push_back(std::move(h));
    return true;
  }

  /// block(j) for j in [0, blocks), spread over the threads, each call on
  /// one thread; the first failure's status.
  template <typename F> static Status runBlocks(int64_t blocks, F &&block) {
    const int threads = omp_get_max_threads();
    if (blocks == 1 || threads == 1) {
      LinalgOneThread one;
      for (int64_t j = 0; j < blocks; ++j)
        PIPEC_TRY(block(j));
      return Status::ok();
    }
    std::vector<Status> st(static_cast<size_t>(blocks), Status::ok());
#pragma omp parallel num_threads(static_cast<int>(std::min<int64_t>(threads, blocks)))
    {
      omp_set_num_threads(1);
#pragma omp for schedule(static)
      for (int64_t j = 0; j < blocks; ++j)
        st[static_cast<size_t>(j)] = block(j);
    }
    for (Status &s : st)
      PIPEC_TRY(std::move(s));
    return Status::ok();
  }

  /// Blocks of `rows` whole rows of C, one primitive each (`prims`, their
  /// scratch at `offsets` in `ws`), at once: product(prim, first row, the
  /// block of C, scratch), then the activation the primitives leave out.
  template <typename Product>
  Status runRowBlocks(const std::vector<LinalgDnnlGemmHolder> &prims, const std::vector<size_t> &offsets,
                      int64_t rows, float *C, unsigned char *ws, Product &&product) const {
    return runBlocks(static_cast<int64_t>(prims.size()), [&](int64_t j) -> Status {
      const int64_t m0 = j * rows;
      float *c = C + cOff[0] + m0 * ldc;
      PIPEC_TRY(product(*prims[static_cast<size_t>(j)].get(), m0, c, ws + offsets[static_cast<size_t>(j)]));
      if (blockAct_ != FusedActivation::None)
        linalgEpilogue<float>(c, std::min(rows, M - m0), N, ldc, nullptr, blockAct_);
      return Status::ok();
    });
  }

  /// The product cut along K (prepare()): the parts at once, part p > 0
  /// into its buffer, then C += each buffer in part order, rows spread
  /// over the threads.
  Status runSplit(const float *A, const float *B, float *C, unsigned char *ws) const {
    const int64_t parts = static_cast<int64_t>(splitPrims_.size());
    // Where each part writes (at most 4 parts: prepare()): C for part 0,
    // else its buffer.
    std::array<float *, 4> dst{};
    for (int64_t p = 0; p < parts; ++p)
      dst[static_cast<size_t>(p)] =
          p == 0 ? C + cOff[0] : reinterpret_cast<float *>(linalgAlign(ws + splitWs_[static_cast<size_t>(p)]));
    const size_t bufferBytes = linalgRoundUp(static_cast<size_t>(M * N) * sizeof(float));
    PIPEC_TRY(runBlocks(parts, [&](int64_t p) -> Status {
      const int64_t k0 = p * splitK_;
      const float *a = A + aOff[0] + k0 * lda; // A transposed: [K, M]
      const float *b = B + bOff[0] + k0 * ldb;
      float *c = dst[static_cast<size_t>(p)];
      unsigned char *scratch = p == 0 ? ws + splitWs_[0] : reinterpret_cast<unsigned char *>(c) + bufferBytes;
      return linalgDnnlGemmRun(*splitPrims_[static_cast<size_t>(p)].get(), a, b, c, scratch);
    }));
    float *c0 = dst[0];
    [[maybe_unused]] const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), M));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t m = 0; m < M; ++m) {
      float *row = c0 + m * ldc;
      for (int64_t p = 1; p < parts; ++p) {
        const float *part = dst[static_cast<size_t>(p)] + m * N;
#pragma omp simd
        for (int64_t n = 0; n < N; ++n)
          row[n] += part[n];
      }
    }
    return Status::ok();
  }

  /// run(), with the tiles' primitives (prepare()) where `workspace` is
  /// given: those run the epilogue as post-ops.
  Status runTiles(const T *A, const T *B, T *C, const T *biasData, void *workspace) const {
    int64_t batch = static_cast<int64_t>(cOff.size());
    if (batch == 0 || M == 0 || N == 0)
      return Status::ok();
    double work = 2.0 * double(M) * double(N) * double(K);
    const Tiling tl = tiling();
    const int64_t tm = tl.tm, tn = tl.tn, mc = tl.mc, nc = tl.nc;
    int64_t perGemm = tm * tn, total = batch * perGemm;
    bool tiny = work <= 2048.0;
    const bool prims = workspace && !tilePrims_.empty();
    std::array<Status, 8> failed; // per tile of one GEMM (tiling(): at most 8) where prims
    auto tile = [&](int64_t t) {
      int64_t b = t / perGemm, r = t % perGemm;
      int64_t m0 = r / tn * mc, n0 = r % tn * nc;
      int64_t m1 = std::min(M, m0 + mc), n1 = std::min(N, n0 + nc);
      const T *a = A + aOff[b] + (ta ? m0 : m0 * lda);
      const T *bm = B + bOff[b] + (tb ? n0 * ldb : n0);
      T *c = C + cOff[b] + m0 * ldc + n0;
      if constexpr (std::is_same_v<T, float>) {
        if (prims) {
          const size_t i = static_cast<size_t>(t);
          const float *tileBias = bias && biasData ? biasData + n0 : nullptr;
          unsigned char *ws = static_cast<unsigned char *>(workspace) + tileWs_[i];
          const int64_t rows = m1 - m0, cols = n1 - n0;
          if (cols == ldc) { // C's rows whole: dense already
            failed[i] = linalgDnnlGemmRun(*tilePrims_[i].get(), a, bm, c, ws, tileBias);
            return;
          }
          // The product in the dense buffer (with beta, C's tile is copied
          // in for the sum post-op), then copied into C.
          float *dense = reinterpret_cast<float *>(linalgAlign(ws));
          if (beta != 0.0f)
            for (int64_t m = 0; m < rows; ++m)
              std::copy(c + m * ldc, c + m * ldc + cols, dense + m * cols);
          failed[i] = linalgDnnlGemmRun(
              *tilePrims_[i].get(), a, bm, dense,
              reinterpret_cast<unsigned char *>(dense) + linalgRoundUp(static_cast<size_t>(rows * cols) * sizeof(float)),
              tileBias);
          for (int64_t m = 0; m < rows; ++m)
            std::copy(dense + m * cols, dense + (m + 1) * cols, c + m * ldc);
          return;
        }
      }
      if (tiny)
        linalgGemmLoop<T>(ta, tb, m1 - m0, n1 - n0, K, alpha, a, lda, bm, ldb, beta, c, ldc);
      else
        linalgGemm<T>(ta, tb, m1 - m0, n1 - n0, K, alpha, a, lda, bm, ldb, beta, c, ldc, tilesOnOneDnn_);
      if (act != FusedActivation::None || (bias && biasData))
        linalgEpilogue<T>(c, m1 - m0, n1 - n0, ldc, bias && biasData ? biasData + n0 : nullptr, act);
    };
    int threads = omp_get_max_threads();
    if (total == 1 || threads == 1 || double(batch) * work < 65536.0) {
      // One thread: keep BLAS from threading the call itself.
      LinalgOneThread one;
      for (int64_t t = 0; t < total; ++t)
        tile(t);
    } else {
      int team = static_cast<int>(std::min<int64_t>(threads, total));
#pragma omp parallel num_threads(team)
      {
        // Per-task setting: BLAS calls inside run on this thread only, even
        // when the team has one thread and the region is inactive.
        omp_set_num_threads(1);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < total; ++t)
          tile(t);
      }
    }
    for (Status &s : failed)
      PIPEC_TRY(std::move(s));
    return Status::ok();
  }

  static int64_t roundUp16(int64_t v) { return (v + 15) / 16 * 16; }
  /// Whether the sgemm tiles call oneDNN (prepare(): oneDnn, less
  /// choose()'s openBlasTiles; oneDnn until a prepare()).
  bool tilesOnOneDnn_ = oneDnn;
  LinalgDnnlGemmHolder dnnl_;
  int64_t dnnlOffsets_[3] = {0, 0, 0};
  /// Packed primitives per column block and their workspace offsets.
  /// Packed primitives (prepare()): one per column block, or with
  /// packedRows_ > 0 one per block of packedRows_ rows, the first holding
  /// B and the others following it; blockAct_: the activation run after
  /// each block of rows, packed or plain (GELU), the primitives' post-ops
  /// having none.
  std::vector<LinalgDnnlGemmHolder> packed_;
  std::vector<size_t> packedWs_;
  size_t packedWsBytes_ = 0;
  int64_t packedRows_ = 0;
  FusedActivation blockAct_ = FusedActivation::None;
  /// Plain-layout primitives per block of rowRows_ whole rows (prepare()),
  /// B as it is, and their workspace offsets.
  std::vector<LinalgDnnlGemmHolder> rowPrims_;
  std::vector<size_t> rowWs_;
  size_t rowWsBytes_ = 0;
  int64_t rowRows_ = 0;
  /// Primitives per part of a GEMM cut along K (prepare()), splitK_ deep
  /// (the last part shallower), and their workspace offsets: part p > 0's
  /// buffer of C's M x N partial sums, then its scratch.
  std::vector<LinalgDnnlGemmHolder> splitPrims_;
  std::vector<size_t> splitWs_;
  size_t splitWsBytes_ = 0;
  int64_t splitK_ = 0;
  /// Plain-layout primitives per tile of a tiled GEMM with B transposed,
  /// and their workspace offsets.
  std::vector<LinalgDnnlGemmHolder> tilePrims_;
  std::vector<size_t> tileWs_;
  size_t tileWsBytes_ = 0;
};

} // namespace pipec::cpu
