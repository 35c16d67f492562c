//===- runtime/cuda/Update.h - Parameter updates on the device -*- C++ -*-===//
//
// The device update of resident training (runtime/kernel/Backend.h's
// ParamUpdater): a device's parameters as one table of chunks
// (runtime/cuda/UpdateBodies.h), and the update's three passes (squares,
// decide, apply) run over it either on the host, for memory the host
// addresses (the emulated GPU of the CPU tests, runtime/EmulatedGpu.h), or by the
// CUDA kernels of runtime/cuda/Update.cu: one launch a pass for all of the
// device's parameters.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/UpdateBodies.h"
#include "runtime/kernel/Backend.h"

#include <vector>

namespace pipec::cuda {

/// A device's parameters cut into chunks, in parameter order.
struct UpdateTable {
  std::vector<update::Chunk> chunks;
  std::vector<int32_t> firstChunk; ///< per parameter, and the end
  int32_t params() const { return static_cast<int32_t>(firstChunk.size()) - 1; }
};

/// The table of `params` (their chunks of update::kChunk elements).
Expected<UpdateTable> makeUpdateTable(const std::vector<kernel::ParamBuffers> &params);

/// The passes on memory the host addresses. `lanes`: chunks x kLanes
/// doubles; `squares`: one per parameter.
void hostSquares(const UpdateTable &t, float scale, double *lanes, double *squares);
void hostApply(const UpdateTable &t, const update::Control &k, const train::UpdateScalars &s, bool update);
void hostAccumulate(float *dst, const float *src, int64_t n, bool first);

#if PIPEC_HAVE_CUDA
/// The passes as CUDA kernels on `stream`: `chunks` and `firstChunk` are
/// the table in device memory, `lanes`, `squares` and `control` device
/// buffers (chunks x kLanes doubles, params doubles, one Control).
Status launchUpdateSquares(const update::Chunk *chunks, int32_t nChunks, const int32_t *firstChunk, int32_t params,
                           float scale, double *lanes, double *squares, void *stream);
Status launchUpdateDecide(const double *squares, int32_t params, double clip, bool skipNonFinite,
                          update::Control *control, void *stream);
Status launchUpdateApply(const update::Chunk *chunks, int32_t nChunks, const update::Control *control,
                         const train::UpdateScalars &s, bool update, void *stream);
Status launchAccumulate(float *dst, const float *src, int64_t n, bool first, void *stream);
#endif

} // namespace pipec::cuda
