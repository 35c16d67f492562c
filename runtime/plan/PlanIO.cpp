//===- runtime/plan/PlanIO.cpp - Reading and writing plan directories -----===//
#include "runtime/plan/PlanIO.h"

#include "runtime/plan/ScheduleCheck.h"

#include "pipec/Version.h"
#include "support/LargeAlloc.h"
#include "support/Limits.h"
#include "support/Tensor.h"
#include "support/FileIO.h"
#include "support/Parallel.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <type_traits>

namespace pipec::plan {

uint32_t formatVersion() { return PIPEC_PLAN_FORMAT_VERSION; }

Status writePlan(const std::string &dir, const Plan &p) {
  std::string bytes;
  // Deterministic serialization: byte-identical plans for identical input.
  {
    google::protobuf::io::StringOutputStream raw(&bytes);
    google::protobuf::io::CodedOutputStream out(&raw);
    out.SetSerializationDeterministic(true);
    if (!p.SerializeToCodedStream(&out))
      return errorf("cannot serialize the plan");
  }
  return writeFileAtomic(joinPath(dir, kPlanFile), bytes);
}

namespace {

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

struct ManifestEntry {
  uint32_t crc = 0;
  uint64_t bytes = 0;
};

/// MANIFEST's entries by file name, after checking its own checksum.
Expected<std::map<std::string, ManifestEntry>> readManifest(const std::string &dir) {
  const std::string path = joinPath(dir, kManifestFile);
  if (!fileExists(path))
    return errorf("'", dir, "' has no ", kManifestFile,
                  " (a plan written by an older pipec, or not a whole plan): compile it again");
  PIPEC_ASSIGN(std::string text, readFile(path));
  const std::string corrupt = cat("'", path, "' is corrupt");
  const size_t last = text.rfind("manifest ");
  if (text.rfind("pipec-plan-manifest 1\n", 0) != 0 || last == std::string::npos ||
      text.back() != '\n')
    return errorf(corrupt, ": not a plan manifest");
  if (text.substr(last) != cat("manifest ", hex32(crc32c(text.data(), last)), "\n"))
    return errorf(corrupt, ": its checksum does not match its lines");
  std::map<std::string, ManifestEntry> entries;
  size_t pos = text.find('\n') + 1;
  while (pos < last) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    char name[4096];
    unsigned crc = 0;
    unsigned long long bytes = 0;
    if (line.size() >= sizeof name ||
        std::sscanf(line.c_str(), "%8x %llu %4095s", &crc, &bytes, name) != 3)
      return errorf(corrupt, ": bad line '", line, "'");
    entries[name] = {crc, bytes};
  }
  return entries;
}

/// Arena offsets are multiples of this (codegen/MemoryPlanner.h): kernels
/// may use aligned vector loads.
constexpr uint64_t kArenaAlignment = 64;

/// A TENSOR attribute's declared type and shape must fit and match its bytes.
Status checkAttribute(const Attribute &a) {
  if (a.kind() != Attribute::TENSOR)
    return Status::ok();
  if (!isKnownDType(a.tensor_dtype()) || a.tensor_dtype() == 0)
    return errorf("attribute '", a.name(), "' has unknown element type ", a.tensor_dtype());
  const Shape shape(a.tensor_shape().begin(), a.tensor_shape().end());
  PIPEC_ASSIGN(int64_t n, validShape(shape, cat("attribute '", a.name(), "'")));
  const uint64_t bytes = static_cast<uint64_t>(n) * dtypeSize(static_cast<DType>(a.tensor_dtype()));
  if (a.tensor_data().size() != bytes)
    return errorf("attribute '", a.name(), "' holds ", a.tensor_data().size(), " bytes, its type ",
                  dtypeName(static_cast<DType>(a.tensor_dtype())), shapeStr(shape), " needs ",
                  bytes);
  return Status::ok();
}

/// Weights and constants occupy disjoint regions of their files, except
/// read-only constants, which may share identical bytes: a trained
/// parameter or a running statistic written in place must not change
/// another tensor.
Status checkWeightRegions(const Plan &p) {
  std::vector<char> written(static_cast<size_t>(p.tensors_size()), 0);
  for (const Parameter &pp : p.training().params())
    if (pp.weight() >= 0 && pp.weight() < p.tensors_size())
      written[pp.weight()] = 1;
  for (const StateUpdate &u : p.training().state_updates())
    if (u.state() >= 0 && u.state() < p.tensors_size())
      written[u.state()] = 1;
  struct Region {
    int file;
    uint64_t lo, hi;
    int tensor;
  };
  std::vector<Region> regions;
  for (int i = 0; i < p.tensors_size(); ++i) {
    const TensorInfo &t = p.tensors(i);
    // Regions of referenced files are read into buffers of their own.
    if ((t.kind() == TensorInfo::WEIGHT || t.kind() == TensorInfo::CONSTANT) && t.bytes() > 0 &&
        t.weight_file() >= 0 && t.weight_file() < p.weight_files_size() &&
        !p.weight_files(t.weight_file()).referenced())
      regions.push_back({t.weight_file(), t.weight_offset(), t.weight_offset() + t.bytes(), i});
  }
  std::sort(regions.begin(), regions.end(), [](const Region &a, const Region &b) {
    return std::tie(a.file, a.lo, a.tensor) < std::tie(b.file, b.lo, b.tensor);
  });
  // A sweep by offset against the regions that still reach it.
  std::vector<Region> active;
  for (const Region &r : regions) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](const Region &a) { return a.file != r.file || a.hi <= r.lo; }),
                 active.end());
    for (const Region &a : active)
      if (written[a.tensor] || written[r.tensor])
        return errorf("tensors '", p.tensors(a.tensor).name(), "' and '", p.tensors(r.tensor).name(),
                      "' overlap in their weight file, and training writes one of them");
    active.push_back(r);
  }
  return Status::ok();
}

