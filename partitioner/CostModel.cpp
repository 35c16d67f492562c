//===- partitioner/CostModel.cpp - Per-node cost estimates ----------------===//
#include "partitioner/CostModel.h"

#include "support/FileIO.h"
#include "support/FusedOps.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace pipec::partitioner {

namespace {
double numel(const ir::Value *v) { return v ? static_cast<double>(v->type().numel()) : 0; }

/// FLOPs per output element of an op without a formula of its own: none
/// for data movement, otherwise by the op's cost trait (ir/Ops.def).
double elementwiseFlops(const ir::Node &n) {
  const ir::OpInfo *info = n.info();
  if (!info || info->has(ir::op::CostMovement))
    return 0;
  if (info->has(ir::op::CostNormalization))
    return 5;
  if (info->has(ir::op::CostTranscendental))
    return 4;
  return 1;
}
} // namespace

NodeCost forwardCost(const ir::Node &n) {
  NodeCost c;
  // A value read twice (pipec:Attention's packed QKV, Mul(x, x)) is read
  // from memory once.
  for (size_t i = 0; i < n.numInputs(); ++i) {
    const ir::Value *v = n.input(i);
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j)
      seen = n.input(j) == v;
    if (v && !seen)
      c.bytesRead += static_cast<double>(v->type().bytes());
  }
  for (const ir::Value *v : n.outputs())
    c.bytesWritten += static_cast<double>(v->type().bytes());
  const std::string &op = n.opType();
  const ir::Value *out = n.output(0);
  const bool fusedGemm = op == "FusedGemm" && n.domain() == "pipec";
  if (op == "MatMul" || op == "Gemm" || fusedGemm) {
    // out = A(...,m,k) x B(k,n): 2*m*n*k per batch; k from A's last axis
    // (first axis when Gemm transposes A).
    const Shape &a = n.input(0)->shape();
    int64_t k = a.empty() ? 1 : a.back();
    if ((op == "Gemm" || fusedGemm) && attrInt(n.attrs(), "transA", 0) && a.size() == 2)
      k = a[0];
    c.flops = 2.0 * numel(out) * static_cast<double>(k);
    c.gemm = true;
    // runtime/cpu/kernels/MatMul.cpp folds A's batch into one GEMM when B
    // has no batch; otherwise it makes one GEMM per output matrix.
    const Shape &b = n.input(1)->shape();
    const Shape &o = out->shape();
    double bBatch = 1;
    for (size_t i = 0; i + 2 < b.size(); ++i)
      bBatch *= static_cast<double>(b[i]);
    if (op == "MatMul" && bBatch > 1 && o.size() >= 2)
      c.calls = numel(out) / (static_cast<double>(o[o.size() - 2]) * static_cast<double>(o.back()));
  } else if (n.domain() == "pipec" && (op == "Attention" || op == "AttentionGrad")) {
    // S = Q KT and O = P V forward; the gradient recomputes S (unless the
    // forward kept P: keep-attention-probs) and forms dV, dP, dQ and dKT
    // (runtime/cpu/kernels/Attention.cpp), one GEMM call per batch entry.
    auto kind = attentionMaskOf(n.attrs());
    if (auto a = attentionDims(n.input(0)->shape(), n.input(1)->shape(), n.input(2)->shape(), n.attrs());
        a && kind) {
      const double batch = static_cast<double>(a->batch()), s = static_cast<double>(a->s),
                   d = static_cast<double>(a->d), t = static_cast<double>(a->t), dv = static_cast<double>(a->dv);
      const bool grad = op == "AttentionGrad";
      const bool given = grad && n.numInputs() == attentionOperands(*kind) + 2;
      c.flops = batch * s * t *
                (given ? 2.0 * (2.0 * d + 2.0 * dv) + 5.0 : grad ? 2.0 * (3.0 * d + 2.0 * dv) + 10.0 : 2.0 * (d + dv) + 5.0);
      c.gemm = true;
      c.calls = batch * (given ? 4.0 : grad ? 5.0 : 2.0);
    }
  } else if (n.domain() == "pipec" && (op == "ConvGradInput" || op == "ConvGradWeight")) {
    // dX = ConvGradInput(dY, W), dW = ConvGradWeight(X, dY): the forward
    // convolution's multiply-adds, once each. The forward output (dY) has
    // numel(dY) elements, each a sum over C/G * prod(kernel) of W's shape
    // [M, C/G, k...], which is input 1 of ConvGradInput and the output of
    // ConvGradWeight.
    const ir::Value *dy = op == "ConvGradInput" ? n.input(0) : n.input(1);
    const Shape &w = op == "ConvGradInput" ? n.input(1)->shape() : out->shape();
    double window = 1;
    for (size_t i = 1; i < w.size(); ++i)
      window *= static_cast<double>(w[i]);
    c.flops = 2.0 * numel(dy) * window;
    c.gemm = true;
  } else if (op == "Conv" || op == "ConvTranspose" || (op == "NhwcConv" && n.domain() == "pipec")) {
    // Weights are [C_out, C_in/group, k...] for Conv (and NhwcConv), whose outputs each sum
    // C_in/group * prod(k) products, and [C_in, C_out/group, k...] for
    // ConvTranspose, whose inputs each scatter over C_out/group * prod(k).
    const Shape &w = n.input(1)->shape();
    double window = 1;
    for (size_t i = 1; i < w.size(); ++i)
      window *= static_cast<double>(w[i]);
    double base = op == "ConvTranspose" ? numel(n.input(0)) : numel(out);
    c.flops = 2.0 * base * window;
    c.gemm = true;
  } else if (op == "Einsum") {
    // Upper bound without parsing: product of output and the largest input.
    double in = 0;
    for (const ir::Value *v : n.inputs())
      in = std::max(in, numel(v));
    c.flops = 2.0 * in;
    c.gemm = true;
  } else if (op.rfind("Reduce", 0) == 0 || op == "GlobalAveragePool" ||
             op == "GlobalMaxPool" || op == "AveragePool" || op == "MaxPool" ||
             ((op == "NhwcMaxPool" || op == "NhwcAveragePool") && n.domain() == "pipec")) {
    c.flops = numel(n.input(0));
  } else if (((op == "Resize" || op == "Upsample") && n.domain().empty()) ||
             (op == "ResizeGrad" && n.domain() == "pipec")) {
    // One pass per resized axis (runtime/cpu/kernels/Resize.cpp), a
    // multiply-add per tap: 2 taps linear, 4 cubic; nearest moves data.
    const std::string mode = attrString(n.attrs(), "mode", "nearest");
    const double taps = mode == "cubic" ? 4 : mode == "linear" ? 2 : 0;
    const Shape &a = n.input(0)->shape(), &b = out->shape();
    double axes = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      axes += a[i] != b[i];
    c.flops = 2.0 * taps * std::max(1.0, axes) * std::max(numel(n.input(0)), numel(out));
  } else if (op == "FusedElementwise" && n.domain() == "pipec") {
    // One operation per program step and element (support/ElementwiseProgram.h).
    const std::vector<int64_t> prog = attrInts(n.attrs(), "program", {});
    c.flops = static_cast<double>(prog.size() > 1 ? (prog.size() - 1) / 3 : 1) * numel(out);
  } else {
    c.flops = elementwiseFlops(n) * numel(out);
  }
  return c;
}

