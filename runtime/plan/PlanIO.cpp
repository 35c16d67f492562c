//===- runtime/plan/PlanIO.cpp - Reading and writing plan directories -----===//
#include "runtime/plan/PlanIO.h"

#include "runtime/plan/ScheduleCheck.h"

#include "pipec/Version.h"
#include "support/Tensor.h"
#include "support/FileIO.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <limits>
#include <set>

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

Status checkTensorRef(const Plan &p, int32_t t, const std::string &what, bool allowNone) {
  if (allowNone && t == -1)
    return Status::ok();
  if (t < 0 || t >= p.tensors_size())
    return errorf(what, " refers to tensor ", t, " of ", p.tensors_size());
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
  if (pl.num_micro_batches() < 1)
    return errorf("the plan has ", pl.num_micro_batches(), " micro-batches");
  for (int i = 0; i < p.tensors_size(); ++i) {
    const TensorInfo &t = p.tensors(i);
    if (!isKnownDType(t.dtype()) || t.dtype() == 0)
      return errorf("tensor ", i, " '", t.name(), "' has unknown dtype ", t.dtype());
    TensorDesc d{static_cast<DType>(t.dtype()), {t.shape().begin(), t.shape().end()}};
    for (int64_t dim : d.shape)
      if (dim < 0)
        return errorf("tensor '", t.name(), "' has negative dimension");
    if (t.bytes() != d.bytes())
      return errorf("tensor '", t.name(), "' is ", t.bytes(), " bytes but ", d.str(),
                    " needs ", d.bytes());
    if (t.kind() == TensorInfo::WEIGHT || t.kind() == TensorInfo::CONSTANT) {
      if (t.weight_file() < 0 || t.weight_file() >= p.weight_files_size())
        return errorf("tensor '", t.name(), "' refers to weight file ", t.weight_file());
      const WeightFile &wf = p.weight_files(t.weight_file());
      if (t.weight_offset() > wf.bytes() || wf.bytes() - t.weight_offset() < t.bytes())
        return errorf("tensor '", t.name(), "' lies outside its weight file");
    }
  }
  if (pl.training()) {
    const Training &tr = p.training();
    PIPEC_TRY(checkTensorRef(p, tr.loss(), "the training loss", false));
    if (tr.params_size() == 0)
      return errorf("the training plan has no parameters");
    for (const Parameter &pp : tr.params()) {
      PIPEC_TRY(checkTensorRef(p, pp.weight(), "a trained parameter", false));
      PIPEC_TRY(checkTensorRef(p, pp.grad(), "a parameter gradient", false));
      const TensorInfo &w = p.tensors(pp.weight()), &g = p.tensors(pp.grad());
      if (w.kind() != TensorInfo::WEIGHT || g.kind() != TensorInfo::ACTIVATION ||
          w.dtype() != 1 || g.dtype() != 1 || w.bytes() != g.bytes())
        return errorf("parameter '", w.name(), "' and its gradient '", g.name(),
                      "' must be f32 tensors of one size, a weight and an activation");
    }
    if (tr.optimizer().empty())
      return errorf("the training plan names no optimizer");
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
  for (int32_t t : p.inputs())
    PIPEC_TRY(checkTensorRef(p, t, "a graph input", false));
  for (int32_t t : p.outputs())
    PIPEC_TRY(checkTensorRef(p, t, "a graph output", false));
  for (const WeightFile &wf : p.weight_files())
    if (wf.path().empty() || wf.path().find("..") != std::string::npos || wf.path()[0] == '/')
      return errorf("weight file path '", wf.path(), "' must be a plain relative path");
  for (int d = 0; d < p.devices_size(); ++d) {
    const Device &dev = p.devices(d);
    std::string where = cat("device ", d);
    if (dev.index() != d)
      return errorf(where, " has index ", dev.index());
    for (const Node &n : dev.nodes()) {
      for (int32_t t : n.inputs())
        PIPEC_TRY(checkTensorRef(p, t, cat(where, " node '", n.name(), "'"), true));
      for (int32_t t : n.outputs())
        PIPEC_TRY(checkTensorRef(p, t, cat(where, " node '", n.name(), "'"), false));
    }
    for (const Allocation &a : dev.allocations()) {
      PIPEC_TRY(checkTensorRef(p, a.tensor(), where + " allocation", false));
      if (a.micro_batch() >= pl.num_micro_batches())
        return errorf(where, " allocates micro-batch ", a.micro_batch(), " of ",
                      pl.num_micro_batches());
      uint64_t bytes = p.tensors(a.tensor()).bytes();
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
        PIPEC_TRY(checkTensorRef(p, ins.tensor(), where + " send/receive", false));
        if (ins.peer() < 0 || ins.peer() >= p.devices_size() || ins.peer() == d)
          return errorf(where, " sends to or receives from device ", ins.peer());
      }
    }
    for (int32_t w : dev.weights())
      PIPEC_TRY(checkTensorRef(p, w, where + " weight list", false));
  }
  return checkSchedule(p);
}

Expected<LoadedPlan> loadPlan(const std::string &dir) {
  if (!isDirectory(dir))
    return errorf("'", dir, "' is not a plan directory",
                  fileExists(dir) ? " (it is a file; plans are directories written by pipec -o)"
                                  : " (it does not exist)");
  auto bytes = readFile(joinPath(dir, kPlanFile));
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
  for (const WeightFile &wf : lp.plan.weight_files()) {
    std::string path = joinPath(dir, wf.path());
    auto data = readFile(path);
    if (!data)
      return data.status().withContext("loading weights");
    if (data->size() != wf.bytes())
      return errorf("weight file '", path, "' has ", data->size(), " bytes, the plan says ",
                    wf.bytes(), " (truncated or replaced)");
    uint32_t crc = crc32c(data->data(), data->size());
    if (crc != wf.crc32c())
      return errorf("weight file '", path, "' is corrupt: CRC-32C ", crc, ", the plan says ",
                    wf.crc32c());
    lp.weightData.push_back(data.take());
  }
  return lp;
}

} // namespace pipec::plan
