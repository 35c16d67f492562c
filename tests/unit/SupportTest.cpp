//===- tests/unit/SupportTest.cpp - Files and checksums -------------------===//
//
// CRC-32C against the published check values (RFC 3720, B.4), the hardware
// and table paths against each other at every length, offset and chaining
// split; readFile refuses what could be read forever (FIFOs, devices);
// file-backed tensors read their region once, on first use, and a region
// that became unreadable is a TensorReadError, not a crash or a hang;
// readFileRegion and crc32cOfFileRegion agree with the whole file.
//
//===----------------------------------------------------------------------===//
#include "support/FileIO.h"
#include "support/LargeAlloc.h"
#include "support/Tensor.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <csignal>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace pipec;

namespace {

/// A fresh directory under the system's temporary one, "" if it cannot be
/// made.
std::string makeTempDir(const std::string &prefix) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))).string();
  return makeDirs(dir).isOk() ? dir : std::string();
}

} // namespace

TEST(Crc32c, PublishedCheckValues) {
  const char *digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xE3069283u);
  EXPECT_EQ(crc32cPortable(digits, 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, EveryLengthOffsetAndSplitAgreesWithTheTable) {
  std::vector<uint8_t> buf(300);
  uint32_t x = 12345;
  for (uint8_t &b : buf) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  for (size_t off = 0; off < 9; ++off)
    for (size_t n = 0; off + n <= buf.size(); n += 7) {
      uint32_t whole = crc32c(buf.data() + off, n);
      ASSERT_EQ(whole, crc32cPortable(buf.data() + off, n)) << "offset " << off << " length " << n;
      for (size_t cut = 0; cut <= n; cut += 5)
        ASSERT_EQ(crc32c(buf.data() + off + cut, n - cut, crc32c(buf.data() + off, cut)), whole)
            << "offset " << off << " length " << n << " split at " << cut;
    }
}

TEST(ReadFile, ReadsRegularFilesAndRefusesWhatNeverEnds) {
  const std::string dir = makeTempDir("pipec-support-");
  ASSERT_FALSE(dir.empty());
  std::string file = joinPath(dir, "f.bin");
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(writeFileAtomic(file, bytes).isOk());
  Expected<std::string> got = readFile(file);
  ASSERT_TRUE(got.isOk()) << got.status().message();
  EXPECT_EQ(*got, bytes);

  std::string fifo = joinPath(dir, "fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Expected<std::string> f = readFile(fifo);
  ASSERT_FALSE(f.isOk());
  EXPECT_NE(f.status().message().find("not a regular file"), std::string::npos)
      << f.status().message();
  // Files of /proc are regular but report a size of 0.
  Expected<std::string> proc = readFile("/proc/self/status");
  ASSERT_TRUE(proc.isOk()) << proc.status().message();
  EXPECT_NE(proc->find("Name:"), std::string::npos);
  Expected<std::string> z = readFile("/dev/zero");
  ASSERT_FALSE(z.isOk());
  EXPECT_NE(z.status().message().find("not a regular file"), std::string::npos);
  Expected<std::string> d = readFile(dir);
  ASSERT_FALSE(d.isOk());
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos);
  Expected<std::string> m = readFile(joinPath(dir, "missing"));
  ASSERT_FALSE(m.isOk());
  EXPECT_NE(m.status().message().find("cannot open"), std::string::npos);
  ASSERT_TRUE(removeTree(dir).isOk());
}

TEST(FileBackedTensor, ReadsItsRegionOnFirstUseOnly) {
  const std::string dir = makeTempDir("pipec-lazy-");
  ASSERT_FALSE(dir.empty());
  std::string file = joinPath(dir, "w.data");
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i) * 0.5f;
  std::string bytes(64, 'x'); // the region starts at offset 64
  bytes.append(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(float));
  ASSERT_TRUE(writeFileAtomic(file, bytes).isOk());

  Tensor t = Tensor::fromFile(TensorDesc{DType::F32, {10, 100}}, FileRegion{file, 64});
  ASSERT_NE(t.fileRegion(), nullptr);
  EXPECT_EQ(t.fileRegion()->offset, 64u);
  EXPECT_FALSE(t.resident());
  EXPECT_FALSE(t.empty());
  Tensor copy = t.reshaped({1000});
  EXPECT_EQ(copy.data<float>()[999], 499.5f); // the copy's read serves both
  EXPECT_TRUE(t.resident());
  EXPECT_EQ(t.data<float>(), copy.data<float>());
  EXPECT_EQ(std::memcmp(t.raw(), values.data(), values.size() * sizeof(float)), 0);
  EXPECT_TRUE(t.clone().identical(t));
  EXPECT_EQ(t.clone().fileRegion(), nullptr);

  // The region agrees with a chunked read of the file.
  Expected<uint32_t> crc = crc32cOfFileRegion(file, 64, values.size() * sizeof(float));
  ASSERT_TRUE(crc.isOk()) << crc.status().message();
  EXPECT_EQ(*crc, crc32c(values.data(), values.size() * sizeof(float)));
  EXPECT_FALSE(crc32cOfFileRegion(file, 64, values.size() * sizeof(float) + 1).isOk());

  // Unreadable before first use: shortened, or replaced by a FIFO.
  Tensor shortened = Tensor::fromFile(TensorDesc{DType::F32, {1000}}, FileRegion{file, 64});
  ASSERT_TRUE(writeFileAtomic(file, bytes.substr(0, 100)).isOk());
  EXPECT_THROW(shortened.raw(), TensorReadError);
  Tensor piped = Tensor::fromFile(TensorDesc{DType::F32, {1000}}, FileRegion{file, 64});
  std::filesystem::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  try {
    piped.raw();
    ADD_FAILURE() << "a FIFO was read";
  } catch (const TensorReadError &e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(removeTree(dir).isOk());
}

// A write that fails part-way (here: the file-size limit, as a full disk
// would) reports the error, leaves the old file as it was and no temporary
// file behind. Run in a child so the limit stays there.
TEST(WriteFileAtomic, FailedWriteLeavesNothingBehind) {
  const std::string dir = makeTempDir("pipec-atomic-");
  ASSERT_FALSE(dir.empty());
  std::string file = joinPath(dir, "f.bin");
  ASSERT_TRUE(writeFileAtomic(file, "old").isOk());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    Status s = writeFileAtomic(file, std::string(1 << 20, 'x'));
    bool named = !s.isOk() && s.message().find("cannot write") != std::string::npos;
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the failed write was not reported";
  std::vector<std::string> left;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"f.bin"});
  Expected<std::string> got = readFile(file);
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(*got, "old");
  ASSERT_TRUE(removeTree(dir).isOk());
}

