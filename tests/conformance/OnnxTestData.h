//===- tests/conformance/OnnxTestData.h - ONNX backend test data -*- C++ -*-===//
//
// Reading ONNX's backend test directories (model.onnx and
// test_data_set_N/{input,output}_K.pb) and comparing outputs at the
// tolerances ONNX's own backend tests use.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"
#include "support/Tensor.h"

#include <string>
#include <vector>

namespace pipec::testdata {

/// ONNX backend test tolerances.
inline constexpr double kRtol = 1e-3, kAtol = 1e-7;

/// A serialized TensorProto file.
Expected<Tensor> loadTensorPb(const std::string &path);
/// DIR/PREFIX0.pb, DIR/PREFIX1.pb, ... while they exist.
std::vector<std::string> numberedFiles(const std::string &dir, const std::string &prefix);
/// Same type and shape, and every element within atol + rtol * |expected|
/// (NaN matches NaN, infinities must be equal).
Status compareOutput(const Tensor &got, const Tensor &want, const std::string &name);

} // namespace pipec::testdata
