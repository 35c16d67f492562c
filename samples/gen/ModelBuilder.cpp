//===- samples/gen/ModelBuilder.cpp - Writing ONNX graphs by hand ---------===//
#include "samples/gen/ModelBuilder.h"

#include "pipec/Version.h"

#include <bit>
#include <cstring>
#include <limits>

namespace pipec::samples {

// Initializers are written as raw_data, which ONNX defines as little-endian.
static_assert(std::endian::native == std::endian::little,
              "raw_data is little-endian; add a byte swap for this target");

Attr Attr::i(const std::string &name, int64_t v) {
  Attr a;
  a.proto.set_name(name);
  a.proto.set_type(onnx::AttributeProto::INT);
  a.proto.set_i(v);
  return a;
}

Attr Attr::f(const std::string &name, float v) {
  Attr a;
  a.proto.set_name(name);
  a.proto.set_type(onnx::AttributeProto::FLOAT);
  a.proto.set_f(v);
  return a;
}

Attr Attr::ints(const std::string &name, const std::vector<int64_t> &v) {
  Attr a;
  a.proto.set_name(name);
  a.proto.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v)
    a.proto.add_ints(x);
  return a;
}

Attr Attr::s(const std::string &name, const std::string &v) {
  Attr a;
  a.proto.set_name(name);
  a.proto.set_type(onnx::AttributeProto::STRING);
  a.proto.set_s(v);
  return a;
}

ModelBuilder::ModelBuilder(std::string graphName, uint64_t seed,
                           std::optional<int64_t> batch, uint64_t maxWeightBytes,
                           bool zeroWeights)
    : init_(seed), batch_(batch), maxWeightBytes_(maxWeightBytes), zeroWeights_(zeroWeights) {
  graph_.set_name(std::move(graphName));
}

Dim ModelBuilder::batchDim() const {
  if (batch_)
    return *batch_;
  return std::string("batch");
}

void ModelBuilder::fail(Status s) {
  if (error_.isOk() && !s.isOk())
    error_ = std::move(s);
}

bool ModelBuilder::claimValue(const std::string &name) {
  if (!ok())
    return false;
  if (name.empty() || !values_.insert(name).second) {
    fail(errorf("internal error: duplicate or empty tensor name '", name, "'"));
    return false;
  }
  return true;
}

bool ModelBuilder::claimNode(const std::string &name) {
  if (!ok())
    return false;
  if (name.empty() || !nodes_.insert(name).second) {
    fail(errorf("internal error: duplicate or empty node name '", name, "'"));
    return false;
  }
  return true;
}

void ModelBuilder::declare(onnx::ValueInfoProto &vi, const std::string &name,
                           onnx::TensorProto::DataType type, const std::vector<Dim> &dims) {
  vi.set_name(name);
  auto *tensor = vi.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(type);
  auto *shape = tensor->mutable_shape();
  for (const Dim &d : dims) {
    auto *dim = shape->add_dim();
    if (const auto *v = std::get_if<int64_t>(&d))
      dim->set_dim_value(*v);
    else
      dim->set_dim_param(std::get<std::string>(d));
  }
}

void ModelBuilder::addInput(const std::string &name, onnx::TensorProto::DataType type,
                            const std::vector<Dim> &dims) {
  if (claimValue(name))
    declare(*graph_.add_input(), name, type, dims);
}

void ModelBuilder::addOutput(const std::string &name, onnx::TensorProto::DataType type,
                             const std::vector<Dim> &dims) {
  if (ok())
    declare(*graph_.add_output(), name, type, dims);
}

std::string ModelBuilder::weight(const std::string &name, const std::vector<int64_t> &dims,
                                 const Init &init, bool trainable) {
  if (!claimValue(name))
    return name;
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) {
      fail(errorf("weight '", name, "' would have a dimension of ", d));
      return name;
    }
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) ||
        n > std::numeric_limits<uint64_t>::max() / sizeof(float)) {
      fail(errorf("weight '", name, "' has more elements than 64 bits count"));
      return name;
    }
  }
  uint64_t bytes = n * sizeof(float);
  if (!zeroWeights_ && bytes > maxWeightBytes_ - std::min(weightBytes_, maxWeightBytes_)) {
    fail(errorf("the weights would exceed the limit of ", maxWeightBytes_ >> 20,
                " MiB at '", name, "' (", n, " elements; ", (weightBytes_ + bytes) >> 20,
                " MiB with the weights before it); choose smaller sizes or raise "
                "--max-weight-mib"));
    return name;
  }
  weightBytes_ += bytes;
  (trainable ? parameters_ : buffers_) += n;

  onnx::TensorProto *t = graph_.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    t->add_dims(d);
  if (zeroWeights_) {
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    return name;
  }
  std::string *raw = t->mutable_raw_data();
  raw->resize(bytes);
  init_.fill(name, init, reinterpret_cast<float *>(raw->data()), n);
  return name;
}

