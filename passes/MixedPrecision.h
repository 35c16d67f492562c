//===- passes/MixedPrecision.h - pipec --precision --------------*- C++ -*-===//
//
// The mixed-precision pass (passes/MixedPrecision.cpp): the matrix
// products' and convolutions' operands read through bf16 or fp16 copies,
// fp32 everywhere else. The driver runs it after autodiff and the GEMM
// epilogues, before fuse-elementwise (driver/Driver.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "passes/Pass.h"

#include <memory>
#include <string>
#include <vector>

namespace pipec::passes {

enum class Precision { Fp32, Bf16, Fp16 };

/// "fp32", "bf16" or "fp16"; an error naming the option otherwise.
Expected<Precision> parsePrecision(const std::string &s);

struct MixedPrecisionOptions {
  Precision precision = Precision::Fp32;
  /// Nodes whose operands stay fp32 (names as --emit=ir prints them).
  std::vector<std::string> keepFp32;
};

std::unique_ptr<Pass> createMixedPrecisionPass(MixedPrecisionOptions o);

} // namespace pipec::passes
