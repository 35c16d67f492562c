//===- passes/FuseElementwise.cpp - fuse-elementwise ----------------------===//
//
// fuse-elementwise (passes/Fusion.cpp's header describes it with the other
// fusions): trees of float32 elementwise nodes of one shape and phase, each
// an op with the Fusible trait (ir/Ops.def), become one
// pipec:FusedElementwise node whose attribute is the program
// (support/ElementwiseProgram.h) the runtime compiles or interprets.
//
//===----------------------------------------------------------------------===//
#include "passes/FusionUtil.h"
#include "passes/Pass.h"
#include "passes/TrainingPasses.h"
#include "support/ElementwiseProgram.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace pipec::passes {

namespace {

class ElementwiseFusion final : public Pass {
public:
  explicit ElementwiseFusion(const TrainingResults *protect) : protect_(protect) {}
  std::string_view name() const override { return "fuse-elementwise"; }
  /// One step per node visited as a root, per input examined while a
  /// cluster grows, and per node of a cluster replaced.
  uint64_t workSteps() const override { return steps_; }

  Expected<bool> run(ir::Graph &g) override {
    steps_ = 0;
    const std::unordered_set<const ir::Value *> keep = protectedValues(protect_);
    std::unordered_set<const ir::Node *> done;
    std::unordered_map<std::string, std::string> renamed; // fused forward node -> its fused node
    bool changed = false;
    const std::vector<ir::Node *> order = g.nodes();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      ir::Node *root = *it;
      ++steps_;
      EwOp op;
      if (done.count(root) || !fusable(root, op))
        continue;
      if (!readable(root, root->output(0)->type().shape))
        continue;
      Cluster c;
      c.shape = root->output(0)->type().shape;
      c.phase = root->phase();
      c.forwardOf = root->forwardOf();
      grow(root, keep, done, c);
      if (c.nodes.size() < 2)
        continue;
      PIPEC_ASSIGN(bool fused, replace(g, root, c, renamed));
      changed = changed || fused;
    }
    if (!renamed.empty())
      steps_ += g.numNodes(); // renameForwardOf's walk
    renameForwardOf(g, renamed);
    return changed;
  }

private:
  /// Nodes of one phase and, outside the forward, of one forward node
  /// (the partitioner places a backward node with its forward node's
  /// stage; one fused node must not span two).
  struct Cluster {
    Shape shape;
    ir::Phase phase = ir::Phase::Forward;
    std::string forwardOf;
    std::unordered_set<const ir::Node *> nodes;
  };

  static bool fusable(const ir::Node *n, EwOp &op) {
    if (!n->info()->has(ir::op::Fusible) || !ewOpOf(n->domain(), n->opType(), op) || n->numOutputs() != 1 ||
        n->numInputs() != static_cast<size_t>(ewArity(op)) || !isF32(n->output(0)) ||
        n->output(0)->type().shape.empty())
      return false;
    for (const ir::Value *v : n->inputs())
      if (!isF32(v))
        return false;
    return true;
  }

  /// Whether the loop of a node of output shape `shape` can read each of
  /// n's inputs (support/ElementwiseProgram.h: ewLoopLayout): then it can
  /// read any set of them, and the fused node is always loop-readable.
  static bool readable(const ir::Node *n, const Shape &shape) {
    const std::vector<int64_t> out(shape.begin(), shape.end());
    for (const ir::Value *v : n->inputs())
      if (v->type().shape != shape &&
          !ewLoopLayout({std::vector<int64_t>(v->type().shape.begin(), v->type().shape.end())}, out))
        return false;
    return true;
  }

