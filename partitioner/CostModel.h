//===- partitioner/CostModel.h - Per-node cost estimates -------*- C++ -*-===//
//
// An analysis (not a pass): FLOPs and bytes moved per node, from static
// shapes. Issue-level device profiles and roofline timing build on these
// counts.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cstdint>

namespace pipec::partitioner {

struct NodeCost {
  double flops = 0;      ///< floating-point operations of the forward node
  double bytesRead = 0;  ///< input bytes
  double bytesWritten = 0;
};

/// Forward cost of one node: multiply-adds count 2 FLOPs (GEMM, convolution,
/// Einsum); elementwise and normalisation ops count a small constant per
/// output element; data movement counts 0 FLOPs.
NodeCost forwardCost(const ir::Node &n);

} // namespace pipec::partitioner
