//===- runtime/cuda/Move.cu - CUDA indexing kernels -----------------------===//
//
// Pad, GatherElements, Trilu, a resize pass, a fill (ConstantOfShape) and
// Mod: one thread per output element, grid-stride, the bodies of
// runtime/cuda/MoveBodies.h. The movers take elements of 1, 2, 4 or 8
// bytes whatever their type.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/Device.cuh"
#include "runtime/cuda/Launch.h"
#include "runtime/cuda/MoveBodies.h"
#include "support/Half.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {




/// The element type a mover uses for `esize` bytes.
template <typename F> bool bySize(size_t esize, F f) {
  switch (esize) {
  case 1: f(uint8_t{}); return true;
  case 2: f(uint16_t{}); return true;
  case 4: f(uint32_t{}); return true;
  case 8: f(uint64_t{}); return true;
  default: return false;
  }
}

/// The low `sizeof(T)` bytes of `bits` as a T (the constant's bytes).
template <typename T> __device__ inline T fromBits(uint64_t bits) { return static_cast<T>(bits); }

template <typename T>
__global__ void padKernel(const T *in, T *out, body::PadGeometry g, int64_t n, uint64_t value, const T *valueAt) {
  const T v = valueAt ? *valueAt : fromBits<T>(value);
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const int64_t s = body::padOffset(g, i);
    out[i] = s < 0 ? v : in[s];
  }
}

template <typename T, typename I>
__global__ void gatherElementsKernel(const T *data, const I *idx, T *out, body::GatherElementsGeometry g, int64_t n,
                                     int *bad) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const int64_t s = body::gatherElementsOffset(g, i, static_cast<int64_t>(idx[i]));
    if (s < 0) {
      *bad = 1;
      out[i] = T(0);
    } else {
      out[i] = data[s];
    }
  }
}

template <typename T>
__global__ void triluKernel(const T *in, T *out, int64_t n, int64_t rows, int64_t cols, int64_t k, const int64_t *kAt,
                            bool upper) {
  const int64_t kk = kAt ? *kAt : k;
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    out[i] = body::triluKeeps(row, col, rows, cols, kk, upper) ? in[i] : T(0);
  }
}

__global__ void resizePassKernel(body::ResizePass p, const float *in, float *out) {
  const int64_t n = p.outer * p.nOut * p.inner;
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = body::resizePassElement(p, in, i);
}

/// Float to and from the 16-bit floats (support/Half.h's rounding); 16-bit
/// values travel as uint16_t, `from16`/`to16` say which format.
template <typename From, typename To>
__global__ void halfCastKernel(const From *x, To *y, int64_t n, CastType from16, CastType to16) {
  for (int64_t i = firstItem(); i < n; i += itemStride()) {
    float f;
    if constexpr (sizeof(From) == 2)
      f = from16 == CastType::BF16 ? bf16ToFloat(x[i]) : halfToFloat(x[i]);
    else
      f = static_cast<float>(x[i]);
    if constexpr (sizeof(To) == 2)
      y[i] = to16 == CastType::BF16 ? floatToBf16(f) : floatToHalf(f);
    else
      y[i] = static_cast<To>(f);
  }
}

template <typename T> __global__ void fillKernel(T *out, int64_t n, uint64_t value) {
  const T v = fromBits<T>(value);
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = v;
}

template <typename T>
__global__ void modKernel(const T *a, body::Broadcast ba, const T *b, body::Broadcast bb, T *out, int64_t n,
                          bool cMod) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    out[i] = body::modOf<T>(a[body::broadcastOffset(i, ba)], b[body::broadcastOffset(i, bb)], cMod);
}

} // namespace

Status launchPad(const void *in, void *out, const body::PadGeometry &g, int64_t n, size_t esize, uint64_t value,
                 const void *valueAt, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  const bool ok = bySize(esize, [&](auto t) {
    using T = decltype(t);
    padKernel<T><<<l.grid, l.block, 0, asStream(stream)>>>(static_cast<const T *>(in), static_cast<T *>(out), g, n,
                                                           value, static_cast<const T *>(valueAt));
  });
  return ok ? launched("Pad") : errorf("Pad: elements of ", esize, " bytes");
}

