//===- tests/unit/FrontendTest.cpp - ONNX importer tests ------------------===//
//
// The models live in tests/models/frontend/*.onnxtxt (ONNX's protobuf text
// form); each test parses one, serializes it and imports the bytes, so the
// importer sees exactly what a .onnx file holds. Error cases mostly edit a
// valid model in place, which keeps the broken part obvious. Also: every
// model of ONNX's node tests (Debian's libonnx-testdata; without it that
// test fails, unless the build allows skips: tests/unit/TestDependency.h)
// imports or fails with a message, never crashes.
//
//===----------------------------------------------------------------------===//
#include "frontend/OnnxImporter.h"
#include "frontend/OnnxProto.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "support/FileIO.h"
#include "tests/unit/TestDependency.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <unistd.h>

using namespace pipec;
using frontend::ImportOptions;
namespace fs = std::filesystem;

namespace {

using GraphOrError = Expected<std::unique_ptr<ir::Graph>>;

onnx::ModelProto loadModel(const std::string &name) {
  std::string path = std::string(PIPEC_SOURCE_DIR) + "/tests/models/frontend/" + name + ".onnxtxt";
  onnx::ModelProto m;
  Expected<std::string> text = readFile(path);
  EXPECT_TRUE(text.isOk()) << text.status().message();
  if (text.isOk()) {
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(*text, &m)) << path;
  }
  return m;
}

std::string serialize(const onnx::ModelProto &m) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

GraphOrError importProto(const onnx::ModelProto &m, const ImportOptions &opts = {}) {
  return frontend::importOnnxBytes(serialize(m), m.graph().name() + ".onnx", opts);
}

GraphOrError importModel(const std::string &name, const ImportOptions &opts = {}) {
  return importProto(loadModel(name), opts);
}

/// The error message of a failed import; fails the test if it succeeded.
std::string importError(const GraphOrError &r) {
  EXPECT_FALSE(r.isOk()) << "the import should have failed";
  return r.isOk() ? std::string() : r.status().message();
}

std::vector<std::string> names(const std::vector<ir::Value *> &vs) {
  std::vector<std::string> r;
  for (const ir::Value *v : vs)
    r.push_back(v->name());
  return r;
}

std::vector<std::string> nodeNames(const ir::Graph &g) {
  std::vector<std::string> r;
  for (const ir::Node *n : g.nodes())
    r.push_back(n->name());
  return r;
}

std::vector<float> floats(const Tensor &t) {
  std::vector<float> r;
  for (int64_t i = 0; i < t.numel(); ++i)
    r.push_back(static_cast<float>(t.getDouble(i)));
  return r;
}

/// Runs the verifier on an imported graph.
void expectWellFormed(const ir::Graph &g) {
  ir::VerifyOptions vo;
  vo.requireTypes = false; // node outputs stay untyped until shape inference
  Status s = ir::verifyGraph(g, vo);
  EXPECT_TRUE(s.isOk()) << s.message();
}

/// A fresh directory removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string &tag) {
    path = fs::temp_directory_path() /
           ("pipec-frontend-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string &name) const { return (path / name).string(); }
};

} // namespace

//===-- Well-formed models ------------------------------------------------===//

