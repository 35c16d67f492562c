//===- runtime/cpu/kernels/Resize.cpp - Resize and Upsample ---------------===//
//
// Resize (opsets 10-19) and Upsample (7-9), any rank; support/Resize.h
// reads the attributes and the constant roi, scales and sizes and gives
// each axis's taps once, when the kernel is prepared.
//
// nearest moves elements of any type: per axis a map from output to input
// coordinate (or "extrapolate" for tf_crop_and_resize), walked row by row
// like Pad's (rows whose innermost axis is unchanged are one memcpy).
// linear and cubic (f32, f64) are separable: one pass per resized axis
// (ResizeCommon.h), each output element a sum over its taps in a fixed
// order, so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "runtime/cpu/kernels/ResizeCommon.h"

#include <cstring>

namespace pipec::cpu {

namespace {

/// nearest: a gather through per-axis coordinate maps.
class NearestKernel final : public Kernel {
public:
  NearestKernel(std::vector<std::vector<int64_t>> maps, Shape in, size_t esize,
                std::vector<unsigned char> fill)
      : maps_(std::move(maps)), inStrides_(rowMajorStrides(in)), esize_(esize),
        fill_(std::move(fill)) {
    rows_ = 1;
    for (size_t k = 0; k + 1 < maps_.size(); ++k)
      rows_ *= static_cast<int64_t>(maps_[k].size());
    const std::vector<int64_t> &last = maps_.back();
    rowLen_ = static_cast<int64_t>(last.size());
    if (rowLen_ == 0)
      rows_ = 0;
    rowIsCopy_ = in.back() == rowLen_;
    for (int64_t i = 0; i < rowLen_ && rowIsCopy_; ++i)
      rowIsCopy_ = last[i] == i;
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    if (rows_ == 0)
      return Status::ok();
    const char *src = static_cast<const char *>(in[0]);
    char *dst = static_cast<char *>(out[0]);
    const int64_t rowBytes = rowLen_ * static_cast<int64_t>(esize_);
    auto rowsOf = [this, src, dst](int64_t r0, int64_t r1) {
      switch (esize_) {
      case 1:
        gatherRows<uint8_t>(src, dst, r0, r1);
        break;
      case 2:
        gatherRows<uint16_t>(src, dst, r0, r1);
        break;
      case 4:
        gatherRows<uint32_t>(src, dst, r0, r1);
        break;
      case 8:
        gatherRows<uint64_t>(src, dst, r0, r1);
        break;
      default:
        gatherRowsBytes(src, dst, r0, r1);
        break;
      }
    };
    if (static_cast<size_t>(rows_ * rowBytes) < dm::kParallelBytes || !threadsAvailable()) {
      rowsOf(0, rows_);
      return Status::ok();
    }
    const int64_t perChunk = std::max<int64_t>(1, 16384 / (rowBytes + 1));
    const int64_t chunks = (rows_ + perChunk - 1) / perChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c)
      rowsOf(c * perChunk, std::min(rows_, (c + 1) * perChunk));
    return Status::ok();
  }

private:
  /// The input offset (in elements) of output row r's first axis-last
  /// element, or -1 when an outer axis extrapolates.
  int64_t rowBase(int64_t r) const {
    int64_t base = 0;
    bool outside = false;
    for (int64_t k = static_cast<int64_t>(maps_.size()) - 2; k >= 0; --k) {
      const auto n = static_cast<int64_t>(maps_[k].size());
      const int64_t s = maps_[k][r % n];
      r /= n;
      outside |= s < 0;
      base += s * inStrides_[k];
    }
    return outside ? -1 : base;
  }

  template <typename E> void gatherRows(const char *src, char *dst, int64_t r0, int64_t r1) const {
    const E *x = reinterpret_cast<const E *>(src);
    E *y = reinterpret_cast<E *>(dst);
    E fill;
    std::memcpy(&fill, fill_.data(), sizeof(E));
    const int64_t *map = maps_.back().data();
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = rowBase(r);
      E *o = y + r * rowLen_;
      if (base < 0) {
        std::fill(o, o + rowLen_, fill);
      } else if (rowIsCopy_) {
        std::memcpy(o, x + base, static_cast<size_t>(rowLen_) * sizeof(E));
      } else {
        const E *row = x + base;
        for (int64_t i = 0; i < rowLen_; ++i)
          o[i] = map[i] < 0 ? fill : row[map[i]];
      }
    }
  }

  void gatherRowsBytes(const char *src, char *dst, int64_t r0, int64_t r1) const {
    const int64_t *map = maps_.back().data();
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = rowBase(r);
      for (int64_t i = 0; i < rowLen_; ++i) {
        char *o = dst + (r * rowLen_ + i) * static_cast<int64_t>(esize_);
        if (base < 0 || map[i] < 0)
          std::memcpy(o, fill_.data(), esize_);
        else
          std::memcpy(o, src + (base + map[i]) * static_cast<int64_t>(esize_), esize_);
      }
    }
  }

  std::vector<std::vector<int64_t>> maps_; ///< per axis: output -> input coordinate, -1 outside
  std::vector<int64_t> inStrides_;
  size_t esize_;
  std::vector<unsigned char> fill_;
  int64_t rows_ = 0, rowLen_ = 0;
  bool rowIsCopy_ = false;
};

