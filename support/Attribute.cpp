//===- support/Attribute.cpp - Node attributes ----------------------------===//
#include "support/Attribute.h"

#include <cstring>

namespace pipec {

Attribute Attribute::ofInt(int64_t v) {
  Attribute a;
  a.kind = Kind::Int;
  a.i = v;
  return a;
}
Attribute Attribute::ofFloat(float v) {
  Attribute a;
  a.kind = Kind::Float;
  a.f = v;
  return a;
}
Attribute Attribute::ofString(std::string v) {
  Attribute a;
  a.kind = Kind::String;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::ofInts(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::ofFloats(std::vector<float> v) {
  Attribute a;
  a.kind = Kind::Floats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::ofStrings(std::vector<std::string> v) {
  Attribute a;
  a.kind = Kind::Strings;
  a.strings = std::move(v);
  return a;
}
Attribute Attribute::ofTensor(pipec::Tensor v) {
  Attribute a;
  a.kind = Kind::Tensor;
  a.t = std::move(v);
  return a;
}

bool Attribute::operator==(const Attribute &o) const {
  if (kind != o.kind)
    return false;
  switch (kind) {
  case Kind::Int: return i == o.i;
  case Kind::Float: return std::memcmp(&f, &o.f, sizeof f) == 0;
  case Kind::String: return s == o.s;
  case Kind::Ints: return ints == o.ints;
  case Kind::Floats:
    return floats.size() == o.floats.size() &&
           (floats.empty() ||
            std::memcmp(floats.data(), o.floats.data(), floats.size() * 4) == 0);
  case Kind::Strings: return strings == o.strings;
  case Kind::Tensor: return t.identical(o.t);
  }
  return false;
}

const Attribute *attrFind(const AttrMap &a, const std::string &name) {
  auto it = a.find(name);
  return it == a.end() ? nullptr : &it->second;
}

int64_t attrInt(const AttrMap &a, const std::string &name, int64_t dflt) {
  const Attribute *x = attrFind(a, name);
  return x && x->kind == Attribute::Kind::Int ? x->i : dflt;
}
float attrFloat(const AttrMap &a, const std::string &name, float dflt) {
  const Attribute *x = attrFind(a, name);
  return x && x->kind == Attribute::Kind::Float ? x->f : dflt;
}
std::string attrString(const AttrMap &a, const std::string &name,
                       const std::string &dflt) {
  const Attribute *x = attrFind(a, name);
  return x && x->kind == Attribute::Kind::String ? x->s : dflt;
}
std::vector<int64_t> attrInts(const AttrMap &a, const std::string &name,
                              std::vector<int64_t> dflt) {
  const Attribute *x = attrFind(a, name);
  return x && x->kind == Attribute::Kind::Ints ? x->ints : dflt;
}

} // namespace pipec
