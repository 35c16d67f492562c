//===- frontend/OnnxImporterImpl.h - The importer's state -------*- C++ -*-===//
//
// Private to frontend/: the state one import carries through its phases,
// shared by OnnxImporter.cpp (opsets, initializers, nodes, outputs) and
// OnnxInputs.cpp (graph inputs, symbolic dimensions, frozen inputs).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "frontend/OnnxImporter.h"

#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace pipec::frontend::detail {

/// "ai.onnx" for the default domain, else the domain itself.
std::string domainName(const std::string &canonical);

class Importer {
public:
  Importer(const onnx::ModelProto &model, const ImportOptions &opts, std::string baseDir);
  /// Runs every phase; the importer is spent afterwards.
  Expected<std::unique_ptr<ir::Graph>> run();

  /// A graph attribute imported on its own: its formal inputs, then one
  /// input per outer value it reads by name (`captures`, in first-use
  /// order).
  struct ImportedSubgraph {
    std::unique_ptr<ir::Graph> graph;
    size_t numFormalInputs = 0;
    std::vector<std::string> captures;
  };

private:
  /// A node input that names a value defined later in the file.
  struct PendingInput {
    ir::Node *node;
    size_t slot;
    std::string value;
    std::string where;
  };

  /// The importer of a graph attribute of a node of `parent`'s graph.
  Importer(const onnx::ModelProto &model, const onnx::GraphProto &body, const ImportOptions &opts,
           std::string baseDir, Importer *parent);
  Expected<ImportedSubgraph> runSubgraph();
  Status importSubgraphInputs();
  /// A subgraph's value `name` defined outside it: a capture input.
  ir::Value *capture(const std::string &name);
  /// Imports the graph attributes of node `n` into `subgraphs` (by
  /// attribute name), appending each captured outer value to `inputs` (or
  /// to `later` when the outer graph defines it further on) and its slot
  /// there to `slots` of the attribute.
  Status importSubgraphs(const onnx::NodeProto &n, const std::string &where,
                         std::vector<ir::Value *> &inputs,
                         std::vector<std::pair<size_t, std::string>> &later,
                         std::map<std::string, ImportedSubgraph> &subgraphs,
                         std::map<std::string, std::vector<size_t>> &slots);
  Status checkOptions();
  Status importOpsets();
  void reserveNames();
  Status importInitializers();
  Status importInputs();
  Status importInput(const onnx::ValueInfoProto &vi);
  Expected<Shape> bindShape(const onnx::ValueInfoProto &vi);
  Status checkDeclared(const onnx::ValueInfoProto &vi, const TensorDesc &actual,
                       const std::string &what);
  Status importConstantNodes();
  Expected<Tensor> constantNodeValue(const onnx::NodeProto &n);
  Status importNodes();
  Status importNode(const onnx::NodeProto &n, const std::string &name);
  Status importOutputs();
  Status checkDomain(const onnx::NodeProto &n, size_t index);
  /// "node 'n' (op type 'T', domain ai.onnx, opset 13)" for error messages.
  std::string describe(const std::string &name, const std::string &opType,
                       const std::string &domain) const;
  /// A value (node=false) or node name derived from `base`, unused in the
  /// graph and in the file.
  std::string freshName(const std::string &base, bool node);

  const onnx::ModelProto &model_;
  const onnx::GraphProto &graph_;
  const ImportOptions &opts_;
  std::string baseDir_;
  std::unique_ptr<ir::Graph> g_;
  std::map<std::string, const onnx::TensorProto *> initializers_;
  /// Symbolic dimension names that -b/--batch binds: those at dimension 0
  /// of some graph input (a name means one size wherever it appears).
  std::set<std::string> batchNames_;
  /// --dim INPUT:AXIS=N: dimensions bound by input and axis (named or not).
  std::map<std::pair<std::string, int64_t>, int64_t> axisDims_;
  /// Value and node names the file declares.
  std::set<std::string> reservedValues_, reservedNodes_;
  std::vector<PendingInput> pending_;
  /// The importer of the graph this subgraph belongs to; null at the top.
  Importer *parent_ = nullptr;
  /// Subgraphs this one is nested in (0 at the top).
  int depth_ = 0;
  /// A subgraph's captured outer values, in first-use order.
  std::vector<std::string> captures_;
};

} // namespace pipec::frontend::detail
