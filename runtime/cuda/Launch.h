//===- runtime/cuda/Launch.h - Launch shapes of the CUDA kernels -*- C++ -*-===//
//
// The grid and block sizes of the kernels, as host arithmetic that
// tests/unit/CudaBodiesTest.cpp checks without a GPU: every element (row)
// is covered exactly once, and no launch exceeds the hardware's limits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdint>

namespace pipec::cuda {

struct LaunchShape {
  uint32_t grid = 0;  ///< blocks (0: nothing to launch)
  uint32_t block = 0; ///< threads per block
};

/// Blocks of every GPU pipec targets take up to 1024 threads; grids up to
/// 2^31 - 1 blocks in x. Kernels loop with a grid stride beyond kMaxGrid.
inline constexpr uint32_t kMaxBlock = 1024;
inline constexpr uint32_t kMaxGrid = 65535u * 32u;

/// One thread per item for n items, `block` threads a block; items past
/// grid * block are taken by a grid-stride loop.
inline LaunchShape itemLaunch(int64_t n, uint32_t block = 256) {
  LaunchShape s;
  if (n <= 0)
    return s;
  s.block = std::clamp<uint32_t>(block, 32, kMaxBlock);
  const int64_t blocks = (n + s.block - 1) / s.block;
  s.grid = static_cast<uint32_t>(std::min<int64_t>(blocks, kMaxGrid));
  return s;
}

/// The items thread `t` of a launch takes: t, t + stride, ... below n.
inline int64_t itemsOfThread(const LaunchShape &s, int64_t t, int64_t n) {
  const int64_t stride = static_cast<int64_t>(s.grid) * s.block;
  return t >= n ? 0 : (n - 1 - t) / stride + 1;
}

} // namespace pipec::cuda
