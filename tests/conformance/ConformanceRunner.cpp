//===- tests/conformance/ConformanceRunner.cpp - ONNX backend tests -------===//
//
// pipec-conformance [--data DIR] [--filter SUBSTR] [--verbose]
// Runs ONNX's own backend test data (Debian package libonnx-testdata:
// node/, pytorch-converted/, pytorch-operator/, simple/) through the whole
// compiler and runtime: import (inputs that decide shapes frozen to their
// test values, symbolic dimensions bound to the test inputs' sizes), the
// default pass pipeline, partition, plan emission into a temporary
// directory, piperun's Session, and a comparison with the expected outputs
// at ONNX's tolerances (rtol 1e-3, atol 1e-7). Prints a line per failure and
// per skip with its reason, then 'N passed, N failed, N skipped'.
//
// A test is skipped only when it uses an op outside the supported set, a
// data type pipec does not compute with, or random data that cannot be
// reproduced (dropout masks drawn from numpy's generator).
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "frontend/OnnxImporter.h"
#include "frontend/OnnxProto.h"
#include "ir/Verifier.h"
#include "partitioner/Partitioner.h"
#include "passes/PassManager.h"
#include "runtime/Session.h"
#include "runtime/cpu/Kernel.h"
#include "support/FileIO.h"
#include "tests/conformance/OnnxTestData.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

using namespace pipec;
namespace fs = std::filesystem;

namespace {
/// Devices to pipeline each test over (--stages); 1 by default.
size_t gStages = 1;
/// Test cases that ran on more than one device.
int gPipelined = 0;
} // namespace

