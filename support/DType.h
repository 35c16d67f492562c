//===- support/DType.h - Element types --------------------------*- C++ -*-===//
//
// Element types, numbered as ONNX's TensorProto.DataType so that import and
// the plan format convert by value.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pipec {

enum class DType : int32_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  String = 8,
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  BF16 = 16,
};

/// Bytes per element; 0 for Undefined and String.
size_t dtypeSize(DType t);
/// Short name used by the IR text form: f32, i64, bool...
std::string_view dtypeName(DType t);
/// Inverse of dtypeName; Undefined when the name is unknown.
DType dtypeFromName(std::string_view name);
/// True if the value is one of the ONNX data type numbers listed above.
bool isKnownDType(int32_t v);
/// Types the CPU kernels compute with (others may be stored and copied).
inline bool isFloat(DType t) { return t == DType::F32 || t == DType::F64; }
inline bool isInteger(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 ||
         t == DType::I8 || t == DType::U8 || t == DType::U16 ||
         t == DType::U32 || t == DType::U64;
}

} // namespace pipec
