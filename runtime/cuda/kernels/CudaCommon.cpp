//===- runtime/cuda/kernels/CudaCommon.cpp - What the CUDA kernel families share -===//
#include "runtime/cuda/kernels/CudaCommon.h"

#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>

namespace pipec::cuda {

Status cublasCheck(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return errorf(what, " failed: ", cublasGetStatusString(s));
}

namespace {
std::mutex gMathLock;
std::map<void *, MathMode> gMath; // by stream
/// Bumped by every setStreamMath: a handle's cached mode is for the
/// generation it read.
std::atomic<uint64_t> gMathGeneration{0};
} // namespace

void setStreamMath(void *stream, MathMode mode) {
  std::lock_guard<std::mutex> lock(gMathLock);
  gMath[stream] = mode;
  ++gMathGeneration;
}

MathMode streamMath(void *stream) {
  std::lock_guard<std::mutex> lock(gMathLock);
  auto it = gMath.find(stream);
  return it == gMath.end() ? MathMode::Exact : it->second;
}

Expected<cublasHandle_t> cublasFor(void *stream) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return errorf("cudaGetDevice failed");
  struct Handle {
    cublasHandle_t h = nullptr;
    MathMode mode = MathMode::Exact;
    void *stream = nullptr;      ///< the stream `want` was looked up for
    uint64_t generation = ~0ull; ///< and when
    MathMode want = MathMode::Exact;
    void *bound = nullptr;       ///< the stream the handle is set to
    bool boundOnce = false;
    /// A workspace of the handle's own per stream (kept as long as the
    /// handle): cuBLAS's default pool would be shared by the streams and
    /// allocated anew by each CUDA graph that records a product.
    std::map<void *, void *> workspace;
  };
  thread_local std::map<int, Handle> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    Handle h;
    PIPEC_TRY(cublasCheck(cublasCreate(&h.h), "cublasCreate"));
    PIPEC_TRY(cublasCheck(cublasSetMathMode(h.h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
    it = handles.emplace(device, h).first;
  }
  Handle &h = it->second;
  // A device's thread launches on one stream: the map is read (under its
  // lock) once, not at every product.
  if (const uint64_t g = gMathGeneration.load(std::memory_order_acquire); stream != h.stream || g != h.generation) {
    h.want = streamMath(stream);
    h.stream = stream;
    h.generation = g;
  }
  if (h.want != h.mode) {
    PIPEC_TRY(cublasCheck(
        cublasSetMathMode(h.h, h.want == MathMode::Tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
        "cublasSetMathMode"));
    h.mode = h.want;
  }
  if (!h.boundOnce || h.bound != stream) {
    // cublasSetStream puts the handle back on the default pool: the
    // stream's own workspace follows it.
    void *&ws = h.workspace[stream];
    if (!ws && cudaMalloc(&ws, kCublasWorkspaceBytes) != cudaSuccess) {
      ws = nullptr;
      return errorf("cannot allocate the ", kCublasWorkspaceBytes, "-byte cuBLAS workspace: ",
                    cudaGetErrorString(cudaGetLastError()));
    }
    PIPEC_TRY(cublasCheck(cublasSetStream(h.h, static_cast<cudaStream_t>(stream)), "cublasSetStream"));
    PIPEC_TRY(cublasCheck(cublasSetWorkspace(h.h, ws, kCublasWorkspaceBytes), "cublasSetWorkspace"));
    h.bound = stream;
    h.boundOnce = true;
  }
  return h.h;
}

Status needF32(const OpDesc &d, int other, DType otherType) {
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (static_cast<int>(i) == other) {
      if (d.inputs[i].dtype != otherType)
        return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype), "; the CUDA kernel takes ",
                      dtypeName(otherType), " there");
      continue;
    }
    if (d.hasInput(i) && d.inputs[i].dtype != DType::F32)
      return errorf(d.where(), ": input ", i, " is ", dtypeName(d.inputs[i].dtype),
                    "; the CUDA kernels take float32 only");
  }
  for (const TensorDesc &o : d.outputs)
    if (o.dtype != DType::F32)
      return errorf(d.where(), ": output is ", dtypeName(o.dtype), "; the CUDA kernels take float32 only");
  return Status::ok();
}

body::Broadcast broadcastOf(const Shape &in, const Shape &out) {
  return body::makeBroadcast(out.data(), static_cast<int>(out.size()), in.data(), static_cast<int>(in.size()));
}

Expected<body::Broadcast> broadcastTo(const OpDesc &d, size_t i) {
  const Shape &out = d.outputs[0].shape, &s = d.inputs[i].shape;
  if (out.size() > static_cast<size_t>(body::kMaxRank))
    return errorf(d.where(), ": rank ", out.size(), " (the CUDA kernels broadcast up to rank ", body::kMaxRank, ")");
  if (s.size() > out.size())
    return errorf(d.where(), ": input ", i, " ", shapeStr(s), " does not broadcast to ", shapeStr(out));
  for (size_t a = 0; a < s.size(); ++a) {
    const int64_t o = out[out.size() - s.size() + a];
    if (s[a] != 1 && s[a] != o)
      return errorf(d.where(), ": input ", i, " ", shapeStr(s), " does not broadcast to ", shapeStr(out));
  }
  return broadcastOf(s, out);
}

Status checkFlag(ExecContext &ctx, const std::string &what) {
  int bad = 0;
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (cudaMemcpyAsync(&bad, ctx.workspace, sizeof bad, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    return errorf(what, ": ", cudaGetErrorString(cudaGetLastError()));
  if (bad)
    return errorf(what, ": an index is out of range");
  return Status::ok();
}

body::Broadcast transposeView(const Shape &in, const std::vector<int64_t> &perm) {
  const std::vector<int64_t> strides = rowMajorStrides(in);
  body::Broadcast b;
  b.rank = static_cast<int>(in.size());
  for (int a = 0; a < b.rank; ++a) {
    b.dims[a] = in[static_cast<size_t>(perm[static_cast<size_t>(a)])];
    b.strides[a] = strides[static_cast<size_t>(perm[static_cast<size_t>(a)])];
  }
  return b;
}

Status clearFlag(ExecContext &ctx, const std::string &what) {
  if (cudaMemsetAsync(ctx.workspace, 0, sizeof(int), static_cast<cudaStream_t>(ctx.stream)) != cudaSuccess)
    return errorf(what, ": cudaMemsetAsync failed: ", cudaGetErrorString(cudaGetLastError()));
  return Status::ok();
}

} // namespace pipec::cuda
