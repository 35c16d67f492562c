//===- ir/Verifier.cpp - Structural checks of a Graph ---------------------===//
#include "ir/Verifier.h"

#include <unordered_set>

namespace pipec::ir {

Status verifyGraph(const Graph &g, const VerifyOptions &opts) {
  std::unordered_set<const Value *> defined;
  defined.reserve(g.inputs().size() + 2 * g.numNodes());
  for (const Value *v : g.inputs()) {
    if (!v->typeKnown())
      return errorf("graph input '", v->name(), "' has no type");
    defined.insert(v);
  }
  for (const Value *v : g.constants()) {
    if (v->type() != v->constant().desc())
      return errorf("constant '", v->name(), "' is typed ", v->type().str(),
                    " but holds ", v->constant().desc().str());
    defined.insert(v);
  }
  for (const Node *n : g.nodes()) {
    auto where = [&] {
      return cat("node '", n->name(), "' (", n->domain().empty() ? "" : n->domain() + ":",
                 n->opType(), ")");
    };
    const OpInfo *info = n->info();
    if (!info)
      return errorf(where(), ": unknown op");
    int nin = static_cast<int>(n->numInputs());
    int nout = static_cast<int>(n->numOutputs());
    if (nin < info->minInputs || (info->maxInputs >= 0 && nin > info->maxInputs))
      return errorf(where(), ": has ", nin, " inputs, the op takes ", info->minInputs,
                    info->maxInputs < 0 ? " or more"
                                        : cat(" to ", info->maxInputs));
    if (nout < info->minOutputs || (info->maxOutputs >= 0 && nout > info->maxOutputs))
      return errorf(where(), ": has ", nout, " outputs, the op gives ",
                    info->minOutputs,
                    info->maxOutputs < 0 ? " or more" : cat(" to ", info->maxOutputs));
    for (int i = 0; i < nin; ++i) {
      const Value *v = n->input(i);
      if (!v) {
        if (i < info->minInputs)
          return errorf(where(), ": required input ", i, " is missing");
        continue;
      }
      if (!defined.count(v))
        return errorf(where(), ": input ", i, " '", v->name(),
                      "' is used before it is defined (or never defined)");
    }
    for (int i = 0; i < nout; ++i) {
      const Value *v = n->output(i);
      if (v->producer() != n || v->producerIndex() != i)
        return errorf(where(), ": output ", i, " '", v->name(),
                      "' does not name this node as its producer");
      if (opts.requireTypes && !v->typeKnown())
        return errorf(where(), ": output '", v->name(), "' has no inferred type");
      defined.insert(v);
    }
  }
  for (const Value *v : g.outputs())
    if (!defined.count(v))
      return errorf("graph output '", v->name(), "' is never defined");
  if (g.outputs().empty())
    return errorf("the graph has no outputs");
  return Status::ok();
}

} // namespace pipec::ir
