//===- frontend/OnnxInputs.cpp - Graph inputs of an ONNX model ------------===//
//
// Turns the graph inputs of an ONNX model into typed ir inputs. pipec
// compiles static shapes, so every symbolic dimension must be bound here:
// by name (--dim N=8) first, else by -b/--batch when it is the leading
// dimension. A name means one size wherever it appears, so a name that
// --batch binds at dimension 0 of one input is bound at every position.
// Inputs backed by an initializer (the old IR < 4 form, or an overridable
// default in newer models) are weights: they stay constants. Frozen inputs
// become constants holding the caller's tensors.
//
//===----------------------------------------------------------------------===//
#include "frontend/OnnxImporterImpl.h"

namespace pipec::frontend::detail {

namespace {

bool isSupportedElemType(int32_t t) {
  return t != 0 && t != static_cast<int32_t>(DType::String) && isKnownDType(t);
}

// pipec's name for types it supports (as the IR prints them), ONNX's for
// the others (STRING, COMPLEX64...), which pipec has no name for.
std::string elemTypeName(int32_t t) {
  if (isSupportedElemType(t))
    return std::string(dtypeName(static_cast<DType>(t)));
  if (onnx::TensorProto_DataType_IsValid(t))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  return cat("<data type ", t, ">");
}

// "a sequence", "an optional"... for messages.
const char *typeKind(const onnx::TypeProto &t) {
  switch (t.value_case()) {
  case onnx::TypeProto::kTensorType: return "a tensor";
  case onnx::TypeProto::kSequenceType: return "a sequence";
  case onnx::TypeProto::kMapType: return "a map";
  case onnx::TypeProto::kOptionalType: return "an optional";
  case onnx::TypeProto::kSparseTensorType: return "a sparse tensor";
  default: return "a value without a type";
  }
}

/// The declared type as written in the model: "f32[N,3,?]".
std::string declaredStr(const onnx::TypeProto_Tensor &tt) {
  std::string s = elemTypeName(tt.elem_type());
  if (!tt.has_shape())
    return s + " of any shape";
  s += '[';
  for (int k = 0; k < tt.shape().dim_size(); ++k) {
    const auto &d = tt.shape().dim(k);
    s += k ? "," : "";
    s += d.has_dim_value() ? std::to_string(d.dim_value())
         : d.dim_param().empty() ? std::string("?")
                                 : d.dim_param();
  }
  return s + ']';
}

bool isSymbolic(const onnx::TensorShapeProto_Dimension &d) {
  // Some exporters write -1 for a dynamic dimension instead of leaving it
  // unset; it means the same.
  return !d.has_dim_value() || d.dim_value() < 0;
}

} // namespace

Status Importer::checkOptions() {
  if (opts_.batch && *opts_.batch <= 0)
    return errorf("the batch size must be positive, got ", *opts_.batch);
  for (const auto &[name, v] : opts_.dims)
    if (v <= 0)
      return errorf("dimension '", name, "' is bound to ", v,
                    "; a dimension must be positive");
  return Status::ok();
}

Status Importer::importInputs() {
  std::set<std::string> names;
  for (int i = 0; i < graph_.input_size(); ++i) {
    const std::string &name = graph_.input(i).name();
    if (name.empty())
      return errorf("graph input ", i, " has no name");
    if (!names.insert(name).second)
      return errorf("graph input '", name, "' is listed twice");
  }
  for (const auto &[name, t] : opts_.freezeInputs) {
    if (!names.count(name))
      return errorf("cannot freeze '", name, "': the model has no graph input of that name");
    if (t.empty())
      return errorf("cannot freeze '", name, "': the given tensor is empty (no type)");
  }
  if (opts_.batch)
    for (const auto &vi : graph_.input()) {
      if (opts_.freezeInputs.count(vi.name()) || initializers_.count(vi.name()) ||
          vi.type().value_case() != onnx::TypeProto::kTensorType)
        continue;
      const auto &tt = vi.type().tensor_type();
      if (tt.has_shape() && tt.shape().dim_size() > 0 && isSymbolic(tt.shape().dim(0)) &&
          !tt.shape().dim(0).dim_param().empty())
        batchNames_.insert(tt.shape().dim(0).dim_param());
    }
  // A binding that matches no dimension is a mistake (a typo, or the wrong
  // model), never something to ignore.
  std::set<std::string> params;
  for (const auto &vi : graph_.input())
    if (vi.type().value_case() == onnx::TypeProto::kTensorType && vi.type().tensor_type().has_shape())
      for (const auto &d : vi.type().tensor_type().shape().dim())
        if (!d.dim_param().empty())
          params.insert(d.dim_param());
  // -b binds the leading dimension of every input; --dim naming the same
  // dimension with another value contradicts it.
  if (opts_.batch)
    for (const std::string &b : batchNames_)
      if (auto it = opts_.dims.find(b); it != opts_.dims.end() && it->second != *opts_.batch)
        return errorf("-b ", *opts_.batch, " and --dim ", b, "=", it->second,
                      " bind the same dimension to different sizes");
  for (const auto &[name, v] : opts_.dims) {
    if (params.count(name))
      continue;
    // INPUT:AXIS: a dimension by its input and position.
    const size_t colon = name.rfind(':');
    int64_t axis = -1;
    if (colon != std::string::npos && colon > 0 && colon + 1 < name.size() &&
        name.find_first_not_of("0123456789", colon + 1) == std::string::npos && name.size() - colon <= 10)
      axis = std::stoll(name.substr(colon + 1));
    if (axis >= 0) {
      const std::string input = name.substr(0, colon);
      const onnx::ValueInfoProto *vi = nullptr;
      for (const auto &x : graph_.input())
        if (x.name() == input)
          vi = &x;
      if (!vi || initializers_.count(input) || opts_.freezeInputs.count(input))
        return errorf("--dim ", name, "=", v, ": the model has no graph input '", input, "' to bind");
      const int rank = vi->type().value_case() == onnx::TypeProto::kTensorType && vi->type().tensor_type().has_shape()
                           ? vi->type().tensor_type().shape().dim_size()
                           : 0;
      if (axis >= rank)
        return errorf("--dim ", name, "=", v, ": input '", input, "' has ", rank, " dimension(s)");
      const auto &d = vi->type().tensor_type().shape().dim(static_cast<int>(axis));
      if (!isSymbolic(d) && d.dim_value() != v)
        return errorf("--dim ", name, "=", v, ": dimension ", axis, " of input '", input, "' is ", d.dim_value(),
                      " in the model");
      axisDims_[{input, axis}] = v;
      continue;
    }
    {
      std::string known;
      for (const std::string &p : params)
        known += (known.empty() ? "" : ", ") + p;
      return errorf("--dim ", name, "=", v, ": the model has no symbolic dimension '", name,
                    "' (its symbolic dimensions: ", known.empty() ? "none" : known,
                    "; INPUT:AXIS=N binds a dimension by input and position)");
    }
  }
  for (const auto &vi : graph_.input())
    PIPEC_TRY(importInput(vi));
  return Status::ok();
}

Status Importer::importInput(const onnx::ValueInfoProto &vi) {
  const std::string &name = vi.name();
  if (auto f = opts_.freezeInputs.find(name); f != opts_.freezeInputs.end()) {
    PIPEC_TRY(checkDeclared(vi, f->second.desc(), "frozen value"));
    // A deep copy, so that later passes (constant folding) never alias the
    // caller's storage.
    return g_->addConstant(name, f->second.clone()).status();
  }
  if (initializers_.count(name)) {
    // importInitializers made it a constant already.
    const ir::Value *c = g_->findValue(name);
    return checkDeclared(vi, c->type(), "initializer");
  }
  if (!vi.has_type() || vi.type().value_case() != onnx::TypeProto::kTensorType)
    return errorf("graph input '", name, "' is ", typeKind(vi.type()),
                  "; pipec imports tensor inputs only");
  int32_t et = vi.type().tensor_type().elem_type();
  if (!isSupportedElemType(et))
    return errorf("graph input '", name, "' has element type ", elemTypeName(et),
                  ", which pipec does not support");
  PIPEC_ASSIGN(Shape shape, bindShape(vi));
  return g_->addInput(name, TensorDesc{static_cast<DType>(et), std::move(shape)}).status();
}

Expected<Shape> Importer::bindShape(const onnx::ValueInfoProto &vi) {
  const std::string &name = vi.name();
  const auto &tt = vi.type().tensor_type();
  if (!tt.has_shape())
    return errorf("graph input '", name,
                  "' has no shape; pipec compiles static shapes (declare its shape in "
                  "the model or freeze the input)");
  Shape shape;
  for (int k = 0; k < tt.shape().dim_size(); ++k) {
    const auto &d = tt.shape().dim(k);
    if (!isSymbolic(d)) {
      shape.push_back(d.dim_value());
      continue;
    }
    const std::string &param = d.dim_param();
    if (auto it = axisDims_.find({name, k}); it != axisDims_.end()) {
      shape.push_back(it->second);
      continue;
    }
    if (auto it = opts_.dims.find(param); !param.empty() && it != opts_.dims.end()) {
      shape.push_back(it->second);
      continue;
    }
    if (opts_.batch && (k == 0 || batchNames_.count(param))) {
      shape.push_back(*opts_.batch);
      continue;
    }
    if (!param.empty())
      return errorf("unbound symbolic dimension '", param, "' of input '", name,
                    "' (dimension ", k, "): bind it with --dim ", param, "=<value>",
                    k == 0 ? " or -b/--batch <value>" : "");
    if (k == 0)
      return errorf("unbound symbolic dimension of input '", name,
                    "' (dimension 0, unnamed): bind it with -b/--batch <value>");
    return errorf("unbound symbolic dimension of input '", name, "' (dimension ", k,
                  ", unnamed): bind it with --dim ", name, ":", k, "=<value>");
  }
  PIPEC_TRY(validShape(shape, cat("graph input '", name, "'")).status());
  return shape;
}

Status Importer::checkDeclared(const onnx::ValueInfoProto &vi, const TensorDesc &actual,
                               const std::string &what) {
  if (!vi.has_type())
    return Status::ok();
  if (vi.type().value_case() != onnx::TypeProto::kTensorType)
    return errorf("graph input '", vi.name(), "' is ", typeKind(vi.type()),
                  ", which a tensor ", what, " cannot match");
  const auto &tt = vi.type().tensor_type();
  bool match = tt.elem_type() == 0 || tt.elem_type() == static_cast<int32_t>(actual.dtype);
  if (tt.has_shape()) {
    match = match && tt.shape().dim_size() == actual.rank();
    for (int k = 0; match && k < tt.shape().dim_size(); ++k) {
      const auto &d = tt.shape().dim(k);
      // A symbolic dimension matches any size.
      match = isSymbolic(d) || d.dim_value() == actual.shape[k];
    }
  }
  if (!match)
    return errorf("graph input '", vi.name(), "' is declared ", declaredStr(tt),
                  " but its ", what, " is ", actual.str());
  return Status::ok();
}

} // namespace pipec::frontend::detail
