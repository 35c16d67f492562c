//===- support/FileIO.cpp - Whole-file I/O, atomic writes, checksums ------===//
#include "support/FileIO.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <new>
#include <sys/stat.h>
#include <unistd.h>

namespace pipec {

namespace fs = std::filesystem;

namespace {

/// A regular file open for reading, closed with the object.
struct RegularFile {
  int fd = -1;
  struct stat st {};
  RegularFile() = default;
  RegularFile(const RegularFile &) = delete;
  RegularFile &operator=(const RegularFile &) = delete;
  ~RegularFile() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Opens `path` for reading if it is a regular file: a FIFO or a character
/// device (a link to /dev/urandom, say) would be read forever, where a
/// regular file ends. Non-blocking, so that opening a FIFO does not wait.
Status openRegular(const std::string &path, RegularFile &f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd < 0)
    return errorf("cannot open '", path, "': ", std::strerror(errno));
  if (::fstat(f.fd, &f.st) != 0)
    return errorf("cannot read '", path, "': ", std::strerror(errno));
  if (S_ISDIR(f.st.st_mode))
    return errorf("cannot read '", path, "': is a directory");
  if (!S_ISREG(f.st.st_mode))
    return errorf("cannot read '", path, "': not a regular file");
  return Status::ok();
}

} // namespace

Expected<std::string> readFile(const std::string &path) {
  RegularFile f;
  PIPEC_TRY(openRegular(path, f));
  const int fd = f.fd;
  const struct stat &st = f.st;
  // Read to the end, in one read where st_size is right (files of /proc
  // report 0).
  std::string data;
  size_t got = 0;
  try {
    data.resize(static_cast<size_t>(st.st_size) + 1);
    while (true) {
      if (got == data.size())
        data.resize(data.size() * 2);
      ssize_t r = ::read(fd, data.data() + got, data.size() - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        return errorf("cannot read '", path, "': ", std::strerror(errno));
      if (r == 0)
        break;
      got += static_cast<size_t>(r);
    }
  } catch (const std::bad_alloc &) {
    return errorf("cannot read '", path, "': ", st.st_size, " bytes do not fit in memory");
  }
  data.resize(got);
  return data;
}

Expected<uint64_t> regularFileSize(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errorf("cannot open '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return errorf("cannot read '", path, "': ", S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Status readFileRegion(const std::string &path, uint64_t offset, uint64_t bytes,
                      const ByteSink &sink) {
  RegularFile f;
  PIPEC_TRY(openRegular(path, f));
  const int fd = f.fd;
  const struct stat &st = f.st;
  if (offset > static_cast<uint64_t>(st.st_size) || static_cast<uint64_t>(st.st_size) - offset < bytes)
    return errorf("'", path, "' is too short: it has ", st.st_size, " bytes, ", bytes,
                  " are needed at offset ", offset);
  constexpr size_t kChunk = size_t(4) << 20;
  std::unique_ptr<char[]> buf(new char[std::min<uint64_t>(kChunk, std::max<uint64_t>(bytes, 1))]);
  uint64_t done = 0;
  while (done < bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - done));
    ssize_t got = ::pread(fd, buf.get(), want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return errorf("cannot read '", path, "': ", std::strerror(errno));
    if (got == 0)
      return errorf("'", path, "' ended at ", offset + done, " bytes, before the ", bytes,
                    " bytes at offset ", offset);
    PIPEC_TRY(sink(buf.get(), static_cast<size_t>(got)));
    done += static_cast<uint64_t>(got);
  }
  return Status::ok();
}

Expected<uint32_t> crc32cOfFileRegion(const std::string &path, uint64_t offset, uint64_t bytes) {
  uint32_t crc = 0;
  PIPEC_TRY(readFileRegion(path, offset, bytes, [&](const void *p, size_t n) {
    crc = crc32c(p, n, crc);
    return Status::ok();
  }));
  return crc;
}

Status writeFileAtomicStreamed(const std::string &path,
                               const std::function<Status(const ByteSink &)> &produce) {
  std::string tmp = path + ".tmp." + uniqueSuffix();
  std::error_code ec;
  Status s = [&]() -> Status {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return errorf("cannot create '", tmp, "': ", std::strerror(errno));
    PIPEC_TRY(produce([&](const void *data, size_t n) -> Status {
      out.write(static_cast<const char *>(data), static_cast<std::streamsize>(n));
      if (!out)
        return errorf("cannot write '", tmp, "': ", std::strerror(errno));
      return Status::ok();
    }));
    out.flush();
    out.close();
    if (!out)
      return errorf("cannot write '", tmp, "': ", std::strerror(errno));
    return Status::ok();
  }();
  if (!s) {
    fs::remove(tmp, ec); // no partial file left behind
    return s;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return errorf("cannot rename '", tmp, "' to '", path, "': ", ec.message());
  }
  return Status::ok();
}

std::string uniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  const auto ns = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%016llx-%d-%llu", ns, static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter++));
  return buf;
}

Status replaceDirectory(const std::string &from, const std::string &to) {
  if (!fileExists(to)) {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return errorf("cannot rename '", from, "' to '", to, "': ", std::strerror(errno));
    return Status::ok();
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0)
    return removeTree(from); // now the old directory
  const std::string old = to + ".old-" + uniqueSuffix();
  if (::rename(to.c_str(), old.c_str()) != 0)
    return errorf("cannot move '", to, "' aside: ", std::strerror(errno));
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    (void)::rename(old.c_str(), to.c_str());
    return errorf("cannot rename '", from, "' to '", to, "': ", why);
  }
  return removeTree(old);
}

Status writeFileAtomic(const std::string &path, const std::string &bytes) {
  return writeFileAtomicStreamed(path, [&](const ByteSink &sink) { return sink(bytes.data(), bytes.size()); });
}

Status makeDirs(const std::string &path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec)
    return errorf("cannot create directory '", path, "': ", ec.message());
  return Status::ok();
}

Status removeTree(const std::string &path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec)
    return errorf("cannot remove '", path, "': ", ec.message());
  return Status::ok();
}

bool fileExists(const std::string &path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

bool isDirectory(const std::string &path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string dirName(const std::string &path) {
  fs::path p(path);
  std::string d = p.parent_path().string();
  return d.empty() ? "." : d;
}

std::string joinPath(const std::string &a, const std::string &b) {
  return (fs::path(a) / b).string();
}

namespace {
std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
} // namespace

uint64_t fnv1a64(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

uint32_t crc32cTable(const uint8_t *p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> table = makeCrcTable();
  for (size_t i = 0; i < n; ++i)
    c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
/// SSE4.2's crc32 instruction computes CRC-32C (the Castagnoli polynomial)
/// eight bytes at a time, where the table loop takes one (weights of a few
/// GB are checksummed at compile and at load).
__attribute__((target("sse4.2"))) uint32_t crc32cHardware(const uint8_t *p, size_t n,
                                                          uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p)
    c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
#endif

} // namespace

uint32_t crc32c(const void *data, size_t n, uint32_t seed) {
  const auto *p = static_cast<const uint8_t *>(data);
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware)
    return ~crc32cHardware(p, n, ~seed);
#endif
  return ~crc32cTable(p, n, ~seed);
}

uint32_t crc32cPortable(const void *data, size_t n, uint32_t seed) {
  return ~crc32cTable(static_cast<const uint8_t *>(data), n, ~seed);
}

} // namespace pipec
