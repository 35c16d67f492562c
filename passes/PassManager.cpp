//===- passes/PassManager.cpp - Runs a pipeline of passes -----------------===//
#include "passes/PassManager.h"

#include "ir/Text.h"
#include "ir/Verifier.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace pipec::passes {

#define PIPEC_PASS(Flag, Factory, Description) std::unique_ptr<Pass> Factory();
#include "passes/Passes.def"

namespace {
struct PassEntry {
  const char *flag;
  std::unique_ptr<Pass> (*factory)();
  const char *description;
};
const PassEntry kPasses[] = {
#define PIPEC_PASS(Flag, Factory, Description) {Flag, &Factory, Description},
#include "passes/Passes.def"
};
} // namespace

const std::vector<PassInfo> &registeredPasses() {
  static const std::vector<PassInfo> infos = [] {
    std::vector<PassInfo> v;
    for (const PassEntry &e : kPasses)
      v.push_back({e.flag, e.description});
    return v;
  }();
  return infos;
}

Expected<std::unique_ptr<Pass>> createPass(const std::string &flag) {
  for (const PassEntry &e : kPasses)
    if (flag == e.flag)
      return e.factory();
  std::string known;
  for (const PassEntry &e : kPasses)
    known += std::string(known.empty() ? "" : ", ") + e.flag;
  return errorf("unknown pass '", flag, "' (passes: ", known, ")");
}

std::vector<std::string> defaultPipeline() {
  return {"promote-half",   "infer-shapes",        "canonicalize",   "constant-fold", "fuse-layernorm",
          "fuse-gelu",      "fuse-masked-softmax", "fuse-attention", "dce"};
}

Status PassManager::add(const std::string &flag) {
  PIPEC_ASSIGN(std::unique_ptr<Pass> p, createPass(flag));
  passes_.push_back(std::move(p));
  return Status::ok();
}

Status PassManager::run(ir::Graph &g) {
  timings_.clear();
  // A name that matches no pass of the pipeline would print nothing: say so.
  for (const std::string &name : opts_.printAfter)
    if (name != "all" &&
        std::find(opts_.laterPasses.begin(), opts_.laterPasses.end(), name) ==
            opts_.laterPasses.end() &&
        std::none_of(passes_.begin(), passes_.end(),
                     [&](const auto &p) { return p->name() == name; })) {
      std::string known;
      for (const auto &p : passes_)
        known += (known.empty() ? "" : ", ") + std::string(p->name());
      return errorf("--print-ir-after ", name, ": no pass of that name runs (the pipeline: ",
                    known.empty() ? "none" : known, ", or 'all')");
    }
  if (opts_.stopAfter > static_cast<int>(passes_.size()))
    return errorf("--stop-after ", opts_.stopAfter, ": the pipeline has ", passes_.size(),
                  " pass(es)");
  int count = 0;
  for (auto &p : passes_) {
    if (opts_.stopAfter >= 0 && count >= opts_.stopAfter)
      break;
    ++count;
    std::string flag(p->name());
    auto t0 = std::chrono::steady_clock::now();
    Expected<bool> changed = p->run(g);
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    timings_.emplace_back(flag, ms);
    // Prefixed with the pass, unless its message names it already
    // ("autodiff: no gradient rule for ...").
    if (!changed)
      return changed.status().message().rfind(flag + ":", 0) == 0
                 ? changed.status()
                 : changed.status().withContext("pass " + flag);
    if (opts_.verifyEach) {
      // Types are required once shapes have been inferred.
      ir::VerifyOptions vo;
      std::vector<ir::Node *> nodes = g.nodes();
      vo.requireTypes = std::all_of(nodes.begin(), nodes.end(), [](const ir::Node *n) {
        return std::all_of(n->outputs().begin(), n->outputs().end(),
                           [](const ir::Value *v) { return v->typeKnown(); });
      });
      PIPEC_TRY(ir::verifyGraph(g, vo).withContext("verifying after pass " + flag));
    }
    bool print = std::find(opts_.printAfter.begin(), opts_.printAfter.end(), flag) !=
                     opts_.printAfter.end() ||
                 std::find(opts_.printAfter.begin(), opts_.printAfter.end(), "all") !=
                     opts_.printAfter.end();
    if (print && opts_.out) {
      *opts_.out << "// ----- IR after " << flag << " -----\n";
      ir::PrintOptions po;
      po.maxConstantElements = 16;
      ir::printGraph(g, *opts_.out, po);
    }
  }
  if (opts_.timePasses && opts_.out) {
    double total = 0;
    *opts_.out << "pass timing:\n";
    for (const auto &[name, ms] : timings_) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "  %-16s %9.3f ms\n", name.c_str(), ms);
      *opts_.out << buf;
      total += ms;
    }
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-16s %9.3f ms\n", "total", total);
    *opts_.out << buf;
  }
  return Status::ok();
}

} // namespace pipec::passes
