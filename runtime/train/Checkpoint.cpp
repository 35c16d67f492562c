//===- runtime/train/Checkpoint.cpp - Atomic training checkpoints ---------===//
#include "runtime/train/Checkpoint.h"

#include "support/FileIO.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <filesystem>
#include <unistd.h>

namespace pipec::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char *kManifest = "manifest.json";
constexpr const char *kData = "tensors.bin";
constexpr const char *kFormat = "pipec-checkpoint";
/// A checkpoint in parts (writeCheckpointPart): the index of its parts.
constexpr const char *kParts = "parts.json";
constexpr const char *kPartsFormat = "pipec-checkpoint-parts";

std::string sysError() { return std::strerror(errno); }

/// Writes a whole file with POSIX calls and fsyncs it before closing.
class SyncedFile {
public:
  Status open(const std::string &path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return errorf("cannot create '", path, "': ", sysError());
    return Status::ok();
  }
  Status write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return errorf("cannot write '", path_, "': ", sysError());
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::ok();
  }
  Status close() {
    int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0) {
      std::string e = sysError();
      ::close(fd);
      return errorf("cannot fsync '", path_, "': ", e);
    }
    if (::close(fd) != 0)
      return errorf("cannot close '", path_, "': ", sysError());
    return Status::ok();
  }
  ~SyncedFile() {
    if (fd_ >= 0)
      ::close(fd_);
  }

private:
  std::string path_;
  int fd_ = -1;
};

Status fsyncDir(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errorf("cannot open directory '", path, "': ", sysError());
  int rc = ::fsync(fd);
  std::string e = rc ? sysError() : "";
  ::close(fd);
  if (rc != 0)
    return errorf("cannot fsync directory '", path, "': ", e);
  return Status::ok();
}

/// DIR's siblings named DIR<marker>*, newest (by name) first.
std::vector<std::string> siblings(const std::string &dir, const std::string &marker) {
  std::vector<std::string> out;
  fs::path p(dir);
  std::string prefix = p.filename().string() + marker;
  std::error_code ec;
  fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0)
      out.push_back((p.parent_path() / name).string());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

size_t alignUp(size_t n) { return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

/// The manifest's checksum: CRC-32C of its compact dump without "checksum"
/// (nlohmann::json objects are key-sorted, so the dump is canonical).
uint32_t manifestChecksum(json m) {
  m.erase("checksum");
  std::string s = jsonText(m);
  return crc32c(s.data(), s.size());
}

/// Writes the checkpoint's two files into the (new, empty) directory `tmp`.
Status writeFiles(const std::string &tmp, const Checkpoint &ckpt) {
  json tensors = json::array();
  SyncedFile data;
  PIPEC_TRY(data.open(joinPath(tmp, kData)));
  static const char zeros[kTensorAlignment] = {};
  size_t offset = 0;
  for (const Checkpoint::Entry &e : ckpt.tensors) {
    const Tensor &t = e.tensor;
    size_t bytes = t.bytes();
    PIPEC_TRY(data.write(t.raw(), bytes));
    size_t padded = alignUp(bytes);
    PIPEC_TRY(data.write(zeros, padded - bytes));
    tensors.push_back({{"name", e.name},
                       {"dtype", std::string(dtypeName(t.dtype()))},
                       {"shape", t.shape()},
                       {"offset", offset},
                       {"bytes", bytes},
                       {"crc32c", crc32c(t.raw(), bytes)}});
    offset += padded;
  }
  PIPEC_TRY(data.close());

  json m = {{"format", kFormat},
            {"version", kCheckpointVersion},
            {"step", ckpt.step},
            {"meta", ckpt.meta},
            {"data_file", kData},
            {"data_bytes", offset},
            {"tensors", std::move(tensors)}};
  m["checksum"] = manifestChecksum(m);
  std::string text = jsonText(m, 1) + "\n";
  SyncedFile manifest;
  PIPEC_TRY(manifest.open(joinPath(tmp, kManifest)));
  PIPEC_TRY(manifest.write(text.data(), text.size()));
  PIPEC_TRY(manifest.close());
  return fsyncDir(tmp);
}

/// Puts directory `tmp` in place of `dir` atomically; `dir` may not exist.
Status commit(const std::string &tmp, const std::string &dir, const std::string &parent) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      return errorf("cannot rename '", tmp, "' to '", dir, "': ", sysError());
    return fsyncDir(parent);
  }
  if (!fs::is_directory(dir, ec))
    return errorf("cannot write checkpoint '", dir, "': it exists and is not a directory");
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    PIPEC_TRY(fsyncDir(parent));
    return removeTree(tmp); // now the previous checkpoint
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return errorf("cannot exchange '", tmp, "' with '", dir, "': ", sysError());
  // No RENAME_EXCHANGE here: move the old checkpoint aside first. Between the
  // two renames DIR is missing; readCheckpoint then falls back to DIR.old-*.
  std::string old = dir + ".old-" + uniqueSuffix();
  if (::rename(dir.c_str(), old.c_str()) != 0)
    return errorf("cannot rename '", dir, "' to '", old, "': ", sysError());
  if (::rename(tmp.c_str(), dir.c_str()) != 0)
    return errorf("cannot rename '", tmp, "' to '", dir, "': ", sysError());
  PIPEC_TRY(fsyncDir(parent));
  return removeTree(old);
}

