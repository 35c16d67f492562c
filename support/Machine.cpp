//===- support/Machine.cpp - What the running machine has ----------------===//

#include "support/Machine.h"

#include "support/FileIO.h"

#include <cstdlib>
#include <string>

namespace pipec {
namespace {

/// The first number of a file, or 0 (missing, "max", unreadable).
uint64_t leadingNumber(const std::string &path, const char *after = nullptr) {
  Expected<std::string> text = readFile(path);
  if (!text.isOk())
    return 0;
  size_t p = 0;
  if (after) {
    p = text->find(after);
    if (p == std::string::npos)
      return 0;
    p += std::string(after).size();
  }
  const char *s = text->c_str() + p;
  while (*s == ' ' || *s == '\t')
    ++s;
  if (*s < '0' || *s > '9')
    return 0;
  return std::strtoull(s, nullptr, 10);
}

} // namespace

uint64_t usableMemoryBytes() {
  uint64_t total = leadingNumber("/proc/meminfo", "MemTotal:") * 1024; // kB (KiB)
  if (total == 0)
    return 0;
  // A cgroup limit of "max" (v2) reads 0 here; v1's "unlimited" is a
  // number near 2^63: either way the machine's figure stays.
  for (const char *limitFile : {"/sys/fs/cgroup/memory.max",
                                "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    uint64_t limit = leadingNumber(limitFile);
    if (limit > 0 && limit < total)
      total = limit;
  }
  return total;
}

} // namespace pipec