std::string ModelBuilder::constantI64(const std::string &name, const std::vector<int64_t> &dims,
                                      const std::vector<int64_t> &values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims)
    t.add_dims(d);
  for (int64_t v : values)
    t.add_int64_data(v);
  Attr a;
  a.proto.set_name("value");
  a.proto.set_type(onnx::AttributeProto::TENSOR);
  *a.proto.mutable_t() = std::move(t);
  return node("Constant", name, {}, {a});
}

std::string ModelBuilder::constantF32(const std::string &name, const std::vector<int64_t> &dims,
                                      const std::vector<float> &values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    t.add_dims(d);
  for (float v : values)
    t.add_float_data(v);
  Attr a;
  a.proto.set_name("value");
  a.proto.set_type(onnx::AttributeProto::TENSOR);
  *a.proto.mutable_t() = std::move(t);
  return node("Constant", name, {}, {a});
}

std::string ModelBuilder::node(const std::string &opType, const std::string &name,
                               const std::vector<std::string> &inputs,
                               const std::vector<Attr> &attrs, const std::string &output) {
  std::string out = output.empty() ? name : output;
  nodeN(opType, name, inputs, {out}, attrs);
  return out;
}

void ModelBuilder::nodeN(const std::string &opType, const std::string &name,
                         const std::vector<std::string> &inputs,
                         const std::vector<std::string> &outputs,
                         const std::vector<Attr> &attrs) {
  if (!claimNode(name))
    return;
  for (const std::string &in : inputs) {
    if (!in.empty() && !values_.count(in)) {
      fail(errorf("internal error: node '", name, "' reads '", in,
                  "' before anything defines it"));
      return;
    }
  }
  for (const std::string &out : outputs)
    if (!claimValue(out))
      return;
  onnx::NodeProto *n = graph_.add_node();
  n->set_op_type(opType);
  n->set_name(name);
  for (const std::string &in : inputs)
    n->add_input(in);
  for (const std::string &out : outputs)
    n->add_output(out);
  for (const Attr &a : attrs)
    *n->add_attribute() = a.proto;
}

std::string ModelBuilder::batchShape(const std::string &prefix, const std::string &x,
                                     const std::vector<int64_t> &tail) {
  std::string shape = node("Shape", prefix + "/shape", {x});
  std::string index = constantI64(prefix + "/batch_index", {}, {0});
  std::string batch = node("Gather", prefix + "/batch", {shape, index}, {Attr::i("axis", 0)});
  std::string axes = constantI64(prefix + "/unsqueeze_axes", {1}, {0});
  std::string batch1d = node("Unsqueeze", prefix + "/batch_1d", {batch, axes});
  std::string dims =
      constantI64(prefix + "/dims", {static_cast<int64_t>(tail.size())}, tail);
  return node("Concat", prefix + "/target", {batch1d, dims}, {Attr::i("axis", 0)});
}

Expected<BuiltModel> ModelBuilder::finish(
    const std::string &docString,
    const std::vector<std::pair<std::string, std::string>> &metadata) {
  if (!ok())
    return error_;
  for (const auto &out : graph_.output())
    if (!values_.count(out.name()))
      return errorf("internal error: graph output '", out.name(), "' is never computed");
  BuiltModel m;
  m.parameters = parameters_;
  m.buffers = buffers_;
  onnx::ModelProto &p = m.proto;
  p.set_ir_version(kIrVersion);
  p.set_producer_name("pipec-samples");
  p.set_producer_version(PIPEC_VERSION);
  p.set_doc_string(docString);
  auto *opset = p.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpsetVersion);
  for (const auto &[k, v] : metadata) {
    auto *prop = p.add_metadata_props();
    prop->set_key(k);
    prop->set_value(v);
  }
  *p.mutable_graph() = std::move(graph_);
  return m;
}

} // namespace pipec::samples
