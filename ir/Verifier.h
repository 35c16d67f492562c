//===- ir/Verifier.h - Structural checks of a Graph ------------*- C++ -*-===//
#pragma once

#include "ir/IR.h"

namespace pipec::ir {

struct VerifyOptions {
  /// Every value must have a known type (true after shape inference).
  bool requireTypes = true;
};

/// Checks that the graph is well formed: known ops within their arity,
/// required inputs present, every use after its definition (the node order
/// is topological), graph outputs defined, constants consistent with their
/// types and, optionally, every type known. The first problem is returned,
/// naming the node.
Status verifyGraph(const Graph &g, const VerifyOptions &opts = {});

} // namespace pipec::ir
