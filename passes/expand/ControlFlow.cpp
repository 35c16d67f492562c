//===- passes/expand/ControlFlow.cpp - If and Loop as straight-line code --===//
//
// pipec plans are static: every node runs at a fixed place of a device's
// instruction stream. Control flow is therefore turned into straight-line
// code while shapes are inferred:
//
//  - If with a compile-time condition (a shape test, a frozen input)
//    becomes the nodes of its taken branch; the other is never typed.
//  - If with a data-dependent condition becomes both branches and a Where
//    per output (a branch select). Each branch's nodes carry a guard
//    (ir::Guard) on the condition, so that a plan may run only the branch
//    taken; where one runs both, the result, and in training the gradient
//    (Where's rule sends it to the taken side only), are still those of
//    the branch taken. Its branches must give outputs of one type.
//  - Loop is unrolled one iteration at a time: the iteration's body, then a
//    Loop for the rest, which the walk reaches after typing and folding the
//    body, so a condition computed from shapes or constants ends the loop
//    exactly. A condition that depends on data keeps the loop running to its
//    trip count M with the state frozen once it turns false (Where on each
//    carried value), which is ONNX's result; scan outputs then have a
//    data-dependent length and are refused.
//  - Scan unrolls over its inputs' static length: each iteration's slices,
//    the body, and the scan outputs stacked from the iterations' outputs.
//
//===----------------------------------------------------------------------===//
#include "passes/expand/Expand.h"

#include <algorithm>

namespace pipec::passes::expand {

namespace {

/// Iterations a Loop may unroll to.
constexpr int64_t kMaxUnrolledIterations = 100000;

/// The value of a constant boolean or integer scalar (one element).
Expected<int64_t> scalarValue(const ir::Value &v) {
  const Tensor &t = v.constant();
  if (t.numel() != 1)
    return errorf("'", v.name(), "' has ", t.numel(), " elements, not one");
  switch (t.dtype()) {
  case DType::Bool: return t.data<bool>()[0] ? 1 : 0;
  case DType::I64: return t.data<int64_t>()[0];
  case DType::I32: return t.data<int32_t>()[0];
  default: return errorf("'", v.name(), "' has element type ", dtypeName(t.dtype()));
  }
}

/// The condition as a scalar (Where would broadcast a [1] condition).
Expected<ir::Value *> scalarCondition(Expansion &x, ir::Value *cond) {
  if (cond->dtype() != DType::Bool)
    return x.error(cat("its condition '", cond->name(), "' is ", dtypeName(cond->dtype()),
                       ", not bool"));
  if (cond->type().numel() != 1)
    return x.error(cat("its condition '", cond->name(), "' has ", cond->type().numel(),
                       " elements, not one"));
  return x.reshape(cond, {});
}

Status selectOutputs(Expansion &x, ir::Value *cond, const std::vector<ir::Value *> &a,
                     const std::vector<ir::Value *> &b, const std::string &what) {
  std::vector<ir::Value *> outs;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) {
      outs.push_back(a[i]);
      continue;
    }
    PIPEC_ASSIGN(ir::Value * s, x.emit("Where", {cond, a[i], b[i]}));
    s->producer()->setBranchSelect(true);
    x.requireSameType(s->producer(), x.error(cat(what, " ", i, " differs")).message());
    outs.push_back(s);
  }
  x.setOutputs(std::move(outs));
  return Status::ok();
}

} // namespace

