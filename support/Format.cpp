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

std::string printable(const std::string &s) {
  std::string out;
  out.reserve(s.size());
  auto escape = [&](unsigned char c) {
    static const char hex[] = "0123456789abcdef";
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f)
        escape(c);
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlong forms, no surrogates, at
    // most U+10FFFF) passes whole; any other byte is escaped alone.
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && n >= 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
           !(c == 0xf4 && c1 >= 0x90);
    }
    if (!ok) {
      escape(c);
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

std::string formatSeconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  return buf;
}

std::string escapeHtml(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

} // namespace pipec
