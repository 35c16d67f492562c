//===- support/FileIO.cpp - Whole-file I/O, atomic writes, checksums ------===//
#include "support/FileIO.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace pipec {

namespace fs = std::filesystem;

Expected<std::string> readFile(const std::string &path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return errorf("cannot read '", path, "': is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return errorf("cannot open '", path, "': ", std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    return errorf("cannot read '", path, "': ", std::strerror(errno));
  return data;
}

Status writeFileAtomic(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return errorf("cannot create '", tmp, "': ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out)
      return errorf("cannot write '", tmp, "': ", std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return errorf("cannot rename '", tmp, "' to '", path, "': ", ec.message());
  }
  return Status::ok();
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

uint32_t crc32c(const void *data, size_t n, uint32_t seed) {
  static const std::array<uint32_t, 256> table = makeCrcTable();
  const auto *p = static_cast<const uint8_t *>(data);
  uint32_t c = ~seed;
  for (size_t i = 0; i < n; ++i)
    c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

} // namespace pipec
