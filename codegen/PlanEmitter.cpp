//===- codegen/PlanEmitter.cpp - IR + partition -> plan directory ---------===//
#include "codegen/PlanEmitter.h"

#include "codegen/Guards.h"
#include "support/Parallel.h"
#include "support/PhaseTimer.h"

#include "codegen/MemoryPlanner.h"
#include "pipec/Version.h"
#include "pipeline/Schedule.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/ScheduleCheck.h"
#include "support/DenseIds.h"
#include "support/DisjointSets.h"
#include "support/FileIO.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <cstdint>
#include <filesystem>
#include <map>
#include <unordered_map>

namespace pipec::codegen {

namespace {

using pipeline::Slot;
using pipeline::Work;

void setAttr(const std::string &name, const Attribute &a, plan::Attribute &out) {
  out.set_name(name);
  switch (a.kind) {
  case Attribute::Kind::Int: out.set_kind(plan::Attribute::INT); out.set_i(a.i); break;
  case Attribute::Kind::Float: out.set_kind(plan::Attribute::FLOAT); out.set_f(a.f); break;
  case Attribute::Kind::String: out.set_kind(plan::Attribute::STRING); out.set_s(a.s); break;
  case Attribute::Kind::Ints:
    out.set_kind(plan::Attribute::INTS);
    for (int64_t v : a.ints)
      out.add_ints(v);
    break;
  case Attribute::Kind::Floats:
    out.set_kind(plan::Attribute::FLOATS);
    for (float v : a.floats)
      out.add_floats(v);
    break;
  case Attribute::Kind::Strings:
    out.set_kind(plan::Attribute::STRINGS);
    for (const auto &v : a.strings)
      out.add_strings(v);
    break;
  case Attribute::Kind::Tensor:
    out.set_kind(plan::Attribute::TENSOR);
    out.set_tensor_dtype(static_cast<int32_t>(a.t.dtype()));
    for (int64_t d : a.t.shape())
      out.add_tensor_shape(d);
    out.set_tensor_data(std::string(static_cast<const char *>(a.t.raw()), a.t.bytes()));
    break;
  }
}

/// Builds the tensor table: inputs, constants, then node outputs in order.
class TensorTable {
public:
  void reserve(size_t n) { ids_.reserve(n); }
  int32_t add(const ir::Value *v, plan::Plan &p, plan::TensorInfo::Kind kind) {
    int32_t id = p.tensors_size();
    plan::TensorInfo *t = p.add_tensors();
    t->set_name(v->name());
    t->set_dtype(static_cast<int32_t>(v->dtype()));
    for (int64_t d : v->shape())
      t->add_shape(d);
    t->set_kind(kind);
    t->set_bytes(v->type().bytes());
    ids_[v] = id;
    return id;
  }
  int32_t id(const ir::Value *v) const {
    if (!v)
      return -1;
    auto it = ids_.find(v);
    return it == ids_.end() ? -1 : it->second;
  }

private:
  std::unordered_map<const ir::Value *, int32_t> ids_;
};


plan::Instruction::Kind instructionKind(Work w) {
  switch (w) {
  case Work::Forward: return plan::Instruction::FORWARD;
  case Work::Recompute: return plan::Instruction::RECOMPUTE;
  case Work::Backward: return plan::Instruction::BACKWARD;
  case Work::WeightGrad: return plan::Instruction::WEIGHT_GRAD;
  case Work::Optimizer: return plan::Instruction::OPTIMIZER;
  }
  return plan::Instruction::FORWARD;
}

Work workOf(const ir::Node &n) {
  switch (n.phase()) {
  case ir::Phase::Forward: return Work::Forward;
  case ir::Phase::Recompute: return Work::Recompute;
  case ir::Phase::Backward: return Work::Backward;
  case ir::Phase::WeightGrad: return Work::WeightGrad;
  case ir::Phase::Optimizer: return Work::Optimizer;
  }
  return Work::Forward;
}

/// Turns each device's schedule slots into instructions: a compute
/// instruction per non-empty slot (the nodes of the slot's stage doing the
/// slot's work), a RECV before the first instruction of a micro-batch that
/// reads a tensor another device produces, and a SEND to every device that
/// reads it after the instruction that produced it.
Status emitPrograms(plan::Plan &p, const pipeline::Slots &slots,
                    const std::vector<std::vector<Work>> &nodeWork,
                    const std::vector<std::vector<unsigned>> &nodeStage) {
  const int K = p.devices_size();
  const size_t T = static_cast<size_t>(p.tensors_size());
  std::vector<int> producer(T, -1);
  std::vector<std::vector<int>> readers(T);
  for (int d = 0; d < K; ++d)
    for (const plan::Node &n : p.devices(d).nodes()) {
      for (int32_t t : n.outputs())
        producer[t] = d;
      for (int32_t t : n.inputs())
        if (t >= 0 && (readers[t].empty() || readers[t].back() != d))
          readers[t].push_back(d);
    }
  for (int d = 0; d < K; ++d) {
    plan::Device *dev = p.mutable_devices(d);
    const unsigned M = p.pipeline().num_micro_batches();
    std::vector<char> received(T * M, 0);
    // The device's nodes by (stage, work), in graph order: what each slot
    // runs, for every micro-batch.
    std::map<std::pair<unsigned, Work>, std::vector<int32_t>> nodesOf;
    for (int i = 0; i < dev->nodes_size(); ++i)
      nodesOf[{nodeStage[d][i], nodeWork[d][i]}].push_back(i);
    // A tensor instance from another device is received before the first
    // slot of its step that reads it. A no-flush schedule's previous-step
    // slots come later in their step than every slot of the program (they
    // run in the next call), so the receives are decided in that order.
    const std::vector<Slot> &mine = slots[d];
    std::vector<size_t> logical(mine.size());
    for (size_t i = 0; i < mine.size(); ++i)
      logical[i] = i;
    std::stable_sort(logical.begin(), logical.end(),
                     [&](size_t a, size_t b) { return !mine[a].previousStep && mine[b].previousStep; });
    std::vector<std::vector<int32_t>> recvsOf(mine.size());
    for (size_t i : logical) {
      auto found = nodesOf.find({mine[i].stage, mine[i].work});
      if (mine[i].work == Work::Optimizer || found == nodesOf.end())
        continue;
      const unsigned mb = mine[i].microBatch;
      for (int32_t ni : found->second)
        for (int32_t t : dev->nodes(ni).inputs())
          if (t >= 0 && producer[t] >= 0 && producer[t] != d && !received[t * M + mb]) {
            received[t * M + mb] = 1;
            recvsOf[i].push_back(t);
          }
      std::sort(recvsOf[i].begin(), recvsOf[i].end());
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      const Slot &slot = mine[i];
      if (slot.work == Work::Optimizer) {
        plan::Instruction *opt = dev->add_program();
        opt->set_kind(plan::Instruction::OPTIMIZER);
        opt->set_previous_step(slot.previousStep);
        continue;
      }
      auto found = nodesOf.find({slot.stage, slot.work});
      if (found == nodesOf.end())
        continue;
      const std::vector<int32_t> &picked = found->second;
      const unsigned mb = slot.microBatch;
      std::vector<int32_t> outs;
      for (int32_t ni : picked)
        for (int32_t t : dev->nodes(ni).outputs())
          outs.push_back(t);
      std::sort(outs.begin(), outs.end());
      for (int32_t t : recvsOf[i]) {
        plan::Instruction *r = dev->add_program();
        r->set_kind(plan::Instruction::RECV);
        r->set_micro_batch(mb);
        r->set_tensor(t);
        r->set_peer(producer[t]);
        r->set_previous_step(slot.previousStep);
      }
      plan::Instruction *ins = dev->add_program();
      ins->set_kind(instructionKind(slot.work));
      ins->set_micro_batch(mb);
      ins->set_stage(slot.stage);
      ins->set_previous_step(slot.previousStep);
      for (int32_t ni : picked)
        ins->add_nodes(ni);
      for (int32_t t : outs)
        for (int to : readers[t])
          if (to != d) {
            plan::Instruction *snd = dev->add_program();
            snd->set_kind(plan::Instruction::SEND);
            snd->set_micro_batch(mb);
            snd->set_tensor(t);
            snd->set_peer(to);
            snd->set_previous_step(slot.previousStep);
          }
    }
  }
  return Status::ok();
}

/// Arena layout of one device from liveness over its program: time
/// advances one step per node run, send and receive. Graph inputs are fed
/// just before the instruction that first reads them; tensors in `keep`
/// (graph outputs, gradients) are collected after the instruction that
/// made them, so they live to its end.
MemoryPlan planDeviceMemory(const plan::Plan &p, plan::Device &dev, const std::vector<char> &keep,
                            PlanMethod method) {
  const unsigned M = p.pipeline().num_micro_batches();
  struct Interval {
    int64_t start = -1, end = -1;
  };
  auto inArena = [&](int32_t t) {
    auto kind = p.tensors(t).kind();
    return kind != plan::TensorInfo::WEIGHT && kind != plan::TensorInfo::CONSTANT;
  };
  // The device's arena tensors, numbered densely (support/DenseIds.h).
  DenseIds ids(static_cast<size_t>(p.tensors_size()));
  for (const plan::Instruction &ins : dev.program()) {
    if (ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::RECV)
      ids.add(ins.tensor());
    for (int32_t ni : ins.nodes()) {
      for (int32_t t : dev.nodes(ni).inputs())
        if (t >= 0 && inArena(t))
          ids.add(t);
      for (int32_t t : dev.nodes(ni).outputs())
        ids.add(t);
      for (const plan::Guard &gd : dev.nodes(ni).guards())
        ids.add(gd.tensor());
    }
  }
  ids.finish();
  std::vector<Interval> live(ids.size() * M);
  auto at = [&](int32_t t, unsigned mb) -> Interval & {
    return live[static_cast<size_t>(ids.local(t)) * M + mb];
  };
  // A no-flush schedule's previous-step instructions run in the next call:
  // in the step's own time they come after the whole program (logical
  // time + L). An instance whose life reaches past L wraps: it lives from
  // its start to the end of the call and again from the next call's start
  // (BufferRequest::wrapEnd).
  int64_t L = 0;
  for (const plan::Instruction &ins : dev.program())
    L += ins.kind() == plan::Instruction::SEND || ins.kind() == plan::Instruction::RECV ? 1 : ins.nodes_size();
  int64_t time = 0;
  for (const plan::Instruction &ins : dev.program()) {
    const unsigned mb = ins.micro_batch();
    const int64_t shift = ins.previous_step() ? L : 0;
    time += shift;
    struct Restore {
      int64_t &time, shift;
      ~Restore() { time -= shift; }
    } restore{time, shift};
    if (ins.kind() == plan::Instruction::SEND) {
      Interval &iv = at(ins.tensor(), mb);
      iv.end = std::max(iv.end, time++);
      continue;
    }
    if (ins.kind() == plan::Instruction::RECV) {
      Interval &iv = at(ins.tensor(), mb);
      iv.start = time;
      iv.end = std::max(iv.end, time++);
      continue;
    }
    int64_t first = time, last = time + ins.nodes_size() - 1;
    std::vector<int32_t> written;
    for (int32_t ni : ins.nodes()) {
      const plan::Node &pn = dev.nodes(ni);
      for (int32_t t : pn.inputs()) {
        if (t < 0 || !inArena(t))
          continue;
        Interval &iv = at(t, mb);
        // An input is fed before the first instruction that reads it (in
        // the step's time: a previous-step reader may come first in the
        // program).
        const bool input = p.tensors(t).kind() == plan::TensorInfo::INPUT;
        if (iv.start < 0 || (input && first < iv.start))
          iv.start = input ? first : time;
        iv.end = std::max(iv.end, time);
      }
      // A guard's condition is read when the node would run.
      for (const plan::Guard &gd : pn.guards()) {
        Interval &iv = at(gd.tensor(), mb);
        iv.end = std::max(iv.end, time);
      }
      for (int32_t t : pn.outputs()) {
        Interval &iv = at(t, mb);
        iv.start = time;
        iv.end = std::max(iv.end, time);
        written.push_back(t);
      }
      ++time;
    }
    for (int32_t t : written)
      if (keep[t])
        at(t, mb).end = std::max(at(t, mb).end, last);
  }
  // A view's output shares its input's buffer: the two instances are one
  // request, live from the first start to the last end of either.
  DisjointSets buffers(live.size());
  auto find = [&](size_t k) { return buffers.find(k); };
  for (const plan::Instruction &ins : dev.program())
    for (int32_t ni : ins.nodes()) {
      const plan::Node &pn = dev.nodes(ni);
      if (!pn.view() || ids.local(pn.inputs(0)) < 0)
        continue;
      size_t in = find(static_cast<size_t>(ids.local(pn.inputs(0))) * M + ins.micro_batch());
      size_t out = find(static_cast<size_t>(ids.local(pn.outputs(0))) * M + ins.micro_batch());
      if (in == out)
        continue;
      buffers.join(in, out);
      live[in].start = std::min(live[in].start, live[out].start);
      live[in].end = std::max(live[in].end, live[out].end);
    }
  std::vector<BufferRequest> requests;
  std::vector<size_t> requestOf(live.size(), SIZE_MAX);
  for (size_t k = 0; k < live.size(); ++k) {
    if (live[k].start < 0 || find(k) != k)
      continue;
    requestOf[k] = requests.size();
    BufferRequest r{p.tensors(ids.id(k / M)).bytes(), live[k].start, live[k].end};
    if (r.start >= L) { // only previous-step instructions touch it
      r.start -= L;
      r.end -= L;
    } else if (r.end >= L) {
      r.wrapEnd = r.end - L;
      r.end = L - 1;
    }
    requests.push_back(r);
  }
  MemoryPlan mp = planMemory(requests, 64, method);
  for (size_t k = 0; k < live.size(); ++k) {
    if (live[k].start < 0)
      continue;
    plan::Allocation *a = dev.add_allocations();
    a->set_tensor(ids.id(k / M));
    a->set_micro_batch(static_cast<unsigned>(k % M));
    a->set_offset(mp.offsets[requestOf[find(k)]]);
  }
  dev.set_arena_bytes(mp.peak);
  return mp;
}

// Calls sink with `n` zero bytes.
Status feedZeros(const ByteSink &sink, uint64_t n) {
  static const char zeros[4096] = {};
  for (; n > 0; n -= std::min<uint64_t>(n, sizeof zeros))
    PIPEC_TRY(sink(zeros, static_cast<size_t>(std::min<uint64_t>(n, sizeof zeros))));
  return Status::ok();
}

// Feeds weights.bin's bytes, piece by piece, to `sink`; a file-backed
// piece is read in bounded chunks, never whole.
Status feedWeightFile(const std::vector<WeightPiece> &pieces, const ByteSink &sink) {
  uint64_t at = 0;
  for (const WeightPiece &w : pieces) {
    PIPEC_TRY(feedZeros(sink, w.offset - at));
    if (const FileRegion *r = w.data.resident() ? nullptr : w.data.fileRegion())
      PIPEC_TRY(readFileRegion(r->path, r->offset, w.data.bytes(), sink));
    else if (w.data.bytes())
      PIPEC_TRY(sink(w.data.raw(), w.data.bytes()));
    at = w.offset + w.data.bytes();
  }
  return Status::ok();
}

// CRC-32C of each (path, offset, bytes) region, on the cores there are:
// the weights of a large model are read at the disk's speed.
struct RegionSum {
  int32_t tensor;
  const FileRegion *region;
  uint64_t bytes;
};

Status checksumRegions(const std::vector<RegionSum> &regions, plan::Plan &p) {
  std::vector<uint32_t> crcs(regions.size());
  std::vector<Status> errors(regions.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < regions.size();) {
      auto crc = crc32cOfFileRegion(regions[i].region->path, regions[i].region->offset,
                                    regions[i].bytes);
      if (crc)
        crcs[i] = *crc;
      else
        errors[i] = crc.status();
    }
  };
  const unsigned n = std::min<unsigned>(std::max(usableCores(), 1u), 8);
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n && t < regions.size(); ++t)
    threads.emplace_back(work);
  work();
  for (std::thread &t : threads)
    t.join();
  for (size_t i = 0; i < regions.size(); ++i) {
    if (!errors[i])
      return errors[i].withContext(cat("checksumming weight '", p.tensors(regions[i].tensor).name(), "'"));
    p.mutable_tensors(regions[i].tensor)->set_crc32c(crcs[i]);
  }
  return Status::ok();
}

