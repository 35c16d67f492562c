//===- runtime/cpu/kernels/DnnlCommon.h - oneDNN plumbing for Linalg kernels -*- C++ -*-===//
//
// One CPU engine shared by every kernel, a stream per calling thread, and a
// prepared primitive that binds raw pointers at run time. Primitives are
// created in kernel factories (prepare once, run many) with a user-managed
// scratchpad, so their scratch memory comes from the kernel's workspace (the
// device arena) rather than from oneDNN's own allocator.
//
// oneDNN reports errors with exceptions; nothing here lets one escape: a
// failure becomes a Status (at run time) or makes the factory fall back to a
// loop (at prepare time).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cpu/kernels/Transpose16.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pipec::cpu {

/// The CPU engine every Linalg oneDNN primitive is created on.
inline dnnl::engine &linalgDnnlEngine() {
  static dnnl::engine engine = (capOneDnnIsa(), dnnl::engine(dnnl::engine::kind::cpu, 0));
  return engine;
}

/// A stream per thread: device threads execute primitives concurrently, and
/// a oneDNN stream is not meant to be shared between threads. With the
/// OpenMP runtime each primitive runs with the calling thread's
/// omp_get_max_threads(), that is the device's thread budget.
inline dnnl::stream &linalgDnnlStream() {
  thread_local dnnl::stream stream(linalgDnnlEngine());
  return stream;
}

template <typename T> constexpr bool linalgDnnlSupports() { return std::is_same_v<T, float>; }

