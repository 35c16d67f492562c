//===- support/Json.h - JSON text from any bytes ----------------*- C++ -*-===//
//
// A model's names (graph, nodes, tensors) are bytes: ONNX does not make them
// valid UTF-8, and nlohmann::json throws when it serialises a string that is
// not. Every JSON pipec writes goes through jsonText, which writes U+FFFD for
// the invalid bytes instead.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace pipec {

/// `j` as JSON text (`indent` < 0: compact); invalid UTF-8 becomes U+FFFD.
inline std::string jsonText(const nlohmann::json &j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace pipec