namespace {

struct Outcome {
  enum Kind { Pass, Fail, Skip } kind;
  std::string reason;
};

bool computable(int32_t dt) {
  DType t = static_cast<DType>(dt);
  return isFloat(t) || isInteger(t) || t == DType::Bool;
}

/// Why the nodes of `g` (and of its subgraphs) cannot run, or empty.
std::string unsupportedNode(const onnx::GraphProto &g) {
  for (const auto &n : g.node()) {
    std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    const ir::OpInfo *op = ir::lookupOp(domain, n.op_type());
    if (!op || !(cpu::hasKernel(domain, n.op_type()) || op->has(ir::op::Expanded)))
      return "op " + (domain.empty() ? "" : domain + ":") + n.op_type() + " is not supported";
    for (const auto &a : n.attribute()) {
      if (a.type() == onnx::AttributeProto::TENSOR && !computable(a.t().data_type()))
        return "node " + n.op_type() + " has a tensor attribute of an unsupported data type";
      if (n.op_type() == "Cast" && a.name() == "to" && !computable(static_cast<int32_t>(a.i())))
        return "casts to a data type pipec does not compute with (" + std::to_string(a.i()) + ")";
      if (a.has_g())
        if (std::string r = unsupportedNode(a.g()); !r.empty())
          return r;
    }
  }
  return "";
}

/// Why the test cannot run, or empty.
std::string skipReason(const onnx::ModelProto &m) {
  const auto &g = m.graph();
  if (std::string r = unsupportedNode(g); !r.empty())
    return r;
  auto typeOk = [](const onnx::ValueInfoProto &v) {
    return v.type().has_tensor_type() && computable(v.type().tensor_type().elem_type());
  };
  for (const auto &v : g.input())
    if (!typeOk(v))
      return "input '" + v.name() + "' has a data type pipec does not compute with";
  for (const auto &v : g.output())
    if (!typeOk(v))
      return "output '" + v.name() + "' has a data type pipec does not compute with";
  for (const auto &t : g.initializer())
    if (!computable(t.data_type()))
      return "initializer '" + t.name() + "' has a data type pipec does not compute with";
  return "";
}

Outcome runTest(const std::string &dir, const std::string &tmpRoot) {
  auto bytes = readFile(joinPath(dir, "model.onnx"));
  if (!bytes)
    return {Outcome::Fail, bytes.status().message()};
  auto model = frontend::parseModelProto(*bytes, dir);
  if (!model)
    return {Outcome::Fail, model.status().message()};
  std::string skip = skipReason(*model);
  if (!skip.empty())
    return {Outcome::Skip, skip};
  const auto &g = model->graph();

  std::set<std::string> initializers;
  for (const auto &t : g.initializer())
    initializers.insert(t.name());
  std::vector<std::string> inputNames;
  for (const auto &v : g.input())
    if (!initializers.count(v.name()))
      inputNames.push_back(v.name());

  // Values whose contents decide a shape: the shape-value operands and,
  // transitively, what they are computed from (Shape and Size need only
  // their input's type, so the walk stops there). Graph inputs among them
  // are frozen to their test values.
  std::set<std::string> shapeInputs;
  std::vector<std::string> work;
  for (const auto &n : g.node()) {
    const ir::OpInfo *info = ir::lookupOp(n.domain(), n.op_type());
    for (int i = 0; i < n.input_size() && i < 32; ++i)
      if ((info->shapeValueInputs >> i) & 1u)
        work.push_back(n.input(i));
    // A Loop with scan outputs (more outputs than carried values) stacks
    // one slice per iteration, so its condition decides their length too.
    if (n.op_type() == "Loop" && n.input_size() >= 2 && n.output_size() > n.input_size() - 2)
      work.push_back(n.input(1));
  }
  while (!work.empty()) {
    std::string v = work.back();
    work.pop_back();
    if (v.empty() || !shapeInputs.insert(v).second)
      continue;
    for (const auto &n : g.node()) {
      if (std::find(n.output().begin(), n.output().end(), v) == n.output().end())
        continue;
      if (n.op_type() == "Shape" || n.op_type() == "Size")
        continue;
      for (const auto &in : n.input())
        work.push_back(in);
    }
  }

  std::vector<std::string> sets;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(e.path().string());
  std::sort(sets.begin(), sets.end());
  if (sets.empty())
    return {Outcome::Fail, "no test_data_set_* directory"};

  for (const std::string &set : sets) {
    std::vector<Tensor> inputs, expected;
    for (const auto &p : testdata::numberedFiles(set, "input_")) {
      auto t = testdata::loadTensorPb(p);
      if (!t)
        return {Outcome::Fail, t.status().message()};
      inputs.push_back(t.take());
    }
    for (const auto &p : testdata::numberedFiles(set, "output_")) {
      auto t = testdata::loadTensorPb(p);
      if (!t)
        return {Outcome::Fail, t.status().message()};
      expected.push_back(t.take());
    }
    if (inputs.size() != inputNames.size())
      return {Outcome::Fail, cat("test data has ", inputs.size(), " inputs, the model ",
                                 inputNames.size())};
    // Training-mode dropout with a non-zero ratio draws its mask from
    // numpy's generator, which cannot be reproduced; with ratio 0 (or in
    // inference mode) it is deterministic and runs.
    for (const auto &n : g.node()) {
      if (n.op_type() != "Dropout" || n.input_size() < 3 || n.input(2).empty())
        continue;
      auto valueOf = [&](const std::string &name) -> const Tensor * {
        for (size_t i = 0; i < inputNames.size(); ++i)
          if (inputNames[i] == name)
            return &inputs[i];
        return nullptr;
      };
      const Tensor *mode = valueOf(n.input(2));
      const Tensor *ratio = n.input_size() > 1 ? valueOf(n.input(1)) : nullptr;
      bool training = !mode || mode->getInt(0) != 0;
      bool zeroRatio = ratio && ratio->getDouble(0) == 0.0;
      if (training && !zeroRatio)
        return {Outcome::Skip,
                "training-mode Dropout: the expected mask comes from numpy's random generator"};
    }
    frontend::ImportOptions io;
    std::vector<Tensor> feed;
    for (size_t i = 0; i < inputNames.size(); ++i) {
      if (shapeInputs.count(inputNames[i]))
        io.freezeInputs[inputNames[i]] = inputs[i];
      else
        feed.push_back(inputs[i]);
      // Bind symbolic dimensions to the test input's sizes.
      for (const auto &v : g.input())
        if (v.name() == inputNames[i] && v.type().has_tensor_type()) {
          const auto &shape = v.type().tensor_type().shape();
          for (int d = 0; d < shape.dim_size() && d < static_cast<int>(inputs[i].shape().size()); ++d)
            if (shape.dim(d).has_dim_param())
              io.dims[shape.dim(d).dim_param()] = inputs[i].shape()[d];
        }
    }
    auto graph = frontend::importOnnxBytes(*bytes, dir, io);
    if (!graph)
      return {Outcome::Fail, graph.status().message()};
    if (Status s = driver::runPasses(**graph, {}); !s)
      return {Outcome::Fail, s.message()};
    driver::CompileOptions co;
    co.noPasses = true;
    // --stages K: pipeline the test's graph over up to K devices.
    size_t forward = 0;
    for (const ir::Node *n : (*graph)->nodes())
      forward += n->phase() == ir::Phase::Forward;
    co.partition.numStages = static_cast<int>(std::max<size_t>(1, std::min<size_t>(gStages, forward)));
    gPipelined += co.partition.numStages > 1;
    auto compiled = driver::compileGraph(**graph, co);
    if (!compiled)
      return {Outcome::Fail, compiled.status().message()};
    const codegen::EmittedPlan *emitted = &compiled->plan;
    std::string planDir = joinPath(tmpRoot, fs::path(dir).filename().string() + ".plan");
    if (Status s = codegen::writePlanDirectory(planDir, *emitted); !s)
      return {Outcome::Fail, s.message()};
    auto session = runtime::Session::open(planDir, {});
    if (!session)
      return {Outcome::Fail, session.status().message()};
    auto outs = (*session)->run(feed);
    (void)removeTree(planDir);
    if (!outs)
      return {Outcome::Fail, outs.status().message()};
    if (outs->size() != expected.size())
      return {Outcome::Fail, cat("got ", outs->size(), " outputs, expected ", expected.size())};
    std::vector<std::string> names = (*session)->outputNames();
    for (size_t i = 0; i < expected.size(); ++i)
      if (Status s = testdata::compareOutput((*outs)[i], expected[i], names[i]); !s)
        return {Outcome::Fail, s.message()};
  }
  return {Outcome::Pass, ""};
}

} // namespace

