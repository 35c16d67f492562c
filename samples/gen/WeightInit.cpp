//===- samples/gen/WeightInit.cpp - Deterministic weight init -------------===//
#include "samples/gen/WeightInit.h"

#include "support/FileIO.h"

#include <random>

namespace pipec::samples {

namespace {

// Spreads nearby seeds (and names differing in one character) over the
// whole state space before they reach the Mersenne Twister.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

void WeightInit::fill(const std::string &name, const Init &init, float *out,
                      uint64_t n) const {
  if (init.lo == init.hi) {
    for (uint64_t i = 0; i < n; ++i)
      out[i] = init.lo;
    return;
  }
  std::mt19937_64 rng(splitmix64(seed_ ^ fnv1a64(name)));
  const double lo = init.lo, width = double(init.hi) - double(init.lo);
  for (uint64_t i = 0; i < n; ++i) {
    // The top 53 bits give a double uniform on [0, 1), exactly.
    double u = double(rng() >> 11) * 0x1.0p-53;
    out[i] = static_cast<float>(lo + width * u);
  }
}

} // namespace pipec::samples
