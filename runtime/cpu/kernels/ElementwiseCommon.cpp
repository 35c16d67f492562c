//===- runtime/cpu/kernels/ElementwiseCommon.cpp - Elementwise helpers ----===//
//
// Non-template parts of ElementwiseCommon.h: broadcast planning and the
// desc checks every elementwise and reduction factory shares, and the
// vectorized f32 to bf16 narrowing.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

#include "runtime/cpu/CpuIsa.h"
#include "support/Half.h"

#include <immintrin.h>

namespace pipec::cpu::ew {

Expected<Shape> broadcastShapes(const OpDesc &d, const std::vector<Shape> &shapes) {
  size_t rank = 0;
  for (const Shape &s : shapes)
    rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape &s : shapes) {
    size_t lead = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[lead + i];
      if (s[i] == o || s[i] == 1)
        continue;
      if (o != 1)
        return errorf(d.where(), ": shapes do not broadcast: dimension ", lead + i,
                      " is ", o, " in one input and ", s[i], " in another");
      o = s[i];
    }
  }
  return out;
}

Expected<BroadcastPlan> makeBroadcastPlan(const OpDesc &d, const Shape &out,
                                          const std::vector<Shape> &inputs) {
  BroadcastPlan p;
  if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxBroadcastInputs))
    return errorf(d.where(), ": broadcast of ", inputs.size(), " inputs");
  p.numInputs = static_cast<int>(inputs.size());
  p.total = numElements(out);
  const size_t rank = out.size();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Shape &s = inputs[k];
    if (s.size() > rank)
      return errorf(d.where(), ": input of shape ", shapeStr(s),
                    " has a higher rank than the output ", shapeStr(out));
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t o = out[rank - s.size() + i];
      if (s[i] < 0 || (s[i] != o && s[i] != 1))
        return errorf(d.where(), ": input of shape ", shapeStr(s),
                      " does not broadcast to the output shape ", shapeStr(out));
    }
  }
  p.flat = true;
  for (const Shape &s : inputs)
    p.flat = p.flat && numElements(s) == p.total;

  // Collapse: drop unit output dims, merge neighbours whose pattern of
  // present/broadcast inputs is the same.
  auto present = [&](size_t k, size_t dim) {
    const Shape &s = inputs[k];
    size_t lead = rank - s.size();
    return dim >= lead && s[dim - lead] == out[dim];
  };
  std::vector<unsigned> patterns;
  const unsigned allPresent = (1u << inputs.size()) - 1;
  for (size_t dim = 0; dim < rank; ++dim) {
    if (out[dim] == 1)
      continue;
    unsigned pat = 0;
    for (size_t k = 0; k < inputs.size(); ++k)
      pat |= present(k, dim) ? 1u << k : 0u;
    if (!patterns.empty() && patterns.back() == pat) {
      p.dims.back() *= out[dim];
    } else {
      p.dims.push_back(out[dim]);
      patterns.push_back(pat);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    patterns.push_back(allPresent);
  }
  if (p.rank() > kMaxRank)
    return errorf(d.where(), ": broadcast needs ", p.rank(),
                  " dimensions after merging; the CPU kernel handles ", kMaxRank);
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::vector<int64_t> &st = p.strides[k];
    st.assign(p.dims.size(), 0);
    int64_t acc = 1;
    for (int i = p.rank() - 1; i >= 0; --i) {
      if (patterns[i] & (1u << k)) {
        st[i] = acc;
        acc *= p.dims[i];
      }
    }
  }
  return p;
}

Status checkArity(const OpDesc &d, size_t minIn, size_t maxIn, size_t minOut,
                  size_t maxOut) {
  if (d.inputs.size() < minIn || d.inputs.size() > maxIn)
    return errorf(d.where(), ": expected ", minIn, "..", maxIn, " inputs, got ",
                  d.inputs.size());
  if (d.outputs.size() < minOut || d.outputs.size() > maxOut)
    return errorf(d.where(), ": expected ", minOut, "..", maxOut, " outputs, got ",
                  d.outputs.size());
  for (size_t i = 0; i < minIn; ++i)
    if (!d.hasInput(i))
      return errorf(d.where(), ": required input ", i, " is missing");
  for (const TensorDesc &t : d.inputs)
    for (int64_t s : t.shape)
      if (s < 0)
        return errorf(d.where(), ": input shape ", shapeStr(t.shape), " is not static");
  for (const TensorDesc &t : d.outputs)
    for (int64_t s : t.shape)
      if (s < 0)
        return errorf(d.where(), ": output shape ", shapeStr(t.shape), " is not static");
  return Status::ok();
}

