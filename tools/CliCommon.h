//===- tools/CliCommon.h - What pipec's tools share at the top --*- C++ -*-===//
//
// Every error of a pipec tool is one line on stderr and exit status 1: a
// command-line mistake (CLI11's own exit codes are 104-114), a Status, and
// what must never escape main: memory running out (std::bad_alloc, which a
// Tensor's OutOfMemory names) or any other exception.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"
#include "support/Tensor.h"

#include <CLI/CLI.hpp>

#include <exception>
#include <new>
#include <optional>

namespace pipec::tools {

/// CLI11's exit for a parse error or --help/--version: 0 for those, 1 for
/// errors (CLI11 prints the message).
inline int cliExit(CLI::App &app, const CLI::ParseError &e) { return app.exit(e) == 0 ? 0 : 1; }

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
