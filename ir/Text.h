//===- ir/Text.h - The IR's text form: printer and parser ------*- C++ -*-===//
//
// A deterministic text form of a Graph (docs/ir.md has the grammar).
// print -> parse -> print gives the same text when constants are printed in
// full; large constants may be elided for reading, and an elided constant
// does not parse.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <memory>
#include <ostream>
#include <string>

namespace pipec::ir {

struct PrintOptions {
  /// Constants with more elements are printed as `elided`; -1 prints all.
  int64_t maxConstantElements = -1;
};

void printGraph(const Graph &g, std::ostream &os, const PrintOptions &opts = {});
std::string printGraph(const Graph &g, const PrintOptions &opts = {});

/// Parses the text form; errors give line and column. The result is not
/// verified; call verifyGraph.
Expected<std::unique_ptr<Graph>> parseGraph(const std::string &text,
                                            const std::string &sourceName = "<ir>");

} // namespace pipec::ir
