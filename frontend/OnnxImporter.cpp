//===- frontend/OnnxImporter.cpp - ONNX model -> ir::Graph ----------------===//
//
// The importer runs in fixed phases, each in file order, so the graph it
// builds depends on nothing but the file and the options:
//   1. opset imports;
//   2. initializers -> constants (except those a frozen input overrides);
//   3. graph inputs -> typed inputs with every symbolic dimension bound, or
//      constants when frozen or backed by an initializer (OnnxInputs.cpp);
//   4. Constant nodes -> constants;
//   5. other nodes -> ir nodes. An input defined later in the file is patched
//      in once every node exists; Graph::topoSort then restores a topological
//      order and finds cycles;
//   6. graph outputs.
//
//===----------------------------------------------------------------------===//
#include "frontend/OnnxImporter.h"

#include "frontend/OnnxImporterImpl.h"
#include "frontend/OnnxProto.h"
#include "support/FileIO.h"

#include <algorithm>
#include <exception>
#include <unordered_map>

namespace pipec::frontend {

namespace detail {

std::string domainName(const std::string &canonical) {
  return canonical.empty() ? "ai.onnx" : canonical;
}

namespace {

bool isConstantNode(const onnx::NodeProto &n) {
  return n.op_type() == "Constant" && ir::canonicalDomain(n.domain()).empty();
}

// Names the nodes of one cycle, "a -> b -> a", in data-flow order. Called
// after a failed topoSort, which leaves the nodes it ordered first.
std::string describeCycle(const ir::Graph &g) {
  // A node is ordered if all its producers are ordered and come before it;
  // every other node has an unordered producer, so walking producers from
  // an unordered node must come back to a node already seen.
  std::unordered_map<const ir::Node *, bool> ordered;
  const ir::Node *start = nullptr;
  for (const ir::Node *n : g.nodes()) {
    bool ok = true;
    for (const ir::Value *in : n->inputs())
      if (in && in->producer())
        ok = ok && ordered[in->producer()];
    ordered[n] = ok;
    if (!ok && !start)
      start = n;
  }
  if (!start)
    return "(no cycle found)";
  std::vector<const ir::Node *> path;
  std::unordered_map<const ir::Node *, size_t> seenAt;
  const ir::Node *n = start;
  while (!seenAt.count(n)) {
    seenAt[n] = path.size();
    path.push_back(n);
    for (const ir::Value *in : n->inputs())
      if (in && in->producer() && !ordered[in->producer()]) {
        n = in->producer();
        break;
      }
  }
  // path[seenAt[n]..] walks against the data flow; print it along.
  std::string r;
  for (size_t i = path.size(); i-- > seenAt[n];)
    r += "'" + path[i]->name() + "' -> ";
  return r + "'" + path.back()->name() + "'";
}

} // namespace

Importer::Importer(const onnx::ModelProto &model, const ImportOptions &opts,
                   std::string baseDir)
    : model_(model), graph_(model.graph()), opts_(opts), baseDir_(std::move(baseDir)),
      g_(std::make_unique<ir::Graph>()) {}

Importer::Importer(const onnx::ModelProto &model, const onnx::GraphProto &body,
                   const ImportOptions &opts, std::string baseDir, Importer *parent)
    : model_(model), graph_(body), opts_(opts), baseDir_(std::move(baseDir)),
      g_(std::make_unique<ir::Graph>()), parent_(parent), depth_(parent->depth_ + 1) {}

Expected<Importer::ImportedSubgraph> Importer::runSubgraph() {
  g_->setName(graph_.name().empty() ? "subgraph" : graph_.name());
  for (const auto &[domain, version] : parent_->g_->opsets())
    g_->setOpset(domain, version);
  reserveNames();
  PIPEC_TRY(importInitializers());
  PIPEC_TRY(importSubgraphInputs());
  const size_t formal = g_->inputs().size();
  PIPEC_TRY(importConstantNodes());
  PIPEC_TRY(importNodes());
  PIPEC_TRY(importOutputs());
  return ImportedSubgraph{std::move(g_), formal, std::move(captures_)};
}

Status Importer::importSubgraphInputs() {
  for (const auto &vi : graph_.input()) {
    // The expansion binds formal inputs to the node's values, whose types
    // shape inference knows; a declared type is not needed.
    TensorDesc desc{DType::F32, {}};
    if (vi.has_type() && vi.type().value_case() == onnx::TypeProto::kTensorType &&
        vi.type().tensor_type().elem_type() != 0)
      desc.dtype = static_cast<DType>(vi.type().tensor_type().elem_type());
    if (initializers_.count(vi.name()))
      return errorf("subgraph '", g_->name(), "': input '", vi.name(),
                    "' is also an initializer");
    PIPEC_TRY(g_->addInput(vi.name(), desc).status());
  }
  return Status::ok();
}

ir::Value *Importer::capture(const std::string &name) {
  if (ir::Value *v = g_->findValue(name))
    return v;
  captures_.push_back(name);
  // Typed when the expansion binds it to the outer value.
  return *g_->addInput(name, TensorDesc{DType::F32, {}});
}

Status Importer::importSubgraphs(const onnx::NodeProto &n, const std::string &where,
                                 std::vector<ir::Value *> &inputs,
                                 std::vector<std::pair<size_t, std::string>> &later,
                                 std::map<std::string, ImportedSubgraph> &subgraphs,
                                 std::map<std::string, std::vector<size_t>> &slots) {
  // One node input per distinct captured name, shared by the subgraphs.
  std::map<std::string, size_t> slotOf;
  for (const onnx::AttributeProto &a : n.attribute()) {
    if (a.type() == onnx::AttributeProto::GRAPHS)
      return errorf(where, ": attribute '", a.name(), "' is a list of graphs, which no op pipec supports takes");
    if (a.type() != onnx::AttributeProto::GRAPH && !(a.type() == 0 && a.has_g()))
      continue;
    // Each level is a frame of this recursion: a hostile file must not
    // exhaust the stack.
    constexpr int kMaxDepth = 64;
    if (depth_ + 1 > kMaxDepth)
      return errorf(where, ": subgraph '", a.name(), "' is nested more than ", kMaxDepth,
                    " levels deep");
    Importer sub(model_, a.g(), opts_, baseDir_, this);
    Expected<ImportedSubgraph> body = sub.runSubgraph();
    if (!body)
      return body.status().withContext(cat(where, ", subgraph '", a.name(), "'"));
    std::vector<size_t> &s = slots[a.name()];
    for (const std::string &c : body->captures) {
      auto [it, fresh] = slotOf.emplace(c, inputs.size());
      if (fresh) {
        ir::Value *v = g_->findValue(c);
        if (!v)
          later.emplace_back(inputs.size(), c);
        inputs.push_back(v);
      }
      s.push_back(it->second);
    }
    subgraphs.emplace(a.name(), body.take());
  }
  return Status::ok();
}

Expected<std::unique_ptr<ir::Graph>> Importer::run() {
  g_->setName(graph_.name().empty() ? "model" : graph_.name());
  PIPEC_TRY(checkOptions());
  PIPEC_TRY(importOpsets());
  reserveNames();
  PIPEC_TRY(importInitializers());
  PIPEC_TRY(importInputs());
  PIPEC_TRY(importConstantNodes());
  PIPEC_TRY(importNodes());
  PIPEC_TRY(importOutputs());
  return std::move(g_);
}

Status Importer::importOpsets() {
  if (model_.opset_import_size() == 0) {
    // IR versions 1 and 2 predate opset_import; ONNX's checker reads such
    // models as ai.onnx opset 1, and so do we.
    if (model_.ir_version() >= 3)
      return errorf("the model imports no opset (IR version ", model_.ir_version(),
                    " requires opset_import)");
    g_->setOpset("", 1);
    return Status::ok();
  }
  for (const auto &imp : model_.opset_import()) {
    std::string d = ir::canonicalDomain(imp.domain());
    if (imp.version() <= 0)
      return errorf("opset_import of domain ", domainName(d), " has version ",
                    imp.version());
    if (int64_t have = g_->opset(d); have != 0 && have != imp.version())
      return errorf("opset_import lists domain ", domainName(d), " twice (versions ",
                    have, " and ", imp.version(), ")");
    g_->setOpset(d, imp.version());
  }
  return Status::ok();
}

void Importer::reserveNames() {
  for (const auto &vi : graph_.input())
    reservedValues_.insert(vi.name());
  for (const auto &t : graph_.initializer())
    reservedValues_.insert(t.name());
  for (const auto &n : graph_.node()) {
    for (const std::string &o : n.output())
      if (!o.empty())
        reservedValues_.insert(o);
    if (!n.name().empty())
      reservedNodes_.insert(n.name());
  }
}

std::string Importer::freshName(const std::string &base, bool node) {
  auto unique = [&](const std::string &b) {
    return node ? g_->uniqueNodeName(b) : g_->uniqueValueName(b);
  };
  // A name the file gives to something not imported yet is taken too: a
  // generated name must never steal the one a later node declares.
  const std::set<std::string> &reserved = node ? reservedNodes_ : reservedValues_;
  std::string n = unique(base);
  for (int k = 1; reserved.count(n); ++k)
    n = unique(cat(base, "_", k));
  return n;
}

Status Importer::importInitializers() {
  if (graph_.sparse_initializer_size() > 0)
    return errorf("sparse initializer '", graph_.sparse_initializer(0).values().name(),
                  "' is not supported");
  std::set<std::string> inputNames;
  for (const auto &vi : graph_.input())
    inputNames.insert(vi.name());
  for (int i = 0; i < graph_.initializer_size(); ++i) {
    const onnx::TensorProto &t = graph_.initializer(i);
    if (t.name().empty())
      return errorf("initializer ", i, " has no name");
    if (!initializers_.emplace(t.name(), &t).second)
      return errorf("initializer '", t.name(), "' is defined twice");
    // A frozen graph input overrides its initializer (the initializer is
    // only the input's default value); importInputs adds the frozen tensor.
    if (!parent_ && opts_.freezeInputs.count(t.name()) && inputNames.count(t.name()))
      continue;
    PIPEC_ASSIGN(Tensor data, tensorFromProto(t, baseDir_));
    // A subgraph's own initializers are constants: exporters keep a
    // model's parameters in the main graph, where a branch or loop body
    // reads them by name (and --save writes the main graph's back).
    // 16-bit float weights train too, as fp32 masters (passes/PromoteHalf.cpp).
    const DType dt = data.dtype();
    bool trainable = (isFloat(dt) || dt == DType::F16 || dt == DType::BF16) && !parent_;
    PIPEC_ASSIGN(ir::Value * v, g_->addConstant(t.name(), std::move(data)));
    v->setTrainable(trainable);
  }
  return Status::ok();
}

Status Importer::checkDomain(const onnx::NodeProto &n, size_t index) {
  std::string d = ir::canonicalDomain(n.domain());
  if (g_->opset(d) == 0)
    return errorf("node '", n.name().empty() ? cat(n.op_type(), "_", index) : n.name(),
                  "' has op type '", n.op_type(), "' of domain ", domainName(d),
                  ", which the model does not import (no opset_import entry)");
  return Status::ok();
}

std::string Importer::describe(const std::string &name, const std::string &opType,
                               const std::string &domain) const {
  return cat("node '", name, "' (op type '", opType, "', domain ", domainName(domain),
             ", opset ", g_->opset(domain), ")");
}

Expected<Tensor> Importer::constantNodeValue(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1)
    return errorf("a Constant node needs exactly one value attribute, it has ",
                  n.attribute_size());
  const onnx::AttributeProto &a = n.attribute(0);
  const std::string &k = a.name();
  if (k == "value") {
    if (!a.has_t())
      return errorf("attribute 'value' holds no tensor");
    return tensorFromProto(a.t(), baseDir_);
  }
  if (k == "value_float")
    return Tensor::scalarF32(a.f());
  if (k == "value_floats") {
    Tensor t(DType::F32, {a.floats_size()});
    std::copy(a.floats().begin(), a.floats().end(), t.data<float>());
    return t;
  }
  if (k == "value_int")
    return Tensor::fromInts({a.i()}).reshaped({});
  if (k == "value_ints")
    return Tensor::fromInts({a.ints().begin(), a.ints().end()});
  if (k == "value_string" || k == "value_strings")
    return errorf("attribute '", k, "': string constants are not supported");
  if (k == "sparse_value")
    return errorf("attribute 'sparse_value': sparse constants are not supported");
  return errorf("unknown Constant attribute '", k, "'");
}

Status Importer::importConstantNodes() {
  for (int i = 0; i < graph_.node_size(); ++i) {
    const onnx::NodeProto &n = graph_.node(i);
    if (!isConstantNode(n))
      continue;
    PIPEC_TRY(checkDomain(n, i));
    std::string name = n.name().empty() ? cat("Constant_", i) : n.name();
    std::string where = describe(name, n.op_type(), "");
    if (n.input_size() != 0 || n.output_size() != 1 || n.output(0).empty())
      return errorf(where, ": a Constant node takes no inputs and has one named output (it has ",
                    n.input_size(), " inputs, ", n.output_size(), " outputs)");
    Expected<Tensor> value = constantNodeValue(n);
    if (!value)
      return value.status().withContext(where);
    const bool trainable = opts_.trainableConstants && isFloat(value->dtype()) && value->numel() >= 2;
    Expected<ir::Value *> v = g_->addConstant(n.output(0), value.take());
    if (!v)
      return v.status().withContext(where);
    (*v)->setTrainable(trainable);
    (*v)->setPromotedConstant(trainable);
  }
  return Status::ok();
}

Status Importer::importNodes() {
  for (int i = 0; i < graph_.node_size(); ++i) {
    const onnx::NodeProto &n = graph_.node(i);
    if (isConstantNode(n))
      continue;
    PIPEC_TRY(checkDomain(n, i));
    std::string name = n.name();
    if (name.empty())
      name = freshName(cat(n.op_type(), "_", i), /*node=*/true);
    else if (g_->findNode(name))
      name = freshName(name, /*node=*/true);
    PIPEC_TRY(importNode(n, name));
  }
  for (const PendingInput &p : pending_) {
    ir::Value *v = g_->findValue(p.value);
    if (!v && parent_)
      v = capture(p.value);
    if (!v)
      return errorf(p.where, ": input ", p.slot, " '", p.value,
                    "' is not defined by any node, graph input or initializer");
    p.node->setInput(p.slot, v);
  }
  if (Status s = g_->topoSort(); !s)
    return errorf("the graph has a cycle: ", describeCycle(*g_));
  return Status::ok();
}

Status Importer::importNode(const onnx::NodeProto &n, const std::string &name) {
  std::string domain = ir::canonicalDomain(n.domain());
  const ir::OpInfo *info = ir::lookupOp(domain, n.op_type());
  if (!info) {
    std::string hint;
    for (const auto &f : model_.functions())
      if (f.name() == n.op_type() && ir::canonicalDomain(f.domain()) == domain)
        hint = "; it is a model-local function, which pipec does not inline";
    return errorf("unsupported op: node '", name, "' has op type '", n.op_type(),
                  "' (domain ", domainName(domain), ", opset ", g_->opset(domain), ")",
                  hint);
  }
  std::string where = describe(name, n.op_type(), domain);

  // Trailing omitted optional inputs say nothing; drop them so that
  // numInputs() counts the inputs really given.
  int nin = n.input_size();
  while (nin > 0 && n.input(nin - 1).empty())
    --nin;
  if (nin < info->minInputs || (info->maxInputs >= 0 && nin > info->maxInputs))
    return errorf(where, ": has ", nin, " inputs, the op takes ", info->minInputs,
                  info->maxInputs < 0 ? " or more" : cat(" to ", info->maxInputs));
  std::vector<ir::Value *> inputs(static_cast<size_t>(nin), nullptr);
  std::vector<std::pair<size_t, std::string>> later;
  for (int j = 0; j < nin; ++j) {
    const std::string &s = n.input(j);
    if (s.empty()) {
      if (j < info->minInputs)
        return errorf(where, ": required input ", j, " is omitted (empty name)");
      continue;
    }
    if (ir::Value *v = g_->findValue(s))
      inputs[j] = v;
    else
      later.emplace_back(static_cast<size_t>(j), s);
  }

  // Likewise trailing omitted outputs, keeping the op's minimum; an omitted
  // output in the middle still exists, so it gets a fresh name.
  int nout = n.output_size();
  while (nout > std::max(info->minOutputs, 0) && n.output(nout - 1).empty())
    --nout;
  if (nout < info->minOutputs || (info->maxOutputs >= 0 && nout > info->maxOutputs))
    return errorf(where, ": has ", nout, " outputs, the op gives ", info->minOutputs,
                  info->maxOutputs < 0 ? " or more" : cat(" to ", info->maxOutputs));
  std::vector<std::string> outputs;
  for (int k = 0; k < nout; ++k) {
    std::string o = n.output(k);
    if (o.empty())
      o = freshName(cat(name, "_out", k), /*node=*/false);
    else if (std::find(outputs.begin(), outputs.end(), o) != outputs.end())
      return errorf(where, ": output '", o, "' is listed twice");
    outputs.push_back(std::move(o));
  }

  std::map<std::string, ImportedSubgraph> subgraphs;
  std::map<std::string, std::vector<size_t>> captureSlots;
  PIPEC_TRY(importSubgraphs(n, where, inputs, later, subgraphs, captureSlots));
  if (!subgraphs.empty() && !info->has(ir::op::Expanded))
    return errorf(where, ": has a graph attribute, which the op does not take");

  AttrMap attrs;
  for (const onnx::AttributeProto &a : n.attribute()) {
    if (a.name().empty())
      return errorf(where, ": has an attribute without a name");
    if (subgraphs.count(a.name()))
      continue;
    if (!a.ref_attr_name().empty())
      return errorf(where, ": attribute '", a.name(),
                    "' refers to a function attribute outside a function");
    Expected<Attribute> attr = attributeFromProto(a, baseDir_);
    if (!attr)
      return attr.status().withContext(where);
    if (!attrs.emplace(a.name(), attr.take()).second)
      return errorf(where, ": attribute '", a.name(), "' is given twice");
  }

  Expected<ir::Node *> node =
      g_->addNode(name, n.op_type(), domain, inputs, outputs, std::move(attrs));
  if (!node)
    return node.status().withContext(where);
  for (auto &[attr, body] : subgraphs)
    (*node)->subgraphs()[attr] = ir::Subgraph{std::shared_ptr<ir::Graph>(std::move(body.graph)),
                                              body.numFormalInputs, captureSlots[attr]};
  for (auto &[slot, value] : later)
    pending_.push_back(PendingInput{*node, slot, value, where});
  return Status::ok();
}

Status Importer::importOutputs() {
  for (const auto &o : graph_.output()) {
    ir::Value *v = g_->findValue(o.name());
    if (!v && parent_)
      v = capture(o.name());
    if (!v)
      return errorf("graph output '", o.name(),
                    "' is not defined by any node, graph input or initializer");
    g_->addOutput(v);
  }
  return Status::ok();
}

} // namespace detail

