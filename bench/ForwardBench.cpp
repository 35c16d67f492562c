//===- bench/ForwardBench.cpp - Forward throughput against the GEMM rate --===//
//
// pipec-bench-forward MODEL.onnx:BATCH [MODEL.onnx:BATCH...] [--repeats R]
//                     [--threads 1,2] [--seconds S] [--json FILE]
//
// For each thread count, measures, interleaved (A B A B...) R times:
//   A: the sgemm rate of OpenBLAS (its own threading) and of oneDNN (one
//      single-threaded call per thread on its share of the rows, as the
//      kernels run it) on the shape of a 1024-wide MLP layer (128 x 1024 x
//      1024); the faster is the physical limit the forward pass is held to;
//   B: each model's forward throughput through the full pipec pipeline
//      (import, passes, plan, piperun's Session), in FLOP/s from the cost
//      model's FLOP count and in samples/s.
// Reports medians and each model's rate as a fraction of the faster GEMM
// rate taken in the same run. A benchmark, not a test: it asserts nothing.
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "frontend/OnnxImporter.h"
#include "runtime/Session.h"
#include "runtime/cpu/Gemm.h"
#include "support/FileIO.h"
#include "support/Json.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>

using namespace pipec;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Runs `fn` repeatedly for about `seconds`; returns the mean seconds per call.
template <typename F> double timeLoop(F &&fn, double seconds) {
  fn(); // warm caches and lazily created state
  int iters = 0;
  auto t0 = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++iters;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < seconds);
  return elapsed / iters;
}

struct ModelCase {
  std::string path;
  int64_t batch = 0;
  std::string name;
  double flops = 0; ///< forward FLOPs per step (cost model)
  std::unique_ptr<runtime::Session> session;
  std::vector<Tensor> inputs;
  std::vector<double> seconds;
};

