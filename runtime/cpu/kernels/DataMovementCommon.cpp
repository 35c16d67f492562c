//===- runtime/cpu/kernels/DataMovementCommon.cpp - Data movement helpers -===//
//
// OpDesc checks, constant-input reads, the strided copy engine and the loss
// layout shared by the kernels of DataMovement.def. Copies work on element
// size: elements of 1, 2, 4 and 8 bytes move as fixed-size byte blocks, so
// no kernel instantiates per element type.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "support/Half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pipec::cpu::dm {

namespace {
/// An element as raw bytes: assignment compiles to one move for 2/4/8 and
/// is free of aliasing concerns (a char array).
template <size_t S> struct Bytes {
  unsigned char b[S];
};

template <size_t S>
void copyStridedT(char *dst, const char *src, int64_t n, int64_t stride) {
  auto *o = reinterpret_cast<Bytes<S> *>(dst);
  auto *i = reinterpret_cast<const Bytes<S> *>(src);
  for (int64_t k = 0; k < n; ++k)
    o[k] = i[k * stride];
}

template <size_t S> void fillT(char *dst, const void *value, int64_t n) {
  Bytes<S> v;
  std::memcpy(&v, value, S);
  auto *o = reinterpret_cast<Bytes<S> *>(dst);
  for (int64_t k = 0; k < n; ++k)
    o[k] = v;
}

template <typename T> void store(void *out, T v) { std::memcpy(out, &v, sizeof(T)); }
} // namespace

//===--- OpDesc checks ------------------------------------------------===//

Status checkArity(const OpDesc &d, size_t minIn, size_t minOut) {
  for (size_t i = 0; i < minIn; ++i)
    if (!d.hasInput(i))
      return errorf(d.where(), ": needs at least ", minIn, " inputs, input ", i,
                    " is missing");
  if (d.outputs.size() < minOut)
    return errorf(d.where(), ": needs ", minOut, " outputs, has ", d.outputs.size());
  return Status::ok();
}

Expected<size_t> elementSize(const OpDesc &d, const TensorDesc &t, std::string_view what) {
  size_t s = dtypeSize(t.dtype);
  if (s == 0)
    return errorf(d.where(), ": ", what, " has element type ", dtypeName(t.dtype),
                  ", which the CPU kernels cannot move");
  return s;
}

Status checkOutput(const OpDesc &d, size_t i, DType dtype, const Shape &shape) {
  if (i >= d.outputs.size())
    return errorf(d.where(), ": output ", i, " is not described");
  const TensorDesc &o = d.outputs[i];
  if (o.dtype != dtype || o.shape != shape)
    return errorf(d.where(), ": output ", i, " is described as ", o.str(),
                  ", the op computes ", TensorDesc{dtype, shape}.str());
  return Status::ok();
}

Expected<int64_t> normalizeAxis(const OpDesc &d, int64_t axis, int64_t rank,
                                std::string_view what) {
  if (axis < -rank || axis >= rank)
    return errorf(d.where(), ": ", what, " ", axis, " is out of range [", -rank, ", ",
                  rank - 1, "] for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Expected<std::vector<int64_t>> constInts(const OpDesc &d, size_t i, std::string_view what) {
  const Tensor *t = d.constInput(i);
  if (!t)
    return errorf(d.where(), ": input ", i, " (", what,
                  ") must be a compile-time constant; pipec needs it to fix output shapes");
  if (t->dtype() != DType::I64 && t->dtype() != DType::I32)
    return errorf(d.where(), ": input ", i, " (", what, ") has type ",
                  dtypeName(t->dtype()), ", expected i64 or i32");
  return t->toInts();
}

Expected<std::vector<int64_t>> intsAttrOrInput(const OpDesc &d, const char *attr,
                                               size_t input, int64_t inputSince,
                                               bool &present) {
  present = true;
  if (attrHas(d.attrs, attr)) {
    if (d.opset >= inputSince)
      return errorf(d.where(), ": attribute '", attr, "' became input ", input,
                    " in opset ", inputSince, ", the node has opset ", d.opset);
    return attrInts(d.attrs, attr);
  }
  if (d.hasInput(input))
    return constInts(d, input, attr);
  present = false;
  return std::vector<int64_t>{};
}

Status encodeScalar(const OpDesc &d, double v, DType t, void *out) {
  switch (t) {
  case DType::F32: store(out, static_cast<float>(v)); break;
  case DType::F64: store(out, v); break;
  case DType::I64: store(out, static_cast<int64_t>(v)); break;
  case DType::I32: store(out, static_cast<int32_t>(v)); break;
  case DType::I16: store(out, static_cast<int16_t>(v)); break;
  case DType::I8: store(out, static_cast<int8_t>(v)); break;
  case DType::U8: store(out, static_cast<uint8_t>(v)); break;
  case DType::U16: store(out, static_cast<uint16_t>(v)); break;
  case DType::U32: store(out, static_cast<uint32_t>(v)); break;
  case DType::U64: store(out, static_cast<uint64_t>(v)); break;
  case DType::Bool: store(out, static_cast<uint8_t>(v != 0.0)); break;
  case DType::F16: store(out, floatToHalf(static_cast<float>(v))); break;
  case DType::BF16: store(out, floatToBf16(static_cast<float>(v))); break;
  default:
    return errorf(d.where(), ": cannot write a number as ", dtypeName(t));
  }
  return Status::ok();
}

//===--- Copy primitives ----------------------------------------------===//

void copyStrided(char *dst, const char *src, int64_t n, int64_t srcStride, size_t esize) {
  if (srcStride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * esize);
    return;
  }
  if (srcStride == 0) {
    fillElements(dst, src, n, esize);
    return;
  }
  switch (esize) {
  case 1: copyStridedT<1>(dst, src, n, srcStride); return;
  case 2: copyStridedT<2>(dst, src, n, srcStride); return;
  case 4: copyStridedT<4>(dst, src, n, srcStride); return;
  case 8: copyStridedT<8>(dst, src, n, srcStride); return;
  default:
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(dst + k * esize, src + k * srcStride * static_cast<int64_t>(esize), esize);
  }
}