Status expandIf(Expansion &x) {
  ir::Value *cond = x.input(0);
  if (cond->isConstant()) {
    Expected<int64_t> taken = scalarValue(*cond);
    if (!taken)
      return x.error(cat("its condition: ", taken.status().message()));
    PIPEC_ASSIGN(std::vector<ir::Value *> outs,
                 x.inlineSubgraph(*taken ? "then_branch" : "else_branch", {}));
    if (outs.size() != x.numOutputs())
      return x.error(cat("its ", *taken ? "then" : "else", " branch gives ", outs.size(),
                         " outputs, the node has ", x.numOutputs()));
    x.setOutputs(std::move(outs));
    return Status::ok();
  }
  PIPEC_ASSIGN(ir::Value * c, scalarCondition(x, cond));
  // Each branch's nodes are needed only when the condition picks it: a
  // plan may skip them otherwise (ir::Guard).
  const ir::Guard onTrue{c, true}, onFalse{c, false};
  PIPEC_ASSIGN(std::vector<ir::Value *> thenOuts, x.inlineSubgraph("then_branch", {}, &onTrue));
  PIPEC_ASSIGN(std::vector<ir::Value *> elseOuts, x.inlineSubgraph("else_branch", {}, &onFalse));
  if (thenOuts.size() != x.numOutputs() || elseOuts.size() != x.numOutputs())
    return x.error(cat("its branches give ", thenOuts.size(), " and ", elseOuts.size(),
                       " outputs, the node has ", x.numOutputs()));
  return selectOutputs(x, c, thenOuts, elseOuts,
                       cat("its condition '", cond->name(),
                           "' is computed from data, so pipec runs both branches and selects "
                           "(a static plan), which needs the branches' outputs to have one "
                           "type; output"));
}

