//===- tools/CliCommon.h - What pipec's tools share at the top --*- C++ -*-===//
//
// Every error of a pipec tool is one line on stderr and exit status 1: a
// command-line mistake (CLI11's own exit codes are 104-114), a Status, and
// what must never escape main: memory running out (std::bad_alloc, which a
// Tensor's OutOfMemory names) or any other exception.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "pipec/Version.h"
#include "runtime/cpu/CpuIsa.h"
#include "support/Error.h"
#include "support/Tensor.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <exception>
#include <iostream>
#include <string>
#include <unistd.h>
#include <new>
#include <optional>

namespace pipec::tools {

/// CLI11's exit for a parse error or --help/--version: 0 for those, 1 for
/// errors (CLI11 prints the message).
inline int cliExit(CLI::App &app, const CLI::ParseError &e) { return app.exit(e) == 0 ? 0 : 1; }

/// The tools' --version: the version, the plan format, and the paths the
/// CPU kernels take on this machine (runtime/cpu/CpuIsa.h).
inline std::string versionLine(const char *tool) {
  const std::string isa = cpu::checkCpuIsaEnvironment()
                              ? cpu::cpuIsaDescription()
                              : cat("host ", cpu::cpuIsaName(cpu::hostCpuIsa()), "; PIPEC_MAX_CPU_ISA is not a level");
  return cat(tool, " ", PIPEC_VERSION, " (plan format ", PIPEC_PLAN_FORMAT_VERSION, "; CPU kernels: ", isa, ")");
}

/// Runs `f` (returning Status); exceptions become errors.
template <typename F> Status guarded(F &&f) {
  try {
    return f();
  } catch (const std::bad_alloc &e) {
    const std::string what = e.what();
    return errorf(what.rfind("out of memory", 0) == 0 ? what : "out of memory (" + what + ")");
  } catch (const TensorReadError &e) {
    return errorf(e.what());
  } catch (const std::exception &e) {
    return errorf("internal error: ", e.what());
  }
}

/// Writes `line` to stderr in one write(2): under mpirun the ranks' stderr
/// pipes are merged as they are read, and a line written piece by piece
/// (std::cerr sends each << on its own) can come out spliced into another
/// rank's (seen under AddressSanitizer, where the ranks run slower).
inline void writeStderrLine(const std::string &line) {
  std::cerr.flush();
  const char *p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

/// guarded() for a function returning Expected<T>.
template <typename F> auto guardedValue(F &&f) -> decltype(f()) {
  using Result = decltype(f());
  std::optional<Result> out;
  Status s = guarded([&]() -> Status {
    out.emplace(f());
    return out->status();
  });
  if (!s)
    return s;
  return std::move(*out);
}

} // namespace pipec::tools
