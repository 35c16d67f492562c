//===- partitioner/CostModel.h - Per-node cost estimates -------*- C++ -*-===//
//
// An analysis (not a pass): FLOPs and bytes moved per node, from static
// shapes, and the time a node takes on a device profile: a measured time
// for this node when one is given (`piperun --profile-ops`, `pipec
// --op-times`); else the profile's op curve for the node's op at its bytes
// (kernels timed by `pipec --calibrate`); else the roofline max(FLOPs /
// peak, bytes / bandwidth), GEMM-like nodes at the GEMM curve's rate. The
// profile's per-node overhead is added to the last two. Backward, weight-gradient and recompute nodes are ordinary IR
// nodes and are costed by their own op types and shapes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "partitioner/DeviceProfile.h"

#include <cstdint>
#include <string>
#include <unordered_map>

namespace pipec::partitioner {

struct NodeCost {
  double flops = 0;      ///< floating-point operations of the forward node
  double bytesRead = 0;  ///< input bytes
  double bytesWritten = 0;
  /// A GEMM or convolution: timed at the profile's GEMM rate for its size.
  bool gemm = false;
  /// GEMM calls the node makes (a MatMul whose B has batch dimensions runs
  /// one GEMM per batch element): each runs at the rate of its own size.
  double calls = 1;
};

/// Forward cost of one node: multiply-adds count 2 FLOPs (GEMM, convolution,
/// Einsum); elementwise and normalisation ops count a small constant per
/// output element; data movement counts 0 FLOPs.
NodeCost forwardCost(const ir::Node &n);

/// The key of a node's op in DeviceProfile::opCurves: its op type,
/// "domain.Op" outside ai.onnx.
std::string opCurveKey(const ir::Node &n);

/// Where a node sits on its op's curve: FLOPs per GEMM call for GEMM-like
/// nodes (whose curves give seconds per call), else bytes read plus
/// written (curves give seconds per node).
double opCurveSize(const NodeCost &c);

/// Times nodes and transfers on one device profile.
struct CostModel {
  DeviceProfile profile;
  /// Measured seconds per micro-batch by node name (--op-times); nodes not
  /// listed fall back to the roofline.
  std::unordered_map<std::string, double> measured;

  /// Seconds one node takes for one micro-batch (see the file comment).
  double nodeTime(const ir::Node &n) const;
  /// Roofline seconds of a cost computed in `dtype`, plus the node overhead.
  double rooflineTime(const NodeCost &c, DType dtype) const;
  /// Seconds to move `bytes` to a neighbour device (0 for nothing).
  double transferTime(double bytes) const {
    return bytes > 0 ? profile.linkLatency + bytes / profile.linkBandwidth : 0;
  }
};

/// Reads measured per-node times: the JSON `piperun --profile-ops FILE`
/// writes ({"micro_batches": M, "nodes": [{"node": NAME, "seconds": S}...]},
/// S per step, so per micro-batch S / M), or a plain object
/// {"NAME": seconds per micro-batch, ...}.
Expected<std::unordered_map<std::string, double>> loadOpTimes(const std::string &path);

} // namespace pipec::partitioner
