//===- support/Format.cpp - Numbers for people ----------------------------===//
#include "support/Format.h"

#include <cstdio>

namespace pipec {

std::string formatBytes(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string formatCount(double v, const char *unit) {
  const char *prefix[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s%s" : "%.0f %s%s", v, prefix[u], unit);
  return buf;
}

} // namespace pipec
