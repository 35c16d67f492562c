//===- samples/gen/ModelWriter.h - Saving a model, maybe with external data -*- C++ -*-===//
//
// Protobuf cannot serialize a message over 2 GiB, so large models keep their
// initializers in a side file, ONNX's external data: `<model>.data` next to
// the model, each tensor at a 64-byte aligned offset, referenced by a
// relative location that pipec's importer and onnx.load both resolve.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

namespace pipec::samples {

enum class ExternalData { Auto, Always, Never };

/// Initializer bytes above which Auto moves weights out of the model file.
inline constexpr uint64_t kAutoExternalBytes = uint64_t(1) << 30;

/// Writes `model` to `path` (atomically); moves initializers into
/// `path`.data as `mode` says, and reports whether it did in `external`.
Status writeModel(onnx::ModelProto &model, const std::string &path, ExternalData mode,
                  bool &external);

} // namespace pipec::samples
