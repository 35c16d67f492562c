//===- samples/gen/ModelBuilder.h - Writing ONNX graphs by hand -*- C++ -*-===//
//
// A thin builder over onnx::GraphProto for the sample generators: named
// nodes with one output named like the node, initializers filled from the
// seeded weight generator, Constant nodes for the small shape and scalar
// constants PyTorch's exporter emits, and graph inputs and outputs with a
// symbolic or fixed batch dimension.
//
// Errors are sticky: the first failure (a duplicate name, a non-positive
// dimension, weights over the size budget) is recorded, later calls do
// nothing, and finish() returns it. Model code then reads as a straight
// sequence of layers instead of a ladder of error checks.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "samples/gen/WeightInit.h"
#include "support/Error.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace pipec::samples {

/// The ONNX opset and IR version every sample targets.
inline constexpr int64_t kOpsetVersion = 17;
inline constexpr int64_t kIrVersion = 8;

/// A dimension of a graph input or output: fixed, or symbolic (dim_param).
using Dim = std::variant<int64_t, std::string>;

/// One node attribute, built by the named constructors.
struct Attr {
  onnx::AttributeProto proto;
  static Attr i(const std::string &name, int64_t v);
  static Attr f(const std::string &name, float v);
  static Attr ints(const std::string &name, const std::vector<int64_t> &v);
  static Attr s(const std::string &name, const std::string &v);
};

/// What the generator built, for the summary line and the docs.
struct BuiltModel {
  onnx::ModelProto proto;
  uint64_t parameters = 0; ///< elements of trainable initializers
  uint64_t buffers = 0;    ///< elements of non-trainable ones (running stats)
};

class ModelBuilder {
public:
  /// `batch` fixes the batch dimension; without it the dimension is the
  /// symbol "batch". `maxWeightBytes` bounds the initializers' total size so
  /// that a typo in a size gives an error instead of exhausting memory.
  /// `zeroWeights` leaves every initializer without data, marked
  /// EXTERNAL with no location: writeModel() stores it as a hole (zeros) of
  /// a sparse external data file, and the weight budget does not apply.
  ModelBuilder(std::string graphName, uint64_t seed, std::optional<int64_t> batch,
               uint64_t maxWeightBytes, bool zeroWeights = false);

  /// The batch dimension for input and output declarations.
  Dim batchDim() const;

  void addInput(const std::string &name, onnx::TensorProto::DataType type,
                const std::vector<Dim> &dims);
  void addOutput(const std::string &name, onnx::TensorProto::DataType type,
                 const std::vector<Dim> &dims);

  /// A float32 initializer drawn from `init` (seeded by its name); returns
  /// its name. Buffers (BatchNorm running statistics) are counted apart from
  /// trainable parameters.
  std::string weight(const std::string &name, const std::vector<int64_t> &dims,
                     const Init &init, bool trainable = true);

  /// A Constant node whose output is named like the node; returns that name.
  std::string constantI64(const std::string &name, const std::vector<int64_t> &dims,
                          const std::vector<int64_t> &values);
  std::string constantF32(const std::string &name, const std::vector<int64_t> &dims,
                          const std::vector<float> &values);
  std::string scalarF32(const std::string &name, float value) {
    return constantF32(name, {}, {value});
  }

  /// A node with one output, named `output` or, if empty, like the node.
  std::string node(const std::string &opType, const std::string &name,
                   const std::vector<std::string> &inputs,
                   const std::vector<Attr> &attrs = {}, const std::string &output = "");
  /// A node with several outputs, named `outputs`.
  void nodeN(const std::string &opType, const std::string &name,
             const std::vector<std::string> &inputs, const std::vector<std::string> &outputs,
             const std::vector<Attr> &attrs = {});

  /// The target of a Reshape with a dynamic batch, exported the way PyTorch
  /// does: Shape(x) -> Gather(0) -> Unsqueeze -> Concat with `tail`. Nodes are
  /// named `prefix`/shape, /batch, /batch_1d, /dims, /target.
  std::string batchShape(const std::string &prefix, const std::string &x,
                         const std::vector<int64_t> &tail);

  /// Records an error (the first one wins).
  void fail(Status s);
  bool ok() const { return error_.isOk(); }

  /// The model with opset/IR version and the given doc string and metadata,
  /// or the first recorded error.
  Expected<BuiltModel> finish(const std::string &docString,
                              const std::vector<std::pair<std::string, std::string>> &metadata);

private:
  bool claimValue(const std::string &name);
  bool claimNode(const std::string &name);
  void declare(onnx::ValueInfoProto &vi, const std::string &name,
               onnx::TensorProto::DataType type, const std::vector<Dim> &dims);

  onnx::GraphProto graph_;
  WeightInit init_;
  std::optional<int64_t> batch_;
  uint64_t maxWeightBytes_;
  bool zeroWeights_;
  uint64_t weightBytes_ = 0;
  uint64_t parameters_ = 0, buffers_ = 0;
  std::set<std::string> values_, nodes_;
  Status error_;
};

} // namespace pipec::samples
