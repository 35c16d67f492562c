//===- runtime/run/Run.h - Training and inference runs over a session -*- C++ -*-===//
//
// What piperun does with an open Session, as library code: the training
// loop (batches from a DataFeed, progress, metrics, checkpoints, resume,
// warm-up, the non-finite policy), the inference loop, the inputs of an
// inference run, saving the trained model as ONNX, and the check that
// every rank of an MPI job runs the same build on the same plan.
// tools/piperun/main.cpp parses options and prints; tests/unit/RunTest.cpp
// runs these on the samples.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipec::runtime {

/// How a training run goes.
struct TrainRunOptions {
  /// Steps in all (a resumed run's total to reach) and the first of them
  /// run as warm-up: timed, but their measurements dropped.
  int64_t steps = 1;
  int64_t warmup = 0;
  /// Batches: .npy files of DIR, or seeded synthetic ones (empty).
  std::string dataDir;
  uint64_t seed = 0;
  /// Write the training state to this directory at the end and every
  /// checkpointEvery steps (0: at the end only); empty: never.
  std::string checkpoint;
  int64_t checkpointEvery = 0;
  /// Continue from this checkpoint.
  std::string resume;
  /// One JSON object per step, rewritten every 10 steps and at the end.
  std::string metrics;
  /// Go on past a step whose gradients are not finite (the session skips
  /// its update; SessionOptions::skipNonFinite); otherwise such a step is
  /// an error.
  bool skipNonFinite = false;
  /// The training state on the leader after the run (for saving).
  bool gatherState = false;
  /// Progress lines on stderr (step, loss, lr, samples/s, ETA).
  bool progress = true;
};

/// What a training run measured.
struct TrainRunSummary {
  int64_t firstStep = 0; ///< steps already run before (resume)
  int64_t stepsRun = 0;
  double firstLoss = 0, lastLoss = 0;
  int skippedSteps = 0;
  int64_t examplesPerStep = 0;
  /// Wall-clock seconds of each timed step (warm-up excluded).
  std::vector<double> stepSeconds;
};

/// Runs the training steps of `opts` on `session` (a training plan). Every
/// rank of a distributed run calls it; the leader prints and writes.
Expected<TrainRunSummary> trainRun(Session &session, const TrainRunOptions &opts);

/// The inputs of an inference step: the named .npy files of `specs`
/// (NAME=FILE.npy) and, for the others, seeded random data within each
/// input's bounds.
Expected<std::vector<Tensor>> inferenceInputs(const Session &session, const std::vector<std::string> &specs,
                                              uint64_t seed);

/// What an inference run measured.
struct InferRunSummary {
  std::vector<Tensor> outputs; ///< the last step's
  int64_t examplesPerStep = 0;
  std::vector<double> stepSeconds; ///< each timed step's
};

/// `warmup` untimed steps, then `steps` timed ones, with progress lines
/// on stderr when `progress`.
Expected<InferRunSummary> inferRun(Session &session, const std::vector<Tensor> &inputs, int64_t steps,
                                   int64_t warmup, bool progress);

/// Writes the plan's source model (source.onnx in the plan directory, kept
/// by pipec without weight data) with the session's current weights to
/// `out`: in the model file or, above 1 GiB of weights or with
/// `external`, in OUT.data as ONNX external data (64-byte aligned,
/// location relative to the model), written from the weights in place.
Status saveTrainedModel(const Session &session, const std::string &planDir, const std::string &out,
                        bool external);

/// Under mpirun: every rank must run the same build on the same plan.
/// Every rank contributes its version's and plan's checksums to an
/// all-reduce; all see the same sums, so all stop with the same error.
Status checkRanksAgree(const Session &session, Transport &transport);

/// The median of `v` (0 when empty).
double medianOf(std::vector<double> v);

} // namespace pipec::runtime