double opCurveSize(const NodeCost &c) {
  return c.gemm ? c.flops / std::max(1.0, c.calls) : c.bytesRead + c.bytesWritten;
}

double CostModel::rooflineTime(const NodeCost &c, DType dtype) const {
  double compute =
      c.flops / (c.gemm ? profile.gemmRate(c.flops / std::max(1.0, c.calls), dtype)
                        : profile.flopsFor(dtype));
  double memory = (c.bytesRead + c.bytesWritten) / profile.memoryBandwidth;
  return std::max(compute, memory) + profile.nodeOverhead;
}

std::string opCurveKey(const ir::Node &n) {
  return n.domain().empty() || n.domain() == "ai.onnx" ? n.opType() : n.domain() + "." + n.opType();
}

double CostModel::nodeTime(const ir::Node &n) const {
  if (ir::isView(n))
    return 0.0; // the plan runs no kernel for it
  if (!measured.empty()) {
    auto it = measured.find(n.name());
    if (it != measured.end())
      return it->second;
  }
  NodeCost c = forwardCost(n);
  const DType dt = n.numOutputs() ? n.output(0)->dtype() : DType::F32;
  if (!profile.opCurves.empty()) {
    const double size = opCurveSize(c);
    double t = profile.opCurveTime(opCurveKey(n), size, c.gemm ? profile.gemmRate(size, dt) : 0.0);
    if (t >= 0)
      return (c.gemm ? std::max(1.0, c.calls) : 1.0) * t + profile.nodeOverhead;
  }
  return rooflineTime(c, dt);
}

Expected<std::unordered_map<std::string, double>> loadOpTimes(const std::string &path) {
  PIPEC_ASSIGN(std::string text, readFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return errorf(path, ": --op-times expects a JSON object");
  std::unordered_map<std::string, double> out;
  if (j.contains("nodes") && j["nodes"].is_array()) {
    double m = j.value("micro_batches", 1.0);
    if (!(m >= 1))
      return errorf(path, ": micro_batches must be at least 1");
    for (const auto &n : j["nodes"]) {
      if (!n.is_object() || !n.contains("node") || !n.contains("seconds") ||
          !n["seconds"].is_number())
        return errorf(path, ": every entry of 'nodes' needs 'node' and 'seconds'");
      out[n["node"].get<std::string>()] += n["seconds"].get<double>() / m;
    }
  } else {
    for (const auto &[k, v] : j.items()) {
      if (!v.is_number())
        return errorf(path, ": the time of node '", k, "' is not a number");
      out[k] = v.get<double>();
    }
  }
  for (const auto &[k, v] : out)
    if (!(v >= 0))
      return errorf(path, ": node '", k, "' has a negative time (", v, " s)");
  return out;
}

} // namespace pipec::partitioner