/// `what` names the referrer: a string, or a callable that makes one only
/// for an error (a large plan has millions of references, and formatting a
/// description for each showed in its validation time).
template <typename What>
Status checkTensorRef(const Plan &p, int32_t t, const What &what, bool allowNone) {
  if (allowNone && t == -1)
    return Status::ok();
  if (t < 0 || t >= p.tensors_size()) {
    if constexpr (std::is_invocable_v<const What &>)
      return errorf(what(), " refers to tensor ", t, " of ", p.tensors_size());
    else
      return errorf(what, " refers to tensor ", t, " of ", p.tensors_size());
  }
  return Status::ok();
}

} // namespace

Status validatePlan(const Plan &p) {
  if (p.format_version() != formatVersion())
    return errorf("plan format version ", p.format_version(), " is not supported (this piperun reads version ",
                  formatVersion(), ")");
  const Pipeline &pl = p.pipeline();
  if (pl.num_stages() < 1 || static_cast<int>(pl.num_stages()) != p.devices_size())
    return errorf("the plan has ", p.devices_size(), " devices for ", pl.num_stages(), " stages");
  if (pl.num_micro_batches() < 1 || pl.num_micro_batches() > kMaxMicroBatches)
    return errorf("the plan has ", pl.num_micro_batches(), " micro-batches (1 to ",
                  kMaxMicroBatches, " are supported)");
  if (pl.num_stages() > kMaxStages)
    return errorf("the plan has ", pl.num_stages(), " stages (at most ", kMaxStages,
                  " are supported)");
  if (pl.data_parallel() > kMaxStages ||
      static_cast<uint64_t>(std::max(pl.data_parallel(), 1u)) * pl.num_stages() > kMaxStages)
    return errorf("the plan has ", pl.data_parallel(), " replicas of ", pl.num_stages(),
                  " stages (at most ", kMaxStages, " devices are supported)");
  // Per-device tables hold one entry per tensor instance (tensors x M).
  if (static_cast<uint64_t>(p.tensors_size()) * pl.num_micro_batches() > (uint64_t(1) << 28))
    return errorf("the plan has ", p.tensors_size(), " tensors x ", pl.num_micro_batches(),
                  " micro-batches, more tensor instances than piperun supports (2^28)");
  for (int i = 0; i < p.tensors_size(); ++i) {
    const TensorInfo &t = p.tensors(i);
    if (!isKnownDType(t.dtype()) || t.dtype() == 0)
      return errorf("tensor ", i, " '", t.name(), "' has unknown dtype ", t.dtype());
    TensorDesc d{static_cast<DType>(t.dtype()), {t.shape().begin(), t.shape().end()}};
    if (!validShape(d.shape, "tensor"))
      return validShape(d.shape, cat("tensor '", t.name(), "'")).status();
    if (t.bytes() != d.bytes())
      return errorf("tensor '", t.name(), "' is ", t.bytes(), " bytes but ", d.str(),
                    " needs ", d.bytes());
    if (t.kind() == TensorInfo::WEIGHT || t.kind() == TensorInfo::CONSTANT) {
      if (t.weight_file() < 0 || t.weight_file() >= p.weight_files_size())
        return errorf("tensor '", t.name(), "' refers to weight file ", t.weight_file());
      const WeightFile &wf = p.weight_files(t.weight_file());
      if (t.weight_offset() > wf.bytes() || wf.bytes() - t.weight_offset() < t.bytes())
        return errorf("tensor '", t.name(), "' lies outside its weight file");
    } else if (t.kind() != TensorInfo::ACTIVATION && t.kind() != TensorInfo::INPUT) {
      return errorf("tensor '", t.name(), "' has unknown kind ", static_cast<int>(t.kind()));
    }
  }
  PIPEC_TRY(checkWeightRegions(p));
  if (pl.shard_optimizer() && !pl.training())
    return errorf("the plan shards an optimizer but does not train");
  if (pl.training()) {
    const Training &tr = p.training();
    PIPEC_TRY(checkTensorRef(p, tr.loss(), "the training loss", false));
    if (std::find(p.outputs().begin(), p.outputs().end(), tr.loss()) == p.outputs().end())
      return errorf("the training loss '", p.tensors(tr.loss()).name(), "' is not a graph output");
    if (tr.params_size() == 0)
      return errorf("the training plan has no parameters");
    const uint32_t replicas = std::max(pl.data_parallel(), 1u);
    if (pl.shard_optimizer() && replicas < 2)
      return errorf("the plan shards its optimizer over ", replicas, " replica(s) (it needs data parallelism)");
    for (const Parameter &pp : tr.params()) {
      PIPEC_TRY(checkTensorRef(p, pp.weight(), "a trained parameter", false));
      if (pp.shard() >= (pl.shard_optimizer() ? replicas : 1u))
        return errorf("parameter '", p.tensors(pp.weight()).name(), "' is updated by replica ", pp.shard(),
                      " of ", pl.shard_optimizer() ? replicas : 1u,
                      pl.shard_optimizer() ? "" : " (the plan's optimizer is not sharded)");
      PIPEC_TRY(checkTensorRef(p, pp.grad(), "a parameter gradient", false));
      const TensorInfo &w = p.tensors(pp.weight()), &g = p.tensors(pp.grad());
      if (w.kind() != TensorInfo::WEIGHT || g.kind() != TensorInfo::ACTIVATION ||
          w.dtype() != 1 || g.dtype() != 1 || w.bytes() != g.bytes())
        return errorf("parameter '", w.name(), "' and its gradient '", g.name(),
                      "' must be f32 tensors of one size, a weight and an activation");
    }
    if (tr.optimizer().empty())
      return errorf("the training plan names no optimizer");
    if (tr.has_loss_scaling()) {
      const LossScaling &ls = tr.loss_scaling();
      PIPEC_TRY(checkTensorRef(p, ls.seed(), "the loss scale's seed", false));
      const TensorInfo &s = p.tensors(ls.seed());
      int exp = 0;
      if (s.kind() != TensorInfo::CONSTANT || s.dtype() != 1 || s.bytes() != sizeof(float))
        return errorf("the loss scale's seed '", s.name(), "' must be an f32 scalar constant");
      if (!(ls.initial_scale() >= 1) || !std::isfinite(ls.initial_scale()) ||
          std::frexp(ls.initial_scale(), &exp) != 0.5 || ls.window() < 1)
        return errorf("the plan's loss scaling starts at ", ls.initial_scale(), " with window ", ls.window(),
                      " (a power of two >= 1 and a window >= 1)");
    }
    if (!(tr.clip_grad_norm() >= 0) || !std::isfinite(tr.clip_grad_norm()))
      return errorf("the training plan's gradient clipping norm is ", tr.clip_grad_norm(),
                    " (it must be a number >= 0)");
    for (const StateUpdate &u : tr.state_updates()) {
      PIPEC_TRY(checkTensorRef(p, u.state(), "an updated state", false));
      PIPEC_TRY(checkTensorRef(p, u.value(), "a state update", false));
      const TensorInfo &st = p.tensors(u.state()), &v = p.tensors(u.value());
      if (st.kind() != TensorInfo::CONSTANT || v.kind() != TensorInfo::ACTIVATION ||
          st.dtype() != v.dtype() || st.bytes() != v.bytes())
        return errorf("state '", st.name(), "' and its update '", v.name(),
                      "' must be a constant and an activation of one type");
    }
  }
  // Inputs are fed, so they must be INPUT tensors, and every INPUT tensor
  // must be one (an input never fed would be read uninitialised).
  std::vector<char> isInput(static_cast<size_t>(p.tensors_size()), 0);
  for (int32_t t : p.inputs()) {
    PIPEC_TRY(checkTensorRef(p, t, "a graph input", false));
    if (p.tensors(t).kind() != TensorInfo::INPUT)
      return errorf("graph input '", p.tensors(t).name(), "' is not an INPUT tensor");
    if (isInput[t]++)
      return errorf("graph input '", p.tensors(t).name(), "' is listed twice");
  }
  for (int i = 0; i < p.tensors_size(); ++i)
    if (p.tensors(i).kind() == TensorInfo::INPUT && !isInput[i])
      return errorf("INPUT tensor '", p.tensors(i).name(), "' is not a graph input: nothing feeds it");
  for (int32_t t : p.outputs())
    PIPEC_TRY(checkTensorRef(p, t, "a graph output", false));
  for (const WeightFile &wf : p.weight_files()) {
    if (wf.referenced()) {
      if (wf.path().empty() || wf.path().find('\0') != std::string::npos)
        return errorf("referenced weight file path '", wf.path(), "' is not a path");
    } else if (wf.path().empty() || wf.path().find("..") != std::string::npos ||
               wf.path()[0] == '/') {
      return errorf("weight file path '", wf.path(), "' must be a plain relative path");
    }
  }
  // Each device's tables are checked on the usable cores at once; the
  // error reported is the lowest device's, whatever the thread count.
  auto checkDeviceTables = [&](int d) -> Status {
    const Device &dev = p.devices(d);
    std::string where = cat("device ", d);
    if (dev.index() != d)
      return errorf(where, " has index ", dev.index());
    if (dev.arena_bytes() > (uint64_t(1) << 50))
      return errorf(where, " asks for an arena of ", dev.arena_bytes(), " bytes");
    for (const Node &n : dev.nodes()) {
      auto node = [&] { return cat(where, " node '", n.name(), "'"); };
      for (int32_t t : n.inputs())
        PIPEC_TRY(checkTensorRef(p, t, node, true));
      if (n.outputs_size() == 0)
        return errorf(where, " node '", n.name(), "' has no outputs");
      for (int32_t t : n.outputs())
        PIPEC_TRY(checkTensorRef(p, t, node, false));
      for (const Guard &gd : n.guards()) {
        PIPEC_TRY(checkTensorRef(p, gd.tensor(), node, false));
        const TensorInfo &ti = p.tensors(gd.tensor());
        if (ti.dtype() != static_cast<int32_t>(DType::Bool) || ti.bytes() != 1)
          return errorf(node(), " is guarded on '", ti.name(), "', which is not one bool");
      }
      for (const Attribute &a : n.attrs())
        if (Status s = checkAttribute(a); !s)
          return s.withContext(node());
    }
    auto allocation = [&] { return where + " allocation"; };
    for (const Allocation &a : dev.allocations()) {
      PIPEC_TRY(checkTensorRef(p, a.tensor(), allocation, false));
      if (a.micro_batch() >= pl.num_micro_batches())
        return errorf(where, " allocates micro-batch ", a.micro_batch(), " of ",
                      pl.num_micro_batches());
      uint64_t bytes = p.tensors(a.tensor()).bytes();
      if (a.offset() % kArenaAlignment != 0)
        return errorf(where, " places tensor '", p.tensors(a.tensor()).name(), "' at offset ",
                      a.offset(), ", not a multiple of ", kArenaAlignment);
      if (a.offset() > dev.arena_bytes() || dev.arena_bytes() - a.offset() < bytes)
        return errorf(where, " places tensor '", p.tensors(a.tensor()).name(),
                      "' outside its arena of ", dev.arena_bytes(), " bytes");
    }
    for (const Instruction &ins : dev.program()) {
      for (int32_t n : ins.nodes())
        if (n < 0 || n >= dev.nodes_size())
          return errorf(where, " instruction refers to node ", n, " of ", dev.nodes_size());
      if (ins.micro_batch() >= pl.num_micro_batches())
        return errorf(where, " instruction for micro-batch ", ins.micro_batch(), " of ",
                      pl.num_micro_batches());
      if (ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV) {
        PIPEC_TRY(checkTensorRef(p, ins.tensor(), [&] { return where + " send/receive"; }, false));
        if (ins.peer() < 0 || ins.peer() >= p.devices_size() || ins.peer() == d)
          return errorf(where, " sends to or receives from device ", ins.peer());
      }
    }
    for (int32_t w : dev.weights())
      PIPEC_TRY(checkTensorRef(p, w, [&] { return where + " weight list"; }, false));
    return Status::ok();
  };
  std::vector<Status> results(static_cast<size_t>(p.devices_size()));
  forEachOnCores(results.size(), [&](size_t d) { results[d] = checkDeviceTables(static_cast<int>(d)); });
  for (Status &r : results)
    PIPEC_TRY(std::move(r));
  return checkSchedule(p);
}

