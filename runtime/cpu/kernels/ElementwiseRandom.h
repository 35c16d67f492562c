//===- runtime/cpu/kernels/ElementwiseRandom.h - Counter-based RNG -*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011) and SplitMix64 key mixing, for random ops (Dropout) whose
// draws must depend only on (seed, step, micro-batch, node, element): never
// on the schedule, the partition or the thread count. Element e of a stream
// uses word e % 4 of the block for counter e / 4. The functions are
// PIPEC_HD: the CUDA Dropout kernel draws the same words.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/Hd.h"

#include <array>
#include <cstdint>

namespace pipec::cpu::ew {

/// SplitMix64's finaliser: a bijective 64-bit mixer.
PIPEC_HD inline uint64_t splitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Philox4x32 with 10 rounds: four random 32-bit words for a 128-bit
/// counter under a 64-bit key. Matches Random123's known-answer vectors.
PIPEC_HD inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c,
                                             std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round) {
      k[0] += kW0;
      k[1] += kW1;
    }
    uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
  }
  return c;
}

/// The random stream of one node in one (step, micro-batch): the 64-bit
/// identifiers that do not fit the counter are mixed into the key.
struct RandomStream {
  std::array<uint32_t, 2> key;
  uint32_t step, microBatch;

  PIPEC_HD RandomStream(uint64_t seed, uint64_t step64, uint64_t microBatch64, uint64_t nodeId) {
    uint64_t h = splitMix64(seed);
    h = splitMix64(h ^ nodeId);
    h = splitMix64(h ^ (step64 >> 32));
    h = splitMix64(h ^ (microBatch64 >> 32));
    key = {uint32_t(h), uint32_t(h >> 32)};
    step = uint32_t(step64);
    microBatch = uint32_t(microBatch64);
  }
  /// Words 4*block .. 4*block+3 of the stream.
  PIPEC_HD std::array<uint32_t, 4> block(uint64_t block) const {
    return philox4x32_10({uint32_t(block), uint32_t(block >> 32), step, microBatch}, key);
  }
};

} // namespace pipec::cpu::ew
