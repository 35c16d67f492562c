//===- runtime/train/Optimizer.h - torch.optim update rules -----*- C++ -*-===//
//
// The optimizers the runtime applies once per mini-batch, after the weight
// gradients of all micro-batches have been accumulated: SGD (momentum,
// dampening, Nesterov), Adam, AdamW (optionally AMSGrad) and RMSprop
// (optionally centered, with momentum). Defaults, validation and update
// formulas are those of torch.optim, so a pipec run and a PyTorch run of the
// same model agree step for step (docs/training.md lists the formulas).
//
// Precision: elements are computed in float, one rounding per PyTorch tensor
// op, in the order of torch.optim's single-tensor (CPU) path. Per-step
// scalars (bias corrections, step sizes, 1 - lr*wd) are computed in double
// from the float learning rate and rounded to float once, as PyTorch does
// with its Python-float scalars. The library is compiled with
// -ffp-contract=off, so no FMA contraction makes results depend on the
// compiler, the CPU or whether an element fell in a vectorized loop.
//
// Threads: the elements are cut into fixed chunks shared out by OpenMP; no
// element's result depends on the chunking, so results are bitwise equal for
// any thread count.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/UpdateScalars.h"
#include "support/Error.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pipec::train {

/// Hyper-parameters of one optimizer. Fields a kind does not use are ignored.
/// Defaults are torch.optim's; `lr` and `weightDecay` default per kind
/// (see resolved()), the others are shared by every kind that uses them.
struct OptimizerConfig {
  /// "sgd", "adam", "adamw" or "rmsprop".
  std::string kind = "adam";
  /// Learning rate. Unset: adam/adamw 1e-3, rmsprop 1e-2; sgd requires one.
  std::optional<double> lr;
  /// Weight decay. Unset: adamw 1e-2 (decoupled), others 0 (L2, added to the
  /// gradient).
  std::optional<double> weightDecay;
  /// sgd, rmsprop: momentum factor.
  double momentum = 0.0;
  /// sgd: dampening for momentum.
  double dampening = 0.0;
  /// sgd: Nesterov momentum (needs momentum > 0 and dampening 0).
  bool nesterov = false;
  /// adam, adamw: coefficients of the running averages of g and g^2.
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// adam, adamw, rmsprop: term added to the denominator.
  double eps = 1e-8;
  /// adam, adamw: AMSGrad (keeps the running maximum of v).
  bool amsgrad = false;
  /// rmsprop: smoothing constant.
  double alpha = 0.99;
  /// rmsprop: normalise by an estimate of the gradient's variance.
  bool centered = false;

  /// The config with the per-kind defaults of `lr` and `weightDecay` filled
  /// in (sgd's `lr` stays unset: torch.optim.SGD has no default).
  OptimizerConfig resolved() const;
  /// The first invalid value, refused as torch.optim refuses it (negative lr,
  /// eps, momentum or weight decay; betas outside [0,1); Nesterov without
  /// momentum or with dampening...), or ok.
  Status validate() const;
  /// "adamw:lr=0.001,beta1=0.9,..." with every field the kind uses; parses
  /// back with parseOptimizer.
  std::string str() const;
};

/// Parses a CLI spec in the grammar of runtime/train/Spec.h, e.g.
/// "adamw:lr=3e-4,weight_decay=0.1,beta2=0.95" or "sgd:lr=0.1,momentum=0.9,
/// nesterov=true". Keys are the field names in snake_case (weight_decay, or
/// wd); a key the kind does not use is an error. `lr`, when given (pipec's
/// --lr), replaces the spec's rate before validation, so "sgd" with an lr
/// is complete. The result is validated.
Expected<OptimizerConfig> parseOptimizer(const std::string &spec,
                                         std::optional<double> lr = std::nullopt);

/// A validated optimizer. Stateless itself: the caller owns each parameter's
/// state buffers (stateTensors() of them, each the parameter's size,
/// zero-initialised before step 1) and checkpoints them with the parameter.
class Optimizer {
public:
  /// Validates and resolves `config`.
  static Expected<Optimizer> create(const OptimizerConfig &config);

  /// The resolved configuration.
  const OptimizerConfig &config() const { return cfg_; }
  /// The learning rate of the config (what a schedule scales).
  double baseLr() const { return *cfg_.lr; }
  /// Number of state buffers per parameter: sgd 0 (no momentum) or 1; adam
  /// and adamw 2, 3 with amsgrad; rmsprop 1, +1 with momentum, +1 centered.
  size_t stateTensors() const { return stateNames_.size(); }
  /// torch.optim's state_dict names of the buffers, in the order step()
  /// takes them: momentum_buffer; exp_avg, exp_avg_sq, max_exp_avg_sq;
  /// square_avg, momentum_buffer, grad_avg.
  const std::vector<std::string> &stateNames() const { return stateNames_; }

  /// Applies one update to `n` elements of a parameter. `step` is the 1-based
  /// optimizer step (Adam's bias corrections; SGD's momentum buffer starts as
  /// the gradient at step 1); `lr` is this step's learning rate (from a
  /// Schedule). `grad` is read only; `param` and `state` are updated in
  /// place. None of the arrays may overlap.
  Status step(int64_t step, float lr, float *param, const float *grad,
              const std::vector<float *> &state, int64_t n) const;

  /// The options and per-step scalars of step `step` at learning rate `lr`
  /// (what step() computes with; the device update's kernels take them).
  UpdateScalars scalars(int64_t step, float lr) const;

  /// The gradient's last pass of a step in one: each piece of `grad` (1024
  /// elements) is multiplied by `gradScale` in place (scaleGrad; skipped at
  /// 1), its squares added to its chunk's (the result: bitwise
  /// gradSquaredSum() of the scaled gradient), and `param` updated as
  /// step() would, while the piece is in L1. `copyFrom`, when given, is
  /// the parameter's value to update (copied into `param` piece by piece
  /// first: 2BW's other version). For a
  /// step that needs no global norm before its update (no clipping, no
  /// skipping of non-finite steps): one read of the gradient instead of
  /// three.
  Expected<double> scaleSquareAndStep(int64_t step, float lr, float *param, float *grad,
                                      float gradScale, const std::vector<float *> &state,
                                      int64_t n, const float *copyFrom = nullptr) const;

private:
  enum class Kind { Sgd, Adam, AdamW, RmsProp };
  Optimizer() = default;
  /// step(), with `prologue(lo, hi)` run on each chunk before its update
  /// when given.
  Status update(int64_t step, float lr, float *param, const float *grad,
                const std::vector<float *> &state, int64_t n,
                const std::function<void(int64_t, int64_t)> &prologue) const;

  OptimizerConfig cfg_;
  Kind kind_ = Kind::Adam;
  std::vector<std::string> stateNames_;
};

/// Elements per parallel chunk of the optimizer, clipping and norm loops.
/// Fixed, so that work split and reduction order do not depend on threads.
constexpr int64_t kTrainChunk = 1 << 14;

} // namespace pipec::train