TEST(Frontend, MlpImports) {
  ImportOptions opts;
  opts.batch = 8;
  GraphOrError r = importModel("mlp", opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(g.name(), "mlp");
  EXPECT_EQ(g.opset(""), 13);
  EXPECT_EQ(g.opset("ai.onnx"), 13);
  EXPECT_EQ(names(g.inputs()), std::vector<std::string>({"x"}));
  EXPECT_EQ(g.inputs()[0]->type().str(), "f32[8,4]");
  EXPECT_EQ(names(g.constants()), std::vector<std::string>({"W1", "B1", "W2", "B2"}));
  EXPECT_EQ(g.findValue("W1")->type().str(), "f32[4,3]");
  EXPECT_EQ(floats(g.findValue("B1")->constant()), std::vector<float>({0.5f, -0.5f, 0.25f}));
  EXPECT_EQ(nodeNames(g), std::vector<std::string>({"fc1", "fc1_bias", "act", "fc2"}));
  EXPECT_EQ(names(g.outputs()), std::vector<std::string>({"y"}));

  const ir::Node *gemm = g.findNode("fc2");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->opType(), "Gemm");
  EXPECT_EQ(gemm->numInputs(), 3u);
  EXPECT_EQ(gemm->input(0), g.findValue("h2"));
  EXPECT_EQ(gemm->input(0)->producer(), g.findNode("act"));
  EXPECT_FLOAT_EQ(attrFloat(gemm->attrs(), "alpha", 0), 1.0f);
  EXPECT_EQ(attrInt(gemm->attrs(), "transB", -1), 0);
  // Node outputs stay untyped: shape inference is a later pass.
  EXPECT_FALSE(g.findValue("y")->typeKnown());
}

TEST(Frontend, ImportIsDeterministic) {
  ImportOptions opts;
  opts.batch = 2;
  std::string bytes = serialize(loadModel("names"));
  GraphOrError a = frontend::importOnnxBytes(bytes, "names.onnx", opts);
  GraphOrError b = frontend::importOnnxBytes(bytes, "names.onnx", opts);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(ir::printGraph(**a), ir::printGraph(**b));
}

TEST(Frontend, OldFormInitializersListedAsInputsAreConstants) {
  GraphOrError r = importModel("old_form");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(g.opset(""), 8);
  EXPECT_EQ(names(g.inputs()), std::vector<std::string>({"x"}));
  EXPECT_EQ(names(g.constants()), std::vector<std::string>({"W", "B"}));
  EXPECT_FALSE(g.findValue("W")->isGraphInput());
  EXPECT_EQ(floats(g.findValue("B")->constant()), std::vector<float>({1.0f, 2.0f}));

  // Freezing such an input overrides its initializer.
  ImportOptions opts;
  opts.freezeInputs["B"] = Tensor::fromFloats({5.0f, 6.0f}, {2});
  GraphOrError frozen = importModel("old_form", opts);
  ASSERT_TRUE(frozen.isOk()) << frozen.status().message();
  EXPECT_EQ(floats((*frozen)->findValue("B")->constant()), std::vector<float>({5.0f, 6.0f}));

  // The declared input type must agree with the initializer.
  onnx::ModelProto m = loadModel("old_form");
  m.mutable_graph()->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(7);
  std::string err = importError(importProto(m));
  EXPECT_NE(err.find("graph input 'W' is declared i64[4,2] but its initializer is f32[4,2]"),
            std::string::npos) << err;
}

TEST(Frontend, ConstantNodesBecomeConstants) {
  GraphOrError r = importModel("constant_nodes");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(names(g.constants()),
            std::vector<std::string>({"shape", "half", "axes", "k", "scale"}));
  EXPECT_EQ(nodeNames(g), std::vector<std::string>({"reshape", "mul", "unsq"}));
  EXPECT_EQ(g.findValue("shape")->type().str(), "i64[2]");
  EXPECT_EQ(g.findValue("shape")->constant().toInts(), std::vector<int64_t>({3, -1}));
  EXPECT_EQ(g.findValue("half")->type().str(), "f32[]");
  EXPECT_FLOAT_EQ(g.findValue("half")->constant().data<float>()[0], 0.5f);
  EXPECT_EQ(g.findValue("axes")->type().str(), "i64[1]");
  EXPECT_EQ(g.findValue("k")->type().str(), "i64[]");
  EXPECT_EQ(g.findValue("k")->constant().getInt(0), 7);
  EXPECT_EQ(floats(g.findValue("scale")->constant()), std::vector<float>({1.5f, 2.5f}));
  // A constant may be a graph output directly.
  EXPECT_EQ(names(g.outputs()), std::vector<std::string>({"y", "k", "scale"}));
  EXPECT_EQ(g.findNode("reshape")->input(1), g.findValue("shape"));
}