// Weights: those in the model's external data files are referenced where
// they are (WeightMode::Reference), the rest go to weights.bin, 64-byte
// aligned regions in tensor order.
Status addWeights(const ir::Graph &g, WeightMode mode, TensorTable &table, EmittedPlan &out) {
  plan::Plan &p = out.plan;
  p.add_weight_files()->set_path(kWeightFile);
  std::unordered_map<std::string, int32_t> referenced;
  std::vector<RegionSum> sums;
  uint64_t size = 0;
  for (const ir::Value *v : g.constants()) {
    int32_t id = table.add(v, p, ir::isParameter(*v) ? plan::TensorInfo::WEIGHT
                                                 : plan::TensorInfo::CONSTANT);
    plan::TensorInfo *t = p.mutable_tensors(id);
    t->set_onnx_name(v->name());
    const Tensor &c = v->constant();
    const FileRegion *r = c.fileRegion();
    if (r && mode != WeightMode::Copy) {
      auto [it, fresh] = referenced.emplace(r->path, p.weight_files_size());
      if (fresh) {
        std::error_code ec;
        std::filesystem::path abs = std::filesystem::absolute(r->path, ec).lexically_normal();
        PIPEC_ASSIGN(uint64_t fileBytes, regularFileSize(r->path));
        plan::WeightFile *wf = p.add_weight_files();
        wf->set_path(ec ? r->path : abs.string());
        wf->set_bytes(fileBytes);
        wf->set_referenced(true);
      }
      t->set_weight_file(it->second);
      t->set_weight_offset(r->offset);
      if (mode == WeightMode::Reference)
        sums.push_back({id, r, c.bytes()});
      continue;
    }
    size = (size + 63) / 64 * 64;
    t->set_weight_file(0);
    t->set_weight_offset(size);
    out.weightPieces.push_back({size, c});
    size += c.bytes();
  }
  p.mutable_weight_files(0)->set_bytes(size);
  if (mode == WeightMode::Describe)
    return Status::ok();
  uint32_t crc = 0;
  PIPEC_TRY(feedWeightFile(out.weightPieces, [&](const void *d, size_t n) {
    crc = crc32c(d, n, crc);
    return Status::ok();
  }));
  p.mutable_weight_files(0)->set_crc32c(crc);
  return checksumRegions(sums, p);
}

} // namespace