Status launchGatherElements(const void *data, const void *idx, bool idx64, void *out,
                            const body::GatherElementsGeometry &g, int64_t n, size_t esize, int *bad, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  const bool ok = bySize(esize, [&](auto t) {
    using T = decltype(t);
    if (idx64)
      gatherElementsKernel<T, int64_t><<<l.grid, l.block, 0, asStream(stream)>>>(
          static_cast<const T *>(data), static_cast<const int64_t *>(idx), static_cast<T *>(out), g, n, bad);
    else
      gatherElementsKernel<T, int32_t><<<l.grid, l.block, 0, asStream(stream)>>>(
          static_cast<const T *>(data), static_cast<const int32_t *>(idx), static_cast<T *>(out), g, n, bad);
  });
  return ok ? launched("GatherElements") : errorf("GatherElements: elements of ", esize, " bytes");
}

Status launchTrilu(const void *in, void *out, int64_t n, int64_t rows, int64_t cols, int64_t k, const int64_t *kAt,
                   bool upper, size_t esize, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  const bool ok = bySize(esize, [&](auto t) {
    using T = decltype(t);
    triluKernel<T><<<l.grid, l.block, 0, asStream(stream)>>>(static_cast<const T *>(in), static_cast<T *>(out), n,
                                                             rows, cols, k, kAt, upper);
  });
  return ok ? launched("Trilu") : errorf("Trilu: elements of ", esize, " bytes");
}

Status launchResizePass(const body::ResizePass &p, const float *in, float *out, void *stream) {
  const LaunchShape l = itemLaunch(p.outer * p.nOut * p.inner);
  if (l.grid == 0)
    return Status::ok();
  resizePassKernel<<<l.grid, l.block, 0, asStream(stream)>>>(p, in, out);
  return launched("Resize");
}

Status launchHalfCast(const void *x, CastType from, void *y, CastType to, int64_t n, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  const bool from16 = from == CastType::F16 || from == CastType::BF16;
  const bool to16 = to == CastType::F16 || to == CastType::BF16;
  auto s = asStream(stream);
  auto run = [&](auto fromTag, auto toTag) {
    using F = decltype(fromTag);
    using T = decltype(toTag);
    halfCastKernel<F, T><<<l.grid, l.block, 0, s>>>(static_cast<const F *>(x), static_cast<T *>(y), n, from, to);
  };
  auto toAny = [&](auto fromTag) {
    if (to16)
      run(fromTag, uint16_t{});
    else if (to == CastType::F32)
      run(fromTag, float{});
    else
      run(fromTag, double{});
  };
  if (from16)
    toAny(uint16_t{});
  else if (from == CastType::F32)
    toAny(float{});
  else
    toAny(double{});
  return launched("Cast");
}

Status launchFill(void *out, int64_t n, size_t esize, uint64_t value, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  const bool ok = bySize(esize, [&](auto t) {
    using T = decltype(t);
    fillKernel<T><<<l.grid, l.block, 0, asStream(stream)>>>(static_cast<T *>(out), n, value);
  });
  return ok ? launched("fill") : errorf("fill: elements of ", esize, " bytes");
}

Status launchMod(CastType type, const void *a, const body::Broadcast &ba, const void *b, const body::Broadcast &bb,
                 void *out, int64_t n, bool cMod, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (l.grid == 0)
    return Status::ok();
  auto run = [&](auto t) {
    using T = decltype(t);
    modKernel<T><<<l.grid, l.block, 0, asStream(stream)>>>(static_cast<const T *>(a), ba, static_cast<const T *>(b),
                                                           bb, static_cast<T *>(out), n, cMod);
  };
  switch (type) {
  case CastType::F32: run(float{}); break;
  case CastType::F64: run(double{}); break;
  case CastType::I32: run(int32_t{}); break;
  case CastType::I64: run(int64_t{}); break;
  default: return errorf("Mod: the CUDA kernel takes float32, float64, int32 or int64");
  }
  return launched("Mod");
}

} // namespace pipec::cuda