void fillElements(char *dst, const void *value, int64_t n, size_t esize) {
  const auto *v = static_cast<const unsigned char *>(value);
  if (n <= 0)
    return;
  if (std::all_of(v, v + esize, [&](unsigned char b) { return b == v[0]; })) {
    std::memset(dst, v[0], static_cast<size_t>(n) * esize);
    return;
  }
  switch (esize) {
  case 2: fillT<2>(dst, value, n); return;
  case 4: fillT<4>(dst, value, n); return;
  case 8: fillT<8>(dst, value, n); return;
  default:
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(dst + k * esize, value, esize);
  }
}

void copyRows(char *dst, int64_t dstPitch, const char *src, int64_t srcPitch,
              int64_t rows, size_t rowBytes) {
  const size_t total = static_cast<size_t>(rows) * rowBytes;
  if (total == 0)
    return;
  if (total < kParallelBytes || !threadsAvailable()) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dstPitch, src + r * srcPitch, rowBytes);
    return;
  }
  // Few long rows: split each into pieces so that every thread has work.
  constexpr size_t kPiece = size_t(1) << 16;
  const int64_t pieces =
      rows >= 16 ? 1 : static_cast<int64_t>((rowBytes + kPiece - 1) / kPiece);
  const size_t pieceBytes = (rowBytes + pieces - 1) / pieces;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows * pieces; ++t) {
    const int64_t r = t / pieces, p = t % pieces;
    const size_t begin = p * pieceBytes;
    if (begin < rowBytes)
      std::memcpy(dst + r * dstPitch + begin, src + r * srcPitch + begin,
                  std::min(pieceBytes, rowBytes - begin));
  }
}

void coalesce(std::vector<int64_t> &dims, std::vector<int64_t> &strides) {
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) {
    dims = {0};
    strides = {1};
    return;
  }
  std::vector<int64_t> nd, ns;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1)
      continue;
    if (!nd.empty() && ns.back() == strides[i] * dims[i]) {
      nd.back() *= dims[i];
      ns.back() = strides[i];
    } else {
      nd.push_back(dims[i]);
      ns.push_back(strides[i]);
    }
  }
  if (nd.empty()) {
    nd = {1};
    ns = {1};
  }
  dims = std::move(nd);
  strides = std::move(ns);
}

StridedCopy::StridedCopy(const Shape &outShape, const std::vector<int64_t> &inStrides,
                         int64_t inOffset, size_t esize)
    : dims_(outShape), strides_(inStrides), offset_(inOffset), esize_(esize) {
  coalesce(dims_, strides_);
  rows_ = 1;
  for (size_t k = 0; k + 1 < dims_.size(); ++k)
    rows_ *= dims_[k];
  if (dims_.back() == 0)
    rows_ = 0;
}