/// Parses a manifest and, once it checks out, the data readData() gives.
template <typename ReadData>
Expected<Checkpoint> parseCheckpointWith(const std::string &text, ReadData &&readData,
                                         const std::string &where) {
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object())
    return errorf(where, ": ", kManifest, " is not valid JSON (truncated or corrupt, ",
                  text.size(), " bytes)");

  Checkpoint ck;
  try {
    if (m.value("format", "") != kFormat)
      return errorf(where, ": ", kManifest, " is not a pipec checkpoint manifest");
    if (!m.contains("checksum") || jsonInteger<uint32_t>(m["checksum"], "checksum") != manifestChecksum(m))
      return errorf(where, ": ", kManifest, " fails its checksum (corrupt)");
    int64_t version = jsonInteger<int64_t>(m.at("version"), "version");
    if (version != kCheckpointVersion)
      return errorf(where, ": format version ", version, ", this build reads version ",
                    kCheckpointVersion);
    ck.step = jsonInteger<int64_t>(m.at("step"), "step");
    ck.meta = m.at("meta").get<std::map<std::string, std::string>>();
    uint64_t dataBytes = jsonInteger<uint64_t>(m.at("data_bytes"), "data_bytes");

    PIPEC_ASSIGN(std::string data, readData());
    if (data.size() != dataBytes)
      return errorf(where, ": ", kData, " has ", data.size(), " bytes, the manifest says ",
                    dataBytes, data.size() < dataBytes ? " (truncated)" : " (corrupt)");
    for (const json &t : m.at("tensors")) {
      std::string name = t.at("name").get<std::string>();
      std::string dtName = t.at("dtype").get<std::string>();
      DType dt = dtypeFromName(dtName);
      if (dt == DType::Undefined || dtypeSize(dt) == 0)
        return errorf(where, ": tensor '", name, "' has unsupported dtype '", dtName, "'");
      Shape shape;
      if (!t.at("shape").is_array())
        throw JsonFieldError("'shape' is not an array");
      for (const json &d : t.at("shape"))
        shape.push_back(jsonInteger<int64_t>(d, "shape"));
      PIPEC_TRY(validShape(shape, cat("tensor '", name, "'")).status().withContext(where));
      TensorDesc desc{dt, shape};
      uint64_t offset = jsonInteger<uint64_t>(t.at("offset"), "offset");
      uint64_t bytes = jsonInteger<uint64_t>(t.at("bytes"), "bytes");
      if (bytes != desc.bytes())
        return errorf(where, ": tensor '", name, "' ", desc.str(), " needs ", desc.bytes(),
                      " bytes, the manifest says ", bytes);
      if (offset > data.size() || bytes > data.size() - offset)
        return errorf(where, ": tensor '", name, "' at bytes [", offset, ", ", offset + bytes,
                      ") lies outside ", kData, " (", data.size(), " bytes)");
      uint32_t crc = crc32c(data.data() + offset, bytes);
      if (crc != jsonInteger<uint32_t>(t.at("crc32c"), "crc32c"))
        return errorf(where, ": tensor '", name, "' fails its CRC-32C check (corrupt ", kData,
                      ")");
      Tensor tensor(desc);
      if (bytes)
        std::memcpy(tensor.raw(), data.data() + offset, bytes);
      PIPEC_TRY(ck.add(name, std::move(tensor)).withContext(where));
    }
  } catch (const json::exception &e) {
    return errorf(where, ": malformed ", kManifest, ": ", e.what());
  } catch (const JsonFieldError &e) {
    return errorf(where, ": malformed ", kManifest, ": ", e.what());
  }
  return ck;
}


Expected<Checkpoint> readPart(const std::string &dir);