  /// Absorbs, from `root` up, the producers whose one reader is in the
  /// cluster, of the root's phase and shape.
  void grow(ir::Node *root, const std::unordered_set<const ir::Value *> &keep,
            std::unordered_set<const ir::Node *> &done, Cluster &c) {
    std::vector<ir::Node *> work{root};
    c.nodes.insert(root);
    while (!work.empty() && c.nodes.size() < kMaxSteps) {
      ir::Node *x = work.back();
      work.pop_back();
      for (ir::Value *v : x->inputs()) {
        ++steps_;
        ir::Node *p = v->producer();
        EwOp op;
        if (!p || c.nodes.count(p) || done.count(p) || !fusable(p, op) || !readable(p, c.shape) ||
            p->phase() != c.phase ||
            (c.phase != ir::Phase::Forward && p->forwardOf() != c.forwardOf) ||
            v->users().size() != 1 || v->isGraphOutput() || keep.count(v) || v->type().shape != c.shape)
          continue;
        c.nodes.insert(p);
        work.push_back(p);
      }
    }
    for (const ir::Node *n : c.nodes)
      done.insert(n);
  }

  Expected<bool> replace(ir::Graph &g, ir::Node *root, const Cluster &c,
                         std::unordered_map<std::string, std::string> &renamed) {
    EwProgram prog;
    std::vector<ir::Value *> inputs;
    std::unordered_map<const ir::Value *, int32_t> slot; // value -> program value index
    std::vector<const ir::Node *> steps;                 // the cluster's nodes, producers first
    auto inCluster = [&](const ir::Value *v) { return v->producer() && c.nodes.count(v->producer()); };
    // Post-order from the root: each node after the values it reads. Every
    // absorbed value has one reader (grow), so each node is reached once.
    std::function<void(const ir::Node *)> visit = [&](const ir::Node *x) {
      for (const ir::Value *v : x->inputs())
        if (inCluster(v))
          visit(v->producer());
      steps.push_back(x);
    };
    visit(root);
    steps_ += steps.size();
    // Inputs first (v0 ..), then one value per step.
    for (const ir::Node *x : steps)
      for (ir::Value *v : x->inputs())
        if (!inCluster(v) && !slot.count(v)) {
          slot[v] = static_cast<int32_t>(inputs.size());
          inputs.push_back(v);
        }
    if (inputs.size() > kMaxInputs)
      return false;
    prog.numInputs = static_cast<int32_t>(inputs.size());
    for (const ir::Node *x : steps) {
      EwOp op{};
      fusable(x, op);
      EwStep st{op, slot.at(x->input(0)), ewArity(op) == 2 ? slot.at(x->input(1)) : 0};
      prog.steps.push_back(st);
      slot[x->output(0)] = prog.numInputs + static_cast<int32_t>(prog.steps.size()) - 1;
    }
    std::vector<std::vector<int64_t>> shapes;
    for (const ir::Value *v : inputs)
      shapes.emplace_back(v->type().shape.begin(), v->type().shape.end());
    // grow() took only nodes whose inputs the loop reads one by one, and
    // then it reads them all.
    if (auto l = ewLoopLayout(shapes, std::vector<int64_t>(c.shape.begin(), c.shape.end())); !l)
      return errorf("internal error: fuse-elementwise at '", root->name(), "': ", l.status().message());
    AttrMap attrs;
    attrs["program"] = Attribute::ofInts(prog.encode());
    const std::string name = scopedName(g, root, "FusedElementwise");
    if (c.phase == ir::Phase::Forward)
      for (const ir::Node *x : steps)
        renamed[x->name()] = name;
    PIPEC_TRY(g.replaceNode(root, name, "FusedElementwise", "pipec", inputs, std::move(attrs)).status());
    // The absorbed nodes, readers before producers.
    for (auto it = steps.rbegin() + 1; it != steps.rend(); ++it)
      g.eraseNode(const_cast<ir::Node *>(*it));
    return true;
  }

  /// What the CUDA kernel takes by value (runtime/cuda/Bodies.h).
  static constexpr size_t kMaxSteps = 64, kMaxInputs = 16;
  const TrainingResults *protect_;
  uint64_t steps_ = 0;
};

} // namespace

std::unique_ptr<Pass> createFuseElementwisePass(const TrainingResults *protect) {
  return std::make_unique<ElementwiseFusion>(protect);
}
std::unique_ptr<Pass> createFuseElementwisePass() { return createFuseElementwisePass(nullptr); }

} // namespace pipec::passes
