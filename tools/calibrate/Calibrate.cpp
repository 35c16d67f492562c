//===- tools/calibrate/Calibrate.cpp - Measuring this machine -----------------===//
#include "tools/calibrate/Calibrate.h"

#include "driver/Driver.h"
#include "frontend/OnnxImporter.h"
#include "partitioner/CostModel.h"
#include "passes/NodeEval.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/train/Clip.h"
#include "runtime/train/Optimizer.h"
#include "support/FileIO.h"
#include "support/Format.h"
#include "support/Json.h"
#include "support/Machine.h"
#include "support/Parallel.h"
#include "samples/gen/Models.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <iostream>
#include <thread>
#include <unordered_map>
#include <vector>

namespace pipec::calibrate {

using namespace partitioner;

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}


/// Seconds of one n x n x n sgemm, median of `repeats` after a warm-up.
/// Square sgemm operands of size n and a call on them.
struct SquareSgemm {
  int n;
  std::vector<float> a, b, c;
  explicit SquareSgemm(int size)
      : n(size), a(static_cast<size_t>(size) * size), b(a.size()), c(a.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<float>((i * 7) % 13) * 0.1f;
      b[i] = static_cast<float>((i * 5) % 11) * 0.1f;
    }
  }
  void operator()() {
    cpu::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }
};

double timeSgemm(int n, int repeats) {
  SquareSgemm run(n);
  run();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    run();
    t.push_back(seconds(t0, Clock::now()));
  }
  return median(t);
}

/// FLOP/s of square sgemms of size n, each timed as a loop of calls long
/// enough (>= 1 ms) for the clock, median of `repeats` loops.
double sgemmRate(int n, int repeats) {
  SquareSgemm run(n);
  run();
  int iters = 1;
  for (;;) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      run();
    if (seconds(t0, Clock::now()) >= 1e-3 || iters >= (1 << 20))
      break;
    iters *= 2;
  }
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      run();
    t.push_back(seconds(t0, Clock::now()) / iters);
  }
  double dn = n;
  return 2 * dn * dn * dn / median(t);
}

/// Seconds of one memcpy of `bytes`, median after a warm-up (pages touched).
double timeMemcpy(size_t bytes, int repeats) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    src[static_cast<size_t>(r) % bytes] = static_cast<char>(r);
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    t.push_back(seconds(t0, Clock::now()));
  }
  return median(t);
}

/// One-way latency of a handoff between two threads (half a ping-pong round
/// trip on an atomic flag), median over rounds.
double timeHandoffLatency(int rounds) {
  std::atomic<int> flag{0};
  std::thread peer([&] {
    for (int i = 0; i < rounds; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1)
        std::this_thread::yield();
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  std::vector<double> t;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = Clock::now();
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2)
      std::this_thread::yield();
    t.push_back(seconds(t0, Clock::now()) / 2);
  }
  peer.join();
  return median(t);
}

/// Seconds from a producer thread publishing a filled buffer to a consumer
/// thread having copied it into its own memory (what an in-process SEND/RECV
/// costs), median of `repeats`.
double timeHandoffCopy(size_t bytes, int repeats) {
  std::vector<char> shared(bytes, 1), mine(bytes, 0);
  std::memcpy(mine.data(), shared.data(), bytes); // touch the pages
  std::atomic<int> ready{0}, done{0};
  std::vector<double> t(static_cast<size_t>(repeats));
  Clock::time_point published;
  std::thread consumer([&] {
    for (int r = 0; r < repeats; ++r) {
      while (ready.load(std::memory_order_acquire) != r + 1)
        std::this_thread::yield();
      std::memcpy(mine.data(), shared.data(), bytes);
      t[static_cast<size_t>(r)] = seconds(published, Clock::now());
      done.store(r + 1, std::memory_order_release);
    }
  });
  for (int r = 0; r < repeats; ++r) {
    std::memset(shared.data(), r, 4096);
    published = Clock::now();
    ready.store(r + 1, std::memory_order_release);
    while (done.load(std::memory_order_acquire) != r + 1)
      std::this_thread::yield();
  }
  consumer.join();
  return median(t);
}

