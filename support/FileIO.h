//===- support/FileIO.h - Whole-file I/O, atomic writes, checksums -*- C++ -*-===//
#pragma once

#include "support/Error.h"

#include <cstdint>
#include <functional>
#include <string>

namespace pipec {

/// Reads a whole regular file (FIFOs, devices and directories are refused:
/// they could be read forever); errors name the path and the OS reason.
Expected<std::string> readFile(const std::string &path);
/// Writes via a temporary file in the same directory and rename(), so that a
/// reader sees the old file or the new one, never a torn one.
Status writeFileAtomic(const std::string &path, const std::string &bytes);
/// Receives consecutive chunks of a stream of bytes.
using ByteSink = std::function<Status(const void *data, size_t n)>;
/// writeFileAtomic for bytes produced in pieces: `produce` writes them
/// through the sink it is given, so nothing holds the whole file.
Status writeFileAtomicStreamed(const std::string &path,
                               const std::function<Status(const ByteSink &)> &produce);
/// Feeds `bytes` bytes at `offset` of the regular file `path` to `sink` in
/// chunks of at most 4 MiB; an error names the file if it is shorter.
Status readFileRegion(const std::string &path, uint64_t offset, uint64_t bytes,
                      const ByteSink &sink);
/// CRC-32C of a region of a file, read as readFileRegion does.
Expected<uint32_t> crc32cOfFileRegion(const std::string &path, uint64_t offset,
                                      uint64_t bytes);
/// Size of a regular file (an error for anything else).
Expected<uint64_t> regularFileSize(const std::string &path);
/// Creates a directory and its parents (no error if it exists).
Status makeDirs(const std::string &path);
/// Removes a directory tree (no error if it does not exist).
Status removeTree(const std::string &path);
/// Puts the directory `from` in the place of `to` (a sibling), which may
/// exist: swapped in one renameat2(RENAME_EXCHANGE) where the file system
/// has it, so that readers see the old directory or the new one; the old one
/// is then removed.
Status replaceDirectory(const std::string &from, const std::string &to);
/// "<time>-<pid>-<n>": a suffix for temporary names no other writer uses
/// (time in ns, hex and fixed width, so that names sort by age).
std::string uniqueSuffix();
bool fileExists(const std::string &path);
bool isDirectory(const std::string &path);
/// Directory part of a path ("." if none).
std::string dirName(const std::string &path);
std::string joinPath(const std::string &a, const std::string &b);

/// CRC-32C (Castagnoli) of a byte range; `seed` chains calls. Uses SSE4.2's
/// crc32 instruction where the CPU has it.
uint32_t crc32c(const void *data, size_t n, uint32_t seed = 0);
/// The same checksum by table lookup, whatever the CPU (for tests).
uint32_t crc32cPortable(const void *data, size_t n, uint32_t seed = 0);
/// 64-bit FNV-1a hash of a string: stable ids derived from names.
uint64_t fnv1a64(const std::string &s);

} // namespace pipec