Expected<EmittedPlan> emitPlan(const ir::Graph &g, const partitioner::Partition &part,
                               const EmitOptions &opts) {
  if (opts.microBatches < 1)
    return errorf("the number of micro-batches must be at least 1 (got ", opts.microBatches, ")");
  if (opts.training && (!opts.train.loss || opts.train.paramGrads.empty()))
    return errorf("a training plan needs a loss and at least one parameter with a gradient");
  EmittedPlan out;
  PhaseTimer phases;
  plan::Plan &p = out.plan;
  p.set_format_version(plan::formatVersion());
  p.set_producer(std::string("pipec ") + PIPEC_VERSION);
  p.set_model_name(g.name());
  p.set_source_model(opts.sourceModel);
  p.set_source_crc32c(opts.sourceCrc32c);
  p.set_compile_command(opts.compileOptions);
  for (const auto &[domain, version] : g.opsets()) {
    plan::OpsetImport *o = p.add_opsets();
    o->set_domain(domain);
    o->set_version(version);
  }
  const unsigned M = static_cast<unsigned>(opts.microBatches);
  const pipeline::Schedule &schedule = opts.schedule;
  const unsigned S = static_cast<unsigned>(part.stages.size());
  const unsigned per = schedule.stagesPerDevice();
  if (S % per != 0)
    return errorf("internal error: ", S, " stages for the ", schedule.name(), " schedule's ", per,
                  " per device");
  const unsigned K = S / per;
  plan::Pipeline *pl = p.mutable_pipeline();
  pl->set_num_stages(K);
  pl->set_num_micro_batches(M);
  if (per > 1)
    pl->set_stages_per_device(per);
  if (opts.dataParallel > 1)
    pl->set_data_parallel(static_cast<uint32_t>(opts.dataParallel));
  if (opts.shardOptimizer)
    pl->set_shard_optimizer(true);
  pl->set_schedule(schedule.name());
  pl->set_training(opts.training);
  if (!g.inputs().empty() && !g.inputs()[0]->shape().empty())
    pl->set_micro_batch_size(g.inputs()[0]->shape()[0]);

  std::vector<ir::Node *> nodes = g.nodes();
  TensorTable table;
  table.reserve(g.inputs().size() + g.constants().size() + 2 * nodes.size());
  for (const ir::Value *v : g.inputs()) {
    int32_t id = table.add(v, p, plan::TensorInfo::INPUT);
    p.mutable_tensors(id)->set_onnx_name(v->name());
    p.add_inputs(id);
  }
  PIPEC_TRY(addWeights(g, opts.weights, table, out));
  phases.done("emit: weights");

  for (const ir::Node *n : nodes)
    for (const ir::Value *o : n->outputs())
      table.add(o, p, plan::TensorInfo::ACTIVATION);
  for (const ir::Value *v : g.outputs())
    p.add_outputs(table.id(v));

  // Each device runs the nodes of its stages, in graph order within a
  // phase and stage.
  PIPEC_ASSIGN(pipeline::Slots slots, schedule.build(K, M, opts.training, opts.stageCosts));
  std::vector<std::vector<const ir::Node *>> stageNodes(K);
  std::vector<std::vector<unsigned>> nodeStage(K);
  for (const ir::Node *n : nodes) {
    int s = part.stageOf(n);
    if (s < 0 || s >= static_cast<int>(S))
      return errorf("internal error: node '", n->name(), "' is on no stage of ", S);
    const unsigned d = schedule.deviceOf(static_cast<unsigned>(s), K);
    stageNodes[d].push_back(n);
    nodeStage[d].push_back(static_cast<unsigned>(s));
  }
  // The guards the plan keeps (codegen/Guards.h): what leaves the graph is
  // needed whatever the conditions.
  std::unordered_set<const ir::Value *> kept;
  if (opts.training) {
    kept.insert(opts.train.loss);
    for (const auto &[param, grad] : opts.train.paramGrads)
      kept.insert(grad);
    for (const auto &[state, value] : opts.train.stateUpdates)
      kept.insert(value);
  }
  const auto guards = planGuards(nodes, [&](const ir::Node *n) { return part.stageOf(n); }, kept);
  std::vector<std::vector<Work>> nodeWork(K);
  for (unsigned s = 0; s < K; ++s) {
    plan::Device *dev = p.add_devices();
    dev->set_index(static_cast<int32_t>(s));
    dev->set_backend("cpu");
  }
  // The devices' node tables are independent: filled on the usable cores.
  forEachOnCores(K, [&](size_t s) {
    for (const ir::Node *n : stageNodes[s])
      nodeWork[s].push_back(workOf(*n));
    plan::Device *dev = p.mutable_devices(static_cast<int>(s));
    std::vector<char> usesWeight(p.tensors_size(), 0);
    for (const ir::Node *n : stageNodes[s]) {
      plan::Node *pn = dev->add_nodes();
      pn->set_name(n->name());
      pn->set_op_type(n->opType());
      pn->set_domain(n->domain());
      pn->set_opset(g.opset(n->domain()));
      // Random streams are keyed by node id. A backward Dropout and a
      // recomputed forward node replay their forward node's mask, so they
      // take the forward node's id.
      bool replaysForward =
          !n->forwardOf().empty() &&
          ((n->is("Dropout") && n->phase() != ir::Phase::Forward) ||
           n->phase() == ir::Phase::Recompute);
      pn->set_node_id(fnv1a64(replaysForward ? n->forwardOf() : n->name()));
      if (opts.nodeSeconds)
        pn->set_predicted_seconds(opts.nodeSeconds(*n));
      for (const auto &[name, a] : n->attrs())
        setAttr(name, a, *pn->add_attrs());
      for (const ir::Value *v : n->inputs()) {
        int32_t id = table.id(v);
        pn->add_inputs(id);
        if (v && v->isConstant())
          usesWeight[id] = 1;
      }
      for (const ir::Value *v : n->outputs())
        pn->add_outputs(table.id(v));
      pn->set_view(ir::isView(*n));
      if (auto it = guards.find(n); it != guards.end())
        for (const ir::Guard &gd : it->second) {
          plan::Guard *pg = pn->add_guards();
          pg->set_tensor(table.id(gd.cond));
          pg->set_when(gd.when);
        }
    }
    // Graph outputs that are weights are read from the last stage's device.
    if (s == schedule.deviceOf(S - 1, K))
      for (int32_t o : p.outputs())
        if (p.tensors(o).kind() == plan::TensorInfo::CONSTANT ||
            p.tensors(o).kind() == plan::TensorInfo::WEIGHT)
          usesWeight[o] = 1;
    uint64_t weightBytes = 0;
    for (int32_t t = 0; t < p.tensors_size(); ++t)
      if (usesWeight[t]) {
        dev->add_weights(t);
        weightBytes += p.tensors(t).bytes();
      }
    dev->set_weight_bytes(weightBytes);
  });
  if (schedule.noFlush()) {
    // 2bw's devices update their own weights when their part of a step is
    // done, with no collective between them (runtime/Session.cpp).
    auto refuse = [&](const std::string &what,
                      const std::string &why = "its devices update their weights at different times, "
                                               "without a collective") {
      return errorf("the ", schedule.name(), " schedule does not support ", what, " (", why, ")");
    };
    if (opts.train.clipGradNorm > 0)
      return refuse("--clip-grad-norm", "clipping needs the global gradient norm before any update, and "
                                        "2bw's devices update at different times, without a collective");
    if (opts.dataParallel > 1)
      return refuse("--data-parallel");
    if (opts.train.lossScaleSeed)
      return refuse("loss scaling (--loss-scale, fp16 training)",
                    "a step with non-finite gradients is skipped on every device, and 2bw's devices update at "
                    "different times, without a collective");
    for (const auto &[param, grad] : opts.train.paramGrads) {
      const int32_t w = table.id(param);
      std::vector<int> on;
      for (int d = 0; d < static_cast<int>(K); ++d)
        for (int32_t t : p.devices(d).weights())
          if (t == w)
            on.push_back(d);
      if (on.size() > 1)
        return refuse(cat("parameter '", p.tensors(w).name(), "' read on devices ", on[0], " and ", on[1],
                          " (tied weights)"));
    }
  }
  PIPEC_TRY(emitPrograms(p, slots, nodeWork, nodeStage));
  phases.done("emit: nodes and programs");
  // Graph outputs, gradients and state updates are collected after the
  // instruction that made them.
  std::vector<char> keep(p.tensors_size(), 0);
  for (int32_t o : p.outputs())
    keep[o] = 1;
  for (const auto &[param, grad] : opts.train.paramGrads)
    keep[table.id(grad)] = 1;
  for (const auto &[state, value] : opts.train.stateUpdates)
    keep[table.id(value)] = 1;
  // The devices' arenas are independent: planned on the usable cores at
  // once (each device by one thread, so the plan does not depend on the
  // count); on long chains this is a sizeable part of the compile.
  // Auto plans each device by its size, and the plan as a whole by the sweep
  // once its instances (node outputs x micro-batches) reach
  // kSweepTotalFrom.
  PlanMethod method = opts.arenaPlanner;
  if (method == PlanMethod::Auto) {
    size_t instances = 0;
    for (const plan::Device &dev : p.devices())
      for (const plan::Node &pn : dev.nodes())
        instances += static_cast<size_t>(pn.outputs_size()) * M;
    if (instances >= kSweepTotalFrom)
      method = PlanMethod::Sweep;
  }
  std::vector<MemoryPlan> arenas(K);
  forEachOnCores(K, [&](size_t s) {
    arenas[s] = planDeviceMemory(p, *p.mutable_devices(static_cast<int>(s)), keep, method);
  });
  for (const MemoryPlan &mp : arenas) {
    out.arenaPeak.push_back(mp.peak);
    out.arenaLiveBound.push_back(mp.liveBound);
  }
  phases.done("emit: arenas");
  if (opts.training) {
    plan::Training *t = p.mutable_training();
    t->set_loss(table.id(opts.train.loss));
    for (const auto &[param, grad] : opts.train.paramGrads) {
      plan::Parameter *pp = t->add_params();
      pp->set_weight(table.id(param));
      pp->set_grad(table.id(grad));
      pp->set_accumulate_in_place(opts.train.accumulatedInPlace.count(param) > 0);
      if (p.tensors(pp->weight()).kind() != plan::TensorInfo::WEIGHT)
        p.mutable_tensors(pp->weight())->set_kind(plan::TensorInfo::WEIGHT);
    }
    for (const auto &[state, value] : opts.train.stateUpdates) {
      plan::StateUpdate *u = t->add_state_updates();
      u->set_state(table.id(state));
      u->set_value(table.id(value));
    }
    t->set_optimizer(opts.train.optimizer);
    t->set_lr_schedule(opts.train.lrSchedule);
    t->set_clip_grad_norm(opts.train.clipGradNorm);
    if (opts.train.lossScaleSeed) {
      if (table.id(opts.train.lossScaleSeed) < 0)
        return errorf("internal error: the loss scale's seed '", opts.train.lossScaleSeed->name(),
                      "' is in no device's program");
      plan::LossScaling *ls = t->mutable_loss_scaling();
      ls->set_seed(table.id(opts.train.lossScaleSeed));
      ls->set_initial_scale(opts.train.lossScale);
      ls->set_window(opts.train.lossScaleWindow);
    }
  }
  PIPEC_TRY(plan::validatePlan(p).withContext("internal error: emitted an invalid plan"));
  phases.done("emit: validate");
  out.phaseSeconds = phases.phases();
  return out;
}

Status writePlanDirectory(const std::string &dir, const EmittedPlan &p, bool manifest) {
  namespace fs = std::filesystem;
  if (fileExists(dir)) {
    if (!isDirectory(dir))
      return errorf("cannot write the plan to '", dir, "': it exists and is not a directory");
    std::error_code ec;
    bool empty = fs::is_empty(dir, ec);
    if (!empty && !fileExists(joinPath(dir, plan::kPlanFile)))
      return errorf("refusing to overwrite '", dir,
                    "': it is a non-empty directory that holds no plan");
  }
  PIPEC_TRY(makeDirs(dir));
  PIPEC_TRY(writeFileAtomicStreamed(joinPath(dir, kWeightFile), [&](const ByteSink &sink) {
    return feedWeightFile(p.weightPieces, sink);
  }));
  PIPEC_TRY(plan::writePlan(dir, p.plan));
  return manifest ? plan::writeManifest(dir) : Status::ok();
}

} // namespace pipec::codegen
