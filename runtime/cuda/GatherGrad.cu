//===- runtime/cuda/GatherGrad.cu - pipec:GatherGrad by sorted indices ----===//
//
// dData[o, r, k] = the sum, in index order, of dY[o, j, k] over the j with
// idx[j] = r (an embedding's gradient). The indices' rows are sorted with
// their positions (CUB's radix sort: stable, so positions stay ascending
// within a row, and deterministic), then each output element finds its
// row's run by binary search and adds the run's dY rows in order: the CPU
// kernel's order, no atomics, and work in proportion to the output and
// the indices, not to their product.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/Device.cuh"
#include "runtime/cuda/Launch.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {


__global__ void gatherKeysKernel(const int64_t *idx, int64_t count, int64_t len, int32_t *keys, int32_t *pos) {
  for (int64_t j = firstItem(); j < count; j += itemStride()) {
    keys[j] = body::gatherRow(idx[j], len);
    pos[j] = static_cast<int32_t>(j);
  }
}

__global__ void gatherGradSortedKernel(const float *dy, const int32_t *keys, const int32_t *pos, float *dData,
                                       int64_t outer, int64_t len, int64_t inner, int64_t count) {
  for (int64_t i = firstItem(); i < outer * len * inner; i += itemStride()) {
    const int64_t o = i / (len * inner), r = (i / inner) % len, k = i % inner;
    dData[i] = body::gatherGradSorted(dy, keys, pos, count, inner, o, static_cast<int32_t>(r), k);
  }
}

int keyBits(int64_t len) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= len) // keys go up to len itself
    ++bits;
  return bits;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t sortBytes(int64_t count, int64_t len) {
  size_t temp = 0;
  if (cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const int32_t *>(nullptr),
                                      static_cast<int32_t *>(nullptr), static_cast<const int32_t *>(nullptr),
                                      static_cast<int32_t *>(nullptr), static_cast<int>(count), 0,
                                      keyBits(len)) != cudaSuccess) {
    cudaGetLastError();
    temp = static_cast<size_t>(count) * 16 + (size_t{1} << 20); // no GPU to ask: a bound
  }
  return temp;
}

} // namespace

size_t gatherGradWorkspace(int64_t count, int64_t len) {
  return 4 * align256(static_cast<size_t>(count) * sizeof(int32_t)) + align256(sortBytes(count, len));
}

Status launchGatherGrad(const float *dy, const int64_t *idx, float *dData, int64_t outer, int64_t len, int64_t inner,
                        int64_t count, void *workspace, void *stream) {
  if (len >= (int64_t{1} << 31) - 1 || count >= (int64_t{1} << 31))
    return errorf("GatherGrad on the GPU: ", len, " rows, ", count, " indices (at most 2^31 - 2 each)");
  auto s = static_cast<cudaStream_t>(stream);
  char *w = static_cast<char *>(workspace);
  const size_t part = align256(static_cast<size_t>(count) * sizeof(int32_t));
  auto *keys = reinterpret_cast<int32_t *>(w), *pos = reinterpret_cast<int32_t *>(w + part);
  auto *sortedKeys = reinterpret_cast<int32_t *>(w + 2 * part), *sortedPos = reinterpret_cast<int32_t *>(w + 3 * part);
  void *temp = w + 4 * part;
  size_t tempBytes = sortBytes(count, len);
  if (count > 0) {
    const LaunchShape l = itemLaunch(count);
    gatherKeysKernel<<<l.grid, l.block, 0, s>>>(idx, count, len, keys, pos);
    if (cub::DeviceRadixSort::SortPairs(temp, tempBytes, keys, sortedKeys, pos, sortedPos, static_cast<int>(count), 0,
                                        keyBits(len), s) != cudaSuccess)
      return errorf("GatherGrad on the GPU: sorting the indices failed: ", cudaGetErrorString(cudaGetLastError()));
  }
  const LaunchShape l = itemLaunch(outer * len * inner);
  if (l.grid == 0)
    return Status::ok();
  gatherGradSortedKernel<<<l.grid, l.block, 0, s>>>(dy, sortedKeys, sortedPos, dData, outer, len, inner, count);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status::ok() : errorf("launching the GatherGrad kernel: ", cudaGetErrorString(e));
}

} // namespace pipec::cuda
