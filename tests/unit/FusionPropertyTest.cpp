//===- tests/unit/FusionPropertyTest.cpp - fuse-elementwise, at random ----===//
//
// Properties of the fuse-elementwise pass (passes/FuseElementwise.cpp) over
// random trees of elementwise ops on random broadcast shapes (axes of one
// element anywhere, leading axes dropped, as numpy broadcasting allows):
// every tree compiles, for inference and for training, and the fused plan
// computes bitwise what the unfused one does, forward and gradients. And
// its cost: the work the pass does grows linearly with the graph, counted
// rather than timed (Pass::workSteps).
//
//===----------------------------------------------------------------------===//
#include "driver/Driver.h"
#include "passes/Pass.h"
#include "passes/PassManager.h"
#include "passes/ShapeInference.h"
#include "passes/TrainingPasses.h"
#include "runtime/Session.h"
#include "support/FileIO.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

using namespace pipec;

namespace {

/// A random elementwise tree over leaves that broadcast to one shape.
class RandomTree {
public:
  explicit RandomTree(unsigned seed) : rng_(seed) {}

  /// Builds the graph: y = tree, loss = ReduceSum(y * r).
  void build(ir::Graph &g) {
    g.setName("tree");
    g.setOpset("", 17);
    const int rank = 2 + static_cast<int>(rng_() % 3);
    for (int i = 0; i < rank; ++i)
      shape_.push_back(std::vector<int64_t>{1, 2, 3, 5}[rng_() % 4]);
    shape_[0] = 2; // the batch
    ir::Value *y = node(g, 0);
    ir::Value *r = input(g, shape_);
    ir::Node *mul = *g.addNode("loss_mul", "Mul", "", {y, r}, {"weighted"});
    AttrMap keep{{"keepdims", Attribute::ofInt(0)}};
    ir::Node *sum = *g.addNode("loss_sum", "ReduceSum", "", {mul->output(0)}, {"loss"}, keep);
    ir::Node *out = *g.addNode("y_out", "Identity", "", {y}, {"y"});
    g.addOutput(sum->output(0));
    g.addOutput(out->output(0));
  }

  const Shape &shape() const { return shape_; }
  /// The graph inputs' values, in the graph's input order.
  std::vector<Tensor> feeds(const ir::Graph &g) {
    std::vector<Tensor> v;
    for (const ir::Value *in : g.inputs())
      v.push_back(values(in->shape()));
    return v;
  }

private:
  /// `shape_` with random axes of one element and leading axes dropped.
  Shape leafShape() {
    Shape s = shape_;
    for (auto &d : s)
      if (rng_() % 3 == 0)
        d = 1;
    const size_t drop = rng_() % 3 == 0 ? rng_() % s.size() : 0;
    return Shape(s.begin() + static_cast<long>(drop), s.end());
  }

  Tensor values(const Shape &s) {
    Tensor t(DType::F32, s);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = u(rng_);
    return t;
  }

  ir::Value *input(ir::Graph &g, const Shape &s) {
    return *g.addInput(cat("x", count_++), TensorDesc{DType::F32, s});
  }

  ir::Value *leaf(ir::Graph &g) {
    const Shape s = leafShape();
    if (haveWeight_ && rng_() % 2)
      return input(g, s);
    haveWeight_ = true; // the first leaf is a weight: training has a parameter
    ir::Value *w = *g.addConstant(cat("w", count_++), values(s));
    w->setTrainable(true);
    return w;
  }

  ir::Value *op(ir::Graph &g, const char *type, std::vector<ir::Value *> in) {
    const std::string n = cat("n", count_++);
    return (*g.addNode(n, type, "", in, {n + "_out"}))->output(0);
  }

  ir::Value *one(ir::Graph &g) { return *g.addConstant(cat("one", count_++), Tensor::scalarF32(1.0f)); }

  /// A subtree; at depth 0 the result broadcasts to the whole shape.
  ir::Value *node(ir::Graph &g, int depth) {
    if (depth >= 4 || (depth > 0 && rng_() % 4 == 0))
      return leaf(g);
    ir::Value *a = node(g, depth + 1);
    switch (rng_() % 10) {
    case 0: return op(g, "Neg", {a});
    case 1: return op(g, "Abs", {a});
    case 2: return op(g, "Relu", {a});
    case 3: return op(g, "Sqrt", {op(g, "Add", {op(g, "Abs", {a}), one(g)})});
    case 4: return op(g, "Tanh", {a}); // not fusible: clusters end at it
    case 5: return op(g, "Div", {a, op(g, "Add", {op(g, "Abs", {node(g, depth + 1)}), one(g)})});
    case 6: return op(g, "Sub", {a, node(g, depth + 1)});
    case 7: return op(g, "Mul", {node(g, depth + 1), a});
    default: return op(g, "Add", {a, node(g, depth + 1)});
    }
  }