void StridedCopy::run(void *dst, const void *src) const {
  if (rows_ == 0)
    return;
  const int64_t runLen = dims_.back(), runStride = strides_.back();
  const int64_t outer = static_cast<int64_t>(dims_.size()) - 1;
  const size_t rowBytes = static_cast<size_t>(runLen) * esize_;
  const int64_t es = static_cast<int64_t>(esize_);
  char *out = static_cast<char *>(dst);
  const char *in = static_cast<const char *>(src) + offset_ * es;

  // Rows [r0, r1): an odometer over the outer dimensions keeps the source
  // offset without a division per row.
  auto copyRange = [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(static_cast<size_t>(outer), 0);
    int64_t off = 0;
    for (int64_t k = outer - 1, r = r0; k >= 0; --k) {
      idx[k] = r % dims_[k];
      r /= dims_[k];
      off += idx[k] * strides_[k];
    }
    for (int64_t r = r0; r < r1; ++r) {
      char *o = out + r * static_cast<int64_t>(rowBytes);
      if (runStride == 1)
        std::memcpy(o, in + off * es, rowBytes);
      else
        copyStrided(o, in + off * es, runLen, runStride, esize_);
      for (int64_t k = outer - 1; k >= 0; --k) {
        off += strides_[k];
        if (++idx[k] < dims_[k])
          break;
        off -= strides_[k] * dims_[k];
        idx[k] = 0;
      }
    }
  };

  const size_t total = static_cast<size_t>(rows_) * rowBytes;
  if (total < kParallelBytes || rows_ == 1 || !threadsAvailable()) {
    if (rows_ == 1 && runStride == 1 && total >= kParallelBytes)
      copyRows(out, 0, in, 0, 1, rowBytes);
    else
      copyRange(0, rows_);
    return;
  }
  const int64_t perChunk = std::max<int64_t>(1, 16384 / static_cast<int64_t>(rowBytes + 1));
  const int64_t chunks = (rows_ + perChunk - 1) / perChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    copyRange(c * perChunk, std::min(rows_, (c + 1) * perChunk));
}

//===--- Losses -------------------------------------------------------===//

Expected<LossLayout> lossLayout(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 2, 1));
  const TensorDesc &x = d.inputs[0], &t = d.inputs[1];
  LossLayout l;
  if (x.rank() < 2)
    return errorf(d.where(), ": scores must be [N, C, d1..dk], got ", x.str());
  if (x.dtype != DType::F32 && x.dtype != DType::F64)
    return errorf(d.where(), ": scores of type ", dtypeName(x.dtype),
                  " are not supported (f32, f64)");
  if (t.dtype != DType::I64 && t.dtype != DType::I32)
    return errorf(d.where(), ": target must be i32 or i64, got ", dtypeName(t.dtype));
  Shape want{x.shape[0]};
  want.insert(want.end(), x.shape.begin() + 2, x.shape.end());
  if (t.shape != want)
    return errorf(d.where(), ": target is ", t.str(), ", scores ", x.str(),
                  " need a target of shape ", shapeStr(want));
  l.n = x.shape[0];
  l.c = x.shape[1];
  l.d = numElements(Shape(x.shape.begin() + 2, x.shape.end()));
  l.scoreType = x.dtype;
  l.targetType = t.dtype;
  if (d.hasInput(2)) {
    const TensorDesc &w = d.inputs[2];
    if (w.dtype != x.dtype || w.shape != Shape{l.c})
      return errorf(d.where(), ": weight must be ", TensorDesc{x.dtype, {l.c}}.str(),
                    ", got ", w.str());
    l.hasWeight = true;
  }
  std::string r = attrString(d.attrs, "reduction", "mean");
  if (r == "none")
    l.reduction = Reduction::None;
  else if (r == "sum")
    l.reduction = Reduction::Sum;
  else if (r == "mean")
    l.reduction = Reduction::Mean;
  else
    return errorf(d.where(), ": unknown reduction '", r, "' (none, sum, mean)");
  if (attrHas(d.attrs, "ignore_index")) {
    l.hasIgnore = true;
    l.ignoreIndex = attrInt(d.attrs, "ignore_index", 0);
  }
  PIPEC_TRY(checkOutput(d, 0, x.dtype, l.reduction == Reduction::None ? t.shape : Shape{}));
  return l;
}

Status checkTargets(const std::string &where, const LossLayout &l, const void *target) {
  if (!target)
    return errorf(where, ": target input is null");
  for (int64_t p = 0; p < l.n * l.d; ++p) {
    int64_t t = targetAt(l, target, p);
    if (l.hasIgnore && t == l.ignoreIndex)
      continue;
    if (t < 0 || t >= l.c)
      return errorf(where, ": target ", t, " at position ", p,
                    " is out of range [0, ", l.c, ")");
  }
  return Status::ok();
}

} // namespace pipec::cpu::dm