/// Seconds per element of adding a gradient into its accumulator, as the
/// runtime does after each micro-batch, median of `repeats`.
double timeAccumulate(int64_t n, int repeats) {
  std::vector<float> acc(static_cast<size_t>(n), 0.5f), g(static_cast<size_t>(n), 0.25f);
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {
    auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i)
      acc[static_cast<size_t>(i)] += g[static_cast<size_t>(i)];
    if (r > 0) // the first run touches the pages
      t.push_back(seconds(t0, Clock::now()));
  }
  return median(t) / static_cast<double>(n);
}

/// Seconds per element of what the runtime does per parameter at the
/// optimizer step of `kind` (default settings): scaling the summed gradient
/// by 1/M, its squared sum for the global norm, the update. Median of
/// `repeats`.
Expected<double> timeOptimizerStep(const std::string &kind, int64_t n, int repeats) {
  PIPEC_ASSIGN(train::OptimizerConfig oc, train::parseOptimizer(kind == "sgd" ? "sgd:lr=0.01" : kind));
  PIPEC_ASSIGN(train::Optimizer opt, train::Optimizer::create(oc));
  const size_t un = static_cast<size_t>(n);
  std::vector<float> param(un, 0.5f), grad(un, 0.25f);
  std::vector<std::vector<float>> states(opt.stateTensors(), std::vector<float>(un, 0.0f));
  std::vector<float *> state;
  for (auto &s : states)
    state.push_back(s.data());
  std::vector<double> t;
  double sink = 0;
  for (int r = 0; r <= repeats; ++r) {
    auto t0 = Clock::now();
    train::scaleGrad(grad.data(), n, 1.0f);
    sink += train::gradSquaredSum(grad.data(), n);
    PIPEC_TRY(opt.step(r + 1, 1e-3f, param.data(), grad.data(), state, n));
    if (r > 0)
      t.push_back(seconds(t0, Clock::now()));
  }
  if (!std::isfinite(sink))
    return errorf("the optimizer calibration overflowed");
  return median(t) / static_cast<double>(n);
}


std::string cpuModel() {
  auto text = readFile("/proc/cpuinfo");
  if (!text)
    return "unknown CPU";
  size_t p = text->find("model name");
  if (p == std::string::npos)
    return "unknown CPU";
  size_t colon = text->find(':', p), end = text->find('\n', p);
  std::string m = text->substr(colon + 2, end - colon - 2);
  return m;
}

} // namespace