Status expandLoop(Expansion &x) {
  const ir::Node &n = x.node();
  // The rest of a loop is a node "loop@3": errors name the model's node.
  const std::string root = n.name().substr(0, n.name().rfind('@'));
  const int64_t iteration = attrInt(n.attrs(), "pipec_iteration", 0);
  auto fail = [&](const std::string &message) {
    return errorf("node '", root, "' (Loop, opset ", x.nodeOpset(), ")",
                  iteration > 0 ? cat(", unrolled to iteration ", iteration) : std::string(), ": ",
                  message);
  };
  auto body = n.subgraphs().find("body");
  if (body == n.subgraphs().end())
    return fail("has no 'body' graph");
  const ir::Subgraph &sub = body->second;
  if (sub.numFormalInputs < 2)
    return fail(cat("its body takes ", sub.numFormalInputs,
                       " inputs; it needs the iteration number and the condition"));
  const size_t carried = sub.numFormalInputs - 2;
  const size_t bodyOutputs = sub.graph->outputs().size();
  if (bodyOutputs < 1 + carried)
    return fail(cat("its body gives ", bodyOutputs, " outputs for ", carried,
                       " loop-carried values and the condition"));
  const size_t scans = bodyOutputs - 1 - carried;
  if (x.numOutputs() != carried + scans)
    return fail(cat("has ", x.numOutputs(), " outputs; its body makes ", carried,
                       " carried values and ", scans, " scan outputs"));

  const int64_t sliced = attrInt(n.attrs(), "pipec_scan_slices", 0);
  const size_t firstSlice = n.numInputs() - static_cast<size_t>(sliced) * scans;

  std::optional<int64_t> tripCount;
  if (ir::Value *m = x.input(0)) {
    if (!m->isConstant())
      return fail(cat("its trip count '", m->name(),
                         "' is not a compile-time value; pipec unrolls loops, so the trip "
                         "count must fold to a constant (freeze the inputs it depends on)"));
    Expected<int64_t> v = scalarValue(*m);
    if (!v)
      return fail(cat("its trip count: ", v.status().message()));
    tripCount = *v;
  }
  ir::Value *cond = x.input(1);
  std::optional<bool> condValue = cond ? std::nullopt : std::optional<bool>(true);
  if (cond && cond->isConstant()) {
    Expected<int64_t> v = scalarValue(*cond);
    if (!v)
      return fail(cat("its condition: ", v.status().message()));
    condValue = *v != 0;
  }
  std::vector<ir::Value *> state;
  for (size_t i = 0; i < carried; ++i)
    state.push_back(x.input(2 + i));

  // Done: the carried values, and each scan output stacked from its slices.
  if ((tripCount && iteration >= *tripCount) || (condValue && !*condValue)) {
    std::vector<ir::Value *> outs = state;
    for (size_t j = 0; j < scans; ++j) {
      if (sliced == 0)
        return fail(cat("runs no iteration, so its scan output ", j,
                           " is empty with an element shape nothing defines"));
      std::vector<ir::Value *> parts;
      for (int64_t t = 0; t < sliced; ++t) {
        PIPEC_ASSIGN(ir::Value * u,
                     x.unsqueeze(x.input(firstSlice + static_cast<size_t>(t) * scans + j), {0}));
        parts.push_back(u);
      }
      PIPEC_ASSIGN(ir::Value * stacked, x.concat(parts, 0));
      outs.push_back(stacked);
    }
    x.setOutputs(std::move(outs));
    return Status::ok();
  }

  const bool dataDependent = !condValue.has_value();
  if (dataDependent && !tripCount)
    return fail(cat("its condition '", cond->name(),
                       "' depends on data and it has no trip count (M): pipec unrolls loops "
                       "and needs a bound"));
  if (dataDependent && scans > 0)
    return fail(cat("its condition '", cond->name(),
                       "' depends on data, so its ", scans,
                       " scan output(s) would have a data-dependent length"));
  if (iteration >= kMaxUnrolledIterations)
    return fail(cat("would unroll to more than ", kMaxUnrolledIterations,
                       " iterations (its trip count and condition do not end it sooner)"));
  if (dataDependent && tripCount && *tripCount > kMaxUnrolledIterations)
    return fail(cat("its condition depends on data, so pipec unrolls it to its trip count ",
                       *tripCount, ", more than ", kMaxUnrolledIterations));

  // One iteration.
  Tensor iterNum(DType::I64, {});
  *iterNum.data<int64_t>() = iteration;
  ir::Value *condIn = cond;
  if (!cond) {
    Tensor t(DType::Bool, {});
    *t.data<bool>() = true;
    condIn = x.constant(std::move(t));
  }
  std::vector<ir::Value *> formals{x.constant(std::move(iterNum)), condIn};
  formals.insert(formals.end(), state.begin(), state.end());
  PIPEC_ASSIGN(std::vector<ir::Value *> outs, x.inlineSubgraph("body", formals));
  ir::Value *condNext = outs[0];
  std::vector<ir::Value *> next(outs.begin() + 1, outs.begin() + 1 + static_cast<long>(carried));
  if (dataDependent) {
    PIPEC_ASSIGN(ir::Value * c, scalarCondition(x, cond));
    for (size_t i = 0; i < carried; ++i) {
      PIPEC_ASSIGN(ir::Value * s, x.emit("Where", {c, next[i], state[i]}));
      x.requireSameType(s->producer(),
                        fail(cat("its loop-carried value ", i, " changes type in an iteration"))
                            .message());
      next[i] = s;
    }
    PIPEC_ASSIGN(condNext, x.emit("And", {cond, condNext}));
  }

  // The rest of the loop: a Loop node that starts at the next iteration.
  std::vector<ir::Value *> inputs{x.input(0), condNext};
  inputs.insert(inputs.end(), next.begin(), next.end());
  for (size_t i = 2 + carried; i < firstSlice; ++i)
    inputs.push_back(x.input(i)); // captured values, at the same slots
  for (size_t i = firstSlice; i < n.numInputs(); ++i)
    inputs.push_back(x.input(i));
  for (size_t j = 0; j < scans; ++j)
    inputs.push_back(outs[1 + carried + j]);
  AttrMap attrs = n.attrs();
  attrs["pipec_iteration"] = Attribute::ofInt(iteration + 1);
  attrs["pipec_scan_slices"] = Attribute::ofInt(sliced + (scans > 0 ? 1 : 0));
  PIPEC_ASSIGN(std::vector<ir::Value *> rest, x.emitN("Loop", inputs, x.numOutputs(), attrs));
  ir::Node *restNode = rest[0]->producer();
  restNode->subgraphs() = n.subgraphs();
  // "loop@3": the name stays short however far the loop unrolls.
  PIPEC_TRY(x.graph().renameNode(restNode, x.graph().uniqueNodeName(cat(root, "@", iteration + 1))));
  x.setOutputs(std::move(rest));
  return Status::ok();
}

