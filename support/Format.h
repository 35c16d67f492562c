//===- support/Format.h - Numbers for people -------------------*- C++ -*-===//
//
// The one spelling of byte counts and large counts in pipec's and
// piperun's tables and reports.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace pipec {

/// "1.50 MiB" (binary units; whole bytes below 1 KiB).
std::string formatBytes(double bytes);
/// "3.20 GFLOP", "59.33 K" (decimal prefixes, K for thousands; `unit` appended).
std::string formatCount(double v, const char *unit);

} // namespace pipec