Status writeManifest(const std::string &dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().filename() != kManifestFile)
      names.push_back(e.path().filename().string());
  if (ec)
    return errorf("cannot list '", dir, "': ", ec.message());
  std::sort(names.begin(), names.end());
  std::string text = "pipec-plan-manifest 1\n";
  for (const std::string &n : names) {
    if (n.find_first_of(" \n") != std::string::npos)
      return errorf("cannot list '", n, "' in the plan manifest: its name has a blank");
    // In chunks: a plan's weight file can be larger than memory.
    const std::string path = joinPath(dir, n);
    PIPEC_ASSIGN(uint64_t bytes, regularFileSize(path));
    PIPEC_ASSIGN(uint32_t crc, crc32cOfFileRegion(path, 0, bytes));
    text += cat(hex32(crc), " ", bytes, " ", n, "\n");
  }
  text += cat("manifest ", hex32(crc32c(text.data(), text.size())), "\n");
  return writeFileAtomic(joinPath(dir, kManifestFile), text);
}

Expected<std::string> readVerified(const std::string &dir, const std::string &name) {
  PIPEC_ASSIGN(auto entries, readManifest(dir));
  auto it = entries.find(name);
  if (it == entries.end())
    return errorf("'", joinPath(dir, name), "' is not listed in the plan's ", kManifestFile);
  const std::string path = joinPath(dir, name);
  PIPEC_ASSIGN(std::string bytes, readFile(path));
  if (bytes.size() != it->second.bytes)
    return errorf("'", path, "' has ", bytes.size(), " bytes, the plan's manifest says ",
                  it->second.bytes, " (truncated or replaced)");
  if (crc32c(bytes.data(), bytes.size()) != it->second.crc)
    return errorf("'", path, "' is corrupt: its CRC-32C differs from the plan's manifest");
  return bytes;
}