namespace {
/// The VmFlags of the mapping of this process that holds `addr`
/// (/proc/self/smaps), or "" where the kernel does not list them.
std::string vmFlagsAt(const void *addr) {
  std::ifstream in("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0)
      return line.substr(8) + " ";
  }
  return "";
}
} // namespace

// Buffers from 2 MB on are 2 MB aligned and advised onto huge pages (the
// mapping's "hg" flag), where the kernel has transparent huge pages;
// smaller ones are 64-byte aligned and not advised. A vector of them reads
// and writes as any vector.
TEST(LargeAlloc, HugePageBuffersFromTwoMegabytes) {
  void *small = pipec::allocateLarge(100);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
  std::free(small);
  pipec::LargeVector<float> v(3 << 20, 1.0f); // 12 MB
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % pipec::kHugePageBytes, 0u);
  v[v.size() - 1] = 2.0f;
  pipec::LargeVector<float> w = v;
  EXPECT_EQ(w.back(), 2.0f);
  EXPECT_EQ(w.front(), 1.0f);
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  const std::string flags = vmFlagsAt(v.data());
  ASSERT_FALSE(flags.empty()) << "no VmFlags for the buffer's mapping";
  EXPECT_NE(flags.find(" hg "), std::string::npos) << flags;
  std::vector<float> plain(3 << 20, 1.0f);
  EXPECT_EQ(vmFlagsAt(plain.data()).find(" hg "), std::string::npos);
}
