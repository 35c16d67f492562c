//===- support/DType.cpp - Element types ----------------------------------===//
#include "support/DType.h"

namespace pipec {

namespace {
struct DTypeInfo {
  DType type;
  const char *name;
  size_t size;
};
constexpr DTypeInfo kInfo[] = {
    {DType::F32, "f32", 4},  {DType::U8, "u8", 1},     {DType::I8, "i8", 1},
    {DType::U16, "u16", 2},  {DType::I16, "i16", 2},   {DType::I32, "i32", 4},
    {DType::I64, "i64", 8},  {DType::String, "str", 0}, {DType::Bool, "bool", 1},
    {DType::F16, "f16", 2},  {DType::F64, "f64", 8},   {DType::U32, "u32", 4},
    {DType::U64, "u64", 8},  {DType::BF16, "bf16", 2},
};
} // namespace

size_t dtypeSize(DType t) {
  for (const auto &i : kInfo)
    if (i.type == t)
      return i.size;
  return 0;
}

std::string_view dtypeName(DType t) {
  for (const auto &i : kInfo)
    if (i.type == t)
      return i.name;
  return "undef";
}

DType dtypeFromName(std::string_view name) {
  for (const auto &i : kInfo)
    if (name == i.name)
      return i.type;
  return DType::Undefined;
}

bool isKnownDType(int32_t v) {
  for (const auto &i : kInfo)
    if (static_cast<int32_t>(i.type) == v)
      return true;
  return false;
}

} // namespace pipec
