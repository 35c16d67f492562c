//===- partitioner/DeviceProfile.cpp - What a device can do ---------------===//
#include "partitioner/DeviceProfile.h"

#include "support/FileIO.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#ifndef PIPEC_PROFILE_DIR
#define PIPEC_PROFILE_DIR "partitioner/profiles"
#endif

namespace pipec::partitioner {

using nlohmann::json;

double DeviceProfile::flopsFor(DType dtype) const {
  const char *want = dtype == DType::F16    ? "fp16"
                     : dtype == DType::BF16 ? "bf16"
                                            : defaultPrecision.c_str();
  auto it = peakFlops.find(want);
  if (it == peakFlops.end())
    it = peakFlops.find("fp32");
  return it == peakFlops.end() ? peakFlops.begin()->second : it->second;
}

namespace {
using Curve = std::vector<std::pair<double, double>>;

/// For x strictly inside an ascending curve: the index i of the point
/// right of x and where x lies between points i-1 and i, as a fraction of
/// their distance in log(x).
std::pair<size_t, double> logSegment(const Curve &c, double x) {
  size_t i = 1;
  while (c[i].first < x)
    ++i;
  const double x0 = c[i - 1].first, x1 = c[i].first;
  return {i, (std::log(x) - std::log(x0)) / (std::log(x1) - std::log(x0))};
}
} // namespace

double DeviceProfile::gemmRate(double flops, DType dtype) const {
  if (gemmCurve.empty() || dtype == DType::F16 || dtype == DType::BF16 || !(flops > 0))
    return flopsFor(dtype);
  if (flops <= gemmCurve.front().first)
    return gemmCurve.front().second;
  if (flops >= gemmCurve.back().first)
    return gemmCurve.back().second;
  auto [i, t] = logSegment(gemmCurve, flops);
  const double r0 = gemmCurve[i - 1].second, r1 = gemmCurve[i].second;
  return r0 + t * (r1 - r0);
}

double DeviceProfile::opCurveTime(const std::string &key, double size, double marginalRate) const {
  auto it = opCurves.find(key);
  if (it == opCurves.end() || it->second.empty())
    return -1;
  const Curve &c = it->second;
  if (size >= c.back().first && marginalRate > 0)
    return c.back().second + (size - c.back().first) / marginalRate;
  if (!(size > c.front().first))
    return c.front().second;
  if (size >= c.back().first)
    return c.back().second * size / c.back().first;
  auto [i, f] = logSegment(c, size);
  const double t0 = c[i - 1].second, t1 = c[i].second;
  return std::exp(std::log(t0) + f * (std::log(t1) - std::log(t0)));
}

double DeviceProfile::gradientAccumulateSecondsPerElement() const {
  // Reads the gradient and the sum, writes the sum.
  return accumulateSecondsPerElement > 0 ? accumulateSecondsPerElement
                                         : 3 * sizeof(float) / memoryBandwidth;
}

double DeviceProfile::optimizerStepSecondsPerParameter(const std::string &kind, int states) const {
  auto it = optimizerStepSeconds.find(kind);
  if (it != optimizerStepSeconds.end())
    return it->second;
  // Bytes per element: the step scales the sum (read, write), reads it for
  // the norm, and reads parameter, gradient and states, writing parameter
  // and states.
  const double f = sizeof(float);
  return (3 * f + (2 + states) * f + (1 + states) * f) / memoryBandwidth;
}

std::string profileDirectory() {
  if (const char *env = std::getenv("PIPEC_PROFILE_DIR"); env && *env)
    return env;
  return PIPEC_PROFILE_DIR;
}

std::string userProfileDirectory() {
  if (const char *env = std::getenv("PIPEC_USER_PROFILE_DIR"); env && *env)
    return env;
  if (const char *xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
    return joinPath(joinPath(xdg, "pipec"), "profiles");
  if (const char *home = std::getenv("HOME"); home && *home)
    return joinPath(joinPath(joinPath(home, ".config"), "pipec"), "profiles");
  return "";
}

std::string profileFile(const std::string &name) {
  for (const std::string &dir : {userProfileDirectory(), profileDirectory()}) {
    if (dir.empty())
      continue;
    std::string file = joinPath(dir, name + ".json");
    if (fileExists(file))
      return file;
  }
  return "";
}

std::vector<std::string> listProfiles() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(profileDirectory(), ec))
    if (e.path().extension() == ".json")
      names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
/// A list of [x, y] pairs, both positive, ascending in x; `what` names the
/// profile, `name` the curve and `units` its pair ("[FLOPs, FLOP/s]").
Expected<Curve> parseCurve(const json &c, const std::string &what, const std::string &name,
                           const char *units) {
  if (!c.is_array() || c.empty())
    return errorf(what, ": ", name, " must be a non-empty list of ", units, " pairs");
  Curve out;
  for (const json &e : c) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_number() || !e[1].is_number() ||
        !(e[0].get<double>() > 0) || !(e[1].get<double>() > 0))
      return errorf(what, ": ", name, " entries must be ", units, ", both positive");
    if (!out.empty() && !(e[0].get<double>() > out.back().first))
      return errorf(what, ": ", name, " must be ascending in its first value");
    out.emplace_back(e[0].get<double>(), e[1].get<double>());
  }
  return out;
}

