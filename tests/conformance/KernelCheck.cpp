//===- tests/conformance/KernelCheck.cpp - One ONNX node test, kernel only ===//
//
// pipec-kernel-check DIR...: for each single-node test directory of ONNX's
// backend test data (model.onnx + test_data_set_*/{input,output}_*.pb), runs
// the node's CPU kernel directly (no importer, no shape inference: output
// types come from the expected outputs) and compares with the expected
// outputs at ONNX's tolerances (rtol 1e-3, atol 1e-7). A kernel developer's
// tool; the conformance runner proper goes through the whole compiler.
//
//===----------------------------------------------------------------------===//
#include "frontend/OnnxProto.h"
#include "ir/IR.h"
#include "runtime/cpu/Kernel.h"
#include "support/FileIO.h"
#include "tests/conformance/OnnxTestData.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

using namespace pipec;
namespace fs = std::filesystem;

namespace {

Status checkDir(const std::string &dir) {
  PIPEC_ASSIGN(std::string bytes, readFile(joinPath(dir, "model.onnx")));
  PIPEC_ASSIGN(onnx::ModelProto model, frontend::parseModelProto(bytes, dir));
  const auto &g = model.graph();
  if (g.node_size() != 1)
    return errorf("not a single-node test (", g.node_size(), " nodes)");
  const onnx::NodeProto &node = g.node(0);
  cpu::OpDesc d;
  d.name = node.name().empty() ? node.op_type() : node.name();
  d.opType = node.op_type();
  d.domain = node.domain() == "ai.onnx" ? "" : node.domain();
  for (const auto &o : model.opset_import())
    if ((o.domain() == "ai.onnx" ? "" : o.domain()) == d.domain)
      d.opset = o.version();
  for (const auto &a : node.attribute()) {
    PIPEC_ASSIGN(Attribute attr, frontend::attributeFromProto(a, dir));
    d.attrs[a.name()] = attr;
  }
  const ir::OpInfo *info = ir::lookupOp(d.domain, d.opType);
  for (fs::path set : {fs::path(dir) / "test_data_set_0"}) {
    std::vector<Tensor> inputs, expected;
    for (const auto &p : testdata::numberedFiles(set.string(), "input_")) {
      PIPEC_ASSIGN(Tensor t, testdata::loadTensorPb(p));
      inputs.push_back(t);
    }
    for (const auto &p : testdata::numberedFiles(set.string(), "output_")) {
      PIPEC_ASSIGN(Tensor t, testdata::loadTensorPb(p));
      expected.push_back(t);
    }
    // Graph inputs bind to node inputs by name; omitted inputs are "".
    std::vector<Tensor> nodeInputs;
    for (int i = 0; i < node.input_size(); ++i) {
      Tensor t;
      for (int k = 0; k < g.input_size() && k < static_cast<int>(inputs.size()); ++k)
        if (g.input(k).name() == node.input(i) && !node.input(i).empty())
          t = inputs[k];
      for (const auto &init : g.initializer())
        if (init.name() == node.input(i)) {
          PIPEC_ASSIGN(Tensor c, frontend::tensorFromProto(init, dir));
          t = c;
        }
      nodeInputs.push_back(t);
      d.inputs.push_back(t.empty() ? TensorDesc{} : t.desc());
      bool shapeValue = info && i < 32 && (info->shapeValueInputs >> i) & 1u;
      d.constInputs.push_back(shapeValue ? t : Tensor());
    }
    for (const Tensor &e : expected)
      d.outputs.push_back(e.desc());
    PIPEC_ASSIGN(std::vector<Tensor> outs, cpu::evaluate(d, nodeInputs));
    for (size_t i = 0; i < expected.size(); ++i)
      PIPEC_TRY(testdata::compareOutput(outs[i], expected[i], std::to_string(i)));
  }
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  int passed = 0, failed = 0;
  for (int i = 1; i < argc; ++i) {
    Status s = checkDir(argv[i]);
    if (s) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", fs::path(argv[i]).filename().c_str(), s.message().c_str());
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