int main(int argc, char **argv) {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string filter;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (a == "--verbose")
      verbose = true;
    else if (a == "--stages" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1)
      gStages = static_cast<size_t>(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: pipec-conformance [--data DIR] [--filter SUBSTR] [--stages K] [--verbose]\n");
      return 2;
    }
  }
  if (!isDirectory(data)) {
    std::fprintf(stderr, "pipec-conformance: error: '%s' is not a directory (apt-get install libonnx-testdata)\n",
                 data.c_str());
    return 2;
  }
  std::string tmpRoot = (fs::temp_directory_path() / ("pipec-conformance-" + std::to_string(::getpid()))).string();
  if (Status s = makeDirs(tmpRoot); !s) {
    std::fprintf(stderr, "pipec-conformance: error: %s\n", s.message().c_str());
    return 2;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const char *suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    std::string root = joinPath(data, suite);
    if (!isDirectory(root))
      continue;
    std::vector<std::string> dirs;
    for (const auto &e : fs::directory_iterator(root))
      if (e.is_directory())
        dirs.push_back(e.path().string());
    std::sort(dirs.begin(), dirs.end());
    for (const std::string &d : dirs) {
      std::string name = std::string(suite) + "/" + fs::path(d).filename().string();
      if (!filter.empty() && name.find(filter) == std::string::npos)
        continue;
      Outcome o = runTest(d, tmpRoot);
      switch (o.kind) {
      case Outcome::Pass:
        ++passed;
        if (verbose)
          std::printf("PASS %s\n", name.c_str());
        break;
      case Outcome::Fail:
        ++failed;
        std::printf("FAIL %s: %s\n", name.c_str(), o.reason.c_str());
        break;
      case Outcome::Skip:
        ++skipped;
        std::printf("SKIP %s: %s\n", name.c_str(), o.reason.c_str());
        break;
      }
    }
  }
  (void)removeTree(tmpRoot);
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (gStages > 1)
    std::printf("%d test cases ran pipelined over 2 to %zu devices\n", gPipelined, gStages);
  return failed ? 1 : 0;
}