namespace {
/// Restores OpenMP's thread count when it leaves scope.
struct ThreadCountScope {
  int previous;
  explicit ThreadCountScope(int threads) : previous(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadCountScope() { omp_set_num_threads(previous); }
};

} // namespace

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

bool typesKnown(const ir::Node &n) {
  for (const ir::Value *v : n.outputs())
    if (!v->typeKnown())
      return false;
  for (const ir::Value *v : n.inputs())
    if (v && !v->typeKnown())
      return false;
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Tensor timingInput(const ir::Value &v, uint64_t seed) {
  if (v.isConstant())
    return v.constant();
  Tensor t(v.type());
  if (v.dtype() == DType::F32) {
    float *p = t.data<float>();
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < t.numel(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = static_cast<float>(static_cast<double>(x >> 40) / 8388608.0 - 1.0);
    }
  } else {
    std::memset(t.raw(), 0, t.bytes());
  }
  return t;
}

Expected<std::vector<NodeTiming>> timeGraphNodes(const ir::Graph &g, const NodeTimingOptions &o) {
  if (o.threads < 1 || o.minRuns < 1)
    return errorf("node timing needs at least one thread and one run");
  ThreadCountScope scope(o.threads);
  // Every value has one buffer, filled by timingInput; a node reads its
  // producer's buffer, so the kernels see the data and the cache state of a
  // pass over the graph, as in a training step. (Timing each kernel alone,
  // over and over on the same inputs, measured it with its operands in L1
  // and L2, and the predicted step came out under piperun's:
  // bench/results/log.md.)
  std::unordered_map<const ir::Value *, Tensor> data;
  uint64_t seed = 1;
  auto buffer = [&](const ir::Value *v) -> void * {
    auto it = data.find(v);
    if (it == data.end())
      it = data.emplace(v, timingInput(*v, seed++)).first;
    return it->second.raw();
  };
  struct Entry {
    const ir::Node *node;
    cpu::KernelPtr kernel;
    std::vector<const void *> in;
    std::vector<void *> out;
    Tensor workspace;
    std::vector<double> seconds;
    bool ok = true;
  };
  std::vector<Entry> entries;
  for (const ir::Node *n : g.nodes()) {
    if (ir::isView(*n) || !cpu::hasKernel(n->domain(), n->opType()))
      continue;
    if (!typesKnown(*n))
      continue;
    auto kernel = cpu::createKernel(passes::opDescForNode(*n, g.opset(n->domain())));
    if (!kernel)
      continue;
    Entry e{n, std::move(*kernel), {}, {}, {}, {}};
    for (const ir::Value *v : n->inputs())
      if (v)
        buffer(v); // input pointers are taken once views are aliased, below
    for (const ir::Value *v : n->outputs())
      e.out.push_back(buffer(v));
    if (size_t ws = e.kernel->workspaceBytes())
      e.workspace = Tensor(DType::U8, Shape{static_cast<int64_t>(ws)});
    entries.push_back(std::move(e));
  }
  // A view's output is its input's bytes: alias the buffers as plans do.
  for (const ir::Node *n : g.nodes())
    if (ir::isView(*n))
      data[n->output(0)] = Tensor(n->output(0)->type(), buffer(n->input(0)), nullptr);
  for (Entry &e : entries)
    for (const ir::Value *v : e.node->inputs())
      e.in.push_back(v ? data.at(v).raw() : nullptr);
  cpu::ExecContext ctx;
  ctx.training = true;
  auto pass = [&](bool timed) -> double {
    double total = 0;
    for (Entry &e : entries) {
      if (!e.ok)
        continue;
      ctx.workspace = e.workspace.empty() ? nullptr : e.workspace.raw();
      auto t0 = Clock::now();
      Status st = e.kernel->run(ctx, e.in.data(), e.out.data());
      double t = seconds(t0, Clock::now());
      if (!st.isOk()) {
        e.ok = false; // e.g. data the kernel checks and refuses
        continue;
      }
      if (timed) {
        e.seconds.push_back(t);
        total += t;
      }
    }
    return total;
  };
  pass(false); // warm-up
  double total = 0;
  for (int round = 0; round < 10000 && (round < o.minRuns ||
                                        total < o.minSeconds * static_cast<double>(entries.size()));
       ++round)
    total += pass(true);
  std::vector<NodeTiming> out;
  for (const Entry &e : entries) {
    if (!e.ok || e.seconds.empty())
      continue;
    NodeCost c = forwardCost(*e.node);
    out.push_back({opCurveKey(*e.node), opCurveSize(c),
                   median(e.seconds) / (c.gemm ? std::max(1.0, c.calls) : 1.0)});
  }
  return out;
}

Expected<double> measureConcurrentSlowdown(const ir::Graph &g, int devices,
                                           const NodeTimingOptions &o, int trials) {
  if (devices < 2)
    return 1.0;
  auto total = [](const std::vector<NodeTiming> &t) {
    double s = 0;
    for (const NodeTiming &x : t)
      s += x.seconds;
    return s;
  };
  std::vector<double> ratios;
  for (int trial = 0; trial < std::max(1, trials); ++trial) {
    PIPEC_ASSIGN(std::vector<NodeTiming> alone, timeGraphNodes(g, o));
    std::vector<Expected<std::vector<NodeTiming>>> each(static_cast<size_t>(devices),
                                                        errorf("not run"));
    {
      std::vector<std::thread> threads;
      for (int d = 0; d < devices; ++d)
        threads.emplace_back([&, d] { each[static_cast<size_t>(d)] = timeGraphNodes(g, o); });
      for (std::thread &t : threads)
        t.join();
    }
    double sum = 0;
    for (auto &e : each) {
      PIPEC_TRY(e.status());
      sum += total(*e);
    }
    const double lone = total(alone);
    if (lone > 0)
      ratios.push_back(sum / devices / lone);
  }
  if (ratios.empty())
    return errorf("the concurrent timing measured nothing");
  return std::max(1.0, median(ratios));
}

std::map<std::string, std::vector<std::pair<double, double>>>
fitOpCurves(const std::vector<NodeTiming> &timings) {
  // key -> half-octave bin -> (sizes, seconds) of its timings.
  std::map<std::string, std::map<long, std::pair<std::vector<double>, std::vector<double>>>> bins;
  for (const NodeTiming &t : timings) {
    if (!(t.size > 0) || !(t.seconds > 0))
      continue;
    auto &b = bins[t.key][std::lround(2 * std::log2(t.size))];
    b.first.push_back(t.size);
    b.second.push_back(t.seconds);
  }
  std::map<std::string, std::vector<std::pair<double, double>>> curves;
  for (auto &[key, byBin] : bins) {
    std::vector<std::pair<double, double>> &c = curves[key];
    for (auto &[bin, v] : byBin) {
      double size = median(v.first);
      if (c.empty() || size > c.back().first)
        c.emplace_back(size, median(v.second));
    }
  }
  return curves;
}

Expected<DeviceProfile> calibrate(const CalibrateOptions &o) {
  if (o.gemmSize < 16 || o.repeats < 1 || o.copyBytes < 4096 || o.optimizerElements < 1)
    return errorf("calibration sizes too small (gemm ", o.gemmSize, ", repeats ", o.repeats,
                  ", copy ", o.copyBytes, " bytes)");
  if (o.threads < 1)
    return errorf("calibration needs at least one thread per device (got ", o.threads, ")");
  const int threads = o.threads;
  ThreadCountScope scope(threads);
  // Thread handoffs first: after a BLAS call OpenMP's workers spin for a
  // while and would take the cores the two threads need.
  double latency = timeHandoffLatency(1001);
  double handoffSec = timeHandoffCopy(o.copyBytes, o.repeats);
  double copySec = timeMemcpy(o.copyBytes, o.repeats);
  double memBw = 2.0 * static_cast<double>(o.copyBytes) / copySec; // read + write
  double gemmSec = timeSgemm(o.gemmSize, o.repeats);
  double n = o.gemmSize;
  double flops = 2 * n * n * n / gemmSec;
  double tinySec = timeSgemm(4, std::max(101, o.repeats));
  // GEMM rate by size, up to the large one measured above.
  std::vector<std::pair<double, double>> curve;
  for (int m = 16; m < o.gemmSize; m *= 2) {
    double dm = m;
    curve.emplace_back(2 * dm * dm * dm, sgemmRate(m, o.repeats));
  }
  curve.emplace_back(2 * n * n * n, flops);
  // The optimizer's work per parameter element.
  const int64_t optElems = o.optimizerElements;
  double accumulate = timeAccumulate(optElems, o.repeats);
  std::map<std::string, double> stepCost;
  for (const char *kind : {"sgd", "adam", "adamw", "rmsprop"}) {
    PIPEC_ASSIGN(double s, timeOptimizerStep(kind, optElems, o.repeats));
    stepCost[kind] = s;
  }
  double linkBw = static_cast<double>(o.copyBytes) / handoffSec;
  double capacity = static_cast<double>(usableMemoryBytes());
  if (capacity <= 0)
    return errorf("cannot read MemTotal from /proc/meminfo");
  DeviceProfile f;
  f.name = o.name;
  f.description = cpuModel() + ", " + std::to_string(threads) + " OpenMP thread(s)";
  f.kind = "cpu";
  f.peakFlops["fp32"] = flops;
  f.memoryBandwidth = memBw;
  f.memoryCapacity = capacity;
  f.linkBandwidth = linkBw;
  f.linkLatency = latency;
  f.nodeOverhead = tinySec;
  f.gemmCurve = curve;
  f.accumulateSecondsPerElement = accumulate;
  f.optimizerStepSeconds = stepCost;
  f.measuredAt = utcNow();
  nlohmann::json j = profileToJson(f);
  j["source"] = "measured by pipec --calibrate on this machine: peak_flops.fp32 = median "
                "cpu::sgemm (the kernels' GEMM: oneDNN, OpenBLAS below " +
                std::to_string(static_cast<int64_t>(cpu::kOneDnnMinMacs)) + " multiply-adds) " +
                std::to_string(o.gemmSize) + "^3 FLOP rate; memory bandwidth = (read + "
                "written bytes) / median memcpy time; link = handoff of a buffer between two threads "
                "through shared memory; node overhead = median 4x4 sgemm call; gemm_curve = square sgemm "
                "rates from 16^3 up; capacity = MemTotal or the cgroup memory limit if lower; optimizer figures = median seconds per "
                "element of the runtime's gradient accumulation and of scaling, squared sum and "
                "update per optimizer kind, on " + std::to_string(optElems) + " elements";
  j["measured"] = {{"threads", threads},
                   {"gemm_n", o.gemmSize},
                   {"gemm_median_s", gemmSec},
                   {"tiny_gemm_median_s", tinySec},
                   {"copy_bytes", o.copyBytes},
                   {"memcpy_median_s", copySec},
                   {"handoff_latency_median_s", latency},
                   {"handoff_copy_median_s", handoffSec},
                   {"repeats", o.repeats}};
  return parseProfile(j, "calibration");
}

Expected<std::unique_ptr<ir::Graph>> sampleTrainingGraph(const std::string &model, int64_t batch) {
  samples::CommonOptions c;
  c.batch = batch;
  c.withLoss = true;
  Expected<samples::BuiltModel> built = model == "mlp"   ? samples::buildMlp({}, c)
                                        : model == "gpt" ? samples::buildGpt({}, c)
                                        : model == "cnn" ? samples::buildCnn({}, c)
                                                         : Expected<samples::BuiltModel>(errorf("no sample '", model, "'"));
  PIPEC_TRY(built.status());
  std::string bytes;
  if (!built->proto.SerializeToString(&bytes))
    return errorf("cannot serialize the ", model, " sample");
  PIPEC_ASSIGN(auto g, frontend::importOnnxBytes(bytes, model + " sample"));
  driver::CompileOptions co;
  co.emit.training = true;
  PIPEC_TRY(driver::compileGraph(*g, co).status().withContext("compiling the " + model + " sample for calibration"));
  return std::unique_ptr<ir::Graph>(std::move(g));
}

Status addOpCurves(DeviceProfile &p, int threads) {
  const int64_t kBatches[] = {1, 4, 16, 64};
  const char *kModels[] = {"mlp", "gpt", "cnn"};
  std::vector<NodeTiming> all;
  std::unique_ptr<ir::Graph> gptAt4; // for the two-core measurement
  for (int64_t batch : kBatches)
    for (const char *name : kModels) {
      PIPEC_ASSIGN(std::unique_ptr<ir::Graph> g, sampleTrainingGraph(name, batch));
      const std::string model = name;
      NodeTimingOptions to;
      to.threads = threads;
      PIPEC_ASSIGN(std::vector<NodeTiming> t, timeGraphNodes(*g, to));
      std::cerr << "calibrate: " << model << " sample, micro-batch " << batch << ": " << t.size()
                << " kernels timed\n";
      all.insert(all.end(), t.begin(), t.end());
      if (model == "gpt" && batch == 4)
        gptAt4 = std::move(g);
    }
  p.opCurves = fitOpCurves(all);
  // Devices of this thread count that fit the cores compute at once in a
  // pipeline; what that costs each of them.
  const int devices = static_cast<int>(usableCores()) / std::max(1, threads);
  NodeTimingOptions to;
  to.threads = threads;
  constexpr int kTrials = 3;
  PIPEC_ASSIGN(p.concurrentSlowdown,
               measureConcurrentSlowdown(*gptAt4, devices, to, kTrials));
  std::cerr << "calibrate: " << devices << " devices computing at once: kernels "
            << p.concurrentSlowdown << "x as long\n";
  p.source += "; concurrent_slowdown = the GPT-like sample's kernels (micro-batch 4) timed on " +
              std::to_string(devices) +
              " threads at once against one alone, median of " + std::to_string(kTrials) +
              " interleaved trials (at least 1)";
  p.source += "; op_curves = median kernel time per op against bytes moved, over the nodes of the "
              "training graphs of the sample models (mlp, gpt, cnn with loss) at micro-batches of "
              "1, 4, 16 and 64";
  return Status::ok();
}

Status linkFromTransport(DeviceProfile &p, const std::string &file) {
  PIPEC_ASSIGN(std::string text, readFile(file));
  nlohmann::json rows = nlohmann::json::parse(text, nullptr, false);
  auto bad = [&](const std::string &why) {
    return errorf("--link '", file, "': ", why, " (write it with pipec-bench-transport --json)");
  };
  if (!rows.is_array() || rows.empty())
    return bad("not a JSON array of measurements");
  const nlohmann::json *small = nullptr, *large = nullptr;
  for (const nlohmann::json &r : rows) {
    if (!r.is_object() || !r.contains("bytes") || !r.contains("one_way_seconds") || !r["bytes"].is_number() ||
        !r["one_way_seconds"].is_number() || !(r["one_way_seconds"].get<double>() > 0))
      return bad("every entry needs bytes and a positive one_way_seconds");
    if (!small || r["bytes"].get<double>() < (*small)["bytes"].get<double>())
      small = &r;
    if (!large || r["bytes"].get<double>() > (*large)["bytes"].get<double>())
      large = &r;
  }
  if ((*large)["bytes"].get<double>() < 65536)
    return bad("its largest message has fewer than 64 KiB: too small for a bandwidth");
  p.linkLatency = (*small)["one_way_seconds"].get<double>();
  p.linkBandwidth = (*large)["bytes"].get<double>() / (*large)["one_way_seconds"].get<double>();
  const std::string kind = (*small).contains("transport") && (*small)["transport"].is_string()
                               ? (*small)["transport"].get<std::string>()
                               : std::string("given");
  p.source += cat("; link figures from the ", kind, " transport (", file, ": one-way time of ",
                  static_cast<int64_t>((*small)["bytes"].get<double>()), " bytes, bandwidth at ",
                  static_cast<int64_t>((*large)["bytes"].get<double>()), " bytes)");
  return Status::ok();
}

Expected<DeviceProfile> calibrateMachine(int threads, const std::string &linkFile) {
  CalibrateOptions co;
  co.threads = threads;
  DeviceProfile link;
  if (!linkFile.empty())
    PIPEC_TRY(linkFromTransport(link, linkFile));
  PIPEC_ASSIGN(DeviceProfile p, calibrate(co));
  PIPEC_TRY(addOpCurves(p, threads));
  if (!linkFile.empty()) {
    p.linkLatency = link.linkLatency;
    p.linkBandwidth = link.linkBandwidth;
    p.source += link.source;
  }
  return p;
}

} // namespace pipec::calibrate
