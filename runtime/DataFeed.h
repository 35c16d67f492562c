//===- runtime/DataFeed.h - Step inputs for runs and training ---*- C++ -*-===//
//
// What piperun feeds a plan: seeded random inputs (integers below the size
// of the axis they index), and for training a source of mini-batches,
// from .npy files or a fixed pool of synthetic batches.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Session.h"
#include "support/Tensor.h"

#include <string>
#include <vector>

namespace pipec::runtime {

/// Exclusive upper bound for random integer data of input `t`: the size of
/// the axis it indexes (Gather indices, loss labels), else 2.
int64_t integerBound(const plan::Plan &p, int32_t t);

/// A tensor of `d` filled from `seed`: floats normal(0, 1), integers
/// uniform in [0, bound), booleans fair coins; other types zeros.
Tensor randomInput(const TensorDesc &d, int64_t bound, uint64_t seed);

/// The file name of a tensor `name` in a directory of .npy files: the
/// name with characters other than [A-Za-z0-9._-] as '_', plus ".npy".
std::string npyFileName(const std::string &name);

/// A source of training mini-batches: examples from .npy files (one per
/// graph input, first axis counts examples), taken in order and wrapping
/// around; or a fixed pool of seeded synthetic batches, repeated, which a
/// model can learn.
class DataFeed {
public:
  /// Examples from DIR/INPUT.npy (npyFileName of each graph input; the
  /// first axis counts examples, the same count in every file), or with
  /// `dataDir` empty four synthetic batches from `seed`.
  static Expected<DataFeed> open(const Session &s, const std::string &dataDir, uint64_t seed);

  /// The inputs of step `step` (0-based): rows taken in order, wrapping
  /// around; synthetic batches repeat.
  std::vector<Tensor> batch(int64_t step) const;

private:
  static constexpr int kSyntheticBatches = 4;
  std::vector<std::string> names_;
  std::vector<TensorDesc> descs_;
  std::vector<std::vector<Tensor>> pool_;
  std::vector<Tensor> files_;
};


} // namespace pipec::runtime
