//===- codegen/PlanEmitter.cpp - IR + partition -> plan directory ---------===//
#include "codegen/PlanEmitter.h"

#include "codegen/MemoryPlanner.h"
#include "pipec/Version.h"
#include "runtime/plan/PlanIO.h"
#include "support/FileIO.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>

namespace pipec::codegen {

namespace {

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

} // namespace

bool isParameter(const ir::Value &v) {
  if (!v.isConstant() || !v.isTrainable())
    return false;
  for (const ir::Node *u : v.users()) {
    if (u->is("BatchNormalization") && (u->input(3) == &v || u->input(4) == &v))
      return false;
    const ir::OpInfo *info = u->info();
    for (size_t i = 0; i < u->numInputs(); ++i)
      if (u->input(i) == &v && i < 32 && ((info->shapeValueInputs >> i) & 1u))
        return false;
  }
  return true;
}

Expected<EmittedPlan> emitPlan(const ir::Graph &g, const partitioner::Partition &part,
                               const EmitOptions &opts) {
  if (opts.microBatches < 1)
    return errorf("the number of micro-batches must be at least 1 (got ", opts.microBatches, ")");
  if (opts.training && (!opts.train.loss || opts.train.paramGrads.empty()))
    return errorf("a training plan needs a loss and at least one parameter with a gradient");
  EmittedPlan out;
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
  const unsigned K = static_cast<unsigned>(part.stages.size());
  plan::Pipeline *pl = p.mutable_pipeline();
  pl->set_num_stages(K);
  pl->set_num_micro_batches(M);
  pl->set_schedule(K == 1 ? "single" : "gpipe");
  pl->set_training(opts.training);
  if (!g.inputs().empty() && !g.inputs()[0]->shape().empty())
    pl->set_micro_batch_size(g.inputs()[0]->shape()[0]);

  TensorTable table;
  for (const ir::Value *v : g.inputs()) {
    int32_t id = table.add(v, p, plan::TensorInfo::INPUT);
    p.mutable_tensors(id)->set_onnx_name(v->name());
    p.add_inputs(id);
  }
  // Weights: one file, 64-byte aligned regions in tensor order.
  p.add_weight_files()->set_path(kWeightFile);
  for (const ir::Value *v : g.constants()) {
    int32_t id = table.add(v, p, isParameter(*v) ? plan::TensorInfo::WEIGHT
                                                 : plan::TensorInfo::CONSTANT);
    plan::TensorInfo *t = p.mutable_tensors(id);
    t->set_onnx_name(v->name());
    out.weights.resize((out.weights.size() + 63) / 64 * 64, '\0');
    t->set_weight_file(0);
    t->set_weight_offset(out.weights.size());
    out.weights.append(static_cast<const char *>(v->constant().raw()), v->constant().bytes());
  }
  p.mutable_weight_files(0)->set_bytes(out.weights.size());
  p.mutable_weight_files(0)->set_crc32c(crc32c(out.weights.data(), out.weights.size()));

  std::vector<ir::Node *> nodes = g.nodes();
  for (const ir::Node *n : nodes)
    for (const ir::Value *o : n->outputs())
      table.add(o, p, plan::TensorInfo::ACTIVATION);
  for (const ir::Value *v : g.outputs())
    p.add_outputs(table.id(v));

  for (unsigned s = 0; s < K; ++s) {
    const partitioner::Stage &stage = part.stages[s];
    plan::Device *dev = p.add_devices();
    dev->set_index(static_cast<int32_t>(s));
    dev->set_backend("cpu");
    std::vector<char> usesWeight(p.tensors_size(), 0);
    for (size_t i = stage.begin; i < stage.end; ++i) {
      const ir::Node *n = nodes[i];
      plan::Node *pn = dev->add_nodes();
      pn->set_name(n->name());
      pn->set_op_type(n->opType());
      pn->set_domain(n->domain());
      pn->set_opset(g.opset(n->domain()));
      // Random streams are keyed by node id. A backward Dropout replays its
      // forward node's mask, so it takes the forward node's id.
      bool replaysForward = n->is("Dropout") && n->phase() != ir::Phase::Forward &&
                            !n->forwardOf().empty();
      pn->set_node_id(fnv1a64(replaysForward ? n->forwardOf() : n->name()));
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
    }
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

    // Per micro-batch, in ascending order: FORWARD runs the forward nodes,
    // BACKWARD (training) the input- and weight-gradient nodes; OPTIMIZER
    // ends a training step.
    for (unsigned mb = 0; mb < M; ++mb) {
      plan::Instruction *fwd = dev->add_program();
      fwd->set_kind(plan::Instruction::FORWARD);
      fwd->set_micro_batch(mb);
      plan::Instruction *bwd = nullptr;
      if (opts.training) {
        bwd = dev->add_program();
        bwd->set_kind(plan::Instruction::BACKWARD);
        bwd->set_micro_batch(mb);
      }
      for (size_t i = stage.begin; i < stage.end; ++i) {
        bool forward = nodes[i]->phase() == ir::Phase::Forward;
        (forward || !bwd ? fwd : bwd)->add_nodes(static_cast<int32_t>(i - stage.begin));
      }
    }
    if (opts.training)
      dev->add_program()->set_kind(plan::Instruction::OPTIMIZER);

    // Liveness over the instruction stream: time advances one step per node
    // run. Inputs are fed just before the instruction that first reads them;
    // graph outputs are collected after the instruction that made them.
    struct Interval {
      int64_t start = -1, end = -1;
    };
    std::vector<Interval> live(static_cast<size_t>(p.tensors_size()) * M);
    auto at = [&](int32_t t, unsigned mb) -> Interval & { return live[static_cast<size_t>(t) * M + mb]; };
    // Graph outputs and gradients are read by the runtime after the
    // instruction that wrote them.
    std::vector<char> isOutput(p.tensors_size(), 0);
    for (int32_t o : p.outputs())
      isOutput[o] = 1;
    for (const auto &[param, grad] : opts.train.paramGrads)
      isOutput[table.id(grad)] = 1;
    int64_t time = 0;
    for (const plan::Instruction &ins : dev->program()) {
      int64_t first = time, last = time + ins.nodes_size() - 1;
      unsigned mb = ins.micro_batch();
      for (int32_t ni : ins.nodes()) {
        const plan::Node &pn = dev->nodes(ni);
        for (int32_t t : pn.inputs()) {
          if (t < 0)
            continue;
          auto kind = p.tensors(t).kind();
          if (kind == plan::TensorInfo::WEIGHT || kind == plan::TensorInfo::CONSTANT)
            continue;
          Interval &iv = at(t, mb);
          if (iv.start < 0)
            iv.start = kind == plan::TensorInfo::INPUT ? first : time;
          iv.end = std::max(iv.end, time);
        }
        for (int32_t t : pn.outputs()) {
          Interval &iv = at(t, mb);
          iv.start = time;
          iv.end = std::max(iv.end, time);
        }
        ++time;
      }
      for (int32_t t = 0; t < p.tensors_size(); ++t)
        if (isOutput[t] && at(t, mb).start >= first)
          at(t, mb).end = last;
    }
    std::vector<BufferRequest> requests;
    std::vector<std::pair<int32_t, unsigned>> owners;
    for (int32_t t = 0; t < p.tensors_size(); ++t)
      for (unsigned mb = 0; mb < M; ++mb) {
        const Interval &iv = at(t, mb);
        if (iv.start < 0)
          continue;
        requests.push_back({p.tensors(t).bytes(), iv.start, iv.end});
        owners.emplace_back(t, mb);
      }
    MemoryPlan mp = planMemory(requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      plan::Allocation *a = dev->add_allocations();
      a->set_tensor(owners[i].first);
      a->set_micro_batch(owners[i].second);
      a->set_offset(mp.offsets[i]);
    }
    dev->set_arena_bytes(mp.peak);
    out.arenaPeak.push_back(mp.peak);
    out.arenaLiveBound.push_back(mp.liveBound);
  }
  if (opts.training) {
    plan::Training *t = p.mutable_training();
    t->set_loss(table.id(opts.train.loss));
    for (const auto &[param, grad] : opts.train.paramGrads) {
      plan::Parameter *pp = t->add_params();
      pp->set_weight(table.id(param));
      pp->set_grad(table.id(grad));
      if (p.tensors(pp->weight()).kind() != plan::TensorInfo::WEIGHT)
        p.mutable_tensors(pp->weight())->set_kind(plan::TensorInfo::WEIGHT);
    }
    t->set_optimizer(opts.train.optimizer);
    t->set_lr_schedule(opts.train.schedule);
    t->set_clip_grad_norm(opts.train.clipGradNorm);
  }
  PIPEC_TRY(plan::validatePlan(p).withContext("internal error: emitted an invalid plan"));
  return out;
}

Status writePlanDirectory(const std::string &dir, const EmittedPlan &p) {
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
  PIPEC_TRY(writeFileAtomic(joinPath(dir, kWeightFile), p.weights));
  return plan::writePlan(dir, p.plan);
}

} // namespace pipec::codegen
