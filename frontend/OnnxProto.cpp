//===- frontend/OnnxProto.cpp - ONNX Protobuf <-> pipec values ------------===//
#include "frontend/OnnxProto.h"

#include "support/FileIO.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fcntl.h>
#include <unistd.h>

namespace pipec::frontend {

namespace {

template <typename Src, typename Dst>
void copyConvert(const Src &src, Dst *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = static_cast<Dst>(src.Get(static_cast<int>(i)));
}

// Parses a decimal external-data field without exceptions (std::stoull
// throws on junk, and a corrupt model must give an error, not a crash).
bool parseU64(const std::string &s, uint64_t &out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

Expected<Tensor> readExternal(const onnx::TensorProto &t, const std::string &baseDir,
                              const TensorDesc &desc) {
  std::string location;
  uint64_t offset = 0, length = desc.bytes();
  bool haveLength = false;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset" || kv.key() == "length") {
      uint64_t v = 0;
      if (!parseU64(kv.value(), v))
        return errorf("tensor '", t.name(), "': external data ", kv.key(), " '",
                      kv.value(), "' is not a non-negative integer");
      if (kv.key() == "offset") {
        offset = v;
      } else {
        length = v;
        haveLength = true;
      }
    }
  }
  if (location.empty())
    return errorf("tensor '", t.name(), "' has external data without a location");
  if (location.find("..") != std::string::npos || location[0] == '/')
    return errorf("tensor '", t.name(), "': external data location '", location,
                  "' must be a relative path inside the model's directory");
  if (haveLength && length != desc.bytes())
    return errorf("tensor '", t.name(), "': external data length ", length,
                  " does not match its shape (", desc.bytes(), " bytes)");
  std::string path = joinPath(baseDir, location);
  std::error_code ec;
  uint64_t fileSize = std::filesystem::file_size(path, ec);
  if (ec || !std::filesystem::is_regular_file(path, ec))
    return errorf("tensor '", t.name(), "': cannot open external data file '", path, "'",
                  ec ? cat(": ", ec.message()) : std::string(" (not a regular file)"));
  if (offset > fileSize || fileSize - offset < desc.bytes())
    return errorf("tensor '", t.name(), "': external data file '", path,
                  "' is too short (needs ", desc.bytes(), " bytes at offset ", offset,
                  ", the file has ", fileSize, ")");
  // The bytes stay in the file: the compiler reads only the few constants
  // whose values it needs, and the plan refers to the region.
  return Tensor::fromFile(desc, FileRegion{path, offset});
}

// Number of values a TensorProto stores in the typed field its data type
// uses; -1 for types read only from raw_data.
int64_t typedCount(const onnx::TensorProto &t, DType dt) {
  switch (dt) {
  case DType::F32: return t.float_data_size();
  case DType::F64: return t.double_data_size();
  case DType::I64: return t.int64_data_size();
  case DType::U32:
  case DType::U64: return t.uint64_data_size();
  case DType::I32:
  case DType::I16:
  case DType::U16:
  case DType::F16:
  case DType::BF16:
  case DType::I8:
  case DType::U8:
  case DType::Bool: return t.int32_data_size();
  default: return -1;
  }
}

} // namespace

Expected<Tensor> tensorFromProto(const onnx::TensorProto &t, const std::string &baseDir) {
  if (!isKnownDType(t.data_type()) || t.data_type() == static_cast<int>(DType::String) ||
      t.data_type() == 0)
    return errorf("tensor '", t.name(), "' has unsupported data type ", t.data_type());
  if (t.has_segment())
    return errorf("tensor '", t.name(), "' is segmented; segments are not supported");
  Shape shape;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return errorf("tensor '", t.name(), "' has negative dimension ", d);
    shape.push_back(d);
  }
  DType dt = static_cast<DType>(t.data_type());
  // Check the size before allocating: a corrupt or hostile file must give
  // an error, not an overflowed element count or a giant allocation. With
  // the element count bounded by the data actually present (checked next),
  // the allocation is never larger than the file.
  const int64_t kMaxBytes = int64_t(1) << 62;
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape)
    zero = zero || d == 0;
  if (zero) {
    n = 0;
  } else {
    for (int64_t d : shape) {
      if (n > kMaxBytes / static_cast<int64_t>(dtypeSize(dt)) / d)
        return errorf("tensor '", t.name(), "' of shape ", shapeStr(shape), " is too large");
      n *= d;
    }
  }
  uint64_t nbytes = static_cast<uint64_t>(n) * dtypeSize(dt);
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return readExternal(t, baseDir, TensorDesc{dt, shape});
  if (t.has_raw_data()) {
    if (t.raw_data().size() != nbytes)
      return errorf("tensor '", t.name(), "' has ", t.raw_data().size(),
                    " bytes of raw data, its shape ", shapeStr(shape), " needs ", nbytes);
    Tensor out(dt, shape);
    if (out.bytes())
      std::memcpy(out.raw(), t.raw_data().data(), out.bytes());
    return out;
  }
  if (int64_t have = typedCount(t, dt); have != n)
    return errorf("tensor '", t.name(), "' has ", have, " values, its shape ",
                  shapeStr(shape), " needs ", n);
  Tensor out(dt, shape);
  switch (dt) {
  case DType::F32:
    copyConvert(t.float_data(), out.data<float>(), n);
    break;
  case DType::F64:
    copyConvert(t.double_data(), out.data<double>(), n);
    break;
  case DType::I64:
    copyConvert(t.int64_data(), out.data<int64_t>(), n);
    break;
  case DType::U32:
  case DType::U64:
    if (dt == DType::U32)
      copyConvert(t.uint64_data(), out.data<uint32_t>(), n);
    else
      copyConvert(t.uint64_data(), out.data<uint64_t>(), n);
    break;
  case DType::I32: copyConvert(t.int32_data(), out.data<int32_t>(), n); break;
  case DType::I16: copyConvert(t.int32_data(), out.data<int16_t>(), n); break;
  case DType::U16:
  case DType::F16:
  case DType::BF16:
    copyConvert(t.int32_data(), out.data<uint16_t>(), n);
    break;
  case DType::I8: copyConvert(t.int32_data(), out.data<int8_t>(), n); break;
  case DType::U8:
  case DType::Bool:
    copyConvert(t.int32_data(), out.data<uint8_t>(), n);
    break;
  default:
    return errorf("tensor '", t.name(), "' has unsupported data type ", t.data_type());
  }
  return out;
}

