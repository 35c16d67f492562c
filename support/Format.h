//===- support/Format.h - Numbers for people -------------------*- C++ -*-===//
//
// The one spelling of byte counts and large counts in pipec's and
// piperun's tables and reports, and of untrusted text on a terminal.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace pipec {

/// "1.50 MiB" (binary units; whole bytes below 1 KiB).
std::string formatBytes(double bytes);
/// "3.20 GFLOP", "59.33 K" (decimal prefixes, K for thousands; `unit` appended).
std::string formatCount(double v, const char *unit);
/// Text for a terminal: valid UTF-8 and printable characters as they are,
/// every other byte (control characters, escape sequences, invalid UTF-8
/// from a model's names) as \xNN.
std::string printable(const std::string &s);
/// "1.25 ms", "3.2 s", "40 us" (three significant digits).
std::string formatSeconds(double s);
/// Text for HTML: <, >, & and " as entities.
std::string escapeHtml(const std::string &s);

} // namespace pipec
