//===- support/Machine.h - What the running machine has --------*- C++ -*-===//
//
// The memory this process may use: the machine's (MemTotal in
// /proc/meminfo), or less where a control group caps it (cgroup v2
// memory.max, v1 memory.limit_in_bytes), as in containers and CI jobs.
// `pipec --calibrate` records it as the profile's capacity; piperun checks a
// plan's allocations against it before it allocates anything.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace pipec {

/// Bytes of memory this process may use; 0 when /proc/meminfo cannot be read.
uint64_t usableMemoryBytes();

} // namespace pipec