TEST(Frontend, ConstantNodeStringIsAnError) {
  onnx::ModelProto m = loadModel("constant_nodes");
  onnx::AttributeProto *a = m.mutable_graph()->mutable_node(0)->mutable_attribute(0);
  a->Clear();
  a->set_name("value_string");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("hello");
  std::string err = importError(importProto(m));
  EXPECT_NE(err.find("node 'c_shape'"), std::string::npos) << err;
  EXPECT_NE(err.find("string constants are not supported"), std::string::npos) << err;
}

TEST(Frontend, NamesAndOmittedOptionals) {
  GraphOrError r = importModel("names");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  // Unnamed nodes are "<OpType>_<index>", never taking a name a later node
  // declares ("Relu_1"); a repeated name is made unique.
  EXPECT_EQ(nodeNames(g), std::vector<std::string>(
                              {"Relu_0", "Relu_1_1", "dup", "dup.1", "Relu_1", "ln", "drop", "clip"}));
  const ir::Node *ln = g.findNode("ln");
  EXPECT_EQ(ln->numInputs(), 2u); // trailing omitted input dropped
  ASSERT_EQ(ln->numOutputs(), 3u);
  EXPECT_EQ(ln->output(1)->name(), "ln_out1"); // omitted middle output named
  EXPECT_EQ(ln->output(2)->name(), "inv_std");
  EXPECT_EQ(g.findNode("drop")->numOutputs(), 1u); // trailing omitted output dropped
  const ir::Node *clip = g.findNode("clip");
  ASSERT_EQ(clip->numInputs(), 3u);
  EXPECT_EQ(clip->input(1), nullptr); // omitted optional input
  EXPECT_EQ(clip->input(2), g.findValue("hi"));
}

TEST(Frontend, OutOfOrderNodesAreSorted) {
  GraphOrError r = importModel("out_of_order");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(nodeNames(g), std::vector<std::string>({"first", "second", "third"}));

  onnx::ModelProto m = loadModel("out_of_order");
  m.mutable_graph()->mutable_node(2)->set_input(0, "c"); // first reads third's output
  std::string err = importError(importProto(m));
  EXPECT_NE(err.find("the graph has a cycle: 'first' -> 'second' -> 'third' -> 'first'"),
            std::string::npos) << err;
}

TEST(Frontend, ExternalData) {
  TempDir dir("external");
  onnx::ModelProto m = loadModel("external_data");
  ASSERT_TRUE(writeFileAtomic(dir.file("model.onnx"), serialize(m)).isOk());
  const float w[4] = {1.5f, -2.0f, 3.25f, 4.0f};
  std::string data(8, 'x'); // the tensor starts at offset 8
  data.append(reinterpret_cast<const char *>(w), sizeof w);
  ASSERT_TRUE(writeFileAtomic(dir.file("weights.bin"), data).isOk());

  GraphOrError r = frontend::importOnnxFile(dir.file("model.onnx"));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(g.findValue("W")->type().str(), "f32[2,2]");
  EXPECT_EQ(floats(g.findValue("W")->constant()), std::vector<float>(w, w + 4));

  // From bytes, the data resolves against externalDataDir.
  ImportOptions opts;
  opts.externalDataDir = dir.path.string();
  GraphOrError fromBytes = frontend::importOnnxBytes(serialize(m), "mem", opts);
  ASSERT_TRUE(fromBytes.isOk()) << fromBytes.status().message();
  EXPECT_EQ(floats((*fromBytes)->findValue("W")->constant()), std::vector<float>(w, w + 4));

  // A file too short for the tensor is an error naming it.
  ASSERT_TRUE(writeFileAtomic(dir.file("weights.bin"), data.substr(0, 20)).isOk());
  std::string err = importError(frontend::importOnnxFile(dir.file("model.onnx")));
  EXPECT_NE(err.find("tensor 'W'"), std::string::npos) << err;
  EXPECT_NE(err.find("too short"), std::string::npos) << err;

  fs::remove(dir.file("weights.bin"));
  err = importError(frontend::importOnnxFile(dir.file("model.onnx")));
  EXPECT_NE(err.find("weights.bin"), std::string::npos) << err;

  // A malformed offset is an error, not an exception.
  m.mutable_graph()->mutable_initializer(0)->mutable_external_data(1)->set_value("12abc");
  err = importError(frontend::importOnnxBytes(serialize(m), "mem", opts));
  EXPECT_NE(err.find("offset"), std::string::npos) << err;
}

