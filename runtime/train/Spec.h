//===- runtime/train/Spec.h - "kind:key=value,..." option specs -*- C++ -*-===//
//
// The command-line grammar shared by optimizer and schedule specs:
//
//   spec  := kind [ ":" pair { "," pair } ]
//   pair  := key "=" value
//
// Kinds and keys are lowercase-insensitive identifiers ([A-Za-z0-9_-]);
// values are numbers ("3e-4", "100") or booleans ("true", "false", "1",
// "0"). Blanks around tokens are ignored. A key may appear once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pipec::train {

/// A parsed spec: its kind and its key=value pairs in the order written.
class Spec {
public:
  /// Parses `text`; errors quote the spec and the offending piece.
  static Expected<Spec> parse(const std::string &text);

  const std::string &kind() const { return kind_; }
  const std::string &text() const { return text_; }

  /// Reads key `key` as a number (if present) into `out`; marks it used.
  Status getDouble(const std::string &key, double &out);
  /// Reads key `key` as a non-negative integer (if present) into `out`.
  Status getInt(const std::string &key, int64_t &out);
  /// Reads key `key` as a boolean (if present) into `out`.
  Status getBool(const std::string &key, bool &out);
  /// Whether the spec names `key`.
  bool has(const std::string &key) const;
  /// An error naming the first key no getter read ("unknown key 'x'"), with
  /// the keys `kind` accepts; ok if all were read.
  Status checkAllUsed(const std::string &accepted) const;

private:
  struct Pair {
    std::string key, value;
    bool used = false;
  };
  Pair *find(const std::string &key);

  std::string text_, kind_;
  std::vector<Pair> pairs_;
};

} // namespace pipec::train