inline dnnl::memory::dims linalgDnnlDims(const std::vector<int64_t> &v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

/// A row-major memory descriptor of shape `s` (f32 unless `t`).
inline dnnl::memory::desc linalgDnnlPlain(const std::vector<int64_t> &s,
                                          dnnl::memory::data_type t = dnnl::memory::data_type::f32) {
  std::vector<int64_t> strides = rowMajorStrides(s);
  return dnnl::memory::desc(linalgDnnlDims(s), t, linalgDnnlDims(strides));
}

/// Whether oneDNN fell back to a reference kernel (plain loops, far slower
/// than pipec's own for the same case): callers then use theirs.
inline bool linalgDnnlIsReference(const char *impl) {
  const std::string s(impl);
  return s.rfind("ref", 0) == 0 || s.find("simple") != std::string::npos;
}

/// oneDNN's type of the 16-bit operands of a product under output_dtype.
inline dnnl::memory::data_type linalgDnnlHalfType(DType t) {
  return t == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f16;
}

/// Whether oneDNN runs a primitive on 16-bit operands with the CPU's own
/// 16-bit instructions (AMX, AVX512_BF16, AVX512_FP16) rather than by
/// converting them in a slower kernel: only then does a 16-bit
/// convolution beat the emulation (LinalgHalfGemm.h).
inline bool linalgDnnlNativeHalf(const char *impl) {
  const std::string s(impl);
  return !linalgDnnlIsReference(impl) && s.rfind("gemm", 0) != 0 &&
         (s.find("amx") != std::string::npos || s.find("bf16") != std::string::npos ||
          s.find("fp16") != std::string::npos);
}

/// Attributes of every primitive we create: user-managed scratchpad.
inline dnnl::primitive_attr linalgDnnlAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

/// A primitive with its argument descriptors. The first run() wraps the raw
/// pointers in memory objects; later runs only point those objects at the
/// new buffers (dnnl_memory_create allocates, which costs most of a small
/// LayerNormalization: docs/cpu-linalg-kernels.md). So one object must not run
/// on two threads at once: a kernel that runs a primitive on several threads
/// holds a copy per thread (GradConv.cpp); a copy starts with no memory
/// objects bound.
struct LinalgDnnlPrim {
  dnnl::primitive prim;
  /// (DNNL_ARG_*, descriptor) per argument, in the order run() takes them.
  std::vector<std::pair<int, dnnl::memory::desc>> args;
  dnnl::memory::desc scratchpad;
  size_t scratchBytes = 0;

  LinalgDnnlPrim() = default;
  LinalgDnnlPrim(const LinalgDnnlPrim &o)
      : prim(o.prim), args(o.args), scratchpad(o.scratchpad), scratchBytes(o.scratchBytes) {}
  LinalgDnnlPrim(LinalgDnnlPrim &&) = default;
  LinalgDnnlPrim &operator=(const LinalgDnnlPrim &o) {
    if (this != &o) {
      prim = o.prim;
      args = o.args;
      scratchpad = o.scratchpad;
      scratchBytes = o.scratchBytes;
      bound_.clear();
      mems_.clear();
    }
    return *this;
  }
  LinalgDnnlPrim &operator=(LinalgDnnlPrim &&) = default;

  bool valid() const { return static_cast<bool>(prim); }

  /// Takes the primitive and scratchpad of a primitive descriptor.
  template <typename Prim, typename PD> void init(const PD &pd) {
    prim = Prim(pd);
    scratchpad = pd.scratchpad_desc();
    scratchBytes = scratchpad.get_size();
    bound_.clear();
    mems_.clear();
  }

  /// `ptrs[i]` is the buffer of args[i]; `scratch` has scratchBytes bytes.
  Status run(const void *const *ptrs, void *scratch) const {
    try {
      if (bound_.empty()) {
        dnnl::engine &eng = linalgDnnlEngine();
        for (size_t i = 0; i < args.size(); ++i) {
          mems_.emplace_back(args[i].second, eng, const_cast<void *>(ptrs[i]));
          bound_.emplace(args[i].first, mems_.back());
        }
        if (scratchBytes) {
          mems_.emplace_back(scratchpad, eng, scratch);
          bound_.emplace(DNNL_ARG_SCRATCHPAD, mems_.back());
        }
      } else {
        for (size_t i = 0; i < args.size(); ++i)
          mems_[i].set_data_handle(const_cast<void *>(ptrs[i]));
        if (scratchBytes)
          mems_.back().set_data_handle(scratch);
      }
      dnnl::stream &s = linalgDnnlStream();
      prim.execute(s, bound_);
      s.wait();
    } catch (const dnnl::error &e) {
      bound_.clear();
      mems_.clear();
      return errorf("oneDNN: ", e.what());
    }
    return Status::ok();
  }

private:
  /// The memory objects of args (then the scratchpad), and the same objects
  /// by argument, as execute() takes them.
  mutable std::vector<dnnl::memory> mems_;
  mutable std::unordered_map<int, dnnl::memory> bound_;
};

/// A primitive run on the layouts oneDNN prefers (format `any`, blocked for
/// its JIT convolutions) between buffers in the graph's plain layouts:
/// inputs are reordered into the workspace before it runs, outputs out of it
/// after. Blocked layouts beat the plain ones' im2col + GEMM on 3x3
/// convolutions even with the reorders included (ConvGradPerf;
/// bench/results/log.md).
/// The workspace holds the reordered copies, then one scratchpad that the
/// primitives share (they run in turn).
struct LinalgDnnlBlocked {
  LinalgDnnlPrim main;
  /// Per argument of `main`, in run() order: its reorder (invalid where the
  /// plain layout is the chosen one) and where its copy lives.
  std::vector<LinalgDnnlPrim> reorders;
  std::vector<bool> isOutput;
  std::vector<size_t> bufOffset;
  size_t scratchOffset = 0, bytes = 0;
  int kept = -1; ///< the argument keepReordered holds, or -1
  /// Per argument: (O, I) of a 1x1 weight gradient in oneDNN's ABcd16b16a
  /// that run() transposes itself, or (0, 0).
  std::vector<std::pair<int64_t, int64_t>> tiles;

  /// ABcd16b16a [O/16][I/16][16 i][16 o] -> row-major [O][I].
  static void untile16(const float *blk, float *dst, int64_t O, int64_t I) {
    const int64_t ib = I / 16;
    for (int64_t ob = 0; ob < O / 16; ++ob)
      for (int64_t b = 0; b < ib; ++b)
        transposeTile16(blk + (ob * ib + b) * 256, 16, dst + ob * 16 * I + b * 16, I);
  }

  bool valid() const { return main.valid(); }

  /// After main.init and main.args (the chosen descriptors): adds a reorder
  /// for every argument whose `plain` descriptor differs. Throws
  /// dnnl::error like the primitive constructors.
  void addReorders(const std::vector<dnnl::memory::desc> &plain, const std::vector<bool> &output) {
    dnnl::engine &eng = linalgDnnlEngine();
    size_t scratch = main.scratchBytes;
    reorders.assign(plain.size(), LinalgDnnlPrim());
    isOutput = output;
    bufOffset.assign(plain.size(), 0);
    tiles.assign(plain.size(), {0, 0});
    bytes = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      const dnnl::memory::desc &chosen = main.args[i].second;
      if (chosen == plain[i])
        continue;
      // A 1x1 convolution's weight gradient in 16x16 tiles: transposed
      // here, since oneDNN's reorder of that case runs far below the rate
      // of its 3x3 ones and the other weight formats (bench/results/log.md).
      const dnnl::memory::dims d = plain[i].dims();
      if (output[i] && d.size() == 4 && d[2] * d[3] == 1 && d[0] % 16 == 0 && d[1] % 16 == 0 &&
          plain[i] == linalgDnnlPlain({d[0], d[1], d[2], d[3]}) &&
          chosen == dnnl::memory::desc(d, dnnl::memory::data_type::f32,
                                       dnnl::memory::format_tag::ABcd16b16a)) {
        tiles[i] = {d[0], d[1]};
        bufOffset[i] = bytes;
        bytes += linalgRoundUp(chosen.get_size());
        continue;
      }
      const dnnl::memory::desc &from = output[i] ? chosen : plain[i];
      const dnnl::memory::desc &to = output[i] ? plain[i] : chosen;
      dnnl::reorder::primitive_desc rpd(eng, from, eng, to, linalgDnnlAttr());
      reorders[i].init<dnnl::reorder>(rpd);
      reorders[i].args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
      scratch = std::max(scratch, reorders[i].scratchBytes);
      bufOffset[i] = bytes;
      bytes += linalgRoundUp(chosen.get_size());
    }
    scratchOffset = bytes;
    bytes += linalgRoundUp(scratch);
  }

  /// Keeps input `i`'s reordered copy from run to run while its address
  /// and the step stay the same: for an input that changes only between
  /// steps (OpDesc::stepInvariant: a convolution's weights). The copy lives
  /// in memory of its own (heldBytes()), not in the workspace.
  void keepReordered(int i) {
    if (i >= 0 && static_cast<size_t>(i) < reorders.size() && reorders[i].valid() && !isOutput[i])
      kept = i;
  }
  /// The kept input's reordered copy, made now unless it is current
  /// (`src`: the input in its plain layout): for runs that take it as an
  /// input already in the chosen layout (run's `chosenLayout`), this
  /// primitive's or a follower's.
  Status hold(const void *src, unsigned char *ws, uint64_t step, const void **held) const {
    if (kept < 0)
      return errorf("oneDNN primitive: no reordered input is kept");
    if (held_.empty())
      held_.resize(heldBytes() + 64);
    void *dst = linalgAlign(held_.data());
    if (heldFrom_ != src || heldStep_ != step) {
      const void *r[2] = {src, dst};
      heldFrom_ = nullptr; // a failed reorder leaves no valid copy
      PIPEC_TRY(reorders[static_cast<size_t>(kept)].run(r, ws + scratchOffset));
      heldFrom_ = src;
      heldStep_ = step;
    }
    *held = dst;
    return Status::ok();
  }
  /// Keeps nothing: the input that keepReordered held comes from another
  /// primitive's hold() (a follower shares the leader's copy).
  void follow() {
    if (kept >= 0)
      reorders[static_cast<size_t>(kept)] = LinalgDnnlPrim();
    kept = -1;
    held_.clear();
    held_.shrink_to_fit();
    heldFrom_ = nullptr;
    // The workspace laid out again without the input's buffer.
    size_t at = 0, scratch = main.scratchBytes;
    for (size_t i = 0; i < reorders.size(); ++i) {
      if (!reorders[i].valid() && !tiles[i].first)
        continue;
      bufOffset[i] = at;
      at += linalgRoundUp(main.args[i].second.get_size());
      scratch = std::max(scratch, reorders[i].scratchBytes);
    }
    scratchOffset = at;
    bytes = at + linalgRoundUp(scratch);
  }

  /// Bytes held between runs by keepReordered.
  size_t heldBytes() const {
    return kept >= 0 ? linalgRoundUp(main.args[static_cast<size_t>(kept)].second.get_size()) : 0;
  }

  /// `ptrs[i]`: argument i in its plain layout, or already in the chosen
  /// one where bit i of `chosenLayout` is set (an input another primitive
  /// reordered); `ws`: `bytes` of workspace; `step`: ExecContext::step, for
  /// keepReordered.
  Status run(const void *const *ptrs, unsigned char *ws, uint32_t chosenLayout = 0,
             uint64_t step = 0) const {
    const size_t n = reorders.size();
    const void *args[8];
    unsigned char *scratch = ws + scratchOffset;
    bool fresh = false;
    if (kept >= 0) {
      if (held_.empty())
        held_.resize(heldBytes() + 64);
      fresh = heldFrom_ == ptrs[kept] && heldStep_ == step;
    }
    for (size_t i = 0; i < n; ++i)
      args[i] = static_cast<int>(i) == kept ? linalgAlign(held_.data())
                : (reorders[i].valid() || tiles[i].first) && !(chosenLayout >> i & 1)
                    ? ws + bufOffset[i]
                    : ptrs[i];
    for (size_t i = 0; i < n; ++i)
      if (reorders[i].valid() && !isOutput[i] && !(chosenLayout >> i & 1) &&
          !(static_cast<int>(i) == kept && fresh)) {
        const void *r[2] = {ptrs[i], args[i]};
        if (static_cast<int>(i) == kept)
          heldFrom_ = nullptr; // a failed reorder leaves no valid copy
        PIPEC_TRY(reorders[i].run(r, scratch));
        if (static_cast<int>(i) == kept) {
          heldFrom_ = ptrs[i];
          heldStep_ = step;
        }
      }
    PIPEC_TRY(main.run(args, scratch));
    for (size_t i = 0; i < n; ++i) {
      if (tiles[i].first) {
        untile16(static_cast<const float *>(args[i]), static_cast<float *>(const_cast<void *>(ptrs[i])),
                 tiles[i].first, tiles[i].second);
        continue;
      }
      if (reorders[i].valid() && isOutput[i]) {
        const void *r[2] = {args[i], ptrs[i]};
        PIPEC_TRY(reorders[i].run(r, scratch));
      }
    }
    return Status::ok();
  }

private:
  mutable std::vector<unsigned char> held_;
  mutable const void *heldFrom_ = nullptr;
  mutable uint64_t heldStep_ = 0;
};

/// oneDNN's dimensions of a convolution of `images` images with C input and
/// M output channels in G groups over the spatial `dims`: source, destination
/// and weights shapes ([G, M/G, C/G, k...] when grouped), strides, dilations
/// (oneDNN counts them from 0) and paddings.
struct LinalgDnnlConvShape {
  std::vector<int64_t> src, dst, weights, strides, dilations, padBegin, padEnd;
};

inline LinalgDnnlConvShape linalgDnnlConvShape(int64_t images, int64_t C, int64_t M, int64_t G,
                                               const std::vector<LinalgWindowDim> &dims) {
  LinalgDnnlConvShape s;
  s.src = {images, C};
  s.dst = {images, M};
  s.weights = G > 1 ? std::vector<int64_t>{G, M / G, C / G} : std::vector<int64_t>{M, C};
  for (const LinalgWindowDim &w : dims) {
    s.src.push_back(w.in);
    s.dst.push_back(w.out);
    s.weights.push_back(w.kernel);
    s.strides.push_back(w.stride);
    s.dilations.push_back(w.dilation - 1);
    s.padBegin.push_back(w.padBegin);
    s.padEnd.push_back(w.padEnd);
  }
  return s;
}

} // namespace pipec::cpu