//===-- Symbolic dimensions ----------------------------------------------===//

TEST(Frontend, BatchBindsLeadingDimension) {
  ImportOptions opts;
  opts.batch = 3;
  opts.dims["seq"] = 5;
  GraphOrError r = importModel("symbolic_dims", opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(g.findValue("x")->type().str(), "f32[3,5,4]");
  EXPECT_EQ(g.findValue("mask")->type().str(), "f32[3,5]");
  EXPECT_EQ(g.findValue("lengths")->type().str(), "i64[3]");
}

TEST(Frontend, DimBindsByNameAndMustAgreeWithBatch) {
  ImportOptions opts;
  opts.dims = {{"N", 7}, {"seq", 2}};
  GraphOrError r = importModel("symbolic_dims", opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(g.findValue("x")->type().str(), "f32[7,2,4]");
  EXPECT_EQ(g.findValue("lengths")->type().str(), "i64[7]");
  // -b binds the leading dimension N too: the same size is fine, another
  // one a contradiction.
  opts.batch = 7;
  ASSERT_TRUE(importModel("symbolic_dims", opts).isOk());
  opts.batch = 3;
  std::string err = importError(importModel("symbolic_dims", opts));
  EXPECT_NE(err.find("-b 3 and --dim N=7 bind the same dimension to different sizes"),
            std::string::npos)
      << err;
}

TEST(Frontend, BatchBindsTheSameNameEverywhere) {
  // 'N' leads x, so --batch binds it also where it appears at dimension 1.
  onnx::ModelProto m = loadModel("symbolic_dims");
  auto *shape = m.mutable_graph()->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(0)->set_dim_value(6);
  shape->mutable_dim(1)->set_dim_param("N");
  ImportOptions opts;
  opts.batch = 4;
  opts.dims["seq"] = 2;
  GraphOrError r = importProto(m, opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(g.findValue("mask")->type().str(), "f32[6,4]");
}

TEST(Frontend, UnboundDimensionErrors) {
  std::string err = importError(importModel("symbolic_dims"));
  EXPECT_NE(err.find("unbound symbolic dimension 'N' of input 'x' (dimension 0): bind it "
                     "with --dim N=<value> or -b/--batch <value>"),
            std::string::npos)
      << err;

  ImportOptions opts;
  opts.batch = 2;
  err = importError(importModel("symbolic_dims", opts));
  EXPECT_NE(err.find("unbound symbolic dimension 'seq' of input 'x' (dimension 1): bind it "
                     "with --dim seq=<value>"),
            std::string::npos)
      << err;

  // A dimension with neither value nor name.
  onnx::ModelProto m = loadModel("symbolic_dims");
  auto *x = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  x->mutable_dim(0)->Clear();
  err = importError(importProto(m));
  EXPECT_NE(err.find("unbound symbolic dimension of input 'x' (dimension 0, unnamed): bind it "
                     "with -b/--batch <value>"),
            std::string::npos)
      << err;
  opts.dims["seq"] = 5;
  GraphOrError r = importProto(m, opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ((*r)->findValue("x")->type().str(), "f32[2,5,4]");

  x->mutable_dim(1)->Clear();
  err = importError(importProto(m, opts));
  EXPECT_NE(err.find("input 'x' (dimension 1, unnamed): bind it with --dim x:1=<value>"), std::string::npos)
      << err;

  opts.batch = 0;
  err = importError(importModel("symbolic_dims", opts));
  EXPECT_NE(err.find("batch size must be positive"), std::string::npos) << err;
}

TEST(Frontend, DimensionsBoundByInputAndAxis) {
  // x is [N, seq, 4]; its second dimension without a name, as exporters
  // write a dynamic axis they were not told to name.
  onnx::ModelProto m = loadModel("symbolic_dims");
  auto *x = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  x->mutable_dim(1)->Clear();
  ImportOptions opts;
  opts.batch = 2;
  opts.dims["x:1"] = 7;
  opts.dims["seq"] = 7; // mask's, named
  GraphOrError r = importProto(m, opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ((*r)->findValue("x")->type().str(), "f32[2,7,4]");
  // Named ones too (each input's own), and a static one where the value
  // agrees.
  ImportOptions named;
  named.dims["x:0"] = 3;
  named.dims["x:1"] = 5;
  named.dims["x:2"] = 4;
  named.dims["mask:0"] = 3;
  named.dims["mask:1"] = 5;
  named.dims["lengths:0"] = 3;
  r = importProto(loadModel("symbolic_dims"), named);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ((*r)->findValue("x")->type().str(), "f32[3,5,4]");
  EXPECT_EQ((*r)->findValue("mask")->type().str(), "f32[3,5]");
  // Mistakes are refused, naming the binding.
  for (const auto &[key, want] : std::vector<std::pair<std::string, std::string>>{
           {"x:2", "dimension 2 of input 'x' is 4 in the model"},
           {"x:3", "input 'x' has 3 dimension(s)"},
           {"nope:0", "the model has no graph input 'nope' to bind"},
           {"nope", "INPUT:AXIS=N binds a dimension by input and position"}}) {
    ImportOptions bad;
    bad.batch = 2;
    bad.dims["seq"] = 5;
    bad.dims[key] = 9;
    std::string err = importError(importModel("symbolic_dims", bad));
    EXPECT_NE(err.find(want), std::string::npos) << key << ": " << err;
  }
}

//===-- Frozen inputs ------------------------------------------------------===//

TEST(Frontend, FreezeInputs) {
  ImportOptions opts;
  opts.batch = 2;
  opts.freezeInputs["target"] = Tensor::fromInts({3, 4});
  GraphOrError r = importModel("freeze", opts);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ir::Graph &g = **r;
  expectWellFormed(g);
  EXPECT_EQ(names(g.inputs()), std::vector<std::string>({"x"}));
  EXPECT_EQ(names(g.constants()), std::vector<std::string>({"target"}));
  EXPECT_EQ(g.findValue("target")->constant().toInts(), std::vector<int64_t>({3, 4}));
  EXPECT_EQ(g.findNode("reshape")->input(1), g.findValue("target"));
  // The graph holds its own copy.
  EXPECT_NE(g.findValue("target")->constant().raw(), opts.freezeInputs["target"].raw());

  // A symbolic dimension matches any size, and a frozen input needs no binding.
  ImportOptions all;
  all.freezeInputs["x"] = Tensor(DType::F32, {5, 6});
  all.freezeInputs["target"] = Tensor::fromInts({5, 6});
  GraphOrError r2 = importModel("freeze", all);
  ASSERT_TRUE(r2.isOk()) << r2.status().message();
  EXPECT_TRUE((*r2)->inputs().empty());
}

TEST(Frontend, FreezeInputsMismatches) {
  ImportOptions opts;
  opts.batch = 2;
  opts.freezeInputs["target"] = Tensor::fromInts({3, 4}, DType::I32);
  std::string err = importError(importModel("freeze", opts));
  EXPECT_NE(err.find("graph input 'target' is declared i64[2] but its frozen value is i32[2]"),
            std::string::npos) << err;

  opts.freezeInputs["target"] = Tensor::fromInts({3, 4, 1});
  err = importError(importModel("freeze", opts));
  EXPECT_NE(err.find("frozen value is i64[3]"), std::string::npos) << err;

  opts.freezeInputs.clear();
  opts.freezeInputs["x"] = Tensor(DType::F32, {5, 7});
  err = importError(importModel("freeze", opts));
  EXPECT_NE(err.find("graph input 'x' is declared f32[N,6]"), std::string::npos) << err;

  opts.freezeInputs.clear();
  opts.freezeInputs["nope"] = Tensor::fromInts({1});
  err = importError(importModel("freeze", opts));
  EXPECT_NE(err.find("cannot freeze 'nope'"), std::string::npos) << err;
}

//===-- Errors ------------------------------------------------------------===//

TEST(Frontend, UnsupportedOp) {
  std::string err = importError(importModel("unsupported_op"));
  EXPECT_NE(err.find("unsupported op"), std::string::npos) << err;
  EXPECT_NE(err.find("unsupported op: node 'foo' has op type 'Bar' (domain ai.onnx, opset 13)"),
            std::string::npos)
      << err;

  // A custom domain the model imports names that domain and its version.
  onnx::ModelProto m = loadModel("unsupported_op");
  m.mutable_graph()->mutable_node(1)->set_domain("com.example");
  auto *imp = m.add_opset_import();
  imp->set_domain("com.example");
  imp->set_version(2);
  err = importError(importProto(m));
  EXPECT_NE(err.find("unsupported op: node 'foo' has op type 'Bar' (domain com.example, opset 2)"),
            std::string::npos)
      << err;
}

TEST(Frontend, DomainWithoutOpsetImport) {
  onnx::ModelProto m = loadModel("unsupported_op");
  m.mutable_graph()->mutable_node(1)->set_domain("com.example");
  std::string err = importError(importProto(m));
  EXPECT_NE(err.find("node 'foo'"), std::string::npos) << err;
  EXPECT_NE(err.find("does not import"), std::string::npos) << err;

  m = loadModel("mlp");
  m.clear_opset_import();
  err = importError(importProto(m));
  EXPECT_NE(err.find("imports no opset"), std::string::npos) << err;
}

TEST(Frontend, UnknownInputValue) {
  onnx::ModelProto m = loadModel("mlp");
  m.mutable_graph()->mutable_node(2)->set_input(0, "nope");
  ImportOptions opts;
  opts.batch = 1;
  std::string err = importError(importProto(m, opts));
  EXPECT_NE(err.find("node 'act'"), std::string::npos) << err;
  EXPECT_NE(err.find("'nope'"), std::string::npos) << err;

  m = loadModel("mlp");
  m.mutable_graph()->mutable_output(0)->set_name("nowhere");
  err = importError(importProto(m, opts));
  EXPECT_NE(err.find("graph output 'nowhere'"), std::string::npos) << err;
}

TEST(Frontend, UnsupportedInputTypes) {
  ImportOptions opts;
  opts.batch = 1;
  for (int type : {8 /*string*/, 14 /*complex64*/, 0 /*undefined*/}) {
    onnx::ModelProto m = loadModel("mlp");
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    std::string err = importError(importProto(m, opts));
    EXPECT_NE(err.find("graph input 'x' has element type"), std::string::npos) << err;
  }
  onnx::ModelProto m = loadModel("mlp");
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_sequence_type();
  std::string err = importError(importProto(m, opts));
  EXPECT_NE(err.find("graph input 'x' is a sequence"), std::string::npos) << err;
}

TEST(Frontend, ArityIsChecked) {
  onnx::ModelProto m = loadModel("mlp");
  m.mutable_graph()->mutable_node(2)->add_input("h0"); // Relu with two inputs
  ImportOptions opts;
  opts.batch = 1;
  std::string err = importError(importProto(m, opts));
  EXPECT_NE(err.find("node 'act' (op type 'Relu', domain ai.onnx, opset 13): has 2 inputs"),
            std::string::npos) << err;
}

TEST(Frontend, TruncatedFileIsAnError) {
  std::string bytes = serialize(loadModel("mlp"));
  ASSERT_GT(bytes.size(), 100u);
  for (size_t cut : {bytes.size() / 2, bytes.size() - 1, size_t(1), size_t(17)}) {
    GraphOrError r = frontend::importOnnxBytes(bytes.substr(0, cut), "cut.onnx");
    EXPECT_FALSE(r.isOk()) << "cut at " << cut;
  }
  TempDir dir("truncated");
  ASSERT_TRUE(writeFileAtomic(dir.file("half.onnx"), bytes.substr(0, bytes.size() / 2)).isOk());
  std::string err = importError(frontend::importOnnxFile(dir.file("half.onnx")));
  EXPECT_NE(err.find("half.onnx"), std::string::npos) << err;
}

TEST(Frontend, RandomBytesAreAnError) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(1 + rng() % 512, '\0');
    for (char &c : bytes)
      c = static_cast<char>(rng());
    GraphOrError r = frontend::importOnnxBytes(bytes, "random.onnx");
    EXPECT_FALSE(r.isOk()) << "random buffer " << i;
  }
}

TEST(Frontend, FileErrors) {
  TempDir dir("files");
  std::string err = importError(frontend::importOnnxFile(dir.file("missing.onnx")));
  EXPECT_NE(err.find("missing.onnx"), std::string::npos) << err;

  err = importError(frontend::importOnnxFile(dir.path.string()));
  EXPECT_NE(err.find("directory"), std::string::npos) << err;

  ASSERT_TRUE(writeFileAtomic(dir.file("empty.onnx"), "").isOk());
  err = importError(frontend::importOnnxFile(dir.file("empty.onnx")));
  EXPECT_NE(err.find("empty"), std::string::npos) << err;

  ASSERT_TRUE(writeFileAtomic(dir.file("text.onnx"), "this is not a model\n").isOk());
  err = importError(frontend::importOnnxFile(dir.file("text.onnx")));
  EXPECT_NE(err.find("not an ONNX model"), std::string::npos) << err;
}

TEST(Frontend, HugeDeclaredTensorIsAnError) {
  // A corrupt initializer claiming 2^61 elements must not allocate.
  onnx::ModelProto m = loadModel("mlp");
  onnx::TensorProto *t = m.mutable_graph()->mutable_initializer(0);
  t->clear_dims();
  t->add_dims(int64_t(1) << 31);
  t->add_dims(int64_t(1) << 30);
  ImportOptions opts;
  opts.batch = 1;
  std::string err = importError(importProto(m, opts));
  EXPECT_NE(err.find("tensor 'W1'"), std::string::npos) << err;
}

//===-- ONNX's conformance models -----------------------------------------===//

TEST(Frontend, ConformanceModelsNeverCrash) {
  const fs::path root = "/usr/share/libonnx-testdata/data/node";
  PIPEC_REQUIRE_TEST_DEPENDENCY(fs::is_directory(root), "libonnx-testdata",
                                "ONNX's test data (" + root.string() + ")");
  std::vector<fs::path> models;
  for (const auto &e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx"))
      models.push_back(e.path() / "model.onnx");
  std::sort(models.begin(), models.end());
  ASSERT_GT(models.size(), 100u);
  size_t ok = 0;
  ImportOptions opts;
  opts.batch = 1;
  for (const fs::path &p : models) {
    GraphOrError r = frontend::importOnnxFile(p.string(), opts);
    if (!r.isOk()) {
      // Errors are fine; they must say something and start lowercase.
      const std::string &msg = r.status().message();
      EXPECT_TRUE(!msg.empty() && std::islower(static_cast<unsigned char>(msg[0]))) << p << ": " << msg;
      continue;
    }
    ++ok;
    SCOPED_TRACE(p.string());
    expectWellFormed(**r);
  }
  // Most single-node tests use ops pipec knows; a sharp drop means the
  // importer broke.
  EXPECT_GT(ok, models.size() / 3) << ok << " of " << models.size() << " imported";
  GraphOrError abs = frontend::importOnnxFile((root / "test_abs/model.onnx").string());
  ASSERT_TRUE(abs.isOk()) << abs.status().message();
  EXPECT_EQ((*abs)->numNodes(), 1u);
  EXPECT_EQ((*abs)->nodeAt(0)->opType(), "Abs");
}