namespace {

// Reads every WEIGHT/CONSTANT region of the referenced files into a 64-byte
// aligned buffer of its own and checks its CRC-32C; a file whose size
// differs from the plan's is refused before anything is read.
Status loadReferencedWeights(LoadedPlan &lp) {
  const Plan &p = lp.plan;
  lp.regionData.assign(static_cast<size_t>(p.tensors_size()), nullptr);
  for (const WeightFile &wf : p.weight_files()) {
    if (!wf.referenced())
      continue;
    auto size = regularFileSize(wf.path());
    if (!size)
      return size.status().withContext(cat("the plan's weights are in '", wf.path(), "'"));
    if (*size != wf.bytes())
      return errorf("weight file '", wf.path(), "' has ", *size, " bytes, the plan says ", wf.bytes(),
                    " (it changed since the plan was compiled; compile again)");
  }
  for (int32_t i = 0; i < p.tensors_size(); ++i) {
    const TensorInfo &t = p.tensors(i);
    if ((t.kind() != TensorInfo::WEIGHT && t.kind() != TensorInfo::CONSTANT) ||
        !p.weight_files(t.weight_file()).referenced())
      continue;
    const std::string &path = p.weight_files(t.weight_file()).path();
    const size_t alloc = std::max<uint64_t>(t.bytes(), 1);
    char *buf = static_cast<char *>(allocateLarge(alloc));
    if (!buf)
      return errorf("out of memory: weight '", t.name(), "' needs ", alloc, " bytes");
    lp.regionData[static_cast<size_t>(i)] = std::shared_ptr<char>(buf, [](char *q) { std::free(q); });
    uint64_t at = 0;
    uint32_t crc = 0;
    PIPEC_TRY(readFileRegion(path, t.weight_offset(), t.bytes(), [&](const void *d, size_t n) {
      std::memcpy(buf + at, d, n);
      at += n;
      crc = crc32c(d, n, crc);
      return Status::ok();
    }).withContext(cat("loading weight '", t.name(), "'")));
    if (crc != t.crc32c())
      return errorf("weight '", t.name(), "' (", t.bytes(), " bytes at offset ", t.weight_offset(),
                    " of '", path, "') is corrupt or changed since the plan was compiled: its "
                    "CRC-32C differs from the plan's");
  }
  return Status::ok();
}

} // namespace

