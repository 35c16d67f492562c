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

private:
  /// A node input that names a value defined later in the file.
  struct PendingInput {
    ir::Node *node;
    size_t slot;
    std::string value;
    std::string where;
  };

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
};

} // namespace pipec::frontend::detail
