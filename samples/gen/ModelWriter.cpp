//===- samples/gen/ModelWriter.cpp - Saving a model, maybe with external data ===//
#include "samples/gen/ModelWriter.h"

#include "support/FileIO.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace pipec::samples {

namespace {

constexpr uint64_t kAlign = 64;

// A zero weight from ModelBuilder(zeroWeights): EXTERNAL, no location yet.
bool isZeroWeight(const onnx::TensorProto &t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL && t.external_data_size() == 0;
}

uint64_t floatBytes(const onnx::TensorProto &t) {
  uint64_t n = sizeof(float);
  for (int64_t d : t.dims())
    n *= static_cast<uint64_t>(d);
  return n;
}

// Streams every initializer's raw_data into `dataPath` and replaces it with
// an external_data reference relative to the model's directory. Zero
// weights become holes: the stream seeks past them, and the file is sized
// at the end, so they take no disk.
Status externalize(onnx::ModelProto &model, const std::string &dataPath) {
  std::string location = std::filesystem::path(dataPath).filename().string();
  std::string tmp = dataPath + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return errorf("cannot create '", tmp, "': ", std::strerror(errno));
    uint64_t offset = 0;
    for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
      uint64_t pad = (kAlign - offset % kAlign) % kAlign;
      offset += pad;
      const bool zero = isZeroWeight(t);
      const std::string &raw = t.raw_data();
      const uint64_t size = zero ? floatBytes(t) : raw.size();
      if (!zero) {
        out.seekp(static_cast<std::streamoff>(offset));
        out.write(raw.data(), static_cast<std::streamsize>(raw.size()));
      }
      auto add = [&](const char *key, const std::string &value) {
        auto *kv = t.add_external_data();
        kv->set_key(key);
        kv->set_value(value);
      };
      add("location", location);
      add("offset", std::to_string(offset));
      add("length", std::to_string(size));
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      offset += size;
      t.clear_raw_data();
    }
    out.flush();
    out.close();
    std::error_code ec;
    if (out)
      std::filesystem::resize_file(tmp, offset, ec);
    if (ec)
      out.setstate(std::ios::failbit);
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return errorf("cannot write '", tmp, "': ", std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dataPath, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return errorf("cannot rename '", tmp, "' to '", dataPath, "': ", ec.message());
  }
  return Status::ok();
}

} // namespace

Status writeModel(onnx::ModelProto &model, const std::string &path, ExternalData mode,
                  bool &external) {
  uint64_t weightBytes = 0;
  bool zeros = false;
  for (const onnx::TensorProto &t : model.graph().initializer()) {
    const bool zero = isZeroWeight(t);
    zeros = zeros || zero;
    weightBytes += zero ? floatBytes(t) : t.raw_data().size();
  }
  external = zeros || mode == ExternalData::Always ||
             (mode == ExternalData::Auto && weightBytes > kAutoExternalBytes);
  std::string dataPath = path + ".data";
  if (external)
    PIPEC_TRY(externalize(model, dataPath));

  size_t size = model.ByteSizeLong();
  if (size > size_t(INT_MAX))
    return errorf("the model is ", size >> 20, " MiB, over Protobuf's 2 GiB limit",
                  external ? " even with its weights in external data"
                           : "; use --external-data");
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return errorf("cannot serialize the model (", size, " bytes)");
  PIPEC_TRY(writeFileAtomic(path, bytes));
  return Status::ok();
}

} // namespace pipec::samples
