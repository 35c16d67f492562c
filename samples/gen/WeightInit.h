//===- samples/gen/WeightInit.h - Deterministic weight init ----*- C++ -*-===//
//
// Sample weights are reproducible bit for bit on every platform: each tensor
// draws from its own std::mt19937_64 (whose output sequence the C++ standard
// fixes), seeded with splitmix64(seed ^ fnv1a64(tensor name)), and maps the
// 64-bit draws to floats by hand, since std::uniform_real_distribution and
// std::normal_distribution differ between standard libraries. Seeding by
// name makes a tensor's values independent of the order it is created in
// and of the other sizes of the model.
//
// Scales keep activations O(1) at initialization: He (Kaiming) uniform for
// weights followed by a ReLU, LeCun uniform (variance 1/fan_in) for linear
// ones, PyTorch's U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for biases.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace pipec::samples {

/// The default seed of every sample (`--seed` overrides it).
inline constexpr uint64_t kDefaultSeed = 20240917;

/// A distribution for one tensor: uniform on [lo, hi) (lo == hi: constant).
struct Init {
  float lo = 0, hi = 0;

  static Init constant(float v) { return {v, v}; }
  static Init range(float lo, float hi) { return {lo, hi}; }
  static Init symmetric(double bound) {
    return {static_cast<float>(-bound), static_cast<float>(bound)};
  }
  /// He uniform: variance 2/fan_in, for a weight followed by a ReLU.
  static Init he(int64_t fanIn) { return symmetric(std::sqrt(6.0 / double(fanIn))); }
  /// LeCun uniform: variance 1/fan_in, for a weight with no ReLU after it.
  static Init lecun(int64_t fanIn, double gain = 1.0) {
    return symmetric(gain * std::sqrt(3.0 / double(fanIn)));
  }
  /// PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static Init bias(int64_t fanIn) { return symmetric(1.0 / std::sqrt(double(fanIn))); }
};

class WeightInit {
public:
  explicit WeightInit(uint64_t seed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  /// Fills `out[0..n)` for the tensor called `name`.
  void fill(const std::string &name, const Init &init, float *out, uint64_t n) const;

private:
  uint64_t seed_;
};

} // namespace pipec::samples
