//===- tools/calibrate/CalibrateGpu.cpp - Measuring a GPU -----------------===//
//
// pipec --calibrate --device cuda (Calibrate.h, calibrateGpu): the GPU
// measured through the runtime's backend interface, so what is timed is
// what piperun runs there: its kernels, its copies between devices, its
// gradient sums and its device update. The same code measures the
// emulated GPU (the CPU's kernels behind that interface), which is how it
// is tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#include "tools/calibrate/Calibrate.h"

#include "partitioner/CostModel.h"
#include "passes/NodeEval.h"
#include "runtime/EmulatedGpu.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gpu.h"
#include "runtime/train/Optimizer.h"
#include "support/Format.h"
#include "support/Json.h"
#include "support/Machine.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <iostream>
#include <thread>
#include <unordered_map>

namespace pipec::calibrate {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Expected<kernel::BackendPtr> openBackend(const GpuCalibrateOptions &o, int gpu) {
  if (o.emulate)
    return runtime::makeEmulatedGpuBackend();
  return cuda::makeCudaBackend(gpu, o.tf32);
}

/// Seconds per call of `enqueue`: `calls` calls in a row, then a wait for
/// the device; the median of `repeats` such runs after a warm-up call.
template <typename F> Expected<double> timeCalls(kernel::Backend &b, int calls, int repeats, F enqueue) {
  PIPEC_TRY(enqueue());
  PIPEC_TRY(b.sync());
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const Clock::time_point t0 = Clock::now();
    for (int c = 0; c < calls; ++c)
      PIPEC_TRY(enqueue());
    PIPEC_TRY(b.sync());
    t.push_back(since(t0) / calls);
  }
  return median(std::move(t));
}

/// Device memory of `bytes` holding the host's `bytes` at `host` (null:
/// zeros).
Expected<void *> deviceBytes(kernel::Backend &b, const void *host, uint64_t bytes) {
  PIPEC_ASSIGN(void *d, b.alloc(bytes));
  PIPEC_ASSIGN(void *stage, b.staging(d, bytes));
  if (host)
    std::memcpy(stage, host, bytes);
  else
    std::memset(stage, 0, bytes);
  PIPEC_TRY(b.commit(d, stage, bytes));
  return d;
}

/// A kernel of the backend with its operands and workspace in device
/// memory, ready to run.
struct Launch {
  kernel::KernelPtr kernel;
  std::vector<const void *> in;
  std::vector<void *> out;
  kernel::ExecContext ctx;
  Status run() { return kernel->run(ctx, in.data(), out.data()); }
};

/// The ExecContext of a training run on `b` with `workspace` bytes of
/// scratch and a data-error flag.
Expected<kernel::ExecContext> contextOn(kernel::Backend &b, size_t workspace) {
  kernel::ExecContext ctx;
  ctx.training = true;
  ctx.stream = b.stream();
  PIPEC_ASSIGN(ctx.workspace, b.alloc(std::max<size_t>(workspace, 256)));
  PIPEC_ASSIGN(void *flag, deviceBytes(b, nullptr, 256));
  ctx.errorFlag = static_cast<int *>(flag);
  return ctx;
}

/// One op on float32 operands of the given shapes.
Expected<Launch> simpleOp(kernel::Backend &b, const std::string &op, const std::vector<Shape> &inputs,
                          const Shape &output) {
  kernel::OpDesc d;
  d.name = cat("calibration ", op);
  d.opType = op;
  d.opset = 17;
  for (const Shape &s : inputs)
    d.inputs.push_back(TensorDesc{DType::F32, s});
  d.outputs.push_back(TensorDesc{DType::F32, output});
  d.constInputs.resize(inputs.size());
  d.stepInvariant.assign(inputs.size(), false);
  Launch l;
  PIPEC_ASSIGN(l.kernel, b.createKernel(d));
  for (const TensorDesc &t : d.inputs) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>((i * 7) % 13) * 0.1f - 0.6f;
    PIPEC_ASSIGN(void *p, deviceBytes(b, v.data(), v.size() * sizeof(float)));
    l.in.push_back(p);
  }
  PIPEC_ASSIGN(void *y, b.alloc(static_cast<uint64_t>(d.outputs[0].numel()) * sizeof(float)));
  l.out.push_back(y);
  PIPEC_ASSIGN(l.ctx, contextOn(b, l.kernel->workspaceBytes()));
  return l;
}

