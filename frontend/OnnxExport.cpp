//===- frontend/OnnxExport.cpp - The source model kept with a plan --------===//
#include "frontend/OnnxExport.h"

#include "frontend/OnnxProto.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace pipec::frontend {

Expected<std::string> stripInitializers(const std::string &modelBytes, const std::string &what,
                                        const std::set<std::string> &names) {
  PIPEC_ASSIGN(onnx::ModelProto model, parseModelProto(modelBytes, what));
  return stripInitializers(std::move(model), what, names);
}

Expected<std::string> stripInitializers(onnx::ModelProto model, const std::string &what,
                                        const std::set<std::string> &names) {
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    if (!names.count(t.name()))
      continue;
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_double_data();
    t.clear_int32_data();
    t.clear_int64_data();
    t.clear_uint64_data();
    t.clear_external_data();
    t.clear_data_location();
  }
  std::string out;
  google::protobuf::io::StringOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  coded.SetSerializationDeterministic(true);
  if (!model.SerializeToCodedStream(&coded))
    return errorf("cannot serialize the source model of '", what, "'");
  coded.Trim();
  return out;
}

} // namespace pipec::frontend
