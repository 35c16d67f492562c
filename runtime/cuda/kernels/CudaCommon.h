//===- runtime/cuda/kernels/CudaCommon.h - What the CUDA kernel families share -*- C++ -*-===//
//
// Helpers of the CUDA kernel files (runtime/cuda/kernels/*.cpp): cuBLAS
// handles and errors, the type check every factory's table row names
// (runtime/cuda/kernels/KernelTable.def), broadcasts, one-launch kernels
// and the out-of-range flag. Host code, compiled with the C++ compiler.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/Kernels.h"
#include "runtime/kernel/Kernel.h"

#include <cublas_v2.h>

#include <string>
#include <utility>

namespace pipec::cuda {

using kernel::ExecContext;
using kernel::Kernel;
using kernel::KernelPtr;
using kernel::OpDesc;

Status cublasCheck(cublasStatus_t s, const char *what);
/// One cuBLAS handle per GPU and host thread (a handle is not to be shared
/// by threads at once), in pedantic math mode: no TF32, no reduced-precision
/// reductions, so a GEMM's bits do not change with the library's choices of
/// tensor-core paths.
/// The handle runs on `stream` with a workspace of its own for it
/// (kCublasWorkspaceBytes, cuBLAS's recommendation for Hopper), so a
/// recorded product (a CUDA graph) allocates nothing and two streams
/// never share one.
Expected<cublasHandle_t> cublasFor(void *stream);
inline constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

/// How a device's matrix products compute (piperun --math): exact fp32
/// (CUBLAS_PEDANTIC_MATH: no TF32, no reduced-precision reductions) or on
/// TF32 tensor cores (CUBLAS_TF32_TENSOR_OP_MATH). A stream's mode, set
/// by its backend; cublasFor puts it on the handle. Unknown streams (the
/// kernel tests') are exact.
enum class MathMode { Exact, Tf32 };
void setStreamMath(void *stream, MathMode mode);
MathMode streamMath(void *stream);

/// Every input float32 but the one at `other`, which must be `otherType`
/// (a loss's int64 targets, ReduceSum's axes, a mask).
Status needF32(const OpDesc &d, int other = -1, DType otherType = DType::I64);

body::Broadcast broadcastOf(const Shape &in, const Shape &out);
/// Transpose's view of `in` (a valid `perm` of its axes, rank at most
/// body::kMaxRank): output axis a reads input axis perm[a].
body::Broadcast transposeView(const Shape &in, const std::vector<int64_t> &perm);
/// Input `i` of `d` broadcast to its output 0, or an error naming the node.
Expected<body::Broadcast> broadcastTo(const OpDesc &d, size_t i);

/// A node whose run is one launch of a lambda (the launchers take device
/// pointers and the stream); `ws` says how much workspace it needs.
template <typename F> class LaunchKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  LaunchKernel(F f, size_t ws) : f_(std::move(f)), ws_(ws) {}
  size_t workspaceBytes() const override { return ws_; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override { return f_(ctx, in, out); }

private:
  F f_;
  size_t ws_;
};
template <typename F> KernelPtr launchKernel(F f, size_t ws = 0) {
  return KernelPtr(new LaunchKernel<F>(std::move(f), ws));
}

/// Reads back the flag a kernel raises for an index out of range (the
/// first int of the workspace, cleared before the launch).
Status checkFlag(ExecContext &ctx, const std::string &what);

/// Clears the workspace's flag (its first int) on the stream.
Status clearFlag(ExecContext &ctx, const std::string &what);

/// Runs `launch(int *flag)` of a kernel that flags bad data (an index out
/// of range): with the executor's ExecContext::errorFlag, read at the
/// step's end; else with the workspace's (workspaceBytes() >= sizeof(int)),
/// cleared before and read back after, so the error comes now.
template <typename F> Status withDataFlag(ExecContext &ctx, const std::string &what, F launch) {
  if (ctx.errorFlag)
    return launch(ctx.errorFlag);
  PIPEC_TRY(clearFlag(ctx, what));
  PIPEC_TRY(launch(static_cast<int *>(ctx.workspace)));
  return checkFlag(ctx, what);
}

inline int64_t normAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

inline int64_t prodDims(const Shape &s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t a = from; a < to && a < s.size(); ++a)
    p *= s[a];
  return p;
}

} // namespace pipec::cuda
