//===- frontend/OnnxImporter.h - ONNX model -> ir::Graph -------*- C++ -*-===//
//
// Reads an ONNX ModelProto through libonnx's Protobuf classes and builds an
// ir::Graph: graph inputs with every symbolic dimension bound to a number,
// initializers (also the old form where they are listed among the inputs)
// and Constant nodes as constants, external data files, opset imports.
// Output types of nodes are left unknown: passes/ShapeInference computes
// them. Every problem is an error value naming the node, op type and opset.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace pipec::frontend {

struct ImportOptions {
  /// Binds the leading dimension of every graph input whose first
  /// dimension is symbolic (dim_param or unset) — the batch axis (-b/--batch).
  /// A dim_param it binds is bound wherever else it appears, since one name
  /// means one size.
  std::optional<int64_t> batch;
  /// Binds symbolic dimensions by name (--dim name=value); wins over batch.
  /// A key INPUT:AXIS that is no dimension's name binds dimension AXIS of
  /// graph input INPUT (--dim input:1=128), which also reaches dimensions
  /// without a name.
  std::map<std::string, int64_t> dims;
  /// Directory that external data paths are relative to; default: the
  /// model file's directory.
  std::string externalDataDir;
  /// Graph inputs to turn into constants with the given values (for inputs
  /// whose values decide shapes, such as a Reshape target).
  std::map<std::string, Tensor> freezeInputs;
  /// Makes the floating-point values of Constant nodes with two elements or
  /// more trainable parameters, as initializers are (--train-constants):
  /// some exporters (paddle2onnx) store every weight as a Constant node.
  bool trainableConstants = false;
};

/// Imports a model file. Errors: missing or unreadable file, not an ONNX
/// model (or truncated), unsupported op ("unsupported op: node 'n' has op
/// type 'T' (domain ai.onnx, opset 13)"), unbound symbolic dimension,
/// unsupported data type, missing external data.
Expected<std::unique_ptr<ir::Graph>> importOnnxFile(const std::string &path,
                                                    const ImportOptions &opts = {});
/// Same from bytes; external data resolves against opts.externalDataDir.
Expected<std::unique_ptr<ir::Graph>> importOnnxBytes(const std::string &bytes,
                                                     const std::string &what,
                                                     const ImportOptions &opts = {});

} // namespace pipec::frontend
