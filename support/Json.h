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

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace pipec {

/// `j` as JSON text (`indent` < 0: compact); invalid UTF-8 becomes U+FFFD.
inline std::string jsonText(const nlohmann::json &j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Thrown by jsonInteger for a value that is no integer in range.
struct JsonFieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `v` as the integer type T: a JSON integer within T's range, else
/// JsonFieldError naming `what`. (nlohmann's get<T>() casts a float such as
/// 1e34 to T, which is undefined behaviour; files pipec reads are untrusted.)
template <typename T> T jsonInteger(const nlohmann::json &v, const char *what) {
  static_assert(std::is_integral_v<T>);
  using L = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(L::max()))
      return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    const bool inRange = std::is_signed_v<T>
                             ? s >= static_cast<int64_t>(L::min()) && s <= static_cast<int64_t>(L::max())
                             : s >= 0 && static_cast<uint64_t>(s) <= static_cast<uint64_t>(L::max());
    if (inRange)
      return static_cast<T>(s);
  }
  throw JsonFieldError(std::string("'") + what + "' is not an integer in range");
}

} // namespace pipec
