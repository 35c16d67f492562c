//===- passes/TrainingPasses.cpp - The training transforms as passes ------===//
#include "passes/TrainingPasses.h"

namespace pipec::passes {

namespace {

class LossPass : public Pass {
public:
  LossPass(LossOptions o, std::string lossOutput, TrainingResults &out)
      : opts_(std::move(o)), lossOutput_(std::move(lossOutput)), out_(out) {}
  std::string_view name() const override { return "loss"; }
  Expected<bool> run(ir::Graph &g) override {
    if (opts_.kind.empty()) {
      PIPEC_ASSIGN(out_.loss, findLoss(g, lossOutput_));
    } else {
      PIPEC_ASSIGN(out_.loss, attachLoss(g, opts_));
    }
    if (out_.loss->isGraphOutput())
      return !opts_.kind.empty();
    g.addOutput(out_.loss); // the runtime reports the loss of every step
    return true;
  }

private:
  LossOptions opts_;
  std::string lossOutput_;
  TrainingResults &out_;
};

class TrainingStatePass : public Pass {
public:
  explicit TrainingStatePass(TrainingResults &out) : out_(out) {}
  std::string_view name() const override { return "training-state"; }
  Expected<bool> run(ir::Graph &g) override {
    PIPEC_ASSIGN(out_.stateUpdates, exposeRunningStatistics(g));
    return !out_.stateUpdates.empty();
  }

private:
  TrainingResults &out_;
};

class AutodiffPass : public Pass {
public:
  explicit AutodiffPass(TrainingResults &out) : out_(out) {}
  std::string_view name() const override { return "autodiff"; }
  Expected<bool> run(ir::Graph &g) override {
    if (!out_.loss)
      return errorf("autodiff needs a loss: run the loss pass first");
    AutodiffOptions ao;
    ao.loss = out_.loss->name();
    ao.scalableSeed = out_.scaleLoss;
    ao.seed = out_.scaleLoss ? &out_.lossScaleSeed : nullptr;
    PIPEC_ASSIGN(out_.gradients, differentiate(g, ao));
    return true;
  }

private:
  TrainingResults &out_;
};

class RecomputePass : public Pass {
public:
  RecomputePass(RecomputeOptions o, TrainingResults &out) : opts_(std::move(o)), out_(out) {}
  std::string_view name() const override { return "recompute"; }
  Expected<bool> run(ir::Graph &g) override {
    PIPEC_ASSIGN(out_.recompute, rematerialize(g, opts_));
    return out_.recompute.clonedNodes > 0;
  }

private:
  RecomputeOptions opts_;
  TrainingResults &out_;
};

} // namespace

std::unique_ptr<Pass> createLossPass(LossOptions opts, std::string lossOutput,
                                     TrainingResults &out) {
  return std::make_unique<LossPass>(std::move(opts), std::move(lossOutput), out);
}
std::unique_ptr<Pass> createTrainingStatePass(TrainingResults &out) {
  return std::make_unique<TrainingStatePass>(out);
}
std::unique_ptr<Pass> createAutodiffPass(TrainingResults &out) {
  return std::make_unique<AutodiffPass>(out);
}
std::unique_ptr<Pass> createRecomputePass(RecomputeOptions opts, TrainingResults &out) {
  return std::make_unique<RecomputePass>(std::move(opts), out);
}

const std::vector<PassInfo> &trainingPasses() {
  static const std::vector<PassInfo> infos = {
      {"loss", "attach the loss (--loss) or find the model's (--loss-output); a graph output"},
      {"training-state", "expose BatchNormalization's running statistics as state updates"},
      {"autodiff", "reverse-mode gradients of every parameter, input (B) and weight (W) phases apart"},
      {"keep-attention-probs", "pipec:Attention keeps its probabilities for its gradient where they are no larger than Q, K and V (default pipeline, after autodiff)"},
      {"recompute", "rematerialize forward values per stage (--recompute), after partitioning"}};
  return infos;
}

} // namespace pipec::passes
