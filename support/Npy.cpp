//===- support/Npy.cpp - NumPy .npy files ---------------------------------===//
#include "support/Npy.h"

#include "support/FileIO.h"

#include <cstdlib>
#include <cstring>

namespace pipec {

namespace {
struct NpyType {
  const char *descr;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {"<f4", DType::F32}, {"<f8", DType::F64}, {"<i8", DType::I64},
    {"<i4", DType::I32}, {"<i2", DType::I16}, {"|i1", DType::I8},
    {"|u1", DType::U8},  {"<u2", DType::U16}, {"<u4", DType::U32},
    {"<u8", DType::U64}, {"|b1", DType::Bool}, {"<f2", DType::F16},
};

// Finds `'key': ` in the header dict and returns the text after it.
Expected<std::string> dictValue(const std::string &h, const std::string &key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos)
    return errorf("header has no '", key, "'");
  size_t c = h.find(':', k);
  if (c == std::string::npos)
    return errorf("header key '", key, "' has no value");
  size_t b = h.find_first_not_of(' ', c + 1);
  if (b == std::string::npos)
    return errorf("header key '", key, "' has no value");
  return h.substr(b);
}
} // namespace

Expected<Tensor> parseNpy(const std::string &bytes, const std::string &what) {
  auto fail = [&](const std::string &m) {
    return errorf("'", what, "' is not a valid .npy file: ", m);
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return fail("bad magic");
  int major = static_cast<uint8_t>(bytes[6]);
  size_t hlen, off;
  if (major == 1) {
    hlen = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return fail("truncated header");
    uint32_t l;
    std::memcpy(&l, bytes.data() + 8, 4);
    hlen = l;
    off = 12;
  } else {
    return fail(cat("unsupported version ", major));
  }
  if (off + hlen > bytes.size())
    return fail("truncated header");
  std::string h = bytes.substr(off, hlen);
  off += hlen;

  auto descr = dictValue(h, "descr");
  if (!descr)
    return fail(descr.status().message());
  DType dtype = DType::Undefined;
  for (const auto &t : kTypes)
    if (descr->compare(0, std::strlen(t.descr) + 2, cat("'", t.descr, "'")) == 0)
      dtype = t.dtype;
  if (dtype == DType::Undefined)
    return fail("unsupported dtype " + descr->substr(0, descr->find(',')));
  auto order = dictValue(h, "fortran_order");
  if (!order)
    return fail(order.status().message());
  if (order->compare(0, 4, "True") == 0)
    return fail("Fortran order is not supported");
  auto shapeText = dictValue(h, "shape");
  if (!shapeText || shapeText->empty() || (*shapeText)[0] != '(')
    return fail("bad shape");
  Shape shape;
  size_t i = 1;
  const std::string &s = *shapeText;
  while (i < s.size() && s[i] != ')') {
    if (s[i] == ' ' || s[i] == ',') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])))
      ++end;
    if (end == i || end - i > 15) // 15 digits are past any dimension pipec accepts
      return fail("bad shape");
    shape.push_back(std::strtoll(s.c_str() + i, nullptr, 10));
    i = end;
  }
  // The size from the header is checked against the bytes present before
  // anything is allocated: a header may claim any shape.
  auto n = validShape(shape, "its shape");
  if (!n)
    return fail(n.status().message());
  const uint64_t need = static_cast<uint64_t>(*n) * dtypeSize(dtype);
  if (bytes.size() - off < need)
    return fail(cat("truncated data: ", bytes.size() - off, " bytes, its shape ", shapeStr(shape),
                    " needs ", need));
  Tensor t(dtype, shape);
  if (t.bytes())
    std::memcpy(t.raw(), bytes.data() + off, t.bytes());
  return t;
}

Expected<Tensor> readNpy(const std::string &path) {
  PIPEC_ASSIGN(std::string bytes, readFile(path));
  return parseNpy(bytes, path);
}

std::string serializeNpy(const Tensor &t) {
  const char *descr = "<f4";
  for (const auto &x : kTypes)
    if (x.dtype == t.dtype())
      descr = x.descr;
  std::string shape = "(";
  for (int64_t d : t.shape())
    shape += std::to_string(d) + ", ";
  if (t.shape().size() > 1)
    shape.resize(shape.size() - 2);
  else if (t.shape().size() == 1)
    shape.resize(shape.size() - 1);
  shape += ")";
  std::string h = cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ",
                      shape, ", }");
  size_t total = 10 + h.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  h.append(pad, ' ');
  h += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xFF);
  out += static_cast<char>((h.size() >> 8) & 0xFF);
  out += h;
  out.append(static_cast<const char *>(t.raw()), t.bytes());
  return out;
}

Status writeNpy(const std::string &path, const Tensor &t) {
  return writeFileAtomic(path, serializeNpy(t));
}

} // namespace pipec
