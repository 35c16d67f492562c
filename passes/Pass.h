//===- passes/Pass.h - The pass interface ----------------------*- C++ -*-===//
//
// A pass transforms a Graph and returns whether it changed it. Passes are
// listed in passes/Passes.def (flag name, class, one-line description); the
// pass manager, `pipec --help` and docs/passes.md all come from that table.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <memory>
#include <string_view>

namespace pipec::passes {

class Pass {
public:
  virtual ~Pass() = default;
  /// The flag name, e.g. "dce".
  virtual std::string_view name() const = 0;
  /// Runs on the graph; true if anything changed.
  virtual Expected<bool> run(ir::Graph &g) = 0;
  /// Units of work the last run did, for tests that check a pass's
  /// complexity by counting (0 where a pass does not count).
  virtual uint64_t workSteps() const { return 0; }
};

} // namespace pipec::passes
