//===- support/LargeAlloc.h - Long-lived buffers on huge pages ---*- C++ -*-===//
//
// The runtime's large, long-lived buffers (activation arenas, kernel
// workspaces, loaded weights, gradient accumulators, optimizer state) are
// streamed through every step: a GEMM packs a layer's 4 MB of weights, Adam
// reads and writes four 4 MB arrays a layer. On 4 KB pages each pass costs a
// page walk per 4 KB of every array it streams; Linux backs memory with 2 MB
// pages instead where the process asks for it with madvise(MADV_HUGEPAGE)
// before the first touch (transparent huge pages in "madvise" mode,
// Debian's default; "always" needs no advice, "never" ignores it).
// allocateLarge gives buffers of at least kHugePageBytes that alignment and
// that advice; smaller ones are plain 64-byte aligned allocations. Both
// are freed with std::free. Numbers are bitwise unaffected: only the page
// size changes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace pipec {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

/// `bytes` aligned to 64 bytes, or from kHugePageBytes on to kHugePageBytes
/// with MADV_HUGEPAGE advice on its whole huge pages (a tail shorter than
/// one keeps small pages: nothing past `bytes` becomes resident); null when
/// out of memory. The memory is not touched.
inline void *allocateLarge(size_t bytes) {
  const bool huge = bytes >= kHugePageBytes;
  const size_t align = huge ? kHugePageBytes : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void *p = std::aligned_alloc(align, rounded == 0 ? align : rounded);
#ifdef MADV_HUGEPAGE
  if (p && huge) // advice: where refused, the pages stay small
    (void)madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  return p;
}

/// A std::allocator for vectors of the buffers above (LargeVector).
template <typename T> struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <typename U> LargeAllocator(const LargeAllocator<U> &) {}
  T *allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T))
      throw std::bad_array_new_length();
    if (void *p = allocateLarge(n * sizeof(T)))
      return static_cast<T *>(p);
    throw std::bad_alloc();
  }
  void deallocate(T *p, size_t) { std::free(p); }
  template <typename U> bool operator==(const LargeAllocator<U> &) const { return true; }
};

template <typename T> using LargeVector = std::vector<T, LargeAllocator<T>>;

} // namespace pipec
