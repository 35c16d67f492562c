//===- bench/GemmBench.cpp - An MLP layer's training GEMMs, library by library ===//
//
// pipec-bench-gemm [--rows 128] [--width 1024] [--layers 8] [--rounds 30]
//                  [--flush-mb 96] [--blas NAME=LIB.so ...] [--json]
//
// What bounds the training step of a width x width MLP (bench/ort_models.py's
// mlp-8x1024 at batch 128): on one thread, the three products of one layer,
//   forward         Y  = X W^T    (rows x width x width, B transposed)
//   input gradient  dX = dY W     (rows x width x width)
//   weight gradient dW = dY^T X   (width x width x rows, A transposed)
// through pipec's kernel as a training step runs it (LinalgBatchedGemm: its
// tiles, each a oneDNN call, whatever the thread count) and each GEMM this
// machine has: oneDNN's matmul primitive on the
// weight as it is (the runtime's training path), oneDNN's matmul on the
// weight reordered once into its blocked layout (the runtime's inference
// path: the reorder is not timed), oneDNN's sgemm, OpenBLAS (linked), and
// the Fortran sgemm_ of each --blas library (dlopen: e.g. BLIS,
// /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4). Each is timed warm
// (the same call just before: operands in cache) and cold (--flush-mb of
// writes before: in a training step the weight comes from memory, since the
// step streams far more than the L3 holds). Rounds interleave every case
// (A B A B): medians over --rounds.
//
// Then the cost of keeping the weights in both blocked layouts in training,
// written by the optimizer while each 16-row block of the new weight is in
// cache, so that the forward and input-gradient GEMMs could skip their
// packing: Adam (train::Optimizer) over --layers layers of width x width,
// alone, with the gradient's squared sum in the same pass (as a step runs
// it), as a loop with its loads and stores but not its arithmetic, and
// followed block by block by the copies, each layer's gradient
// rewritten before its update as the weight gradient GEMM leaves it. The
// copies are checked against oneDNN's reorder of the final weights.
//
// A benchmark, not a test: it asserts nothing, it measures (bench/results/log.md
// records its runs).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgGemm.h"
#include "runtime/cpu/kernels/Transpose16.h"
#include "runtime/train/Optimizer.h"
#include "support/LargeAlloc.h"

#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.hpp>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace pipec;
using Clock = std::chrono::steady_clock;

extern "C" void openblas_set_num_threads(int);

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Float buffers on huge pages, zeroed, as the runtime allocates its
/// weights, moments and gradients.
using Buffer = LargeVector<float>;

using FortranSgemm = void (*)(const char *, const char *, const int *, const int *, const int *,
                              const float *, const float *, const int *, const float *, const int *,
                              const float *, float *, const int *);

/// One product: row-major C[M,N] = op(A) op(B).
struct Product {
  const char *name;
  bool ta, tb;
  int M, N, K;
  const float *A, *B;
  float *C;
  int lda() const { return ta ? M : K; }
  int ldb() const { return tb ? K : N; }
  double flops() const { return 2.0 * M * N * K; }
};

/// oneDNN's matmul for `p`, on B as it is or, with `blocked`, on B
/// reordered once into the layout oneDNN picks.
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;
  dnnl::memory::desc blockedDesc;

  Matmul(const dnnl::engine &eng, dnnl::stream &s, const Product &p, bool blocked) {
    using namespace dnnl;
    using dims = memory::dims;
    const auto f32 = memory::data_type::f32;
    auto desc = [&](int64_t rows, int64_t cols, bool trans, int64_t ld) {
      return memory::desc({rows, cols}, f32, dims{trans ? 1 : ld, trans ? ld : 1});
    };
    memory::desc ad = desc(p.M, p.K, p.ta, p.lda()), bd = desc(p.K, p.N, p.tb, p.ldb()),
                 cd = desc(p.M, p.N, false, p.N);
    memory::desc want = blocked ? memory::desc({p.K, p.N}, f32, memory::format_tag::any) : bd;
    matmul::primitive_desc pd(matmul::desc(ad, want, cd), eng);
    prim = matmul(pd);
    impl = pd.impl_info_str();
    a = memory(ad, eng, const_cast<float *>(p.A));
    c = memory(cd, eng, p.C);
    memory plainB(bd, eng, const_cast<float *>(p.B));
    if (blocked) {
      blockedDesc = pd.weights_desc();
      b = memory(blockedDesc, eng);
      reorder(plainB, b).execute(s, plainB, b);
      s.wait();
    } else {
      b = plainB;
    }
  }
  void run(dnnl::stream &s) {
    prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
  }
};

