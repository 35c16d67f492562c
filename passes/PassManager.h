//===- passes/PassManager.h - Runs a pipeline of passes --------*- C++ -*-===//
//
// Runs passes by flag name, in order, with the options every compiler
// engineer expects: verify after each pass, print the IR after a named pass
// (or all), stop after pass N, and time each pass.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "passes/Pass.h"

#include <ostream>
#include <string>
#include <vector>

namespace pipec::passes {

struct PassInfo {
  std::string flag;
  std::string description;
};
/// The rows of passes/Passes.def.
const std::vector<PassInfo> &registeredPasses();
/// A new instance of the pass with this flag, or an error listing the flags.
Expected<std::unique_ptr<Pass>> createPass(const std::string &flag);

struct PassManagerOptions {
  bool verifyEach = false;
  /// Print the IR after passes with these flags ("all" for every pass).
  std::vector<std::string> printAfter;
  /// Names printAfter may hold for passes a later pass manager runs (the
  /// recompute pass runs after partitioning).
  std::vector<std::string> laterPasses;
  /// Stop after this many passes (-1: run all).
  int stopAfter = -1;
  bool timePasses = false;
  /// Where printing and timing go.
  std::ostream *out = nullptr;
};

/// The passes run by `pipec` by default, in order.
std::vector<std::string> defaultPipeline();

class PassManager {
public:
  explicit PassManager(PassManagerOptions opts = {}) : opts_(std::move(opts)) {}
  Status add(const std::string &flag);
  void add(std::unique_ptr<Pass> p) { passes_.push_back(std::move(p)); }
  size_t size() const { return passes_.size(); }
  /// Runs every pass; the first failure is returned, prefixed with the pass.
  Status run(ir::Graph &g);
  /// Milliseconds per pass of the last run, in order.
  const std::vector<std::pair<std::string, double>> &timings() const { return timings_; }

private:
  PassManagerOptions opts_;
  std::vector<std::unique_ptr<Pass>> passes_;
  std::vector<std::pair<std::string, double>> timings_;
};

} // namespace pipec::passes