namespace {

/// Axis `a` of rank `rank`, negative counting from the end; -1 if out of range.
int64_t normAxis(int64_t a, int64_t rank) {
  if (a < 0)
    a += rank;
  return a >= 0 && a < rank ? a : -1;
}

} // namespace

namespace {

/// The scan proper (opset 9's form): states, scan inputs with their axes
/// and directions; returns the final states, then the stacked outputs.
Expected<std::vector<ir::Value *>> unrollScan(Expansion &x, std::vector<ir::Value *> state,
                                              const std::vector<ir::Value *> &inputs,
                                              std::vector<int64_t> inAxes,
                                              const std::vector<int64_t> &inDirs,
                                              const std::vector<int64_t> &outAxes,
                                              const std::vector<int64_t> &outDirs) {
  int64_t length = -1;
  for (size_t j = 0; j < inputs.size(); ++j) {
    const ir::Value *v = inputs[j];
    const int64_t a = normAxis(inAxes[j], v->type().rank());
    if (a < 0)
      return x.error(cat("scan axis ", inAxes[j], " is outside input '", v->name(),
                         "' of rank ", v->type().rank()));
    inAxes[j] = a;
    const int64_t len = v->shape()[static_cast<size_t>(a)];
    if (length >= 0 && len != length)
      return x.error(cat("its scan inputs have lengths ", length, " and ", len));
    length = len;
  }
  if (length < 1)
    return x.error("its scan inputs are empty, so its scan outputs have no element shape");
  if (length > kMaxUnrolledIterations)
    return x.error(cat("would unroll to ", length, " iterations, more than ",
                       kMaxUnrolledIterations));
  const size_t states = state.size();
  std::vector<std::vector<ir::Value *>> slices(outAxes.size());
  for (int64_t t = 0; t < length; ++t) {
    std::vector<ir::Value *> formals = state;
    for (size_t j = 0; j < inputs.size(); ++j) {
      const int64_t at = inDirs[j] ? length - 1 - t : t;
      PIPEC_ASSIGN(ir::Value * s, x.slice(inputs[j], {at}, {at + 1}, {inAxes[j]}));
      PIPEC_ASSIGN(s, x.squeeze(s, {inAxes[j]}));
      formals.push_back(s);
    }
    PIPEC_ASSIGN(std::vector<ir::Value *> outs, x.inlineSubgraph("body", formals));
    if (outs.size() != states + slices.size())
      return x.error(cat("its body gives ", outs.size(), " outputs for ", states,
                         " state values and ", slices.size(), " scan outputs"));
    state.assign(outs.begin(), outs.begin() + static_cast<long>(states));
    for (size_t k = 0; k < slices.size(); ++k)
      slices[k].push_back(outs[states + k]);
  }
  // The slices stacked along their axis (a negative axis counts from the
  // stacked value's end, by Unsqueeze's own rule).
  std::vector<ir::Value *> result = state;
  for (size_t k = 0; k < slices.size(); ++k) {
    if (outDirs[k])
      std::reverse(slices[k].begin(), slices[k].end());
    std::vector<ir::Value *> parts;
    for (ir::Value *s : slices[k]) {
      PIPEC_ASSIGN(ir::Value * u, x.unsqueeze(s, {outAxes[k]}));
      parts.push_back(u);
    }
    PIPEC_ASSIGN(ir::Value * stacked, x.concat(parts, outAxes[k]));
    result.push_back(stacked);
  }
  return result;
}

} // namespace

