//===- tests/conformance/OnnxTestData.cpp - ONNX backend test data --------===//
#include "tests/conformance/OnnxTestData.h"

#include "frontend/OnnxProto.h"
#include "support/FileIO.h"

#include <cmath>

namespace pipec::testdata {

Expected<Tensor> loadTensorPb(const std::string &path) {
  PIPEC_ASSIGN(std::string bytes, readFile(path));
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return errorf("cannot parse '", path, "' as a TensorProto");
  return frontend::tensorFromProto(t, dirName(path));
}

std::vector<std::string> numberedFiles(const std::string &dir, const std::string &prefix) {
  std::vector<std::string> files;
  for (size_t i = 0;; ++i) {
    std::string p = joinPath(dir, prefix + std::to_string(i) + ".pb");
    if (!fileExists(p))
      break;
    files.push_back(p);
  }
  return files;
}

Status compareOutput(const Tensor &got, const Tensor &want, const std::string &name) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return errorf("output '", name, "': got ", got.desc().str(), ", expected ", want.desc().str());
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.getDouble(i), w = want.getDouble(i);
    if (std::isnan(w) && std::isnan(g))
      continue;
    if (std::isinf(w) && g == w)
      continue;
    if (!(std::fabs(g - w) <= kAtol + kRtol * std::fabs(w)))
      return errorf("output '", name, "' element ", i, ": got ", g, ", expected ", w);
  }
  return Status::ok();
}

} // namespace pipec::testdata
