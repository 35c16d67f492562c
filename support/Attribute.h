//===- support/Attribute.h - Node attributes -------------------*- C++ -*-===//
//
// Attribute values of an operator (ONNX's AttributeProto without subgraphs).
// Kept in a std::map so that iteration, printing and plan emission are in
// name order and deterministic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Tensor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pipec {

struct Attribute {
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Tensor };
  Kind kind = Kind::Int;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  pipec::Tensor t;

  static Attribute ofInt(int64_t v);
  static Attribute ofFloat(float v);
  static Attribute ofString(std::string v);
  static Attribute ofInts(std::vector<int64_t> v);
  static Attribute ofFloats(std::vector<float> v);
  static Attribute ofStrings(std::vector<std::string> v);
  static Attribute ofTensor(pipec::Tensor v);
  bool operator==(const Attribute &o) const;
};

using AttrMap = std::map<std::string, Attribute>;

/// Typed look-ups with defaults. A present attribute of the wrong kind
/// counts as absent; the verifier reports kind mismatches separately.
int64_t attrInt(const AttrMap &a, const std::string &name, int64_t dflt);
float attrFloat(const AttrMap &a, const std::string &name, float dflt);
std::string attrString(const AttrMap &a, const std::string &name,
                       const std::string &dflt);
std::vector<int64_t> attrInts(const AttrMap &a, const std::string &name,
                              std::vector<int64_t> dflt = {});
const Attribute *attrFind(const AttrMap &a, const std::string &name);
inline bool attrHas(const AttrMap &a, const std::string &name) {
  return a.count(name) != 0;
}

} // namespace pipec