namespace {

Expected<std::unique_ptr<ir::Graph>> importModel(const onnx::ModelProto &model,
                                                 const std::string &what,
                                                 std::string baseDir,
                                                 const ImportOptions &opts) {
  auto result = detail::Importer(model, opts, std::move(baseDir)).run();
  if (!result)
    return result.status().withContext(cat("importing '", what, "'"));
  return result;
}

// The entry points are a library boundary: nothing may escape as an
// exception, including std::bad_alloc from a hostile file.
template <typename F>
Expected<std::unique_ptr<ir::Graph>> noThrow(const std::string &what, F &&f) {
  try {
    return f();
  } catch (const TensorReadError &e) {
    return errorf("importing '", what, "': ", e.what());
  } catch (const std::bad_alloc &e) {
    // Protobuf holds the whole model while it is parsed, and the importer
    // copies the initializers stored in it; external data is not read.
    auto size = regularFileSize(what);
    return errorf("out of memory importing '", what, "'",
                  size ? cat(" (", *size, " bytes: the model file, its parsed form and the "
                                 "initializers stored in it are held at once; weights in "
                                 "external data files are not)")
                       : std::string(),
                  ": ", e.what());
  } catch (const std::exception &e) {
    return errorf("importing '", what, "': internal error: ", e.what());
  }
}

} // namespace

Expected<std::unique_ptr<ir::Graph>> importOnnxFile(const std::string &path,
                                                    const ImportOptions &opts) {
  return noThrow(path, [&]() -> Expected<std::unique_ptr<ir::Graph>> {
    // Parsed as read: no copy of the file beside the proto's.
    PIPEC_ASSIGN(onnx::ModelProto model, parseModelProtoFile(path));
    std::string baseDir = opts.externalDataDir.empty() ? dirName(path) : opts.externalDataDir;
    return importModel(model, path, baseDir, opts);
  });
}

Expected<std::unique_ptr<ir::Graph>> importOnnxBytes(const std::string &bytes,
                                                     const std::string &what,
                                                     const ImportOptions &opts) {
  return noThrow(what, [&]() -> Expected<std::unique_ptr<ir::Graph>> {
    PIPEC_ASSIGN(onnx::ModelProto model, parseModelProto(bytes, what));
    // Bytes have no directory of their own; without externalDataDir,
    // external data paths resolve against the working directory.
    std::string baseDir = opts.externalDataDir.empty() ? "." : opts.externalDataDir;
    return importModel(model, what, baseDir, opts);
  });
}

} // namespace pipec::frontend
