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

// Streams every initializer's raw_data into `dataPath` and replaces it with
// an external_data reference relative to the model's directory.
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
      static const char zeros[kAlign] = {};
      out.write(zeros, static_cast<std::streamsize>(pad));
      offset += pad;
      const std::string &raw = t.raw_data();
      out.write(raw.data(), static_cast<std::streamsize>(raw.size()));
      auto add = [&](const char *key, const std::string &value) {
        auto *kv = t.add_external_data();
        kv->set_key(key);
        kv->set_value(value);
      };
      add("location", location);
      add("offset", std::to_string(offset));
      add("length", std::to_string(raw.size()));
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      offset += raw.size();
      t.clear_raw_data();
    }
    out.flush();
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
  for (const onnx::TensorProto &t : model.graph().initializer())
    weightBytes += t.raw_data().size();
  external = mode == ExternalData::Always ||
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