Expected<Attribute> attributeFromProto(const onnx::AttributeProto &a,
                                       const std::string &baseDir) {
  using AP = onnx::AttributeProto;
  AP::AttributeType type = a.type();
  if (type == AP::UNDEFINED) {
    // Old exporters left the type unset; infer it from the field present.
    if (a.has_i()) type = AP::INT;
    else if (a.has_f()) type = AP::FLOAT;
    else if (a.has_s()) type = AP::STRING;
    else if (a.has_t()) type = AP::TENSOR;
    else if (a.ints_size()) type = AP::INTS;
    else if (a.floats_size()) type = AP::FLOATS;
    else if (a.strings_size()) type = AP::STRINGS;
  }
  switch (type) {
  case AP::INT: return Attribute::ofInt(a.i());
  case AP::FLOAT: return Attribute::ofFloat(a.f());
  case AP::STRING: return Attribute::ofString(a.s());
  case AP::INTS: return Attribute::ofInts({a.ints().begin(), a.ints().end()});
  case AP::FLOATS: return Attribute::ofFloats({a.floats().begin(), a.floats().end()});
  case AP::STRINGS: return Attribute::ofStrings({a.strings().begin(), a.strings().end()});
  case AP::TENSOR: {
    PIPEC_ASSIGN(Tensor t, tensorFromProto(a.t(), baseDir));
    return Attribute::ofTensor(std::move(t));
  }
  case AP::GRAPH:
  case AP::GRAPHS:
    return errorf("attribute '", a.name(), "' is a subgraph; control flow is not supported");
  default:
    return errorf("attribute '", a.name(), "' has unsupported type ", static_cast<int>(type));
  }
}

namespace {

Status checkModelSize(uint64_t size, const std::string &what) {
  if (size == 0)
    return errorf("'", what, "' is empty, not an ONNX model");
  // Protobuf messages are limited to 2 GiB; bigger models keep their
  // weights in external data files.
  if (size > static_cast<uint64_t>(std::numeric_limits<int>::max()))
    return errorf("'", what, "' is ", size,
                  " bytes, over protobuf's 2 GiB limit; store the weights as external data");
  return Status::ok();
}

/// Parses the `size` bytes of `raw` (checkModelSize passed) as a
/// ModelProto and checks that it is one.
Expected<onnx::ModelProto> parseModelStream(google::protobuf::io::ZeroCopyInputStream &raw, uint64_t size,
                                            const std::string &what) {
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage() ||
      in.CurrentPosition() != static_cast<int>(size))
    return errorf("'", what, "' is not an ONNX model (or it is truncated): protobuf parsing failed");
  if (!model.has_graph() || model.ir_version() <= 0)
    return errorf("'", what, "' is not an ONNX model: it has no ",
                  model.has_graph() ? "ir_version" : "graph");
  if (model.graph().output_size() == 0)
    return errorf("'", what, "' is not a usable ONNX model: its graph has no outputs");
  return model;
}

} // namespace

Expected<onnx::ModelProto> parseModelProto(const std::string &bytes, const std::string &what) {
  PIPEC_TRY(checkModelSize(bytes.size(), what));
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  return parseModelStream(raw, bytes.size(), what);
}

Expected<onnx::ModelProto> parseModelProtoFile(const std::string &path) {
  // regularFileSize refuses what readFile refuses (FIFOs, devices,
  // directories), before the file is opened for the stream.
  PIPEC_ASSIGN(uint64_t size, regularFileSize(path));
  PIPEC_TRY(checkModelSize(size, path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errorf("cannot open '", path, "': ", std::strerror(errno));
  google::protobuf::io::FileInputStream raw(fd, 1 << 20);
  raw.SetCloseOnDelete(true);
  Expected<onnx::ModelProto> m = parseModelStream(raw, size, path);
  if (!m && raw.GetErrno() != 0)
    return errorf("cannot read '", path, "': ", std::strerror(raw.GetErrno()));
  return m;
}

} // namespace pipec::frontend