/// A checkpoint in parts: every part read and verified, their tensors
/// merged (each name in one part), step and metadata equal in all.
Expected<Checkpoint> readParts(const std::string &dir) {
  std::string where = cat("checkpoint '", dir, "'");
  PIPEC_ASSIGN(std::string text, readFile(joinPath(dir, kParts)));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || index.value("format", "") != kPartsFormat ||
      !index.contains("parts") || !index["parts"].is_array() || index["parts"].empty() ||
      !index.contains("checksum") || !index["checksum"].is_number_unsigned() ||
      index["checksum"].get<uint64_t>() != manifestChecksum(index))
    return errorf(where, ": ", kParts, " is corrupt");
  Checkpoint all;
  bool first = true;
  for (const json &name : index["parts"]) {
    if (!name.is_string() || name.get<std::string>().find('/') != std::string::npos)
      return errorf(where, ": ", kParts, " names a part that is not a directory of it");
    PIPEC_ASSIGN(Checkpoint part, readPart(joinPath(dir, name.get<std::string>())));
    if (first) {
      all.step = part.step;
      all.meta = part.meta;
      first = false;
    } else if (part.step != all.step || part.meta != all.meta) {
      return errorf(where, ": part '", name.get<std::string>(), "' is of step ", part.step,
                    " or other settings than the first part (step ", all.step, ")");
    }
    for (Checkpoint::Entry &e : part.tensors)
      PIPEC_TRY(all.add(e.name, std::move(e.tensor)).withContext(where));
  }
  return all;
}

Expected<Checkpoint> readOne(const std::string &dir) {
  if (isDirectory(dir) && fileExists(joinPath(dir, kParts)))
    return readParts(dir);
  return readPart(dir);
}

Expected<Checkpoint> readPart(const std::string &dir) {
  std::string where = cat("checkpoint '", dir, "'");
  if (!isDirectory(dir))
    return errorf(where, ": no such directory");
  std::string manifestPath = joinPath(dir, kManifest);
  if (!fileExists(manifestPath))
    return errorf(where, ": ", kManifest, " is missing (not a checkpoint, or an incomplete one)");
  PIPEC_ASSIGN(std::string text, readFile(manifestPath));
  // The data file is read only once the manifest vouches for it.
  auto data = [&]() { return readFile(joinPath(dir, kData)); };
  return parseCheckpointWith(text, data, where);
}

} // namespace

uint32_t checkpointManifestChecksum(const std::string &manifestText) {
  json m = json::parse(manifestText, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object())
    return 0;
  return manifestChecksum(m);
}

Expected<Checkpoint> parseCheckpoint(const std::string &manifestText, const std::string &data,
                                     const std::string &where) {
  return parseCheckpointWith(manifestText, [&]() -> Expected<std::string> { return data; }, where);
}


Status Checkpoint::add(const std::string &name, Tensor tensor) {
  if (find(name))
    return errorf("checkpoint: tensor '", name, "' added twice");
  if (tensor.empty() || dtypeSize(tensor.dtype()) == 0)
    return errorf("checkpoint: tensor '", name, "' is empty or of a type without a size");
  tensors.push_back({name, std::move(tensor)});
  return Status::ok();
}

Status Checkpoint::addFloats(const std::string &name, const float *data, int64_t n) {
  if (n < 0 || (n > 0 && !data))
    return errorf("checkpoint: tensor '", name, "' has no data or a negative size");
  Tensor t(DType::F32, Shape{n});
  if (n)
    std::memcpy(t.raw(), data, t.bytes());
  return add(name, std::move(t));
}

const Tensor *Checkpoint::find(const std::string &name) const {
  for (const Entry &e : tensors)
    if (e.name == name)
      return &e.tensor;
  return nullptr;
}

Status Checkpoint::restoreFloats(const std::string &name, float *dst, int64_t n) const {
  const Tensor *t = find(name);
  if (!t)
    return errorf("checkpoint has no tensor '", name, "'");
  if (t->dtype() != DType::F32 || t->numel() != n)
    return errorf("checkpoint tensor '", name, "' is ", t->desc().str(), ", expected f32 of ",
                  n, " elements");
  if (n)
    std::memcpy(dst, t->raw(), t->bytes());
  return Status::ok();
}

Status checkCheckpointTarget(const std::string &dir) {
  // The commit replaces DIR: never a directory (or a file) that holds
  // something other than a checkpoint.
  if (fileExists(dir) && !isDirectory(dir))
    return errorf("checkpoint '", dir, "': it exists and is not a directory");
  std::error_code ec;
  if (isDirectory(dir) && !std::filesystem::is_empty(dir, ec) &&
      !fileExists(joinPath(dir, "manifest.json")) && !fileExists(joinPath(dir, kParts)))
    return errorf("refusing to write a checkpoint into '", dir,
                  "': it is a non-empty directory that holds no checkpoint (no manifest.json)");
  return Status::ok();
}

