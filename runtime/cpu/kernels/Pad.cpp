//===- runtime/cpu/kernels/Pad.cpp - Pad ----------------------------------===//
//
// Pad (opsets 2-19): pads from the 'pads' attribute (< 11) or the constant
// 'pads' input (>= 11), restricted to the constant 'axes' input (>= 18);
// modes constant (value attribute < 11, runtime constant_value input >= 11),
// reflect, edge and wrap (19). Negative pads crop first; the other modes
// then pad relative to the cropped extent.
//
// The factory maps every output coordinate of every axis to its source
// coordinate (or "fill"), and cuts the innermost axis into segments: runs of
// consecutive source elements (one memcpy each) and fills. run() walks the
// output rows, adds up the source row offset, and copies the segments.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"
#include "runtime/cpu/kernels/PadSpec.h"

#include <algorithm>
#include <cstring>

namespace pipec::cpu {

namespace {
using dm::PadMode;

class PadKernel final : public Kernel {
public:
  struct Segment {
    int64_t out, len, src; ///< src -1: filled with the constant
  };

  PadKernel(std::vector<std::vector<int64_t>> maps, std::vector<int64_t> inStrides,
            std::vector<Segment> segments, int64_t rowLen, size_t esize,
            std::vector<unsigned char> value, bool runtimeValue)
      : maps_(std::move(maps)), inStrides_(std::move(inStrides)),
        segments_(std::move(segments)), rowLen_(rowLen), esize_(esize),
        value_(std::move(value)), runtimeValue_(runtimeValue) {
    rows_ = 1;
    for (size_t k = 0; k + 1 < maps_.size(); ++k)
      rows_ *= static_cast<int64_t>(maps_[k].size());
    if (rowLen_ == 0)
      rows_ = 0;
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    if (rows_ == 0)
      return Status::ok();
    std::vector<unsigned char> value = value_;
    if (runtimeValue_ && in[2])
      std::memcpy(value.data(), in[2], esize_);
    const char *src = static_cast<const char *>(in[0]);
    char *dst = static_cast<char *>(out[0]);
    const int64_t outer = static_cast<int64_t>(maps_.size()) - 1;
    const int64_t es = static_cast<int64_t>(esize_);
    const int64_t rowBytes = rowLen_ * es;

    auto padRows = [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> idx(static_cast<size_t>(outer));
      for (int64_t k = outer - 1, r = r0; k >= 0; --k) {
        idx[k] = r % static_cast<int64_t>(maps_[k].size());
        r /= static_cast<int64_t>(maps_[k].size());
      }
      for (int64_t r = r0; r < r1; ++r) {
        char *o = dst + r * rowBytes;
        int64_t base = 0;
        bool fill = false;
        for (int64_t k = 0; k < outer; ++k) {
          const int64_t s = maps_[k][idx[k]];
          fill |= s < 0;
          base += s * inStrides_[k];
        }
        if (fill) {
          dm::fillElements(o, value.data(), rowLen_, esize_);
        } else {
          for (const Segment &g : segments_) {
            if (g.src < 0)
              dm::fillElements(o + g.out * es, value.data(), g.len, esize_);
            else
              std::memcpy(o + g.out * es, src + (base + g.src) * es,
                          static_cast<size_t>(g.len) * esize_);
          }
        }
        for (int64_t k = outer - 1; k >= 0; --k) {
          if (++idx[k] < static_cast<int64_t>(maps_[k].size()))
            break;
          idx[k] = 0;
        }
      }
    };

    if (static_cast<size_t>(rows_ * rowBytes) < dm::kParallelBytes || !threadsAvailable()) {
      padRows(0, rows_);
      return Status::ok();
    }
    const int64_t perChunk = std::max<int64_t>(1, 16384 / (rowBytes + 1));
    const int64_t chunks = (rows_ + perChunk - 1) / perChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c)
      padRows(c * perChunk, std::min(rows_, (c + 1) * perChunk));
    return Status::ok();
  }

private:
  std::vector<std::vector<int64_t>> maps_; ///< per axis: output -> source coordinate
  std::vector<int64_t> inStrides_;
  std::vector<Segment> segments_; ///< of the innermost axis
  int64_t rowLen_, rows_ = 0;
  size_t esize_;
  std::vector<unsigned char> value_;
  bool runtimeValue_;
};

Status readPads(const OpDesc &d, int64_t rank, std::vector<int64_t> &pads) {
  if (d.opset < 11) {
    const char *name = attrHas(d.attrs, "pads") ? "pads" : "paddings";
    if (!attrHas(d.attrs, name))
      return errorf(d.where(), ": attribute 'pads' is required before opset 11");
    pads = attrInts(d.attrs, name);
  } else {
    PIPEC_TRY(dm::checkArity(d, 2, 1));
    PIPEC_ASSIGN(std::vector<int64_t> given, dm::constInts(d, 1, "pads"));
    std::vector<int64_t> axes;
    if (d.hasInput(3)) {
      PIPEC_ASSIGN(axes, dm::constInts(d, 3, "axes"));
    } else {
      for (int64_t i = 0; i < rank; ++i)
        axes.push_back(i);
    }
    const size_t n = axes.size();
    if (given.size() != 2 * n)
      return errorf(d.where(), ": pads ", shapeStr(given), " must have 2 * ", n, " values");
    pads.assign(static_cast<size_t>(2 * rank), 0);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (size_t i = 0; i < n; ++i) {
      PIPEC_ASSIGN(int64_t a, dm::normalizeAxis(d, axes[i], rank));
      if (seen[a])
        return errorf(d.where(), ": axis ", a, " is padded twice");
      seen[a] = true;
      pads[a] = given[i];
      pads[a + rank] = given[i + n];
    }
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return errorf(d.where(), ": pads ", shapeStr(pads), " must have 2 * ", rank, " values");
  return Status::ok();
}
} // namespace

Expected<dm::PadSpec> dm::padSpec(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  PadSpec p;
  PIPEC_ASSIGN(p.esize, dm::elementSize(d, x, "input"));
  std::string modeName = attrString(d.attrs, "mode", "constant");
  if (modeName == "constant")
    p.mode = PadMode::Constant;
  else if (modeName == "reflect")
    p.mode = PadMode::Reflect;
  else if (modeName == "edge")
    p.mode = PadMode::Edge;
  else if (modeName == "wrap")
    p.mode = PadMode::Wrap;
  else
    return errorf(d.where(), ": unknown mode '", modeName, "' (constant, reflect, edge, wrap)");

  // A scalar pads as a tensor of shape [1] with zero pads.
  const int64_t rank = x.rank();
  PIPEC_TRY(readPads(d, rank, p.pads));
  p.dims = rank ? x.shape : Shape{1};
  if (!rank)
    p.pads = {0, 0};
  for (size_t i = 0; i < p.dims.size(); ++i) {
    const int64_t begin = p.pads[i], end = p.pads[i + p.dims.size()];
    const int64_t out = p.dims[i] + begin + end;
    const int64_t kept = p.dims[i] - std::max<int64_t>(0, -begin) - std::max<int64_t>(0, -end);
    if (out < 0 || kept < 0)
      return errorf(d.where(), ": pads ", begin, " and ", end, " on axis ", i, " crop more than ", p.dims[i],
                    " elements");
    if (p.mode != PadMode::Constant && kept == 0 && out > 0)
      return errorf(d.where(), ": mode '", modeName, "' cannot pad axis ", i, ", which has no elements left");
    p.outDims.push_back(out);
  }
  PIPEC_TRY(dm::checkOutput(d, 0, x.dtype, rank ? p.outDims : Shape{}));
  p.value.assign(p.esize, 0);
  if (d.opset < 11) {
    PIPEC_TRY(dm::encodeScalar(d, attrFloat(d.attrs, "value", 0.0f), x.dtype, p.value.data()));
  } else if (d.hasInput(2)) {
    const TensorDesc &v = d.inputs[2];
    if (v.dtype != x.dtype || v.numel() != 1)
      return errorf(d.where(), ": constant_value must be one ", dtypeName(x.dtype), " value, got ", v.str());
    p.runtimeValue = true;
  }
  return p;
}

Expected<KernelPtr> makePadKernel(const OpDesc &d) {
  PIPEC_ASSIGN(dm::PadSpec p, dm::padSpec(d));
  std::vector<std::vector<int64_t>> maps;
  for (size_t i = 0; i < p.dims.size(); ++i) {
    std::vector<int64_t> map(static_cast<size_t>(p.outDims[i]));
    for (int64_t o = 0; o < p.outDims[i]; ++o)
      map[o] = dm::padSource(o, p.dims[i], p.pads[i], p.pads[i + p.dims.size()], p.mode);
    maps.push_back(std::move(map));
  }

  // Innermost axis: maximal runs of consecutive sources, and fills.
  std::vector<PadKernel::Segment> segments;
  for (int64_t o = 0; o < static_cast<int64_t>(maps.back().size()); ++o) {
    const int64_t s = maps.back()[o];
    if (!segments.empty()) {
      PadKernel::Segment &g = segments.back();
      const bool extends = s < 0 ? g.src < 0 : g.src >= 0 && s == g.src + g.len;
      if (extends) {
        ++g.len;
        continue;
      }
    }
    segments.push_back({o, 1, s});
  }
  const int64_t rowLen = p.outDims.back();
  return KernelPtr(new PadKernel(std::move(maps), rowMajorStrides(p.dims), std::move(segments), rowLen, p.esize,
                                 std::move(p.value), p.runtimeValue));
}

} // namespace pipec::cpu
