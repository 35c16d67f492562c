//===- frontend/OnnxProto.h - ONNX Protobuf <-> pipec values ---*- C++ -*-===//
//
// Conversions between ONNX's TensorProto / AttributeProto and pipec's Tensor
// and Attribute, shared by the importer, the exporter of trained models and
// the conformance runner.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Attribute.h"
#include "support/Error.h"
#include "support/Tensor.h"

#include <onnx/onnx_pb.h>

#include <string>

namespace pipec::frontend {

/// Converts a TensorProto (typed fields, raw_data or external data resolved
/// against `baseDir`). Fails on unsupported types, segments, sizes that do
/// not match the shape, and missing or short external files.
Expected<Tensor> tensorFromProto(const onnx::TensorProto &t, const std::string &baseDir);
/// Converts an attribute; graph-valued and sparse attributes are errors.
Expected<Attribute> attributeFromProto(const onnx::AttributeProto &a,
                                       const std::string &baseDir);
/// Parses a serialized ModelProto (any size protobuf allows), rejecting
/// truncated or non-ONNX bytes; `what` names the source in errors.
Expected<onnx::ModelProto> parseModelProto(const std::string &bytes, const std::string &what);
/// The same for a regular file, parsed as it is read: no copy of the whole
/// file is held beside the parsed model.
Expected<onnx::ModelProto> parseModelProtoFile(const std::string &path);

} // namespace pipec::frontend
