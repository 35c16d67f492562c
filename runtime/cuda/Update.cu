//===- runtime/cuda/Update.cu - The device update's kernels ---------------===//
//
// The passes of runtime/cuda/Update.h as CUDA kernels over a device's chunk
// table; each thread runs a body of runtime/cuda/UpdateBodies.h. Built with
// --fmad=false (runtime/cuda/CMakeLists.txt): no multiply-add contraction,
// so that the updates are the CPU optimizer's bit for bit. No atomics:
// every lane sum, squared sum and element has one thread.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Launch.h"
#include "runtime/cuda/Update.h"
#include "runtime/cuda/Device.cuh"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {


__global__ void laneSquaresKernel(const update::Chunk *chunks, int64_t items, float scale, double *lanes) {
  for (int64_t it = firstItem(); it < items; it += itemStride())
    lanes[it] = update::laneSquares(chunks[it / update::kLanes], scale, static_cast<int>(it % update::kLanes));
}

__global__ void paramSquaresKernel(const double *lanes, const int32_t *firstChunk, int32_t params, double *squares) {
  for (int64_t p = firstItem(); p < params; p += itemStride())
    squares[p] = update::paramSquares(lanes, firstChunk, static_cast<int32_t>(p));
}

__global__ void decideKernel(const double *squares, int32_t params, double clip, bool skipNonFinite,
                             update::Control *control) {
  if (firstItem() == 0)
    *control = update::decide(squares, params, clip, skipNonFinite);
}

__global__ void applyKernel(const update::Chunk *chunks, int32_t nChunks, const update::Control *control,
                            train::UpdateScalars s, bool update) {
  const update::Control k = *control;
  if (k.skip)
    return;
  for (int64_t c = blockIdx.x; c < nChunks; c += gridDim.x) {
    const update::Chunk ch = chunks[c];
    for (int64_t i = threadIdx.x; i < ch.n; i += blockDim.x)
      update::applyElement(ch, k, s, update, i);
  }
}

__global__ void accumulateKernel(float *dst, const float *src, int64_t n, bool first) {
  for (int64_t i = firstItem(); i < n; i += itemStride())
    update::accumulateElement(dst, src, first, i);
}



} // namespace

Status launchUpdateSquares(const update::Chunk *chunks, int32_t nChunks, const int32_t *firstChunk, int32_t params,
                           float scale, double *lanes, double *squares, void *stream) {
  const int64_t items = static_cast<int64_t>(nChunks) * update::kLanes;
  if (const LaunchShape l = itemLaunch(items, 128); l.grid) {
    laneSquaresKernel<<<l.grid, l.block, 0, asStream(stream)>>>(chunks, items, scale, lanes);
    PIPEC_TRY(launched("update squares"));
  }
  if (const LaunchShape l = itemLaunch(params, 128); l.grid) {
    paramSquaresKernel<<<l.grid, l.block, 0, asStream(stream)>>>(lanes, firstChunk, params, squares);
    PIPEC_TRY(launched("parameter squares"));
  }
  return Status::ok();
}

Status launchUpdateDecide(const double *squares, int32_t params, double clip, bool skipNonFinite,
                          update::Control *control, void *stream) {
  decideKernel<<<1, 32, 0, asStream(stream)>>>(squares, params, clip, skipNonFinite, control);
  return launched("update decision");
}

Status launchUpdateApply(const update::Chunk *chunks, int32_t nChunks, const update::Control *control,
                         const train::UpdateScalars &s, bool update, void *stream) {
  if (nChunks <= 0)
    return Status::ok();
  const uint32_t grid = static_cast<uint32_t>(std::min<int64_t>(nChunks, kMaxGrid));
  applyKernel<<<grid, 256, 0, asStream(stream)>>>(chunks, nChunks, control, s, update);
  return launched("update");
}

Status launchAccumulate(float *dst, const float *src, int64_t n, bool first, void *stream) {
  const LaunchShape l = itemLaunch(n);
  if (!l.grid)
    return Status::ok();
  accumulateKernel<<<l.grid, l.block, 0, asStream(stream)>>>(dst, src, n, first);
  return launched("gradient sum");
}

} // namespace pipec::cuda
