//===- support/Tensor.cpp - Host tensors ----------------------------------===//
#include "support/Tensor.h"

#include "support/FileIO.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>

namespace pipec {

int64_t numElements(const Shape &s) {
  // Shapes are validated where they enter (validShape); still, a zero
  // dimension makes 0 whatever the others are, and a product that would
  // overflow saturates instead of being undefined.
  for (int64_t d : s)
    if (d == 0)
      return 0;
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      return std::numeric_limits<int64_t>::max();
  return n;
}

Expected<int64_t> validShape(const Shape &s, const std::string &what) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : s) {
    if (d < 0)
      return errorf(what, " has a negative dimension: ", shapeStr(s));
    zero = zero || d == 0;
  }
  if (zero)
    return int64_t(0);
  for (int64_t d : s) {
    if (n > kMaxTensorElements / d)
      return errorf(what, " of shape ", shapeStr(s), " has more than 2^48 elements");
    n *= d;
  }
  return n;
}

std::string shapeStr(const Shape &s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i)
    os << (i ? "," : "") << s[i];
  os << ']';
  return os.str();
}

std::vector<int64_t> rowMajorStrides(const Shape &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i)
    st[i] = st[i + 1] * s[i + 1];
  return st;
}

std::string TensorDesc::str() const {
  return std::string(dtypeName(dtype)) + shapeStr(shape);
}

namespace {

// 64-byte aligned, zeroed storage for `desc`; OutOfMemory if none.
std::shared_ptr<void> allocateStorage(const TensorDesc &desc) {
  size_t n = desc.bytes();
  size_t alloc = (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (alloc == 0)
    alloc = kTensorAlignment;
  void *p = std::aligned_alloc(kTensorAlignment, alloc);
  if (!p) {
    // Callers validate sizes from untrusted input before allocating; this
    // is the machine running out of memory. The tools turn it into a
    // one-line error naming the tensor (OutOfMemory).
    throw OutOfMemory(cat("a ", desc.str(), " tensor needs ", alloc, " bytes"));
  }
  std::memset(p, 0, alloc);
  return std::shared_ptr<void>(p, [](void *q) { std::free(q); });
}

} // namespace

/// The shared state of a file-backed tensor and its copies: the region, and
/// once read, the bytes.
struct Tensor::Lazy {
  FileRegion region;
  std::once_flag once;
  std::shared_ptr<void> storage;
};

Tensor::Tensor(TensorDesc desc) : desc_(std::move(desc)) {
  storage_ = allocateStorage(desc_);
  data_ = storage_.get();
}

Tensor Tensor::fromFile(TensorDesc desc, FileRegion region) {
  Tensor t;
  t.desc_ = std::move(desc);
  t.lazy_ = std::make_shared<Lazy>();
  t.lazy_->region = std::move(region);
  return t;
}

const FileRegion *Tensor::fileRegion() const { return lazy_ ? &lazy_->region : nullptr; }

bool Tensor::resident() const { return !lazy_ || lazy_->storage != nullptr; }

void *Tensor::load() const {
  // Copies share the Lazy (reshaped ones too: same bytes), so the region is
  // read once. A failed read throws out of call_once, which a later access
  // retries.
  std::call_once(lazy_->once, [this] {
    std::shared_ptr<void> storage = allocateStorage(desc_);
    const FileRegion &r = lazy_->region;
    char *dst = static_cast<char *>(storage.get());
    // readFileRegion reads only a regular file, opened non-blocking: the
    // file was checked when the model was imported, but a FIFO put in its
    // place since must not hang.
    Status read = readFileRegion(r.path, r.offset, desc_.bytes(), [&](const void *p, size_t n) {
      std::memcpy(dst, p, n);
      dst += n;
      return Status::ok();
    });
    if (!read)
      throw TensorReadError(cat("cannot read a ", desc_.str(), " tensor: ", read.message()));
    lazy_->storage = std::move(storage);
  });
  return lazy_->storage.get();
}

Tensor::Tensor(TensorDesc desc, void *data, std::shared_ptr<void> keepAlive)
    : desc_(std::move(desc)), storage_(std::move(keepAlive)), data_(data) {}

Tensor Tensor::clone() const {
  Tensor t(desc_);
  if (bytes())
    std::memcpy(t.data_, raw(), bytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.desc_.shape = std::move(shape);
  return t;
}

double Tensor::getDouble(int64_t i) const {
  switch (desc_.dtype) {
  case DType::F32: return data<float>()[i];
  case DType::F64: return data<double>()[i];
  case DType::I64: return static_cast<double>(data<int64_t>()[i]);
  case DType::I32: return data<int32_t>()[i];
  case DType::I16: return data<int16_t>()[i];
  case DType::I8: return data<int8_t>()[i];
  case DType::U8: return data<uint8_t>()[i];
  case DType::U16: return data<uint16_t>()[i];
  case DType::U32: return data<uint32_t>()[i];
  case DType::U64: return static_cast<double>(data<uint64_t>()[i]);
  case DType::Bool: return data<uint8_t>()[i] ? 1.0 : 0.0;
  default: return 0.0;
  }
}

int64_t Tensor::getInt(int64_t i) const {
  switch (desc_.dtype) {
  case DType::I64: return data<int64_t>()[i];
  case DType::I32: return data<int32_t>()[i];
  case DType::U64: return static_cast<int64_t>(data<uint64_t>()[i]);
  default: return static_cast<int64_t>(getDouble(i));
  }
}

std::vector<int64_t> Tensor::toInts() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i)
    v[i] = getInt(i);
  return v;
}

bool Tensor::identical(const Tensor &o) const {
  if (desc_ != o.desc_)
    return false;
  return bytes() == 0 || std::memcmp(raw(), o.raw(), bytes()) == 0;
}

Tensor Tensor::scalarF32(float v) {
  Tensor t(DType::F32, {});
  *t.data<float>() = v;
  return t;
}

Tensor Tensor::fromInts(const std::vector<int64_t> &v, DType dtype) {
  Tensor t(dtype, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::I32)
      t.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    else
      t.data<int64_t>()[i] = v[i];
  }
  return t;
}

Tensor Tensor::fromFloats(const std::vector<float> &v, Shape shape) {
  Tensor t(DType::F32, std::move(shape));
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

} // namespace pipec