Expected<LoadedPlan> loadPlan(const std::string &dir, LoadWeights weights) {
  if (!isDirectory(dir))
    return errorf("'", dir, "' is not a plan directory",
                  fileExists(dir) ? " (it is a file; plans are directories written by pipec -o)"
                                  : " (it does not exist)");
  auto bytes = readVerified(dir, kPlanFile);
  if (!bytes)
    return bytes.status().withContext("loading plan");
  LoadedPlan lp;
  lp.dir = dir;
  google::protobuf::io::ArrayInputStream raw(bytes->data(), static_cast<int>(bytes->size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (bytes->empty() || !lp.plan.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return errorf("'", joinPath(dir, kPlanFile), "' is corrupt or truncated: it does not parse as a plan");
  PIPEC_TRY(validatePlan(lp.plan).withContext(cat("invalid plan '", dir, "'")));
  if (weights == LoadWeights::Yes)
    PIPEC_TRY(loadWeights(lp));
  return lp;
}

Status loadWeights(LoadedPlan &lp) {
  const std::string &dir = lp.dir;
  lp.weightData.clear();
  PIPEC_ASSIGN(auto manifest, readManifest(dir));
  for (const WeightFile &wf : lp.plan.weight_files()) {
    if (wf.referenced()) {
      lp.weightData.emplace_back();
      continue;
    }
    std::string path = joinPath(dir, wf.path());
    auto listed = manifest.find(wf.path());
    if (listed == manifest.end() || listed->second.crc != wf.crc32c() ||
        listed->second.bytes != wf.bytes())
      return errorf("weight file '", path, "' is not in the plan's ", kManifestFile,
                    " as plan.pb describes it");
    auto size = regularFileSize(path);
    if (!size)
      return size.status().withContext("loading weights");
    if (*size != wf.bytes())
      return errorf("weight file '", path, "' has ", *size, " bytes, the plan says ", wf.bytes(),
                    " (truncated or replaced)");
    char *buf = static_cast<char *>(allocateLarge(std::max<uint64_t>(*size, 1)));
    if (!buf)
      return errorf("out of memory: weight file '", path, "' needs ", *size, " bytes");
    lp.weightData.emplace_back(buf, [](char *q) { std::free(q); });
    uint64_t at = 0;
    uint32_t crc = 0;
    PIPEC_TRY(readFileRegion(path, 0, *size, [&](const void *d, size_t n) {
      std::memcpy(buf + at, d, n);
      at += n;
      crc = crc32c(d, n, crc);
      return Status::ok();
    }).withContext("loading weights"));
    if (crc != wf.crc32c())
      return errorf("weight file '", path, "' is corrupt: CRC-32C ", crc, ", the plan says ",
                    wf.crc32c());
  }
  return loadReferencedWeights(lp);
}

char *LoadedPlan::weightAddress(int32_t tensor) const {
  if (tensor < 0 || tensor >= plan.tensors_size())
    return nullptr;
  const TensorInfo &ti = plan.tensors(tensor);
  if (ti.kind() != TensorInfo::WEIGHT && ti.kind() != TensorInfo::CONSTANT)
    return nullptr;
  if (plan.weight_files(ti.weight_file()).referenced())
    return regionData[static_cast<size_t>(tensor)].get();
  // Validated by loadPlan: the file holds the region.
  return weightData[static_cast<size_t>(ti.weight_file())].get() + ti.weight_offset();
}

} // namespace pipec::plan