Expected<double> positive(const json &j, const char *key, const std::string &what) {
  if (!j.contains(key) || !j[key].is_number())
    return errorf(what, ": the profile has no number '", key, "'");
  double v = j[key].get<double>();
  if (!(v > 0) || !std::isfinite(v))
    return errorf(what, ": '", key, "' must be positive (got ", v, ")");
  return v;
}
} // namespace

Expected<DeviceProfile> parseProfile(const json &j, const std::string &what) {
  if (!j.is_object())
    return errorf(what, ": a device profile is a JSON object");
  DeviceProfile p;
  p.raw = j;
  p.name = j.value("name", "");
  if (p.name.empty())
    return errorf(what, ": the profile has no 'name'");
  p.description = j.value("description", "");
  p.kind = j.value("kind", "");
  p.source = j.value("source", "");
  if (p.source.empty())
    return errorf(what, ": the profile has no 'source' (a data sheet or a measurement)");
  p.assumptions = j.value("assumptions", "");
  p.measuredAt = j.value("measured_at", "");
  if (j.contains("concurrent_slowdown")) {
    const json &c = j["concurrent_slowdown"];
    if (!c.is_number() || !(c.get<double>() >= 0.5 && c.get<double>() <= 4))
      return errorf(what, ": 'concurrent_slowdown' must be a number in [0.5, 4]");
    p.concurrentSlowdown = c.get<double>();
  }
  p.defaultPrecision = j.value("default_precision", "fp32");
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object() || j["peak_flops"].empty())
    return errorf(what, ": the profile has no 'peak_flops' object (e.g. {\"fp32\": 1.57e13})");
  for (const auto &[k, v] : j["peak_flops"].items()) {
    if (!v.is_number() || !(v.get<double>() > 0))
      return errorf(what, ": peak_flops.", k, " must be a positive number");
    p.peakFlops[k] = v.get<double>();
  }
  if (!p.peakFlops.count(p.defaultPrecision))
    return errorf(what, ": default_precision '", p.defaultPrecision, "' has no peak_flops entry");
  PIPEC_ASSIGN(p.memoryBandwidth, positive(j, "memory_bandwidth_bytes_per_s", what));
  PIPEC_ASSIGN(p.memoryCapacity, positive(j, "memory_capacity_bytes", what));
  PIPEC_ASSIGN(p.linkBandwidth, positive(j, "link_bandwidth_bytes_per_s", what));
  PIPEC_ASSIGN(p.linkLatency, positive(j, "link_latency_s", what));
  PIPEC_ASSIGN(p.nodeOverhead, positive(j, "node_overhead_s", what));
  if (j.contains("gemm_curve")) {
    PIPEC_ASSIGN(p.gemmCurve, parseCurve(j["gemm_curve"], what, "gemm_curve", "[FLOPs, FLOP/s]"));
  }
  if (j.contains("op_curves")) {
    const json &oc = j["op_curves"];
    if (!oc.is_object())
      return errorf(what, ": op_curves must map op names to lists of [size, seconds] pairs");
    for (const auto &[op, c] : oc.items()) {
      PIPEC_ASSIGN(p.opCurves[op], parseCurve(c, what, "op_curves." + op, "[size, seconds]"));
    }
  }
  if (j.contains("gradient_accumulate_seconds_per_element")) {
    PIPEC_ASSIGN(p.accumulateSecondsPerElement,
                 positive(j, "gradient_accumulate_seconds_per_element", what));
  }
  if (j.contains("optimizer_step_seconds_per_element")) {
    const json &o = j["optimizer_step_seconds_per_element"];
    if (!o.is_object())
      return errorf(what, ": optimizer_step_seconds_per_element must map optimizer kinds to seconds");
    for (const auto &[k, v] : o.items()) {
      if (!v.is_number() || !(v.get<double>() > 0))
        return errorf(what, ": optimizer_step_seconds_per_element.", k, " must be a positive number");
      p.optimizerStepSeconds[k] = v.get<double>();
    }
  }
  return p;
}