Status expandScan(Expansion &x) {
  const ir::Node &n = x.node();
  auto body = n.subgraphs().find("body");
  if (body == n.subgraphs().end())
    return x.error("has no 'body' graph");
  const ir::Subgraph &sub = body->second;
  const int64_t numScanIn = attrInt(n.attrs(), "num_scan_inputs", -1);
  const size_t formal = sub.numFormalInputs;
  if (numScanIn < 1 || static_cast<size_t>(numScanIn) > formal)
    return x.error(cat("num_scan_inputs ", numScanIn, " is not between 1 and the body's ",
                       formal, " inputs"));
  const size_t scanIn = static_cast<size_t>(numScanIn);
  const size_t states = formal - scanIn;
  const size_t bodyOutputs = sub.graph->outputs().size();
  if (bodyOutputs < states || x.numOutputs() != bodyOutputs)
    return x.error(cat("its body gives ", bodyOutputs, " outputs for ", states,
                       " state values; the node has ", x.numOutputs()));
  const size_t scanOut = bodyOutputs - states;
  auto perInput = [&](const char *name, size_t count) -> Expected<std::vector<int64_t>> {
    std::vector<int64_t> v = attrInts(n.attrs(), name, std::vector<int64_t>(count, 0));
    if (v.size() != count)
      return x.error(cat("attribute ", name, " has ", v.size(), " entries for ", count));
    return v;
  };
  const bool batched = x.nodeOpset() < 9; // opset 8: axis 0 is a batch, 1 the sequence
  const size_t first = batched ? 1 : 0;    // opset 8's input 0 is sequence_lens
  if (x.node().numInputs() < first + formal)
    return x.error(cat("has ", x.node().numInputs(), " inputs; its body takes ", formal));
  PIPEC_ASSIGN(std::vector<int64_t> inDirs,
               perInput(batched ? "directions" : "scan_input_directions", scanIn));
  std::vector<int64_t> inAxes(scanIn, 0), outAxes(scanOut, 0), outDirs(scanOut, 0);
  if (!batched) {
    PIPEC_ASSIGN(inAxes, perInput("scan_input_axes", scanIn));
    PIPEC_ASSIGN(outAxes, perInput("scan_output_axes", scanOut));
    PIPEC_ASSIGN(outDirs, perInput("scan_output_directions", scanOut));
  }
  std::vector<ir::Value *> state, inputs;
  for (size_t i = 0; i < states; ++i)
    state.push_back(x.input(first + i));
  for (size_t j = 0; j < scanIn; ++j)
    inputs.push_back(x.input(first + states + j));
  if (!batched) {
    PIPEC_ASSIGN(std::vector<ir::Value *> outs,
                 unrollScan(x, state, inputs, inAxes, inDirs, outAxes, outDirs));
    x.setOutputs(std::move(outs));
    return Status::ok();
  }

  // Opset 8: each batch entry scanned alone, the results stacked on axis 0.
  if (ir::Value *lens = x.input(0))
    return x.error(cat("sequence_lens ('", lens->name(),
                       "') is not supported: re-export without it or at opset 9 or later"));
  const int64_t batch = inputs[0]->shape().empty() ? 0 : inputs[0]->shape()[0];
  std::vector<std::vector<ir::Value *>> perBatch(x.numOutputs());
  for (int64_t b = 0; b < batch; ++b) {
    auto entry = [&](ir::Value *v) -> Expected<ir::Value *> {
      PIPEC_ASSIGN(ir::Value * s, x.slice(v, {b}, {b + 1}, {0}));
      return x.squeeze(s, {0});
    };
    std::vector<ir::Value *> bs, bi;
    for (ir::Value *v : state) {
      PIPEC_ASSIGN(ir::Value * e, entry(v));
      bs.push_back(e);
    }
    for (ir::Value *v : inputs) {
      PIPEC_ASSIGN(ir::Value * e, entry(v));
      bi.push_back(e);
    }
    PIPEC_ASSIGN(std::vector<ir::Value *> outs,
                 unrollScan(x, bs, bi, inAxes, inDirs, outAxes, outDirs));
    for (size_t k = 0; k < outs.size(); ++k) {
      PIPEC_ASSIGN(ir::Value * u, x.unsqueeze(outs[k], {0}));
      perBatch[k].push_back(u);
    }
  }
  if (batch < 1)
    return x.error("its batch is empty");
  std::vector<ir::Value *> outs;
  for (auto &parts : perBatch) {
    PIPEC_ASSIGN(ir::Value * v, x.concat(parts, 0));
    outs.push_back(v);
  }
  x.setOutputs(std::move(outs));
  return Status::ok();
}

} // namespace pipec::passes::expand
