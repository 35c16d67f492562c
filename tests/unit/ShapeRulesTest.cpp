//===- tests/unit/ShapeRulesTest.cpp - Shape rules and infer-shapes -------===//
//
// Representative cases of every rule family (including opset differences
// and error messages) on graphs written in the IR text form, the
// infer-shapes pass's folding of shape subgraphs, and a broad check against
// ONNX's own single-node test data: every node test of an op in ir/Ops.def
// must infer the dtypes and shapes of its expected outputs (Debian's
// libonnx-testdata; without it that test fails, unless the build allows
// skips: tests/unit/TestDependency.h).
// Over 700 lines: a case per rule family and the ONNX node-test sweep.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/ShapeRules.h"
#include "frontend/OnnxProto.h"
#include "ir/IR.h"
#include "ir/Text.h"
#include "passes/ShapeInference.h"
#include "runtime/cpu/Kernel.h"
#include "support/FileIO.h"
#include "tests/unit/TestDependency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

using namespace pipec;

namespace {

/// A parsed graph after infer-shapes, or the error.
struct Inferred {
  std::unique_ptr<ir::Graph> g;
  Status status;
  /// The type of a value as text ("f32[2,3]"), "?" if untyped, "missing".
  std::string type(const std::string &name) const {
    const ir::Value *v = g ? g->findValue(name) : nullptr;
    if (!v)
      return "missing";
    return v->typeKnown() ? v->type().str() : "?";
  }
};

Inferred infer(const std::string &body, int opset = 17) {
  Inferred r;
  auto g = ir::parseGraph(cat("graph \"t\" {\n  opset \"\" ", opset, "\n", body, "\n}\n"));
  if (!g) {
    r.status = g.status();
    return r;
  }
  r.g = g.take();
  r.status = passes::inferShapes(*r.g);
  return r;
}

/// The type of %y (a graph output, so that folding keeps it), or the
/// error message.
std::string one(const std::string &body, int opset = 17) {
  Inferred r = infer(body + "\noutput %y", opset);
  if (!r.status)
    return r.status.message();
  return r.type("y");
}

/// The error message of a graph expected to fail ("" if it did not).
std::string err(const std::string &body, int opset = 17) {
  Inferred r = infer(body, opset);
  return r.status ? "" : r.status.message();
}

bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

// Every op but those expanded into others while shapes are inferred
// (passes/expand/: If, Loop, LSTM...), which OpRegistryTest checks have an
// expansion instead.
TEST(ShapeRules, EveryOpHasARule) {
  for (const ir::OpInfo &op : ir::allOps())
    EXPECT_EQ(ir::hasShapeRule(op.domain, op.name), !op.has(ir::op::Expanded)) << op.name;
}

TEST(ShapeRules, HelperFunctions) {
  auto wide = ir::broadcastShapes({2, 1, 4}, {3, 1});
  ASSERT_TRUE(wide) << wide.status().message();
  EXPECT_EQ(*wide, (Shape{2, 3, 4}));
  auto scalar = ir::broadcastShapes({}, {5});
  ASSERT_TRUE(scalar) << scalar.status().message();
  EXPECT_EQ(*scalar, (Shape{5}));
  auto bad = ir::broadcastShapes({2, 3}, {4});
  ASSERT_FALSE(bad);
  EXPECT_TRUE(has(bad.status().message(), "[2,3] and [4]")) << bad.status().message();
  auto last = ir::normalizeAxis(-1, 3);
  ASSERT_TRUE(last) << last.status().message();
  EXPECT_EQ(*last, 2);
  auto axis = ir::normalizeAxis(3, 3);
  ASSERT_FALSE(axis);
  EXPECT_TRUE(has(axis.status().message(), "axis 3 is out of range for rank 3"));
}

TEST(ShapeRules, Elementwise) {
  EXPECT_EQ(one("input %a: f32[2,3,4]\ninput %b: f32[3,1]\n"
                "node \"n\" Add(%a, %b) -> %y: ?"),
            "f32[2,3,4]");
  EXPECT_EQ(one("input %a: i64[4]\ninput %b: i64[]\nnode \"n\" Less(%a, %b) -> %y: ?"), "bool[4]");
  EXPECT_EQ(one("input %c: bool[2,1]\ninput %a: f32[3]\ninput %b: f32[1,1]\n"
                "node \"n\" Where(%c, %a, %b) -> %y: ?"),
            "f32[2,3]");
  EXPECT_EQ(one("input %a: f32[2]\nnode \"n\" Cast(%a) {to = 7} -> %y: ?"), "i64[2]");
  EXPECT_EQ(one("input %a: f32[2]\nnode \"n\" IsNaN(%a) -> %y: ?"), "bool[2]");
  EXPECT_EQ(one("input %a: f32[2,3]\ninput %b: f32[3]\ninput %c: f32[1,1]\n"
                "node \"n\" Sum(%a, %b, %c) -> %y: ?"),
            "f32[2,3]");
  EXPECT_EQ(one("input %a: f32[2,3]\ninput %s: f32[3]\nnode \"n\" PRelu(%a, %s) -> %y: ?"),
            "f32[2,3]");
  // Pow's exponent may have its own type from opset 12.
  EXPECT_EQ(one("input %a: f32[2]\ninput %b: i64[]\nnode \"n\" Pow(%a, %b) -> %y: ?", 12),
            "f32[2]");
  EXPECT_TRUE(has(err("input %a: f32[2]\ninput %b: i64[]\nnode \"n\" Pow(%a, %b) -> %y: ?", 11),
                  "element type i64"));
}

TEST(ShapeRules, ElementwiseOpsetForms) {
  // Clip: attributes before 11, optional scalar inputs after.
  EXPECT_EQ(one("input %a: f32[3]\nnode \"n\" Clip(%a) {min = -1.0, max = 1.0} -> %y: ?", 7),
            "f32[3]");
  EXPECT_EQ(one("input %a: f32[3]\nconst %lo: f32[] = [0.0]\n"
                "node \"n\" Clip(%a, %lo, none) -> %y: ?",
                13),
            "f32[3]");
  EXPECT_TRUE(has(err("input %a: f32[3]\nconst %lo: f32[] = [0.0]\n"
                      "node \"n\" Clip(%a, %lo) -> %y: ?",
                      7),
                  "before opset 11"));
  // Dropout's mask: the input's type before 10, bool after; ratio input from 12.
  Inferred d7 = infer("input %a: f32[3]\nnode \"n\" Dropout(%a) -> %y: ?, %m: ?", 7);
  ASSERT_TRUE(d7.status) << d7.status.message();
  EXPECT_EQ(d7.type("m"), "f32[3]");
  Inferred d13 = infer("input %a: f32[3]\nconst %r: f32[] = [0.1]\n"
                       "node \"n\" Dropout(%a, %r) -> %y: ?, %m: ?",
                       13);
  ASSERT_TRUE(d13.status) << d13.status.message();
  EXPECT_EQ(d13.type("m"), "bool[3]");
  // Opset 6 binary ops broadcast only with broadcast=1 (suffix or axis).
  EXPECT_EQ(one("input %a: f32[2,3,4]\ninput %b: f32[3]\n"
                "node \"n\" Mul(%a, %b) {broadcast = 1, axis = 1} -> %y: ?",
                6),
            "f32[2,3,4]");
  EXPECT_TRUE(has(err("input %a: f32[2,3]\ninput %b: f32[3]\nnode \"n\" Mul(%a, %b) -> %y: ?", 6),
                  "broadcast is 0"));
}

TEST(ShapeRules, ElementwiseErrors) {
  std::string e = err("input %a: f32[2,3]\ninput %b: i64[2,3]\nnode \"add\" Add(%a, %b) -> %y: ?");
  EXPECT_TRUE(has(e, "node 'add' (Add, opset 17): ")) << e;
  EXPECT_TRUE(has(e, "input 1 'b' has element type i64 but input 0 'a' has f32")) << e;
  e = err("input %a: f32[2,3]\ninput %b: f32[4]\nnode \"add\" Add(%a, %b) -> %y: ?");
  EXPECT_TRUE(has(e, "node 'add' (Add, opset 17): cannot broadcast input 1 'b' of shape [4]")) << e;
  EXPECT_TRUE(has(e, "3 vs 4")) << e;
  e = err("input %a: f32[2]\nnode \"n\" Not(%a) -> %y: ?");
  EXPECT_TRUE(has(e, "must have element type bool, got f32")) << e;
}

TEST(ShapeRules, MatMulAndGemm) {
  auto mm = [](const std::string &a, const std::string &b) {
    return one(cat("input %a: ", a, "\ninput %b: ", b, "\nnode \"n\" MatMul(%a, %b) -> %y: ?"));
  };
  EXPECT_EQ(mm("f32[2,3,4]", "f32[4,5]"), "f32[2,3,5]");
  EXPECT_EQ(mm("f32[4]", "f32[4,5]"), "f32[5]");
  EXPECT_EQ(mm("f32[3,4]", "f32[4]"), "f32[3]");
  EXPECT_EQ(mm("f32[4]", "f32[4]"), "f32[]");
  EXPECT_EQ(mm("f32[2,1,3,4]", "f32[5,4,6]"), "f32[2,5,3,6]");
  EXPECT_EQ(mm("f32[7,4]", "f32[2,4,6]"), "f32[2,7,6]");
  std::string e = mm("f32[3,4]", "f32[5,6]");
  EXPECT_TRUE(has(e, "inner dimensions differ")) << e;
  EXPECT_TRUE(has(e, "K = 4") && has(e, "K = 5")) << e;
  EXPECT_EQ(one("input %a: f32[4,3]\ninput %b: f32[5,4]\ninput %c: f32[5]\n"
                "node \"n\" Gemm(%a, %b, %c) {transA = 1, transB = 1} -> %y: ?"),
            "f32[3,5]");
  EXPECT_EQ(one("input %a: f32[3,4]\ninput %b: f32[4,5]\nnode \"n\" Gemm(%a, %b) -> %y: ?", 11),
            "f32[3,5]");
  e = err("input %a: f32[3,4]\ninput %b: f32[4,5]\ninput %c: f32[2,5]\n"
          "node \"n\" Gemm(%a, %b, %c) -> %y: ?");
  EXPECT_TRUE(has(e, "C of shape [2,5] does not broadcast to [3,5]")) << e;
}

TEST(ShapeRules, Einsum) {
  auto es = [](const std::string &inputs, const std::string &args, const std::string &eq) {
    return one(cat(inputs, "\nnode \"n\" Einsum(", args, ") {equation = \"", eq, "\"} -> %y: ?"));
  };
  EXPECT_EQ(es("input %a: f32[2,3,4]\ninput %b: f32[2,4,5]", "%a, %b", "bij,bjk->bik"),
            "f32[2,3,5]");
  EXPECT_EQ(es("input %a: f32[3,4]\ninput %b: f32[4,5]", "%a, %b", "ij,jk"), "f32[3,5]");
  EXPECT_EQ(es("input %a: f32[3,4]", "%a", "ba"), "f32[4,3]");
  EXPECT_EQ(es("input %a: f32[7,3,5,5]", "%a", "...ii ->...i"), "f32[7,3,5]");
  EXPECT_EQ(es("input %a: f32[5]\ninput %b: f32[5]", "%a, %b", "i,i"), "f32[]");
  EXPECT_EQ(es("input %a: f32[2,1,3,4]\ninput %b: f32[5,4,6]", "%a, %b", "...ij,...jk"),
            "f32[2,5,3,6]");
  EXPECT_TRUE(has(es("input %a: f32[3,4]\ninput %b: f32[5,6]", "%a, %b", "ij,jk->ik"),
                  "label 'j' is 4 and 5"));
}

TEST(ShapeRules, Normalization) {
  Inferred bn = infer("input %x: f32[2,3,4,5]\ninput %s: f32[3]\ninput %b: f32[3]\n"
                      "input %m: f64[3]\ninput %v: f64[3]\n"
                      "node \"n\" BatchNormalization(%x, %s, %b, %m, %v) {training_mode = 1} "
                      "-> %y: ?, %rm: ?, %rv: ?",
                      15);
  ASSERT_TRUE(bn.status) << bn.status.message();
  EXPECT_EQ(bn.type("y"), "f32[2,3,4,5]");
  EXPECT_EQ(bn.type("rm"), "f64[3]");
  std::string e = err("input %x: f32[2,3,4,5]\ninput %s: f32[3]\ninput %b: f32[3]\n"
                      "input %m: f32[3]\ninput %v: f32[3]\n"
                      "node \"n\" BatchNormalization(%x, %s, %b, %m, %v) -> %y: ?, %rm: ?",
                      14);
  EXPECT_TRUE(has(e, "only with training_mode=1")) << e;
  Inferred bn9 = infer("input %x: f32[2,3]\ninput %s: f32[3]\n"
                       "node \"n\" BatchNormalization(%x, %s, %s, %s, %s) -> %y: ?, %m: ?, %v: ?",
                       9);
  ASSERT_TRUE(bn9.status) << bn9.status.message();
  EXPECT_EQ(bn9.type("v"), "f32[3]");
  Inferred ln =
      infer("input %x: f32[2,3,4]\ninput %w: f32[4]\n"
            "node \"n\" LayerNormalization(%x, %w) {axis = -1} -> %y: ?, %mean: ?, %inv: ?");
  ASSERT_TRUE(ln.status) << ln.status.message();
  EXPECT_EQ(ln.type("y"), "f32[2,3,4]");
  EXPECT_EQ(ln.type("mean"), "f32[2,3,1]");
  EXPECT_EQ(ln.type("inv"), "f32[2,3,1]");
  Inferred ln0 =
      infer("input %x: f64[2,3]\ninput %w: f64[2,3]\n"
            "node \"n\" LayerNormalization(%x, %w) {axis = 0, stash_type = 11} -> %y: ?, %mean: ?");
  ASSERT_TRUE(ln0.status) << ln0.status.message();
  EXPECT_EQ(ln0.type("mean"), "f64[1,1]");
  EXPECT_EQ(one("input %x: f32[2,3]\nnode \"n\" Softmax(%x) -> %y: ?", 11), "f32[2,3]");
  EXPECT_EQ(one("input %x: f32[2,3]\nnode \"n\" LogSoftmax(%x) -> %y: ?", 13), "f32[2,3]");
  e = err("input %x: f32[2,3]\nnode \"sm\" Softmax(%x) {axis = 2} -> %y: ?");
  EXPECT_TRUE(has(e, "node 'sm' (Softmax, opset 17): axis: axis 2 is out of range for rank 2"))
      << e;
}

TEST(ShapeRules, ConvAndPool) {
  EXPECT_EQ(one("input %x: f32[1,3,32,32]\ninput %w: f32[8,3,3,3]\ninput %b: f32[8]\n"
                "node \"n\" Conv(%x, %w, %b) {pads = [1, 1, 1, 1], strides = [2, 2]} -> %y: ?"),
            "f32[1,8,16,16]");
  EXPECT_EQ(one("input %x: f32[1,4,10,10]\ninput %w: f32[8,2,3,3]\n"
                "node \"n\" Conv(%x, %w) {group = 2, dilations = [2, 2]} -> %y: ?"),
            "f32[1,8,6,6]");
  EXPECT_EQ(one("input %x: f32[1,3,7,9]\ninput %w: f32[2,3,3,3]\n"
                "node \"n\" Conv(%x, %w) {auto_pad = \"SAME_UPPER\", strides = [2, 2]} -> %y: ?"),
            "f32[1,2,4,5]");
  EXPECT_EQ(one("input %x: f32[1,3,7]\ninput %w: f32[2,3,3]\n"
                "node \"n\" Conv(%x, %w) {auto_pad = \"VALID\", strides = [2]} -> %y: ?"),
            "f32[1,2,3]");
  std::string e = err("input %x: f32[1,4,10,10]\ninput %w: f32[8,3,3,3]\n"
                      "node \"n\" Conv(%x, %w) -> %y: ?");
  EXPECT_TRUE(has(e, "X has 4 channels")) << e;
  EXPECT_EQ(one("input %x: f32[1,1,3,3]\ninput %w: f32[1,2,3,3]\n"
                "node \"n\" ConvTranspose(%x, %w) {strides = [3, 2], output_padding = [1, 1]} "
                "-> %y: ?"),
            "f32[1,2,10,8]");
  EXPECT_EQ(one("input %x: f32[1,1,3,3]\ninput %w: f32[1,2,3,3]\n"
                "node \"n\" ConvTranspose(%x, %w) {strides = [3, 2], output_shape = [10, 8]} "
                "-> %y: ?"),
            "f32[1,2,10,8]");
  EXPECT_EQ(one("input %x: f32[1,1,3,3]\ninput %w: f32[1,2,3,3]\n"
                "node \"n\" ConvTranspose(%x, %w) {auto_pad = \"SAME_UPPER\", strides = [2, 2]} "
                "-> %y: ?"),
            "f32[1,2,6,6]");
  Inferred mp =
      infer("input %x: f32[1,1,4,4]\n"
            "node \"n\" MaxPool(%x) {kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1} "
            "-> %y: ?, %i: ?");
  ASSERT_TRUE(mp.status) << mp.status.message();
  EXPECT_EQ(mp.type("y"), "f32[1,1,2,2]");
  EXPECT_EQ(mp.type("i"), "i64[1,1,2,2]");
  // With ceil_mode a window may not start in the right padding (PyTorch's rule).
  EXPECT_EQ(one("input %x: f32[1,1,5,5]\n"
                "node \"n\" MaxPool(%x) {kernel_shape = [2, 2], strides = [2, 2], pads = [1, 1, "
                "1, 1], ceil_mode = 1} -> %y: ?"),
            "f32[1,1,3,3]");
  EXPECT_EQ(one("input %x: f32[1,3,32,32]\n"
                "node \"n\" AveragePool(%x) {kernel_shape = [2, 2], auto_pad = \"SAME_LOWER\"} "
                "-> %y: ?"),
            "f32[1,3,32,32]");
  EXPECT_EQ(one("input %x: f32[2,3,5,6]\nnode \"n\" GlobalAveragePool(%x) -> %y: ?"),
            "f32[2,3,1,1]");
  e = err("input %x: f32[1,1,2,2]\nnode \"n\" MaxPool(%x) {kernel_shape = [3, 3]} -> %y: ?");
  EXPECT_TRUE(has(e, "does not fit input size 2")) << e;
}

TEST(ShapeRules, Reductions) {
  // ReduceSum's axes: attribute before 13, input from 13.
  EXPECT_EQ(one("input %x: f32[2,3,4]\nnode \"n\" ReduceSum(%x) {axes = [1]} -> %y: ?", 11),
            "f32[2,1,4]");
  EXPECT_EQ(one("input %x: f32[2,3,4]\nconst %a: i64[1] = [-1]\n"
                "node \"n\" ReduceSum(%x, %a) {keepdims = 0} -> %y: ?",
                13),
            "f32[2,3]");
  EXPECT_EQ(
      one("input %x: f32[2,3,4]\nnode \"n\" ReduceSum(%x) {noop_with_empty_axes = 1} -> %y: ?", 13),
      "f32[2,3,4]");
  // The other reductions switch at 18.
  EXPECT_EQ(one("input %x: f32[2,3,4]\nnode \"n\" ReduceMean(%x) {axes = [0, 2]} -> %y: ?", 17),
            "f32[1,3,1]");
  EXPECT_EQ(one("input %x: f32[2,3,4]\nconst %a: i64[2] = [0, 2]\n"
                "node \"n\" ReduceMax(%x, %a) {keepdims = 0} -> %y: ?",
                18),
            "f32[3]");
  EXPECT_EQ(one("input %x: f32[2,3,4]\nnode \"n\" ReduceL2(%x) {keepdims = 0} -> %y: ?", 18),
            "f32[]");
  std::string e = err("input %x: f32[2,3,4]\ninput %a: i64[1]\n"
                      "node \"n\" ReduceMax(%x, %a) -> %y: ?",
                      18);
  EXPECT_TRUE(has(e, "depends on the value of input 1 'a'")) << e;
  e = err("input %x: f32[2,3]\nnode \"n\" ReduceMean(%x) {axes = [1, -1]} -> %y: ?", 13);
  EXPECT_TRUE(has(e, "lists axis 1 twice")) << e;
  EXPECT_EQ(one("input %x: f32[2,3,4]\nnode \"n\" ArgMax(%x) {axis = 1} -> %y: ?"), "i64[2,1,4]");
  EXPECT_EQ(one("input %x: f32[2,3,4]\n"
                "node \"n\" ArgMin(%x) {axis = -1, keepdims = 0, select_last_index = 1} -> %y: ?"),
            "i64[2,3]");
}

TEST(ShapeRules, DataMovement) {
  EXPECT_EQ(one("input %a: f32[2,3]\ninput %b: f32[2,5]\n"
                "node \"n\" Concat(%a, %b) {axis = -1} -> %y: ?"),
            "f32[2,8]");
  EXPECT_TRUE(has(one("input %a: f32[2,3]\ninput %b: f32[3,5]\n"
                      "node \"n\" Concat(%a, %b) {axis = 1} -> %y: ?"),
                  "does not match input 0 'a' of shape [2,3] outside axis 1"));
  EXPECT_EQ(one("input %a: f32[5,4,3]\ninput %i: i64[2,2]\n"
                "node \"n\" Gather(%a, %i) {axis = 1} -> %y: ?"),
            "f32[5,2,2,3]");
  EXPECT_EQ(one("input %a: f32[5,4]\ninput %i: i32[]\nnode \"n\" Gather(%a, %i) -> %y: ?"),
            "f32[4]");
  EXPECT_EQ(one("input %a: f32[3,3]\ninput %i: i64[2,3]\n"
                "node \"n\" GatherElements(%a, %i) {axis = 1} -> %y: ?"),
            "f32[2,3]");
  EXPECT_EQ(one("input %a: f32[2,3,4]\nnode \"n\" Transpose(%a) -> %y: ?"), "f32[4,3,2]");
  EXPECT_EQ(one("input %a: f32[2,3,4]\nnode \"n\" Transpose(%a) {perm = [1, 0, 2]} -> %y: ?"),
            "f32[3,2,4]");
  EXPECT_EQ(one("input %a: f32[2,3,4]\nnode \"n\" Flatten(%a) -> %y: ?"), "f32[2,12]");
  EXPECT_EQ(one("input %a: f32[2,3,4]\nnode \"n\" Flatten(%a) {axis = -1} -> %y: ?", 13),
            "f32[6,4]");
  EXPECT_EQ(one("input %a: f32[2,3]\nnode \"n\" Flatten(%a) {axis = 0} -> %y: ?"), "f32[1,6]");
  EXPECT_EQ(one("input %a: f32[2,3]\nconst %r: i64[2] = [2, 3]\nnode \"n\" Tile(%a, %r) -> %y: ?"),
            "f32[4,9]");
  EXPECT_EQ(one("input %a: f32[3,1]\nconst %s: i64[3] = [2, 1, 6]\n"
                "node \"n\" Expand(%a, %s) -> %y: ?"),
            "f32[2,3,6]");
  EXPECT_EQ(one("input %a: f32[2,4,4]\nconst %k: i64[] = [1]\nnode \"n\" Trilu(%a, %k) -> %y: ?"),
            "f32[2,4,4]");
}

TEST(ShapeRules, PadAndSplitOpsetForms) {
  EXPECT_EQ(one("input %a: f32[2,3]\nnode \"n\" Pad(%a) {pads = [0, 1, 0, 2]} -> %y: ?", 2),
            "f32[2,6]");
  EXPECT_EQ(one("input %a: f32[2,3]\nconst %p: i64[4] = [1, 0, 1, -1]\n"
                "node \"n\" Pad(%a, %p) -> %y: ?",
                13),
            "f32[4,2]");
  EXPECT_EQ(one("input %a: f32[2,3,4]\nconst %p: i64[2] = [2, 3]\nconst %ax: i64[1] = [-1]\n"
                "node \"n\" Pad(%a, %p, none, %ax) {mode = \"reflect\"} -> %y: ?",
                18),
            "f32[2,3,9]");
  // Split: `split` attribute before 13, input from 13, num_outputs from 18.
  Inferred s11 =
      infer("input %a: f32[6,2]\nnode \"n\" Split(%a) {split = [2, 4]} -> %p: ?, %q: ?", 11);
  ASSERT_TRUE(s11.status) << s11.status.message();
  EXPECT_EQ(s11.type("q"), "f32[4,2]");
  Inferred s13 = infer("input %a: f32[2,6]\nconst %s: i64[3] = [1, 2, 3]\n"
                       "node \"n\" Split(%a, %s) {axis = 1} -> %p: ?, %q: ?, %r: ?",
                       13);
  ASSERT_TRUE(s13.status) << s13.status.message();
  EXPECT_EQ(s13.type("r"), "f32[2,3]");
  Inferred s18 =
      infer("input %a: f32[7]\nnode \"n\" Split(%a) {num_outputs = 3} -> %p: ?, %q: ?, %r: ?", 18);
  ASSERT_TRUE(s18.status) << s18.status.message();
  EXPECT_EQ(s18.type("p"), "f32[3]");
  EXPECT_EQ(s18.type("r"), "f32[1]");
  std::string e = err("input %a: f32[7]\nnode \"n\" Split(%a) -> %p: ?, %q: ?", 13);
  EXPECT_TRUE(has(e, "axis 0 of size 7 does not split evenly into 2 outputs")) << e;
}

TEST(ShapeRules, ShapeOps) {
  EXPECT_EQ(one("input %a: f32[2,3,4]\nconst %s: i64[3] = [0, -1, 2]\n"
                "node \"n\" Reshape(%a, %s) -> %y: ?"),
            "f32[2,6,2]");
  // allowzero (opset 14) makes 0 a real dimension.
  EXPECT_EQ(one("input %a: f32[0,3]\nconst %s: i64[2] = [3, 0]\n"
                "node \"n\" Reshape(%a, %s) {allowzero = 1} -> %y: ?",
                14),
            "f32[3,0]");
  std::string e = err("input %a: f32[2,3]\nconst %s: i64[2] = [4, -1]\n"
                      "node \"n\" Reshape(%a, %s) -> %y: ?");
  EXPECT_TRUE(has(e, "6 is not a multiple of 4")) << e;
  // Slice: attributes before 10, inputs (with steps) after.
  EXPECT_EQ(one("input %a: f32[10,5]\n"
                "node \"n\" Slice(%a) {starts = [1], ends = [-1], axes = [0]} -> %y: ?",
                9),
            "f32[8,5]");
  EXPECT_EQ(one("input %a: f32[10,5]\nconst %st: i64[2] = [-1, 0]\n"
                "const %en: i64[2] = [-9223372036854775807, 5]\nconst %sp: i64[2] = [-3, 2]\n"
                "node \"n\" Slice(%a, %st, %en, none, %sp) -> %y: ?",
                13),
            "f32[4,3]");
  EXPECT_EQ(one("input %a: f32[2,1,3,1]\nnode \"n\" Squeeze(%a) -> %y: ?"), "f32[2,3]");
  EXPECT_EQ(one("input %a: f32[2,1,3,1]\nnode \"n\" Squeeze(%a) {axes = [1]} -> %y: ?", 11),
            "f32[2,3,1]");
  EXPECT_EQ(one("input %a: f32[2,1,3,1]\nconst %ax: i64[1] = [-1]\n"
                "node \"n\" Squeeze(%a, %ax) -> %y: ?",
                13),
            "f32[2,1,3]");
  EXPECT_TRUE(has(one("input %a: f32[2,3]\nnode \"n\" Squeeze(%a) {axes = [1]} -> %y: ?", 11),
                  "cannot squeeze axis 1 of f32[2,3]: its size is 3"));
  EXPECT_EQ(one("input %a: f32[3,4]\nnode \"n\" Unsqueeze(%a) {axes = [0, -1]} -> %y: ?", 11),
            "f32[1,3,4,1]");
  EXPECT_EQ(one("input %a: f32[3,4]\nconst %ax: i64[2] = [1, 3]\n"
                "node \"n\" Unsqueeze(%a, %ax) -> %y: ?",
                13),
            "f32[3,1,4,1]");
  EXPECT_EQ(one("const %s: i64[] = [10]\nconst %l: i64[] = [1]\nconst %d: i64[] = [-3]\n"
                "node \"n\" Range(%s, %l, %d) -> %y: ?"),
            "i64[3]");
  EXPECT_EQ(one("const %s: f32[] = [1.0]\nconst %l: f32[] = [2.0]\nconst %d: f32[] = [0.3]\n"
                "node \"n\" Range(%s, %l, %d) -> %y: ?"),
            "f32[4]");
  EXPECT_EQ(one("const %s: i64[2] = [2, 3]\n"
                "node \"n\" ConstantOfShape(%s) {value = tensor i32[1] [7]} -> %y: ?"),
            "i32[2,3]");
  EXPECT_EQ(one("input %a: f32[3,4,5]\nnode \"n\" Shape(%a) {start = 1, end = -1} -> %y: ?", 15),
            "i64[1]");
  EXPECT_EQ(one("input %a: f32[3,4,5]\nnode \"n\" Shape(%a) {start = 1} -> %y: ?", 13), "i64[3]");
  EXPECT_EQ(one("input %a: f32[3,4,5]\nnode \"n\" Size(%a) -> %y: ?"), "i64[]");
}

TEST(ShapeRules, Losses) {
  EXPECT_EQ(one("input %x: f32[3,5,2]\ninput %t: i64[3,2]\ninput %w: f32[5]\n"
                "node \"n\" NegativeLogLikelihoodLoss(%x, %t, %w) {reduction = \"none\"} -> %y: ?"),
            "f32[3,2]");
  EXPECT_EQ(one("input %x: f32[3,5]\ninput %t: i64[3]\n"
                "node \"n\" NegativeLogLikelihoodLoss(%x, %t) -> %y: ?"),
            "f32[]");
  Inferred sce = infer("input %x: f32[3,5,2]\ninput %t: i32[3,2]\n"
                       "node \"n\" SoftmaxCrossEntropyLoss(%x, %t) {reduction = \"sum\"} "
                       "-> %y: ?, %lp: ?");
  ASSERT_TRUE(sce.status) << sce.status.message();
  EXPECT_EQ(sce.type("y"), "f32[]");
  EXPECT_EQ(sce.type("lp"), "f32[3,5,2]");
  std::string e = err("input %x: f32[3,5]\ninput %t: i64[4]\n"
                      "node \"n\" SoftmaxCrossEntropyLoss(%x, %t) -> %y: ?");
  EXPECT_TRUE(has(e, "target i64[4] must have shape [3]")) << e;
}

//===-- The infer-shapes pass ---------------------------------------------===//

TEST(ShapeInference, FoldsShapeIntoReshape) {
  Inferred r = infer("input %x: f32[4,6]\ninput %z: f32[24]\n"
                     "node \"shape\" Shape(%x) -> %s: ?\n"
                     "node \"reshape\" Reshape(%z, %s) -> %y: ?\noutput %y");
  ASSERT_TRUE(r.status) << r.status.message();
  EXPECT_EQ(r.type("y"), "f32[4,6]");
  EXPECT_EQ(r.g->numNodes(), 1u);
  const ir::Value *s = r.g->findValue("s");
  ASSERT_TRUE(s && s->isConstant());
  EXPECT_EQ(s->constant().toInts(), (std::vector<int64_t>{4, 6}));
}

TEST(ShapeInference, FoldsConstantNodesAndKeepsOutputNames) {
  Inferred r = infer("input %x: f32[4,6]\n"
                     "node \"c\" Constant() {value_ints = [6, 4]} -> %c: ?\n"
                     "node \"reshape\" Reshape(%x, %c) -> %y: ?\n"
                     "node \"size\" Size(%x) -> %n: ?\noutput %y\noutput %n");
  ASSERT_TRUE(r.status) << r.status.message();
  EXPECT_EQ(r.type("y"), "f32[6,4]");
  const ir::Value *n = r.g->findValue("n");
  ASSERT_TRUE(n && n->isConstant() && n->isGraphOutput());
  EXPECT_EQ(n->constant().getInt(0), 24);
  EXPECT_EQ(r.g->numNodes(), 1u);
}

TEST(ShapeInference, PassReportsChanges) {
  auto g = ir::parseGraph("graph \"t\" {\n opset \"\" 17\n input %x: f32[2]\n"
                          " node \"n\" Relu(%x) -> %y: ?\n output %y\n}\n");
  ASSERT_TRUE(g) << g.status().message();
  auto pass = passes::createShapeInferencePass();
  EXPECT_EQ(pass->name(), "infer-shapes");
  auto first = pass->run(**g);
  ASSERT_TRUE(first) << first.status().message();
  EXPECT_TRUE(*first);
  auto second = pass->run(**g);
  ASSERT_TRUE(second) << second.status().message();
  EXPECT_FALSE(*second);
}

TEST(ShapeInference, ValueFromGraphInputIsAnError) {
  std::string e = err("input %x: f32[4,6]\ninput %shape: i64[2]\n"
                      "node \"r\" Reshape(%x, %shape) -> %y: ?");
  EXPECT_TRUE(has(e, "node 'r' (Reshape, opset 17): the output shape depends on the value of "
                     "input 1 'shape', which is not a compile-time constant"))
      << e;
  EXPECT_TRUE(has(e, "'shape' is a graph input")) << e;
}

TEST(ShapeInference, ErrorExplainsWhyAValueIsUnknown) {
  std::string e = err("input %x: f32[4,6]\ninput %r: i64[1]\nconst %axes: i64[1] = [0]\n"
                      "node \"shape\" Shape(%x) {end = 1} -> %s: ?\n"
                      "node \"concat\" Concat(%s, %r) {axis = 0} -> %target: ?\n"
                      "node \"reshape\" Reshape(%x, %target) -> %y: ?");
  EXPECT_TRUE(has(e, "depends on the value of input 1 'target'")) << e;
  EXPECT_TRUE(has(e,
                  "'target' is computed by node 'concat' (Concat), which was not folded: its input "
                  "'r' is not a compile-time constant; 'r' is a graph input"))
      << e;
}

TEST(ShapeInference, MissingOpsetIsAnError) {
  auto g = ir::parseGraph("graph \"t\" {\n input %x: f32[2]\n node \"n\" Relu(%x) -> %y: ?\n}\n");
  ASSERT_TRUE(g) << g.status().message();
  Status s = passes::inferShapes(**g);
  ASSERT_FALSE(s);
  EXPECT_TRUE(has(s.message(), "imports no opset for domain 'ai.onnx'")) << s.message();
}

// PyTorch's dynamic reshape: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
TEST(ShapeInference, FoldsPyTorchShapeChain) {
  std::string body = "input %x: f32[8,3,4]\n"
                     "const %zero: i64[] = [0]\nconst %axes: i64[1] = [0]\n"
                     "const %minus1: i64[1] = [-1]\n"
                     "node \"shape\" Shape(%x) -> %s: ?\n"
                     "node \"gather\" Gather(%s, %zero) {axis = 0} -> %b: ?\n"
                     "node \"unsq\" Unsqueeze(%b, %axes) -> %bu: ?\n"
                     "node \"concat\" Concat(%bu, %minus1) {axis = 0} -> %target: ?\n"
                     "node \"reshape\" Reshape(%x, %target) -> %y: ?\noutput %y";
  bool kernels = cpu::hasKernel("", "Gather") && cpu::hasKernel("", "Unsqueeze") &&
                 cpu::hasKernel("", "Concat");
  Inferred r = infer(body, 13);
  if (kernels) {
    ASSERT_TRUE(r.status) << r.status.message();
    EXPECT_EQ(r.type("y"), "f32[8,12]");
    EXPECT_EQ(r.g->numNodes(), 1u);
  } else {
    // Without kernels folding stops, and the error explains the chain.
    ASSERT_FALSE(r.status);
    EXPECT_TRUE(has(r.status.message(), "input 1 'target', which is not a compile-time constant"))
        << r.status.message();
    EXPECT_TRUE(has(r.status.message(), "was not folded")) << r.status.message();
  }
}

TEST(ShapeInference, FoldsSmallConstantArithmetic) {
  if (!cpu::hasKernel("", "Add"))
    GTEST_SKIP() << "no CPU kernel for Add yet";
  Inferred r = infer("const %a: f32[2] = [1.0, 2.0]\nconst %b: f32[2] = [3.0, 4.0]\n"
                     "node \"add\" Add(%a, %b) -> %y: ?\noutput %y");
  ASSERT_TRUE(r.status) << r.status.message();
  const ir::Value *y = r.g->findValue("y");
  ASSERT_TRUE(y && y->isConstant());
  EXPECT_EQ(y->constant().getDouble(1), 6.0);
}

//===-- ONNX's node tests -------------------------------------------------===//

namespace {

namespace fs = std::filesystem;
const char *kOnnxTestData = "/usr/share/libonnx-testdata/data";
/// The single-node test suites of ONNX's test data.
const char *kOnnxSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

Expected<onnx::TensorProto> loadTensorProto(const std::string &path) {
  PIPEC_ASSIGN(std::string bytes, readFile(path));
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return errorf("cannot parse '", path, "'");
  return t;
}

/// Type and shape only, so that strings (which pipec does not load) count.
TensorDesc descOf(const onnx::TensorProto &t) {
  return {static_cast<DType>(t.data_type()), Shape(t.dims().begin(), t.dims().end())};
}

/// Outcome of one test directory: skipped (not a single node of an op in
/// the table, or data pipec cannot load), or the comparison's status.
struct NodeTestResult {
  bool skipped = false;
  Status status;
};

/// Builds the test's node in a Graph (inputs typed from test_data_set_0,
/// value inputs and initializers as constants), infers its output types
/// and compares them with the expected outputs.
NodeTestResult checkNodeTest(const std::string &dir) {
  NodeTestResult r;
  auto bytes = readFile(joinPath(dir, "model.onnx"));
  auto model =
      bytes ? frontend::parseModelProto(*bytes, dir) : Expected<onnx::ModelProto>(bytes.status());
  if (!model || model->graph().node_size() != 1) {
    r.skipped = true;
    return r;
  }
  const onnx::GraphProto &gp = model->graph();
  const onnx::NodeProto &np = gp.node(0);
  const ir::OpInfo *info = ir::lookupOp(np.domain(), np.op_type());
  // An expanded op has no shape rule; the conformance runner checks its
  // expansion's outputs.
  if (!info || info->has(ir::op::Expanded)) {
    r.skipped = true;
    return r;
  }
  ir::Graph g;
  for (const auto &o : model->opset_import())
    g.setOpset(o.domain(), o.version());
  auto fail = [&](Status s) {
    // Data pipec does not load (strings, ...) is not a shape failure.
    r.skipped = true;
    r.status = s;
    return r;
  };
  std::vector<ir::Value *> inputs;
  for (int i = 0; i < np.input_size(); ++i) {
    const std::string &name = np.input(i);
    if (name.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    if (ir::Value *v = g.findValue(name)) {
      inputs.push_back(v);
      continue;
    }
    onnx::TensorProto proto;
    bool isInit = false;
    for (const auto &init : gp.initializer())
      if (init.name() == name) {
        proto = init;
        isInit = true;
      }
    for (int k = 0; !isInit && k < gp.input_size(); ++k)
      if (gp.input(k).name() == name) {
        if (!gp.input(k).type().has_tensor_type())
          return fail(errorf("input '", name, "' is not a tensor"));
        auto c = loadTensorProto(joinPath(dir, cat("test_data_set_0/input_", k, ".pb")));
        if (!c)
          return fail(c.status());
        proto = c.take();
      }
    bool value = isInit || (i < 32 && ((info->shapeValueInputs >> i) & 1u));
    Expected<ir::Value *> v = Status::error("unset");
    if (value) {
      auto t = frontend::tensorFromProto(proto, dir);
      if (!t)
        return fail(t.status());
      v = g.addConstant(name, t.take());
    } else {
      v = g.addInput(name, descOf(proto));
    }
    if (!v)
      return fail(v.status());
    inputs.push_back(*v);
  }
  AttrMap attrs;
  for (const auto &a : np.attribute()) {
    auto attr = frontend::attributeFromProto(a, dir);
    if (!attr)
      return fail(attr.status());
    attrs[a.name()] = attr.take();
  }
  std::vector<std::string> outNames;
  for (int i = 0; i < np.output_size(); ++i)
    outNames.push_back(np.output(i).empty() ? cat("unused.", i) : np.output(i));
  auto node = g.addNode(np.name().empty() ? np.op_type() : np.name(), np.op_type(), np.domain(),
                        inputs, outNames, std::move(attrs));
  if (!node)
    return fail(node.status());
  std::vector<TensorDesc> types;
  r.status = ir::inferNodeTypes(**node, g.opset((*node)->domain()), types);
  if (!r.status)
    return r;
  for (int k = 0; k < gp.output_size(); ++k) {
    if (!gp.output(k).type().has_tensor_type())
      return fail(errorf("output '", gp.output(k).name(), "' is not a tensor"));
    auto want = loadTensorProto(joinPath(dir, cat("test_data_set_0/output_", k, ".pb")));
    if (!want)
      return fail(want.status());
    auto pos = std::find(outNames.begin(), outNames.end(), gp.output(k).name());
    if (pos == outNames.end())
      continue;
    const TensorDesc &got = types[static_cast<size_t>(pos - outNames.begin())];
    // The data files store bfloat16 as uint16; the model declares the type.
    TensorDesc expected = descOf(*want);
    if (int32_t declared = gp.output(k).type().tensor_type().elem_type())
      expected.dtype = static_cast<DType>(declared);
    if (got != expected) {
      r.status = errorf("output '", gp.output(k).name(), "': inferred ", got.str(), ", expected ",
                        expected.str());
      return r;
    }
  }
  return r;
}

} // namespace

TEST(ShapeRules, OnnxNodeTests) {
  PIPEC_REQUIRE_TEST_DEPENDENCY(isDirectory(kOnnxTestData), "libonnx-testdata",
                                cat("ONNX's test data (", kOnnxTestData, ")"));
  std::vector<std::string> dirs;
  for (const char *suite : kOnnxSuites)
    if (isDirectory(joinPath(kOnnxTestData, suite)))
      for (const auto &e : fs::directory_iterator(joinPath(kOnnxTestData, suite)))
        if (e.is_directory())
          dirs.push_back(e.path().string());
  std::sort(dirs.begin(), dirs.end());
  int passed = 0, failed = 0, unloadable = 0;
  for (const std::string &dir : dirs) {
    NodeTestResult r = checkNodeTest(dir);
    std::string name =
        fs::path(dir).parent_path().filename().string() + "/" + fs::path(dir).filename().string();
    if (r.skipped) {
      if (!r.status) {
        ++unloadable;
        std::printf("  skipped %s: %s\n", name.c_str(), r.status.message().c_str());
      }
      continue;
    }
    if (r.status) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << name << ": " << r.status.message();
    }
  }
  std::printf("ONNX node tests: %d of %d node shapes match (%d skipped: not tensors, or "
              "values pipec does not load)\n",
              passed, passed + failed, unloadable);
  EXPECT_GT(passed, 500);
  EXPECT_EQ(failed, 0);
}

// pipec:Attention with packed_qkv (pack-qkv): Q, K and V one [n, s, 3 h d]
// tensor; O [n, s, h, d], P [n, h, s, s], the gradient's one output dQKV.
TEST(ShapeRules, PackedQkvAttention) {
  const std::string in = "opset \"pipec\" 1\ninput %x: f32[2,5,24]\ninput %do: f32[2,5,2,4]\n";
  const std::string attrs = "{heads = 2, heads_inner = 1, packed_qkv = 1, scale = 0.5}";
  Inferred r = infer(in + "node \"a\" pipec:Attention(%x, %x, %x) " + attrs + " -> %o: ?, %p: ?\n" +
                     "node \"g\" pipec:AttentionGrad(%x, %x, %x, %do) " + attrs + " -> %dx: ?\noutput %o\noutput %dx");
  ASSERT_TRUE(r.status.isOk()) << r.status.message();
  EXPECT_EQ(r.type("o"), "f32[2,5,2,4]");
  EXPECT_EQ(r.type("p"), "f32[2,2,5,5]");
  EXPECT_EQ(r.type("dx"), "f32[2,5,24]");
  // Three outputs, a width that is not 3 x heads x d, or no heads_inner.
  EXPECT_TRUE(has(err(in + "node \"g\" pipec:AttentionGrad(%x, %x, %x, %do) " + attrs +
                      " -> %a: ?, %b: ?, %c: ?"),
                  "expects 1 output (dQKV)"));
  EXPECT_TRUE(has(err(in + "node \"a\" pipec:Attention(%x, %x, %x) {heads = 5, heads_inner = 1, packed_qkv = 1} -> %o: ?"),
                  "packed_qkv needs heads_inner"));
  EXPECT_TRUE(has(err(in + "node \"a\" pipec:Attention(%x, %x, %x) {heads = 2, packed_qkv = 1} -> %o: ?"),
                  "packed_qkv needs heads_inner"));
}