json profileToJson(const DeviceProfile &p) {
  json j = p.raw.is_object() ? p.raw : json::object();
  j["name"] = p.name;
  j["description"] = p.description;
  j["kind"] = p.kind;
  j["peak_flops"] = p.peakFlops;
  j["default_precision"] = p.defaultPrecision;
  j["memory_bandwidth_bytes_per_s"] = p.memoryBandwidth;
  j["memory_capacity_bytes"] = p.memoryCapacity;
  j["link_bandwidth_bytes_per_s"] = p.linkBandwidth;
  j["link_latency_s"] = p.linkLatency;
  j["node_overhead_s"] = p.nodeOverhead;
  if (!p.gemmCurve.empty())
    j["gemm_curve"] = p.gemmCurve;
  if (!p.opCurves.empty())
    j["op_curves"] = p.opCurves;
  if (p.accumulateSecondsPerElement > 0)
    j["gradient_accumulate_seconds_per_element"] = p.accumulateSecondsPerElement;
  if (!p.optimizerStepSeconds.empty())
    j["optimizer_step_seconds_per_element"] = p.optimizerStepSeconds;
  j["source"] = p.source;
  if (!p.measuredAt.empty())
    j["measured_at"] = p.measuredAt;
  if (p.concurrentSlowdown != 1)
    j["concurrent_slowdown"] = p.concurrentSlowdown;
  if (!p.assumptions.empty())
    j["assumptions"] = p.assumptions;
  return j;
}

namespace {
Expected<DeviceProfile> loadFile(const std::string &path) {
  PIPEC_ASSIGN(std::string text, readFile(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded())
    return errorf(path, ": not valid JSON");
  return parseProfile(j, path);
}
} // namespace

Expected<DeviceProfile> loadProfile(const std::string &nameOrPath) {
  bool isPath = nameOrPath.find('/') != std::string::npos ||
                (nameOrPath.size() > 5 && nameOrPath.compare(nameOrPath.size() - 5, 5, ".json") == 0);
  if (isPath)
    return loadFile(nameOrPath);
  if (std::string file = profileFile(nameOrPath); !file.empty())
    return loadFile(file);
  std::string dir = profileDirectory();
  std::vector<std::string> names = listProfiles();
  for (const std::string &n : names) {
    auto text = readFile(joinPath(dir, n + ".json"));
    if (!text)
      continue;
    json j = json::parse(*text, nullptr, false);
    if (j.is_object() && j.contains("aliases") && j["aliases"].is_array())
      for (const json &a : j["aliases"])
        if (a.is_string() && a.get<std::string>() == nameOrPath)
          return parseProfile(j, joinPath(dir, n + ".json"));
  }
  std::string known;
  for (const std::string &n : names)
    known += (known.empty() ? "" : ", ") + n;
  return errorf("unknown device profile '", nameOrPath, "' (profiles in ", dir, ": ",
                known.empty() ? "none" : known, "; or give a FILE.json)");
}

Expected<double> parseByteSize(const std::string &s) {
  size_t i = 0;
  double v = 0;
  try {
    v = std::stod(s, &i);
  } catch (const std::exception &) {
    return errorf("'", s, "' is not a size (e.g. 16GiB, 512MiB, 8GB)");
  }
  std::string unit = s.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  static const std::pair<const char *, double> kUnits[] = {
      {"", 1},      {"B", 1},       {"KB", 1e3},          {"MB", 1e6},
      {"GB", 1e9},  {"TB", 1e12},   {"KiB", 1024.0},      {"MiB", 1048576.0},
      {"GiB", 1073741824.0},        {"TiB", 1099511627776.0}};
  for (const auto &[u, scale] : kUnits)
    if (unit == u) {
      if (!(v > 0))
        return errorf("the size '", s, "' must be positive");
      return v * scale;
    }
  return errorf("'", s, "': unknown unit '", unit, "' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
}

} // namespace pipec::partitioner
