//===- support/Tensor.h - Shapes, tensor descriptions, host tensors -*- C++ -*-===//
//
// The tensor vocabulary shared by the compiler and the runtime: a static
// Shape, a TensorDesc (element type and shape), and a host Tensor that owns
// (or shares) 64-byte aligned storage.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"
#include "support/Error.h"
#include "support/Limits.h"

#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipec {

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar). The shape must be valid
/// (validShape): the product is not checked here.
int64_t numElements(const Shape &s);
/// The element count of `s` if every dimension is >= 0 and the product is at
/// most kMaxTensorElements; an error saying which otherwise ("what" names the
/// tensor in it). Shapes from a model, a plan or a file pass here before
/// anything is sized by them.
Expected<int64_t> validShape(const Shape &s, const std::string &what);
/// "[2,3,4]".
std::string shapeStr(const Shape &s);
/// Row-major strides in elements.
std::vector<int64_t> rowMajorStrides(const Shape &s);

/// Thrown where memory runs out while allocating (a Tensor): a
/// std::bad_alloc that says what wanted how much. The tools catch it (and
/// any bad_alloc) and exit with a one-line error.
class OutOfMemory : public std::bad_alloc {
public:
  explicit OutOfMemory(std::string what) : what_("out of memory: " + std::move(what)) {}
  const char *what() const noexcept override { return what_.c_str(); }

private:
  std::string what_;
};

/// Thrown where a file-backed tensor (Tensor::fromFile) cannot be read on
/// first use: the file changed or vanished after it was checked. The tools
/// catch it and exit with a one-line error.
class TensorReadError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Where a file-backed tensor's bytes live: raw little-endian data at
/// `offset` of the file at `path`.
struct FileRegion {
  std::string path;
  uint64_t offset = 0;
};

/// Element type and static shape of a tensor.
struct TensorDesc {
  DType dtype = DType::Undefined;
  Shape shape;

  int64_t numel() const { return numElements(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool operator==(const TensorDesc &o) const {
    return dtype == o.dtype && shape == o.shape;
  }
  bool operator!=(const TensorDesc &o) const { return !(*this == o); }
  /// "f32[2,3]".
  std::string str() const;
};

constexpr size_t kTensorAlignment = 64;

/// A host tensor. Copies share storage (like a shared_ptr); use clone() for a
/// deep copy. Storage is zero-initialised and 64-byte aligned.
///
/// A file-backed tensor (fromFile) holds no bytes until something reads
/// them: the first raw() or data() reads its region (once, for every copy)
/// and throws TensorReadError if it cannot. Code that only needs the bytes'
/// location (the plan emitter) asks fileRegion() and reads nothing, so a
/// model's weights need not fit in memory to be compiled.
class Tensor {
public:
  Tensor() = default;
  explicit Tensor(TensorDesc desc);
  Tensor(DType dtype, Shape shape) : Tensor(TensorDesc{dtype, std::move(shape)}) {}
  /// Wraps memory owned elsewhere; `keepAlive` holds the owner.
  Tensor(TensorDesc desc, void *data, std::shared_ptr<void> keepAlive);
  /// A tensor whose bytes stay in `region` until first read. The caller
  /// has checked that the file holds desc.bytes() bytes there.
  static Tensor fromFile(TensorDesc desc, FileRegion region);

  const TensorDesc &desc() const { return desc_; }
  DType dtype() const { return desc_.dtype; }
  const Shape &shape() const { return desc_.shape; }
  int64_t numel() const { return desc_.numel(); }
  size_t bytes() const { return desc_.bytes(); }
  bool empty() const {
    return data_ == nullptr && !lazy_ && desc_.dtype == DType::Undefined;
  }

  void *raw() { return lazy_ ? load() : data_; }
  const void *raw() const { return lazy_ ? load() : data_; }
  template <typename T> T *data() { return static_cast<T *>(raw()); }
  template <typename T> const T *data() const { return static_cast<const T *>(raw()); }

  /// Where a file-backed tensor's bytes live (read or not); null for a
  /// tensor made in memory.
  const FileRegion *fileRegion() const;
  /// Whether the bytes are in memory (false for an unread file-backed one).
  bool resident() const;

  Tensor clone() const;
  /// Whether this is the only Tensor that holds its storage (nobody else
  /// can see a write to it).
  bool soleOwner() const { return !lazy_ && storage_ && storage_.use_count() == 1; }
  /// Same storage, new shape of equal element count.
  Tensor reshaped(Shape shape) const;
  /// Element i converted to double / int64 (any numeric dtype).
  double getDouble(int64_t i) const;
  int64_t getInt(int64_t i) const;
  /// All elements as int64 (for shape-like tensors).
  std::vector<int64_t> toInts() const;
  /// Byte-wise equality of type, shape and data.
  bool identical(const Tensor &o) const;

  static Tensor scalarF32(float v);
  static Tensor fromInts(const std::vector<int64_t> &v, DType dtype = DType::I64);
  static Tensor fromFloats(const std::vector<float> &v, Shape shape);

private:
  struct Lazy;
  void *load() const;

  TensorDesc desc_;
  std::shared_ptr<void> storage_;
  void *data_ = nullptr;
  std::shared_ptr<Lazy> lazy_; ///< set for a file-backed tensor
};

} // namespace pipec