Status checkOutput(const OpDesc &d, size_t i, DType t, const Shape &s) {
  if (i >= d.outputs.size())
    return errorf(d.where(), ": output ", i, " is missing");
  const TensorDesc &o = d.outputs[i];
  if (o.dtype != t || o.shape != s)
    return errorf(d.where(), ": output ", i, " is ", o.str(), ", expected ",
                  TensorDesc{t, s}.str());
  return Status::ok();
}

Expected<int64_t> normalizeAxis(const OpDesc &d, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return errorf(d.where(), ": axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Expected<double> scalarValue(const OpDesc &d, const Tensor &t, const char *what) {
  if (t.numel() != 1)
    return errorf(d.where(), ": ", what, " must have one element, it has shape ",
                  shapeStr(t.shape()));
  if (!inTypeSet(t.dtype(), kAll))
    return errorf(d.where(), ": ", what, " has unsupported type ", dtypeName(t.dtype()));
  return t.getDouble(0);
}

namespace {

/// Eight bf16 roundings in the low halves of 32-bit lanes (floatToBf16).
inline __m256i bf16Lanes8(__m256i x) {
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i isNan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, nan, isNan);
}

/// Only where cpuHas(CpuIsa::Avx512): sixteen at a time, narrowed by vpmovdw.
PIPEC_TARGET_AVX512 int64_t narrowToBf16Avx512(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  // The maskz forms with every lane set: GCC 12's unmasked ones start from
  // an undefined vector and warn (-Wmaybe-uninitialized).
  const __mmask16 all = 0xffff;
  for (; i + 16 <= n; i += 16) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __m512i hi = _mm512_maskz_srli_epi32(all, v, 16);
    const __m512i rounded =
        _mm512_maskz_srli_epi32(all, _mm512_add_epi32(_mm512_add_epi32(v, bias), _mm512_and_si512(hi, one)), 16);
    const __mmask16 isNan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, absMask), inf);
    const __m512i r = _mm512_mask_or_epi32(rounded, isNan, hi, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm512_maskz_cvtepi32_epi16(all, r));
  }
  return i;
}

} // namespace

void narrowToBf16(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  if (cpuHas(CpuIsa::Avx512)) {
    i = narrowToBf16Avx512(x, y, n);
  } else {
    for (; i + 16 <= n; i += 16) {
      const __m256i a = bf16Lanes8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i)));
      const __m256i b = bf16Lanes8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i + 8)));
      // packus interleaves the 128-bit halves of a and b; the permute puts
      // them back in order. Every lane is below 2^16: no saturation.
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i),
                          _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
    }
  }
  for (; i < n; ++i)
    y[i] = floatToBf16(x[i]);
}

void widenBf16(const uint16_t *x, float *y, int64_t n) {
  const uint16_t *__restrict xv = x;
  float *__restrict yv = y;
  for (int64_t i = 0; i < n; ++i)
    yv[i] = bf16ToFloat(xv[i]);
}

void narrowToHalf(const float *x, uint16_t *y, int64_t n) {
  const float *__restrict xv = x;
  uint16_t *__restrict yv = y;
  for (int64_t i = 0; i < n; ++i)
    yv[i] = floatToHalf(xv[i]);
}

void widenHalf(const uint16_t *x, float *y, int64_t n) {
  const uint16_t *__restrict xv = x;
  float *__restrict yv = y;
  for (int64_t i = 0; i < n; ++i)
    yv[i] = halfToFloat(xv[i]);
}

} // namespace pipec::cpu::ew