Status prepare(ModelCase &m, const std::string &tmp) {
  frontend::ImportOptions io;
  io.batch = m.batch;
  PIPEC_ASSIGN(auto g, frontend::importOnnxFile(m.path, io));
  PIPEC_ASSIGN(driver::Compiled c, driver::compileGraph(*g, {}));
  m.flops = c.report["total_forward_flops_per_micro_batch"].get<double>();
  std::string dir = joinPath(tmp, std::filesystem::path(m.path).stem().string() + ".plan");
  PIPEC_TRY(codegen::writePlanDirectory(dir, c.plan));
  PIPEC_ASSIGN(m.session, runtime::Session::open(dir, {}));
  std::mt19937_64 rng(1);
  for (const TensorDesc &d : m.session->stepInputDescs()) {
    Tensor t(d);
    if (d.dtype == DType::F32) {
      std::normal_distribution<float> n(0, 1);
      for (int64_t i = 0; i < t.numel(); ++i)
        t.data<float>()[i] = n(rng);
    } // integer inputs (token ids) stay 0: valid indices for any vocabulary
    m.inputs.push_back(t);
  }
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  cpu::capOneDnnIsa(); // PIPEC_MAX_CPU_ISA caps the oneDNN calls made here too
  std::vector<ModelCase> models;
  int repeats = 5;
  double seconds = 0.5;
  std::vector<int> threads = {1, 2};
  std::string jsonPath;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) {
      repeats = std::stoi(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::stod(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      jsonPath = argv[++i];
    } else if (a == "--threads" && i + 1 < argc) {
      threads.clear();
      std::stringstream ss(argv[++i]);
      std::string t;
      while (std::getline(ss, t, ','))
        threads.push_back(std::stoi(t));
    } else if (a.find(':') != std::string::npos && a[0] != '-') {
      ModelCase m;
      m.path = a.substr(0, a.rfind(':'));
      m.batch = std::stoll(a.substr(a.rfind(':') + 1));
      m.name = std::filesystem::path(m.path).stem().string();
      models.push_back(std::move(m));
    } else {
      std::fprintf(stderr, "usage: pipec-bench-forward MODEL.onnx:BATCH... [--repeats R] "
                           "[--threads 1,2] [--seconds S] [--json FILE]\n");
      return 2;
    }
  }
  std::string tmp = (std::filesystem::temp_directory_path() /
                     ("pipec-bench-" + std::to_string(::getpid())))
                        .string();
  (void)makeDirs(tmp);
  for (ModelCase &m : models)
    if (Status s = prepare(m, tmp); !s) {
      std::fprintf(stderr, "pipec-bench-forward: error: %s: %s\n", m.path.c_str(), s.message().c_str());
      return 1;
    }

  const int M = 128, N = 1024, K = 1024;
  std::vector<float> A(static_cast<size_t>(M) * K, 0.5f), B(static_cast<size_t>(K) * N, 0.25f),
      C(static_cast<size_t>(M) * N);
  nlohmann::json out = nlohmann::json::array();
  std::printf("%-8s %-22s %14s %14s %12s %10s\n", "threads", "case", "median GFLOP/s", "samples/s",
              "median ms", "of GEMM");
  for (int t : threads) {
    omp_set_num_threads(t);
    std::vector<double> gemm, dnnlGemm;
    for (ModelCase &m : models)
      m.seconds.clear();
    for (int r = 0; r < repeats; ++r) {
      gemm.push_back(timeLoop(
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A.data(), K,
                        B.data(), K, 0.0f, C.data(), N);
          },
          seconds));
      // oneDNN as the kernels run it: each thread one single-threaded call
      // on its share of the rows (LinalgBatchedGemm's tiles).
      dnnlGemm.push_back(timeLoop(
          [&] {
#pragma omp parallel num_threads(t)
            {
              omp_set_num_threads(1);
              const int nt = omp_get_num_threads(), id = omp_get_thread_num();
              const int rows = (M + nt - 1) / nt, m0 = id * rows, m1 = std::min(M, m0 + rows);
              if (m1 > m0)
                dnnl_sgemm('N', 'T', m1 - m0, N, K, 1.0f, A.data() + m0 * K, K, B.data(), K,
                           0.0f, C.data() + m0 * N, N);
            }
          },
          seconds));
      for (ModelCase &m : models) {
        Status st;
        m.seconds.push_back(timeLoop(
            [&] {
              auto o = m.session->run(m.inputs);
              if (!o)
                st = o.status();
            },
            seconds));
        if (!st) {
          std::fprintf(stderr, "pipec-bench-forward: error: %s\n", st.message().c_str());
          return 1;
        }
      }
    }
    const double blasRate = 2.0 * M * N * K / median(gemm);
    const double dnnlRate = 2.0 * M * N * K / median(dnnlGemm);
    const double gemmRate = std::max(blasRate, dnnlRate);
    std::printf("%-8d %-22s %14.2f %14s %12.3f %10.2f\n", t, "OpenBLAS sgemm 128x1024x1024",
                blasRate / 1e9, "-", median(gemm) * 1e3, blasRate / gemmRate);
    std::printf("%-8d %-22s %14.2f %14s %12.3f %10.2f\n", t, "oneDNN sgemm 128x1024x1024",
                dnnlRate / 1e9, "-", median(dnnlGemm) * 1e3, dnnlRate / gemmRate);
    out.push_back({{"threads", t}, {"case", "sgemm-openblas"}, {"gflops", blasRate / 1e9},
                   {"ms", median(gemm) * 1e3}});
    out.push_back({{"threads", t}, {"case", "sgemm-onednn"}, {"gflops", dnnlRate / 1e9},
                   {"ms", median(dnnlGemm) * 1e3}});
    for (ModelCase &m : models) {
      double s = median(m.seconds);
      double rate = m.flops / s;
      int64_t examples = m.batch;
      std::printf("%-8d %-22s %14.2f %14.1f %12.3f %10.2f\n", t,
                  (m.name + " b=" + std::to_string(m.batch)).c_str(), rate / 1e9, examples / s, s * 1e3,
                  rate / gemmRate);
      out.push_back({{"threads", t}, {"case", m.name}, {"batch", m.batch}, {"gflops", rate / 1e9},
                     {"samples_per_second", examples / s}, {"ms", s * 1e3},
                     {"fraction_of_gemm", rate / gemmRate}});
    }
  }
  (void)removeTree(tmp);
  if (!jsonPath.empty())
    (void)writeFileAtomic(jsonPath, jsonText(out, 2) + "\n");
  return 0;
}