/// `runs` runs of `l` as one recording (a CUDA graph: how piperun runs a
/// compute instruction's kernels, DeviceExecutor::setRecording), or null
/// where the kernel is not replayable or the backend cannot record it.
void *recordRuns(kernel::Backend &b, Launch &l, int runs) {
  if (!b.canRecord() || !l.kernel->replayable())
    return nullptr;
  // One run first, as the executor makes it: a kernel makes some things
  // lazily (this thread's cuBLAS handle and workspace), which a capture
  // may not. A run that fails is not recorded (and is not timed).
  if (!l.run() || !b.sync() || !b.beginRecording())
    return nullptr;
  Status st = Status::ok();
  for (int r = 0; r < runs && st; ++r)
    st = l.run();
  Expected<void *> made = b.endRecording();
  return st && made ? *made : nullptr;
}

/// FLOP/s of the backend's MatMul on n x n operands.
Expected<double> matmulRate(kernel::Backend &b, int n, int repeats) {
  const int64_t m = n;
  PIPEC_ASSIGN(Launch l, simpleOp(b, "MatMul", {{m, m}, {m, m}}, {m, m}));
  const double flops = 2.0 * m * m * m;
  // Enough calls between waits that the wait is a small part.
  const int calls = std::clamp(static_cast<int>(2e9 / flops), 2, 200);
  PIPEC_ASSIGN(double s, timeCalls(b, calls, repeats, [&] { return l.run(); }));
  return flops / s;
}

/// The kernels of `g` on the backend (NodeTiming per node, as
/// timeGraphNodes times the CPU's): every node with a kernel there, in
/// graph order, reading its producers' outputs; each run `runs` times back
/// to back and waited for, per pass; medians of `passes` passes after a
/// warm-up pass. Run on the thread that made nothing else current: the
/// backend's device is made current first. `ready`, where given, is called
/// once everything is made and recorded, before the timed passes.
Expected<std::vector<NodeTiming>> timeNodesOn(kernel::Backend &b, const ir::Graph &g, int runs, int passes,
                                              bool recorded, const std::function<void()> &ready = nullptr) {
  PIPEC_TRY(b.beginStep(false));
  std::unordered_map<const ir::Value *, void *> data;
  uint64_t seed = 1;
  auto buffer = [&](const ir::Value *v) -> Expected<void *> {
    if (auto it = data.find(v); it != data.end())
      return it->second;
    Tensor t = timingInput(*v, seed++);
    PIPEC_ASSIGN(void *d, deviceBytes(b, t.raw(), std::max<uint64_t>(t.bytes(), 1)));
    data.emplace(v, d);
    return d;
  };
  struct Entry {
    const ir::Node *node;
    Launch launch;
    std::vector<double> seconds;
    bool ok = true;
    void *recording = nullptr; ///< the runs recorded, when `recorded`
  };
  std::vector<Entry> entries;
  for (const ir::Node *n : g.nodes()) {
    if (ir::isView(*n))
      continue;
    if (!typesKnown(*n))
      continue;
    // A node without a kernel here is not timed (the cost model's
    // roofline covers it).
    Expected<kernel::KernelPtr> k = b.createKernel(passes::opDescForNode(*n, g.opset(n->domain())));
    if (!k)
      continue;
    Entry e{n, {}, {}};
    e.launch.kernel = std::move(*k);
    for (const ir::Value *v : n->inputs())
      if (v)
        PIPEC_TRY(buffer(v).status());
    for (const ir::Value *v : n->outputs()) {
      PIPEC_ASSIGN(void *p, buffer(v));
      e.launch.out.push_back(p);
    }
    PIPEC_ASSIGN(e.launch.ctx, contextOn(b, e.launch.kernel->workspaceBytes()));
    entries.push_back(std::move(e));
  }
  // A view's output is its input's bytes, as in plans.
  for (const ir::Node *n : g.nodes())
    if (ir::isView(*n)) {
      PIPEC_ASSIGN(void *p, buffer(n->input(0)));
      data[n->output(0)] = p;
    }
  for (Entry &e : entries)
    for (const ir::Value *v : e.node->inputs())
      e.launch.in.push_back(v ? data.at(v) : nullptr);
  if (recorded)
    for (Entry &e : entries)
      e.recording = recordRuns(b, e.launch, runs);
  if (ready)
    ready(); // everything made: the timed passes begin
  for (int pass = 0; pass <= passes; ++pass)
    for (Entry &e : entries) {
      if (!e.ok)
        continue;
      PIPEC_TRY(b.sync());
      const Clock::time_point t0 = Clock::now();
      Status st = Status::ok();
      if (e.recording)
        st = b.replay(e.recording, 0);
      for (int r = 0; r < runs && st && !e.recording; ++r)
        st = e.launch.run();
      if (st)
        st = b.sync();
      if (!st) {
        e.ok = false; // data the kernel refuses: not timed
        continue;
      }
      if (pass > 0)
        e.seconds.push_back(since(t0) / runs);
    }
  std::vector<NodeTiming> out;
  for (const Entry &e : entries) {
    if (!e.ok || e.seconds.empty())
      continue;
    partitioner::NodeCost c = partitioner::forwardCost(*e.node);
    out.push_back({partitioner::opCurveKey(*e.node), partitioner::opCurveSize(c),
                   median(e.seconds) / (c.gemm ? std::max(1.0, c.calls) : 1.0)});
  }
  return out;
}