  std::mt19937 rng_;
  Shape shape_;
  int count_ = 0;
  bool haveWeight_ = false;
};

bool sameBits(const Tensor &a, const Tensor &b) {
  return a.desc() == b.desc() && std::memcmp(a.raw(), b.raw(), a.desc().bytes()) == 0;
}

/// Compiles `seed`'s tree with or without fuse-elementwise and returns its
/// outputs and, for training, its gradients; counts the fused nodes.
struct Result {
  std::vector<Tensor> outputs;
  std::vector<std::pair<std::string, Tensor>> grads;
  int fused = 0;
};

Result compileAndRun(unsigned seed, bool fuse, bool training) {
  ir::Graph g;
  RandomTree tree(seed);
  tree.build(g);
  driver::CompileOptions co;
  if (!fuse)
    co.passes = passes::defaultPipeline(); // the default, without the late fusions
  co.emit.training = training;
  if (training) {
    co.train.optimizer = "sgd:lr=1";
    co.train.lossOutput = "loss";
  }
  Result r;
  RandomTree feedsOf(seed + 1000);
  std::vector<Tensor> feeds = feedsOf.feeds(g);
  auto compiled = driver::compileGraph(g, co);
  EXPECT_TRUE(compiled.isOk()) << "seed " << seed << (fuse ? " fused" : "") << ": "
                               << compiled.status().message();
  if (!compiled.isOk())
    return r;
  for (const ir::Node *n : g.nodes())
    r.fused += n->opType() == "FusedElementwise";
  const std::string dir = (std::filesystem::temp_directory_path() /
                           cat("pipec-fusion-property-", seed, fuse ? "-f" : "-u", training ? "-t" : "-i"))
                              .string();
  EXPECT_TRUE(codegen::writePlanDirectory(dir, compiled->plan).isOk());
  auto session = runtime::Session::open(dir, {});
  EXPECT_TRUE(session.isOk()) << session.status().message();
  if (session.isOk()) {
    if (training) {
      auto grads = (*session)->gradients(feeds);
      EXPECT_TRUE(grads.isOk()) << grads.status().message();
      if (grads.isOk())
        r.grads = grads->values;
    } else {
      auto outs = (*session)->run(feeds);
      EXPECT_TRUE(outs.isOk()) << outs.status().message();
      if (outs.isOk())
        r.outputs = *outs;
    }
  }
  (void)removeTree(dir);
  return r;
}

} // namespace

TEST(FusionProperty, RandomTreesFuseAndComputeBitwiseTheSame) {
  int fusedTrees = 0;
  for (unsigned seed = 0; seed < 100; ++seed) {
    SCOPED_TRACE(cat("seed ", seed));
    for (bool training : {false, true}) {
      Result fused = compileAndRun(seed, true, training);
      Result plain = compileAndRun(seed, false, training);
      EXPECT_EQ(plain.fused, 0);
      fusedTrees += fused.fused > 0;
      ASSERT_EQ(fused.outputs.size(), plain.outputs.size());
      for (size_t i = 0; i < fused.outputs.size(); ++i)
        EXPECT_TRUE(sameBits(fused.outputs[i], plain.outputs[i])) << "output " << i;
      ASSERT_EQ(fused.grads.size(), plain.grads.size());
      for (size_t i = 0; i < fused.grads.size(); ++i) {
        EXPECT_EQ(fused.grads[i].first, plain.grads[i].first);
        EXPECT_TRUE(sameBits(fused.grads[i].second, plain.grads[i].second))
            << "gradient of " << fused.grads[i].first;
      }
    }
  }
  // The property is worth something only if most trees do fuse.
  EXPECT_GT(fusedTrees, 100);
}

// The pass's work, counted: a chain of N elementwise nodes, every third one
// a Tanh (which does not fuse), so the pass finds N/3 clusters of two. Its
// steps per node stay constant from 3,000 to 48,000 nodes.
TEST(FusionProperty, WorkGrowsLinearlyWithTheGraph) {
  std::vector<double> perNode;
  for (int n : {3000, 12000, 48000}) {
    ir::Graph g;
    g.setOpset("", 17);
    ir::Value *x = *g.addInput("x", TensorDesc{DType::F32, {4, 8}});
    ir::Value *b = *g.addConstant("b", Tensor(DType::F32, {8}));
    ir::Value *v = x;
    for (int i = 0; i < n; ++i) {
      const char *type = i % 3 == 2 ? "Tanh" : (i % 3 ? "Mul" : "Add");
      std::vector<ir::Value *> in{v};
      if (i % 3 != 2)
        in.push_back(b);
      v = (*g.addNode(cat("n", i), type, "", in, {cat("v", i)}))->output(0);
    }
    g.addOutput(v);
    ASSERT_TRUE(passes::inferShapes(g).isOk());
    auto pass = passes::createFuseElementwisePass(nullptr);
    ASSERT_TRUE(pass->run(g).isOk());
    size_t fused = 0;
    for (const ir::Node *x : g.nodes())
      fused += x->opType() == "FusedElementwise";
    EXPECT_EQ(fused, static_cast<size_t>(n / 3));
    perNode.push_back(static_cast<double>(pass->workSteps()) / n);
    std::printf("%d nodes: %llu steps (%.2f a node)\n", n,
                static_cast<unsigned long long>(pass->workSteps()), perNode.back());
  }
  EXPECT_GT(perNode[0], 0.0);
  EXPECT_LE(perNode[2], 1.1 * perNode[0]);
}