/// Offsets into oneDNN's blocked layout of a K x N weight with inner blocks
/// of 16 rows (K) by 64 columns (N), the layout its brgemm matmul picks for
/// f32 on AVX-512; `ok` is false for any other.
struct Blocked16x64 {
  bool ok = false;
  int64_t kBlockStride = 0, nBlockStride = 0;
  explicit Blocked16x64(const dnnl::memory::desc &d) {
    const auto &b = d.data.format_desc.blocking;
    ok = d.data.format_kind == dnnl_blocked && d.data.ndims == 2 && b.inner_nblks == 2 &&
         b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 && b.inner_blks[1] == 64 &&
         b.inner_idxs[1] == 1;
    kBlockStride = b.strides[0];
    nBlockStride = b.strides[1];
  }
  int64_t at(int64_t k, int64_t n) const {
    return (k / 16) * kBlockStride + (n / 64) * nBlockStride + (k % 16) * 64 + n % 64;
  }
};

/// Set where pipec's kernel reported an error (then nothing is printed).
bool kernelFailed = false;

struct Case {
  std::string product, path;
  double flops;
  std::function<void()> run;
  std::vector<double> warm, cold;
};

int run(int argc, char **argv) {
  int rows = 128, width = 1024, layers = 8, rounds = 30;
  double flushMb = 96;
  std::vector<std::string> blasArgs;
  bool json = false;
  CLI::App app{"pipec-bench-gemm: an MLP layer's training GEMMs, library by library, one thread"};
  app.add_option("--rows", rows, "rows of the activations (the batch; default 128)")
      ->check(CLI::Range(16, 8192));
  app.add_option("--width", width, "layer width, a multiple of 64 (default 1024)")
      ->check(CLI::Range(64, 8192));
  app.add_option("--layers", layers, "layers the optimizer part updates (default 8)")
      ->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "interleaved rounds (default 30)")
      ->check(CLI::Range(3, 10000));
  app.add_option("--flush-mb", flushMb, "MB written before each cold call (default 96)")
      ->check(CLI::Range(0.0, 4096.0));
  app.add_option("--blas", blasArgs, "NAME=PATH of another BLAS whose sgemm_ to time (repeatable)");
  app.add_flag("--json", json, "print JSON instead of tables");
  CLI11_PARSE(app, argc, argv);
  if (width % 64 != 0 || rows % 16 != 0) {
    std::cerr << "pipec-bench-gemm: --width must be a multiple of 64 and --rows of 16\n";
    return 2;
  }
  // The optimizer part holds six width x width arrays a layer.
  const double optimizerBytes = 6.0 * layers * double(width) * width * sizeof(float);
  if (optimizerBytes > 8e9) {
    std::cerr << "pipec-bench-gemm: " << layers << " layers of " << width << " x " << width
              << " need " << optimizerBytes / 1e9 << " GB for the optimizer part; at most 8\n";
    return 2;
  }

  // One thread everywhere: each library's own threading off.
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("BLIS_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  omp_set_num_threads(1);
  openblas_set_num_threads(1);

  std::vector<std::pair<std::string, FortranSgemm>> others;
  for (const std::string &arg : blasArgs) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      std::cerr << "pipec-bench-gemm: --blas takes NAME=PATH, not '" << arg << "'\n";
      return 2;
    }
    void *h = dlopen(arg.c_str() + eq + 1, RTLD_NOW | RTLD_LOCAL);
    void *f = h ? dlsym(h, "sgemm_") : nullptr;
    if (!f) {
      std::cerr << "pipec-bench-gemm: " << arg.substr(eq + 1) << ": "
                << (h ? "no sgemm_ in it" : dlerror()) << "\n";
      return 2;
    }
    others.emplace_back(arg.substr(0, eq), reinterpret_cast<FortranSgemm>(f));
  }

  const size_t w2 = size_t(width) * width, act = size_t(rows) * width;
  Buffer W(w2), X(act), dY(act), Y(act), dX(act), dW(w2);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < w2; ++i)
    W.data()[i] = u(rng);
  for (size_t i = 0; i < act; ++i) {
    X.data()[i] = u(rng);
    dY.data()[i] = u(rng);
  }
  const Product products[] = {
      {"forward Y = X W^T", false, true, rows, width, width, X.data(), W.data(), Y.data()},
      {"input gradient dX = dY W", false, false, rows, width, width, dY.data(), W.data(), dX.data()},
      {"weight gradient dW = dY^T X", true, false, width, width, rows, dY.data(), X.data(), dW.data()},
  };

  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::vector<std::unique_ptr<Matmul>> matmuls;
  std::vector<std::unique_ptr<cpu::LinalgBatchedGemm<float>>> kernels;
  std::vector<Buffer> workspaces;
  std::vector<Case> cases;
  for (const Product &p : products) {
    const double flops = p.flops();
    {
      auto k = std::make_unique<cpu::LinalgBatchedGemm<float>>();
      k->ta = p.ta;
      k->tb = p.tb;
      k->M = p.M;
      k->N = p.N;
      k->K = p.K;
      k->lda = p.lda();
      k->ldb = p.ldb();
      k->ldc = p.N;
      k->aOff = k->bOff = k->cOff = {0};
      k->prepare();
      const auto t = k->tiling();
      workspaces.emplace_back(k->workspaceBytes() / sizeof(float) + 64);
      cpu::LinalgBatchedGemm<float> *kp = k.get();
      void *ws = cpu::linalgAlign(workspaces.back().data());
      kernels.push_back(std::move(k));
      cases.push_back({p.name,
                       "pipec's kernel, " + std::to_string(t.tm) + " x " + std::to_string(t.tn) +
                           " tiles" + (kp->splitDepth() ? ", cut along K" : ""),
                       flops,
                       [kp, p, ws] {
                         if (!kp->runPrepared(p.A, p.B, p.C, ws).isOk())
                           kernelFailed = true;
                       },
                       {},
                       {}});
    }
    for (bool blocked : {false, true}) {
      if (blocked && p.ta)
        continue; // the weight gradient's B is an activation
      matmuls.push_back(std::make_unique<Matmul>(eng, strm, p, blocked));
      Matmul *m = matmuls.back().get();
      cases.push_back({p.name,
                       std::string(blocked ? "oneDNN matmul, B blocked once" : "oneDNN matmul") +
                           " (" + m->impl + ")",
                       flops,
                       [m, &strm] { m->run(strm); },
                       {},
                       {}});
    }
    cases.push_back({p.name,
                     "oneDNN sgemm",
                     flops,
                     [p] {
                       dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.M, p.N, p.K, 1.0f, p.A,
                                  p.lda(), p.B, p.ldb(), 0.0f, p.C, p.N);
                     },
                     {},
                     {}});
    cases.push_back({p.name,
                     "OpenBLAS cblas_sgemm",
                     flops,
                     [p] {
                       cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans,
                                   p.tb ? CblasTrans : CblasNoTrans, p.M, p.N, p.K, 1.0f, p.A,
                                   p.lda(), p.B, p.ldb(), 0.0f, p.C, p.N);
                     },
                     {},
                     {}});
    for (const auto &[name, fn] : others) {
      // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
      FortranSgemm g = fn;
      cases.push_back({p.name,
                       name + " sgemm_",
                       flops,
                       [p, g] {
                         const char ta = p.tb ? 'T' : 'N', tb = p.ta ? 'T' : 'N';
                         const int lda = p.ldb(), ldb = p.lda(), ldc = p.N;
                         const float one = 1.0f, zero = 0.0f;
                         g(&ta, &tb, &p.N, &p.M, &p.K, &one, p.B, &lda, p.A, &ldb, &zero, p.C,
                           &ldc);
                       },
                       {},
                       {}});
    }
  }

  const size_t flushN = static_cast<size_t>(flushMb * (1 << 20) / sizeof(float));
  Buffer junk(std::max<size_t>(flushN, 16));
  auto flush = [&] {
    float *j = junk.data();
    for (size_t i = 0; i < flushN; ++i)
      j[i] += 1.0f;
  };
  auto seconds = [](const std::function<void()> &f) {
    auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (Case &c : cases) // first calls: lazily built kernels, page faults
    for (int i = 0; i < 2; ++i)
      c.run();
  for (int r = 0; r < rounds; ++r)
    for (Case &c : cases) {
      c.run();
      c.warm.push_back(seconds(c.run));
      flush();
      c.cold.push_back(seconds(c.run));
    }

  if (kernelFailed) {
    std::cerr << "pipec-bench-gemm: pipec's GEMM kernel failed\n";
    return 1;
  }

  // --- The optimizer keeping the weights' blocked copies --------------------
  auto optimizer = train::Optimizer::create(train::OptimizerConfig{});
  if (!optimizer) {
    std::cerr << "pipec-bench-gemm: " << optimizer.status().message() << "\n";
    return 1;
  }
  // The blocked layouts of the weight as the forward's B (W^T: k = input,
  // n = output) and the input gradient's (W: k = output, n = input).
  const Blocked16x64 fwdLayout(matmuls[1]->blockedDesc), dxLayout(matmuls[3]->blockedDesc);
  const bool copiesOk = fwdLayout.ok && dxLayout.ok;
  struct Layer {
    Buffer w, g, m, v, fwd, dx;
    explicit Layer(size_t n) : w(n), g(n), m(n), v(n), fwd(n), dx(n) {}
  };
  std::vector<std::unique_ptr<Layer>> net;
  for (int l = 0; l < layers; ++l) {
    net.push_back(std::make_unique<Layer>(w2));
    std::memcpy(net.back()->w.data(), W.data(), w2 * sizeof(float));
  }
  // Mode 0: Adam over each layer at once; 1: Adam with the gradient's
  // squared sum in one pass, as a training step runs it
  // (scaleSquareAndStep: the reported gradient norm, the non-finite check);
  // 2: a loop with Adam's loads and stores but no square root or division
  // (is Adam bound by memory or by its arithmetic?); 3: Adam by 16-row
  // blocks, each then copied into the input gradient's blocked layout; 4:
  // into the forward's; 5: both.
  const char *modeNames[] = {"Adam",
                             "Adam and the gradient's squared sum (the step's one pass)",
                             "Adam's loads and stores, no square root or division",
                             "Adam + the input gradient's blocked copy",
                             "Adam + the forward's blocked copy", "Adam + both blocked copies"};
  const int modes = copiesOk ? 6 : 3;
  std::vector<std::vector<double>> adamMs(modes);
  int64_t step = 0;
  bool stepFailed = false;
  auto update = [&](Layer &L, int mode) {
    const std::vector<float *> state = {L.m.data(), L.v.data()};
    if (mode == 0) {
      stepFailed |=
          !optimizer->step(++step, 1e-3f, L.w.data(), L.g.data(), state, int64_t(w2)).isOk();
      return;
    }
    if (mode == 1) {
      auto sq = optimizer->scaleSquareAndStep(++step, 1e-3f, L.w.data(), L.g.data(), 1.0f, state,
                                              int64_t(w2));
      stepFailed |= !sq;
      return;
    }
    if (mode == 2) {
      float *__restrict w = L.w.data(), *__restrict m = L.m.data(), *__restrict v = L.v.data();
      const float *__restrict g = L.g.data();
      for (size_t i = 0; i < w2; ++i) {
        const float mi = m[i] + 0.1f * (g[i] - m[i]);
        const float vi = 0.999f * v[i] + 0.001f * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] - 1e-3f * mi * vi;
      }
      return;
    }
    const int copies = mode - 2; // bit 0: the input gradient's, bit 1: the forward's
    const int64_t block = int64_t(16) * width;
    for (int64_t o0 = 0; o0 < width; o0 += 16) {
      const int64_t at = o0 * width;
      const std::vector<float *> st = {L.m.data() + at, L.v.data() + at};
      stepFailed |=
          !optimizer->step(step + 1, 1e-3f, L.w.data() + at, L.g.data() + at, st, block).isOk();
      const float *wb = L.w.data() + at;
      if (copies & 1)
        for (int64_t r = 0; r < 16; ++r)
          for (int64_t i0 = 0; i0 < width; i0 += 64)
            std::memcpy(L.dx.data() + dxLayout.at(o0 + r, i0), wb + r * width + i0,
                        64 * sizeof(float));
      if (copies & 2)
        for (int64_t i0 = 0; i0 < width; i0 += 16)
          cpu::transposeTile16(wb + i0, width, L.fwd.data() + fwdLayout.at(i0, o0), 64);
    }
    ++step;
  };
  std::vector<float> gradient(w2);
  for (size_t i = 0; i < w2; ++i)
    gradient[i] = 1e-3f * u(rng);
  for (int r = 0; r < rounds / 3 + 2; ++r)
    for (int mode = 0; mode < modes; ++mode) {
      double total = 0;
      for (auto &L : net) {
        std::memcpy(L->g.data(), gradient.data(), w2 * sizeof(float));
        total += seconds([&] { update(*L, mode); });
      }
      if (r >= 2) // two warm-up rounds
        adamMs[mode].push_back(total * 1e3);
    }
  // The copies against oneDNN's own reorder of the last weights written.
  bool copiesMatch = copiesOk && !stepFailed;
  if (copiesMatch) {
    Layer &L = *net.back();
    update(L, 5);
    for (int which = 0; which < 2 && copiesMatch; ++which) {
      const Matmul &m = *matmuls[which == 0 ? 1 : 3];
      const auto f32 = dnnl::memory::data_type::f32;
      const int64_t wd = width;
      dnnl::memory::desc plain({wd, wd}, f32,
                               which == 0 ? dnnl::memory::dims{1, wd} : dnnl::memory::dims{wd, 1});
      dnnl::memory src(plain, eng, L.w.data()), dst(m.blockedDesc, eng);
      dnnl::reorder(src, dst).execute(strm, src, dst);
      strm.wait();
      copiesMatch = std::memcmp(dst.get_data_handle(), which == 0 ? L.fwd.data() : L.dx.data(),
                                w2 * sizeof(float)) == 0;
    }
  }

  if (json) {
    nlohmann::json out;
    out["rows"] = rows;
    out["width"] = width;
    out["rounds"] = rounds;
    out["flush_mb"] = flushMb;
    for (const Case &c : cases)
      out["gemms"].push_back({{"product", c.product},
                              {"path", c.path},
                              {"warm_us", median(c.warm) * 1e6},
                              {"cold_us", median(c.cold) * 1e6},
                              {"warm_gflops", c.flops / median(c.warm) / 1e9},
                              {"cold_gflops", c.flops / median(c.cold) / 1e9}});
    out["optimizer"]["layers"] = layers;
    out["optimizer"]["copies_match_onednn_reorder"] = copiesMatch;
    for (int mode = 0; mode < modes; ++mode)
      out["optimizer"]["modes"].push_back(
          {{"what", modeNames[mode]}, {"ms", median(adamMs[mode])}});
    std::cout << out.dump(2) << "\n";
    return stepFailed ? 1 : 0;
  }
  std::printf(
      "One thread, %d rounds interleaved, medians; cold: %.0f MB written before the call\n\n",
      rounds, flushMb);
  std::printf("| product | path | warm us | cold us | warm GFLOP/s | cold GFLOP/s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Case &c : cases)
    std::printf("| %s | %s | %.0f | %.0f | %.0f | %.0f |\n", c.product.c_str(), c.path.c_str(),
                median(c.warm) * 1e6, median(c.cold) * 1e6, c.flops / median(c.warm) / 1e9,
                c.flops / median(c.cold) / 1e9);
  std::printf("\nThe optimizer over %d layers of %d x %d (ms a step, median of %d rounds):\n\n",
              layers, width, width, rounds / 3);
  std::printf("| update | ms |\n| --- | --- |\n");
  for (int mode = 0; mode < modes; ++mode)
    std::printf("| %s | %.2f |\n", modeNames[mode], median(adamMs[mode]));
  if (!copiesOk)
    std::printf("\n(oneDNN picked another blocked layout here: the copies were not timed)\n");
  else
    std::printf("\nblocked copies %s oneDNN's reorder of the weights\n",
                copiesMatch ? "match" : "DO NOT match");
  return stepFailed ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    // PIPEC_MAX_CPU_ISA caps the oneDNN calls made here as the kernels'.
    pipec::cpu::capOneDnnIsa();
    return run(argc, argv);
  } catch (const std::exception &e) { // oneDNN refusing a shape, out of memory
    std::cerr << "pipec-bench-gemm: " << e.what() << "\n";
    return 1;
  }
}