double passSeconds(const std::vector<NodeTiming> &t) {
  double s = 0;
  for (const NodeTiming &n : t)
    s += n.seconds;
  return s;
}


} // namespace

Expected<DeviceProfile> calibrateGpu(const GpuCalibrateOptions &o) {
  if (o.gemmSize < 16 || o.repeats < 1 || o.copyBytes < 4096 || o.optimizerElements < 1 || o.runsPerNode < 1 ||
      o.passes < 1 || o.batches.empty())
    return errorf("GPU calibration sizes too small (gemm ", o.gemmSize, ", repeats ", o.repeats, ", copy ",
                  o.copyBytes, " bytes)");
  std::string description;
  double capacity = 0;
  int gpus = 1;
  if (o.emulate) {
    description = "an emulated GPU (the CPU's kernels behind the GPU backend's interface: tests)";
    capacity = static_cast<double>(usableMemoryBytes());
  } else {
    PIPEC_ASSIGN(std::vector<cuda::GpuInfo> list, cuda::listGpus());
    if (o.gpu < 0 || o.gpu >= static_cast<int>(list.size()))
      return errorf("--calibrate --device cuda: no GPU ", o.gpu, " (", list.size(), " found)");
    const cuda::GpuInfo &g = list[static_cast<size_t>(o.gpu)];
    gpus = static_cast<int>(list.size());
    description = cat(g.name, ", compute capability ", g.major, ".", g.minor, ", ", g.multiprocessors,
                      " SMs, ", o.tf32 ? "TF32 products (--math tf32)" : "exact fp32 products");
    capacity = static_cast<double>(g.memoryBytes);
  }
  PIPEC_ASSIGN(kernel::BackendPtr b, openBackend(o, o.gpu));
  PIPEC_TRY(b->beginStep(false));
  std::cerr << "calibrate: " << b->name() << ": " << description << "\n";

  // Matrix products: the peak and the curve below it.
  PIPEC_ASSIGN(double peak, matmulRate(*b, o.gemmSize, o.repeats));
  std::vector<std::pair<double, double>> curve;
  for (int m = 16; m < o.gemmSize; m *= 2) {
    PIPEC_ASSIGN(double rate, matmulRate(*b, m, o.repeats));
    curve.emplace_back(2.0 * m * m * m, rate);
  }
  curve.emplace_back(2.0 * o.gemmSize * o.gemmSize * o.gemmSize, peak);
  std::cerr << "calibrate: MatMul " << o.gemmSize << "^3: " << peak / 1e12 << " TFLOP/s\n";

  // Copies: within the GPU (memory bandwidth), and between stages.
  PIPEC_ASSIGN(void *src, deviceBytes(*b, nullptr, o.copyBytes));
  PIPEC_ASSIGN(void *dst, b->alloc(o.copyBytes));
  const int self = b->deviceIndex();
  constexpr kernel::Queue kCompute = kernel::Queue::Compute;
  PIPEC_ASSIGN(double copySec, timeCalls(*b, 3, o.repeats,
                                         [&] { return b->copyFromDevice(dst, src, self, o.copyBytes, kCompute); }));
  const double memBw = 2.0 * static_cast<double>(o.copyBytes) / copySec;
  kernel::BackendPtr peer;
  if (!o.emulate && gpus > 1) {
    PIPEC_ASSIGN(peer, openBackend(o, (o.gpu + 1) % gpus));
    PIPEC_TRY(peer->beginStep(false));
  }
  kernel::Backend &to = peer ? *peer : *b;
  PIPEC_ASSIGN(void *far, to.alloc(o.copyBytes));
  PIPEC_ASSIGN(double linkSec, timeCalls(to, 3, o.repeats,
                                         [&] { return to.copyFromDevice(far, src, self, o.copyBytes, kCompute); }));
  PIPEC_ASSIGN(double latency,
               timeCalls(to, 101, o.repeats, [&] { return to.copyFromDevice(far, src, self, 256, kCompute); }));
  PIPEC_TRY(b->beginStep(false));
  const double linkBw = static_cast<double>(o.copyBytes) / linkSec;

  // A launch's own cost, as plans launch: recorded where they are.
  PIPEC_ASSIGN(Launch tiny, simpleOp(*b, "Relu", {{1}}, {1}));
  void *tinyRuns = o.recorded ? recordRuns(*b, tiny, 101) : nullptr;
  PIPEC_ASSIGN(double overhead,
               tinyRuns ? timeCalls(*b, 1, o.repeats, [&] { return b->replay(tinyRuns, 0); })
                        : timeCalls(*b, 101, o.repeats, [&] { return tiny.run(); }));
  if (tinyRuns)
    overhead /= 101;

  // The gradient sum and the device update per element.
  const int64_t n = o.optimizerElements;
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  std::vector<float> half(static_cast<size_t>(n), 0.5f), quarter(static_cast<size_t>(n), 0.25f);
  kernel::ParamBuffers pb;
  PIPEC_ASSIGN(void *param, deviceBytes(*b, half.data(), bytes));
  PIPEC_ASSIGN(void *grad, deviceBytes(*b, quarter.data(), bytes));
  PIPEC_ASSIGN(void *sum, deviceBytes(*b, nullptr, bytes));
  pb.param = static_cast<float *>(param);
  pb.grad = static_cast<float *>(grad);
  for (float *&s : pb.state) {
    PIPEC_ASSIGN(void *p, deviceBytes(*b, nullptr, bytes));
    s = static_cast<float *>(p);
  }
  pb.n = n;
  PIPEC_ASSIGN(double accumulate, timeCalls(*b, 5, o.repeats, [&] {
                 return b->accumulate(static_cast<float *>(sum), pb.grad, n, false);
               }));
  PIPEC_ASSIGN(std::unique_ptr<kernel::ParamUpdater> updater, b->paramUpdater({pb}));
  PIPEC_TRY(updater->setDecision(false, false, 1.0));
  PIPEC_TRY(b->sync());
  std::map<std::string, double> stepCost;
  for (const char *kind : {"sgd", "adam", "adamw", "rmsprop"}) {
    PIPEC_ASSIGN(train::OptimizerConfig oc,
                 train::parseOptimizer(std::string(kind) == "sgd" ? "sgd:lr=0.01" : kind));
    PIPEC_ASSIGN(train::Optimizer opt, train::Optimizer::create(oc));
    int64_t step = 0;
    PIPEC_ASSIGN(double s, timeCalls(*b, 3, o.repeats, [&]() -> Status {
                   PIPEC_TRY(updater->squares(1.0f));
                   return updater->apply(opt.scalars(++step, 1e-3f), true);
                 }));
    stepCost[kind] = s / static_cast<double>(n);
  }

  // The kernels of the sample models' training graphs.
  std::vector<NodeTiming> all;
  std::unique_ptr<ir::Graph> gptAt4;
  for (int64_t batch : o.batches)
    for (const char *name : {"mlp", "gpt", "cnn"}) {
      PIPEC_ASSIGN(std::unique_ptr<ir::Graph> g, sampleTrainingGraph(name, batch));
      PIPEC_ASSIGN(std::vector<NodeTiming> t, timeNodesOn(*b, *g, o.runsPerNode, o.passes, o.recorded));
      std::cerr << "calibrate: " << name << " sample, micro-batch " << batch << ": " << t.size()
                << " kernels timed\n";
      all.insert(all.end(), t.begin(), t.end());
      if (std::string(name) == "gpt" && (!gptAt4 || batch == 4))
        gptAt4 = std::move(g);
    }
  // Pipelines of K > 1 on a one-GPU machine share it: its kernels on two
  // streams at once against one alone.
  double slowdown = 1;
  std::string slowdownWhy = cat("1: ", gpus, " GPUs, a stage each");
  if (gpus == 1) {
    PIPEC_ASSIGN(kernel::BackendPtr second, openBackend(o, o.gpu));
    std::vector<double> ratios;
    for (int trial = 0; trial < 3; ++trial) {
      PIPEC_ASSIGN(std::vector<NodeTiming> alone, timeNodesOn(*b, *gptAt4, o.runsPerNode, 1, o.recorded));
      // Both streams' kernels made, compiled and recorded before either
      // times its pass, so that the passes overlap. One that fails before
      // that point leaves the barrier, so the other does not wait for it.
      std::barrier<> both(2);
      auto timed = [&](kernel::Backend &on) {
        bool arrived = false;
        auto r = timeNodesOn(on, *gptAt4, o.runsPerNode, 1, o.recorded, [&] {
          arrived = true;
          both.arrive_and_wait();
        });
        if (!arrived)
          both.arrive_and_drop();
        return r;
      };
      Expected<std::vector<NodeTiming>> other = std::vector<NodeTiming>{};
      std::thread t([&] { other = timed(*second); });
      Expected<std::vector<NodeTiming>> mine = timed(*b);
      t.join();
      PIPEC_TRY(mine.status());
      PIPEC_TRY(other.status());
      const double lone = passSeconds(alone);
      if (lone > 0)
        ratios.push_back((passSeconds(*mine) + passSeconds(*other)) / 2 / lone);
    }
    const double measured = ratios.empty() ? 1.0 : median(ratios);
    // A profile takes [0.5, 4] (DeviceProfile.h); a loaded machine can
    // measure more.
    slowdown = std::clamp(measured, 1.0, 4.0);
    slowdownWhy = cat("the GPT-like sample's kernels (its micro-batch of 4 where measured) on two streams of the GPU at "
                      "once against one alone, median of 3 trials (",
                      measured, ", kept within [1, 4])");
  }
  std::cerr << "calibrate: two stages on the GPU at once: kernels " << slowdown << "x as long\n";

  DeviceProfile f;
  f.name = o.name;
  f.description = description;
  f.kind = "gpu";
  f.peakFlops["fp32"] = peak;
  f.memoryBandwidth = memBw;
  f.memoryCapacity = capacity;
  f.linkBandwidth = linkBw;
  f.linkLatency = latency;
  f.nodeOverhead = overhead;
  f.gemmCurve = curve;
  f.accumulateSecondsPerElement = accumulate / static_cast<double>(n);
  f.optimizerStepSeconds = stepCost;
  f.measuredAt = utcNow();
  nlohmann::json j = profileToJson(f);
  j["concurrent_slowdown"] = slowdown;
  std::string batches;
  for (int64_t bsz : o.batches)
    batches += (batches.empty() ? "" : ", ") + std::to_string(bsz);
  j["source"] = cat(
      "measured by pipec --calibrate --device ", o.emulate ? "cuda-emulated" : "cuda", " through piperun's ",
      b->name(), " backend: peak_flops.fp32 = the MatMul kernel (cuBLAS", o.tf32 ? ", TF32" : ", pedantic fp32",
      ") on ", o.gemmSize, "^2 operands, calls in a row, median of ", o.repeats,
      "; gemm_curve = square MatMuls from 16 up; memory bandwidth = (read + written bytes) / a device-to-device "
      "copy of ", o.copyBytes, " bytes; link = ",
      peer ? "a peer copy to the next GPU" : "a copy within the GPU (stages sharing it)",
      ", latency a 256-byte one; node overhead = a one-element Relu launched over and over",
      o.recorded ? " (recorded and replayed, as piperun runs kernels)" : "", "; optimizer figures = "
      "the device update (squared sums and step) and the gradient sum per element on ",
      n, " elements; concurrent_slowdown = ", slowdownWhy,
      "; op_curves = each kernel of the sample models' training graphs (mlp, gpt, cnn with loss) at micro-batches "
      "of ",
      batches, ", run ", o.runsPerNode, " times back to back", o.recorded ? " as one recording (a CUDA graph)" : "",
      " and waited for, median of ", o.passes, " passes");
  j["measured"] = {{"gpu", o.gpu},
                   {"gpus", gpus},
                   {"math", o.tf32 ? "tf32" : "exact"},
                   {"recorded", o.recorded},
                   {"gemm_n", o.gemmSize},
                   {"copy_bytes", o.copyBytes},
                   {"copy_median_s", copySec},
                   {"link_copy_median_s", linkSec},
                   {"repeats", o.repeats}};
  PIPEC_ASSIGN(DeviceProfile p, partitioner::parseProfile(j, "GPU calibration"));
  p.opCurves = fitOpCurves(all);
  return p;
}

} // namespace pipec::calibrate
