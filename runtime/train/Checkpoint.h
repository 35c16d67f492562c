//===- runtime/train/Checkpoint.h - Atomic training checkpoints -*- C++ -*-===//
//
// A checkpoint is a directory holding named tensors (parameters, optimizer
// state), the step counter and small string metadata (RNG seed, data cursor,
// optimizer and schedule specs):
//
//   DIR/manifest.json   format, version, step, meta, and per tensor: name,
//                       dtype, shape, offset, bytes, crc32c; plus the CRC-32C
//                       of the manifest itself
//   DIR/tensors.bin     the tensors' bytes, each at a 64-byte aligned offset
//
// Writing is atomic: everything goes to DIR.tmp-<id>, each file and that
// directory are fsync'ed, then the directory is swapped with DIR in one
// renameat2(RENAME_EXCHANGE) (or renamed into place if DIR is new) and the
// parent directory is fsync'ed. A run killed at any point leaves DIR holding
// the previous checkpoint or the new one, never a mix; leftover DIR.tmp-*
// directories are ignored by readers and removed by the next write. On file
// systems without RENAME_EXCHANGE the old DIR is first renamed to
// DIR.old-<id>; a reader that finds no DIR falls back to the newest valid
// DIR.old-*. docs/training.md describes the format.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"
#include "support/Tensor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pipec::train {

/// Version of the checkpoint format written by writeCheckpoint.
constexpr int64_t kCheckpointVersion = 1;

/// The contents of a checkpoint.
struct Checkpoint {
  struct Entry {
    std::string name;
    Tensor tensor;
  };

  /// Optimizer steps completed (the next step is step + 1).
  int64_t step = 0;
  /// Small string values: "rng.seed", "data.cursor", "optimizer", "schedule".
  std::map<std::string, std::string> meta;
  /// Tensors in the order they were added (and are stored).
  std::vector<Entry> tensors;

  /// Adds a tensor (shares its storage); a duplicate name is an error.
  Status add(const std::string &name, Tensor tensor);
  /// Adds a copy of `n` floats as an f32 tensor of shape [n].
  Status addFloats(const std::string &name, const float *data, int64_t n);
  /// The tensor called `name`, or null.
  const Tensor *find(const std::string &name) const;
  /// Copies the f32 tensor `name` of exactly `n` elements into `dst`; errors
  /// name the tensor and the sizes when it is missing or of another size.
  Status restoreFloats(const std::string &name, float *dst, int64_t n) const;
};

/// Whether DIR may receive a checkpoint: absent, empty, or a checkpoint
/// already (writeCheckpoint replaces it). Anything else is refused, so a
/// mistyped --checkpoint never deletes a user's files.
Status checkCheckpointTarget(const std::string &dir);

/// Writes `ckpt` to directory `dir` atomically (see above), creating parent
/// directories as needed and replacing any checkpoint already there.
Status writeCheckpoint(const std::string &dir, const Checkpoint &ckpt);

/// A checkpoint in parts, one per process of a distributed run, each
/// holding the tensors its process owns (runtime/Session.cpp):
///   DIR/parts.json              the parts' names, with its own checksum
///   DIR/part-P-of-N/...         a checkpoint each (manifest, tensors)
/// Written in three steps the caller orders across the processes: the
/// leader begins (the target checked, DIR.tmp-parts-STEP created, its path
/// returned), every process writes its part there, and once all have, the
/// leader commits: parts.json is written and the directory swapped in as
/// writeCheckpoint swaps one, so DIR holds the old checkpoint or the whole
/// new one. readCheckpoint reads both forms.
Expected<std::string> beginCheckpointParts(const std::string &dir, int64_t step);
/// The directory beginCheckpointParts makes (every process can name it).
std::string checkpointPartsDirectory(const std::string &dir, int64_t step);
Status writeCheckpointPart(const std::string &tmp, int part, int parts, const Checkpoint &ckpt);
Status commitCheckpointParts(const std::string &tmp, const std::string &dir, int parts);

/// Reads and verifies the checkpoint in `dir`: manifest checksum, file size,
/// each tensor's bounds, size and CRC-32C. Errors say which file or tensor is
/// truncated or corrupt.
Expected<Checkpoint> readCheckpoint(const std::string &dir);
/// The reading behind readCheckpoint, on the two files' bytes (`where`
/// names them in errors): for the fuzzer (tests/fuzz/) and for tests.
Expected<Checkpoint> parseCheckpoint(const std::string &manifestText, const std::string &data,
                                     const std::string &where);
/// The checksum a manifest's "checksum" field must hold (0 for text that is
/// not a JSON object).
uint32_t checkpointManifestChecksum(const std::string &manifestText);

} // namespace pipec::train