Status writeCheckpoint(const std::string &dirIn, const Checkpoint &ckpt) {
  // Strip trailing slashes so that "ck/" and "ck" name the same siblings.
  std::string dir = dirIn;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  if (dir.empty())
    return errorf("checkpoint: empty directory name");
  std::string parent = dirName(dir);
  PIPEC_TRY(makeDirs(parent));
  PIPEC_TRY(checkCheckpointTarget(dir));
  // Leftovers of writes killed before their commit: never a valid checkpoint.
  for (const std::string &stale : siblings(dir, ".tmp-"))
    PIPEC_TRY(removeTree(stale));

  std::string tmp = dir + ".tmp-" + uniqueSuffix();
  if (::mkdir(tmp.c_str(), 0755) != 0)
    return errorf("cannot create directory '", tmp, "': ", sysError());
  Status s = writeFiles(tmp, ckpt);
  if (s.isOk())
    s = commit(tmp, dir, parent);
  if (!s.isOk()) {
    (void)removeTree(tmp);
    return s.withContext(cat("writing checkpoint '", dir, "'"));
  }
  // A checkpoint is in place: copies moved aside by an earlier, interrupted
  // fallback commit are now stale.
  for (const std::string &old : siblings(dir, ".old-"))
    PIPEC_TRY(removeTree(old));
  return Status::ok();
}

namespace {
std::string stripSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  return dir;
}
std::string partName(int part, int parts) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "part-%05d-of-%05d", part, parts);
  return buf;
}
} // namespace

std::string checkpointPartsDirectory(const std::string &dir, int64_t step) {
  return cat(stripSlashes(dir), ".tmp-parts-", step);
}

Expected<std::string> beginCheckpointParts(const std::string &dirIn, int64_t step) {
  const std::string dir = stripSlashes(dirIn);
  if (dir.empty())
    return errorf("checkpoint: empty directory name");
  PIPEC_TRY(makeDirs(dirName(dir)));
  PIPEC_TRY(checkCheckpointTarget(dir));
  for (const std::string &stale : siblings(dir, ".tmp-"))
    PIPEC_TRY(removeTree(stale));
  const std::string tmp = checkpointPartsDirectory(dir, step);
  if (::mkdir(tmp.c_str(), 0755) != 0)
    return errorf("cannot create directory '", tmp, "': ", sysError());
  return tmp;
}

Status writeCheckpointPart(const std::string &tmp, int part, int parts, const Checkpoint &ckpt) {
  if (part < 0 || part >= parts)
    return errorf("checkpoint part ", part, " of ", parts);
  const std::string sub = joinPath(tmp, partName(part, parts));
  if (::mkdir(sub.c_str(), 0755) != 0)
    return errorf("cannot create directory '", sub, "': ", sysError());
  return writeFiles(sub, ckpt).withContext(cat("writing checkpoint part '", sub, "'"));
}

Status commitCheckpointParts(const std::string &tmp, const std::string &dirIn, int parts) {
  const std::string dir = stripSlashes(dirIn);
  json names = json::array();
  for (int p = 0; p < parts; ++p) {
    const std::string name = partName(p, parts);
    if (!fileExists(joinPath(joinPath(tmp, name), kManifest)))
      return errorf("checkpoint '", dir, "': part ", p, " of ", parts, " was not written");
    names.push_back(name);
  }
  json index = {{"format", kPartsFormat}, {"version", kCheckpointVersion}, {"parts", names}};
  index["checksum"] = manifestChecksum(index);
  const std::string text = jsonText(index, 1) + "\n";
  SyncedFile f;
  PIPEC_TRY(f.open(joinPath(tmp, kParts)));
  PIPEC_TRY(f.write(text.data(), text.size()));
  PIPEC_TRY(f.close());
  PIPEC_TRY(fsyncDir(tmp));
  Status s = commit(tmp, dir, dirName(dir));
  if (!s.isOk()) {
    (void)removeTree(tmp);
    return s.withContext(cat("writing checkpoint '", dir, "'"));
  }
  for (const std::string &old : siblings(dir, ".old-"))
    PIPEC_TRY(removeTree(old));
  return Status::ok();
}

Expected<Checkpoint> readCheckpoint(const std::string &dirIn) {
  std::string dir = dirIn;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  if (isDirectory(dir) || fileExists(dir))
    return readOne(dir);
  // Killed between the two renames of a fallback commit: the previous
  // checkpoint is the newest DIR.old-* that verifies.
  Status first;
  for (const std::string &old : siblings(dir, ".old-")) {
    Expected<Checkpoint> ck = readOne(old);
    if (ck.isOk())
      return ck;
    if (first.isOk())
      first = ck.status();
  }
  if (!first.isOk())
    return first;
  return errorf("checkpoint '", dir, "': no such directory");
}

} // namespace pipec::train
