//===- support/Npy.h - NumPy .npy files ------------------------*- C++ -*-===//
//
// Reads and writes NumPy's .npy format (version 1.0-3.0, little-endian, C
// order) for the dtypes pipec computes with.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Error.h"
#include "support/Tensor.h"

#include <string>

namespace pipec {

Expected<Tensor> readNpy(const std::string &path);
Expected<Tensor> parseNpy(const std::string &bytes, const std::string &what);
std::string serializeNpy(const Tensor &t);
Status writeNpy(const std::string &path, const Tensor &t);

} // namespace pipec
