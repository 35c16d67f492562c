//===- runtime/cuda/Update.cpp - Parameter updates on the device ----------===//
#include "runtime/cuda/Update.h"

#include "support/Format.h"

#include <limits>

namespace pipec::cuda {

Expected<UpdateTable> makeUpdateTable(const std::vector<kernel::ParamBuffers> &params) {
  UpdateTable t;
  t.firstChunk.reserve(params.size() + 1);
  for (size_t p = 0; p < params.size(); ++p) {
    const kernel::ParamBuffers &b = params[p];
    if (b.n < 0 || (b.n > 0 && (!b.param || !b.grad)))
      return errorf("device update: parameter ", p, " has no memory or a negative size");
    t.firstChunk.push_back(static_cast<int32_t>(t.chunks.size()));
    for (int64_t lo = 0; lo < b.n; lo += update::kChunk) {
      update::Chunk c;
      c.param = b.param + lo;
      c.grad = b.grad + lo;
      for (int k = 0; k < update::kMaxStates; ++k)
        c.state[k] = b.state[k] ? b.state[k] + lo : nullptr;
      c.n = std::min(update::kChunk, b.n - lo);
      c.index = static_cast<int32_t>(p);
      t.chunks.push_back(c);
      if (t.chunks.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        return errorf("device update: more than 2^31 chunks");
    }
  }
  t.firstChunk.push_back(static_cast<int32_t>(t.chunks.size()));
  return t;
}

void hostSquares(const UpdateTable &t, float scale, double *lanes, double *squares) {
  for (size_t c = 0; c < t.chunks.size(); ++c)
    for (int l = 0; l < update::kLanes; ++l)
      lanes[c * update::kLanes + static_cast<size_t>(l)] = update::laneSquares(t.chunks[c], scale, l);
  for (int32_t p = 0; p < t.params(); ++p)
    squares[p] = update::paramSquares(lanes, t.firstChunk.data(), p);
}

void hostApply(const UpdateTable &t, const update::Control &k, const train::UpdateScalars &s, bool update) {
  if (k.skip)
    return;
  for (const update::Chunk &c : t.chunks)
    for (int64_t i = 0; i < c.n; ++i)
      update::applyElement(c, k, s, update, i);
}

void hostAccumulate(float *dst, const float *src, int64_t n, bool first) {
  for (int64_t i = 0; i < n; ++i)
    update::accumulateElement(dst, src, first, i);
}

} // namespace pipec::cuda
