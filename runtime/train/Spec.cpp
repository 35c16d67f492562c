//===- runtime/train/Spec.cpp - "kind:key=value,..." option specs ---------===//
#include "runtime/train/Spec.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace pipec::train {

namespace {

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool isIdent(const std::string &s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      return false;
  return true;
}

} // namespace

Expected<Spec> Spec::parse(const std::string &text) {
  Spec spec;
  spec.text_ = text;
  size_t colon = text.find(':');
  spec.kind_ = lower(trim(text.substr(0, colon)));
  if (!isIdent(spec.kind_))
    return errorf("spec '", text, "': expected a kind such as 'adam' or 'cosine' before ':'");
  if (colon == std::string::npos)
    return spec;
  std::string rest = text.substr(colon + 1);
  if (trim(rest).empty())
    return errorf("spec '", text, "': nothing after ':'");
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t comma = rest.find(',', pos);
    std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return errorf("spec '", text, "': '", trim(item), "' is not key=value");
    Pair p;
    p.key = lower(trim(item.substr(0, eq)));
    p.value = trim(item.substr(eq + 1));
    if (!isIdent(p.key))
      return errorf("spec '", text, "': bad key in '", trim(item), "'");
    if (p.value.empty())
      return errorf("spec '", text, "': key '", p.key, "' has no value");
    if (spec.has(p.key))
      return errorf("spec '", text, "': key '", p.key, "' given twice");
    spec.pairs_.push_back(std::move(p));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return spec;
}

Spec::Pair *Spec::find(const std::string &key) {
  for (Pair &p : pairs_)
    if (p.key == key)
      return &p;
  return nullptr;
}

bool Spec::has(const std::string &key) const {
  for (const Pair &p : pairs_)
    if (p.key == key)
      return true;
  return false;
}

Status Spec::getDouble(const std::string &key, double &out) {
  Pair *p = find(key);
  if (!p)
    return Status::ok();
  p->used = true;
  const char *s = p->value.c_str();
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    return errorf("spec '", text_, "': ", key, "=", p->value, " is not a finite number");
  out = v;
  return Status::ok();
}

Status Spec::getInt(const std::string &key, int64_t &out) {
  Pair *p = find(key);
  if (!p)
    return Status::ok();
  p->used = true;
  const char *s = p->value.c_str();
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno == ERANGE || v < 0)
    return errorf("spec '", text_, "': ", key, "=", p->value, " is not a non-negative integer");
  out = v;
  return Status::ok();
}

Status Spec::getBool(const std::string &key, bool &out) {
  Pair *p = find(key);
  if (!p)
    return Status::ok();
  p->used = true;
  std::string v = lower(p->value);
  if (v == "true" || v == "1")
    out = true;
  else if (v == "false" || v == "0")
    out = false;
  else
    return errorf("spec '", text_, "': ", key, "=", p->value, " is not a boolean (true/false)");
  return Status::ok();
}

Status Spec::checkAllUsed(const std::string &accepted) const {
  for (const Pair &p : pairs_)
    if (!p.used)
      return errorf("spec '", text_, "': '", kind_, "' has no key '", p.key,
                    "' (it accepts: ", accepted, ")");
  return Status::ok();
}

} // namespace pipec::train