/// Input `slot`'s constant value, null when absent or empty; an error
/// when the kernel needs it and it is not a constant.
Status constSlot(const OpDesc &d, int slot, bool needed, const Tensor *&t) {
  t = nullptr;
  if (slot < 0 || !d.hasInput(static_cast<size_t>(slot)) ||
      d.inputs[static_cast<size_t>(slot)].numel() == 0)
    return Status::ok();
  t = d.constInput(static_cast<size_t>(slot));
  if (!t && needed)
    return errorf(d.where(), ", opset ", d.opset, ": input ", slot,
                  " must be a compile-time constant (it decides the sampling)");
  return Status::ok();
}

Expected<KernelPtr> makeKernel(const OpDesc &d) {
  PIPEC_ASSIGN(resize::ResizeNode node, resize::resizeNode(d));
  const TensorDesc &x = d.inputs[0];
  const size_t rank = x.shape.size();
  const ResizeSpec *spec = &node.spec;
  const std::vector<ResizeTaps> &taps = node.taps;

  if (spec->mode == ResizeMode::Nearest) {
    PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "X"));
    std::vector<unsigned char> fill(esize, 0);
    PIPEC_TRY(dm::encodeScalar(d, spec->extrapolation, x.dtype, fill.data()));
    if (rank == 0)
      return makeIdentityKernel(d);
    std::vector<std::vector<int64_t>> maps;
    for (const ResizeTaps &t : taps) {
      std::vector<int64_t> m(static_cast<size_t>(t.outSize), -1);
      for (int64_t o = 0; o < t.outSize; ++o)
        if (t.start[o + 1] > t.start[o])
          m[o] = t.idx[t.start[o]];
      maps.push_back(std::move(m));
    }
    return KernelPtr(new NearestKernel(std::move(maps), x.shape, esize, std::move(fill)));
  }
  return ew::dispatchKernel<ew::kFloats>(
      d, x.dtype, "X", [&]<typename T>(ew::TypeTag<T>) -> Expected<KernelPtr> {
        return KernelPtr(new resize::SeparableKernel<T>(
            resize::SeparablePlan<T>(x.shape, taps, spec->extrapolation)));
      });
}

} // namespace

Expected<resize::ResizeNode> resize::resizeNode(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  ResizeNode node;
  if (d.opType == "ResizeGrad") {
    const TensorDesc &dy = d.inputs[0];
    auto fwd = resizeGradForward(d.attrs);
    if (!fwd)
      return errorf(d.where(), ": ", fwd.status().message());
    auto spec = resolveResize(fwd->args());
    if (!spec)
      return errorf(d.where(), ": forward ", fwd->opType, "-", fwd->opset, ": ", spec.status().message());
    if (dy.shape != spec->out)
      return errorf(d.where(), ": dY ", dy.str(), " does not have the forward output's shape ", shapeStr(spec->out));
    PIPEC_TRY(dm::checkOutput(d, 0, dy.dtype, spec->in));
    node.spec = *spec;
    node.in = dy.shape;
    for (size_t ax = 0; ax < spec->in.size(); ++ax)
      node.taps.push_back(resizeAxisTaps(*spec, ax).transposed());
    return node;
  }
  const TensorDesc &x = d.inputs[0];
  const ResizeInputSlots slots = resizeInputSlots(d.opType, d.opset);
  ResizeArgs a;
  a.opType = d.opType;
  a.opset = d.opset;
  a.attrs = &d.attrs;
  a.x = x.shape;
  const bool crop = attrString(d.attrs, "coordinate_transformation_mode", "") == "tf_crop_and_resize";
  PIPEC_TRY(constSlot(d, slots.roi, crop, a.roi));
  PIPEC_TRY(constSlot(d, slots.scales, true, a.scales));
  PIPEC_TRY(constSlot(d, slots.sizes, true, a.sizes));
  auto spec = resolveResize(a);
  if (!spec)
    return errorf(d.where(), ", opset ", d.opset, ": ", spec.status().message());
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, spec->out));
  node.spec = *spec;
  node.in = x.shape;
  for (size_t ax = 0; ax < x.shape.size(); ++ax)
    node.taps.push_back(resizeAxisTaps(*spec, ax));
  return node;
}

Expected<KernelPtr> makeResizeKernel(const OpDesc &d) { return makeKernel(d); }
Expected<KernelPtr> makeUpsampleKernel(const OpDesc &d) { return makeKernel(d); }

} // namespace pipec::cpu
