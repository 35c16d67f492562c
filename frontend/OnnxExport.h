//===- frontend/OnnxExport.h - The source model kept with a plan -*- C++ -*-===//
//
// A plan directory keeps the source ONNX model without the data of the
// initializers the plan already stores (`source.onnx`), so that piperun can
// write the trained weights back into the model the user gave
// (`piperun --save trained.onnx`). Dropping the data keeps the plan small:
// the weights are in weights.bin or the model's external data files, once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <onnx/onnx_pb.h>

#include <set>
#include <string>

namespace pipec::frontend {

/// Name of the stripped source model inside a plan directory.
inline constexpr const char *kSourceModelFile = "source.onnx";

/// The model with the data of the named initializers removed (their names,
/// types and shapes stay); serialized deterministically.
Expected<std::string> stripInitializers(const std::string &modelBytes, const std::string &what,
                                        const std::set<std::string> &names);
/// The same for a model already parsed (pipec parses it while it compiles).
Expected<std::string> stripInitializers(onnx::ModelProto model, const std::string &what,
                                        const std::set<std::string> &names);

} // namespace pipec::frontend
