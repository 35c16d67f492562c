//===- samples/gen/Models.h - The sample model generators -----*- C++ -*-===//
//
// Each generator validates its sizes and returns the model or an error that
// names the offending option and its value. Defaults are the small models
// built into ${CMAKE_BINARY_DIR}/samples (docs/samples.md).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "samples/gen/ModelBuilder.h"

#include <cstdint>
#include <optional>
#include <string>

namespace pipec::samples {

/// Options every model takes.
struct CommonOptions {
  std::optional<int64_t> batch; ///< fixed batch size; unset: symbolic 'batch'
  uint64_t seed = kDefaultSeed;
  bool withLoss = false;        ///< add 'labels' input and 'loss' output
  uint64_t maxWeightMiB = 16384;
  /// Weights are zeros in a sparse external data file: nothing generated,
  /// no disk used, for compile-time and memory tests of large models.
  bool zeroWeights = false;
  std::string command;          ///< the command line, stored as metadata
};

struct MlpOptions {
  int64_t layers = 4, hidden = 64, in = 32, out = 10;
};

struct GptOptions {
  int64_t layers = 2, dmodel = 64, heads = 4, seq = 16, vocab = 128;
  bool tieEmbeddings = false; ///< lm_head reuses the token embedding
  /// GPT-2's residual dropout: a Dropout of this ratio on the attention's
  /// and the MLP's output before each residual add (0: none).
  double dropout = 0;
};

struct CnnOptions {
  int64_t stages = 2, blocks = 1, width = 8, image = 16, classes = 10;
};

Expected<BuiltModel> buildMlp(const MlpOptions &o, const CommonOptions &c);
Expected<BuiltModel> buildGpt(const GptOptions &o, const CommonOptions &c);
Expected<BuiltModel> buildCnn(const CnnOptions &o, const CommonOptions &c);

/// Checks 1 <= value <= max for a size option, naming it in the error.
Status checkSize(const char *option, int64_t value, int64_t max);

/// The metadata every sample records: generator, seed, command line.
std::vector<std::pair<std::string, std::string>> commonMetadata(const std::string &model,
                                                                const CommonOptions &c);

} // namespace pipec::samples
