//===- runtime/cuda/Dnn.h - cuDNN for the CUDA kernels ---------*- C++ -*-===//
//
// What the CNN kernels (runtime/cuda/kernels/Conv.cpp, Pool.cpp,
// BatchNorm.cpp) share: a cuDNN handle per GPU and host thread, cuDNN's
// status as a Status, owning descriptors, and DnnConv, one pass of a
// convolution (forward, backward data, backward filter) on cuDNN's legacy
// API with its algorithms chosen once, when the kernel is made, by
// cuDNN's heuristics (never by timing, so the choice does not depend on
// the machine's load), for both math modes (docs/cuda.md, "cuDNN"). Also
// the launchers of runtime/cuda/DnnKernels.cu: the pools and
// normalizations, whose bodies are runtime/cuda/DnnBodies.h. Host code.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/DnnBodies.h"
#include "runtime/cuda/kernels/CudaCommon.h"

#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

namespace pipec::cuda {

/// cuDNN's status as a Status: `what` failed, with cuDNN's name for the
/// status and the last message cuDNN logged.
Status dnnCheck(cudnnStatus_t s, const char *what);

/// The cuDNN handle of the calling host thread on its current GPU (a
/// handle is not to be used by two threads at once; made on first use,
/// kept for the thread's life, as cublasFor's), bound to `stream`.
Expected<cudnnHandle_t> dnnFor(void *stream);

struct DnnDeleter {
  void operator()(cudnnTensorStruct *p) const;
  void operator()(cudnnFilterStruct *p) const;
  void operator()(cudnnConvolutionStruct *p) const;
};
using DnnTensor = std::unique_ptr<cudnnTensorStruct, DnnDeleter>;
using DnnFilter = std::unique_ptr<cudnnFilterStruct, DnnDeleter>;
using DnnConvolution = std::unique_ptr<cudnnConvolutionStruct, DnnDeleter>;

/// A packed float32 NC[D]HW tensor of `dims` (4 or 5 of them).
Expected<DnnTensor> dnnTensor(const std::vector<int64_t> &dims);

/// The most workspace a convolution's algorithm may take; one that needs
/// more is passed over for the next.
inline constexpr size_t kDnnWorkspaceCap = size_t(256) << 20;

/// A convolution as cuDNN computes it: X [N, Cin, in...] and W [Cout,
/// Cin / G, kernel...] give Y [N, Cout, out...], with `pad` at both ends
/// of every spatial dimension (1 to 3 of them; one runs as two with a unit
/// leading dimension). For ConvTranspose, X is the node's Y and Y its X.
struct DnnConvShape {
  int64_t N = 0, Cin = 0, Cout = 0, G = 1;
  std::vector<int64_t> in, out, kernel, stride, dilation, pad;
};

enum class DnnConvPass { Forward, BackwardData, BackwardFilter };

/// The cuDNN algorithms a kernel chose, in words (tests, docs/cuda.md).
class DnnChoice {
public:
  virtual ~DnnChoice() = default;
  virtual std::string dnnChoice() const = 0;
};

/// One pass over one convolution, its algorithm chosen per math mode
/// (MathMode::Exact: FMA math, no TF32, and no FFT or Winograd, whose
/// transforms round otherwise than a sum of products; MathMode::Tf32: what
/// the heuristics rank first, tensor cores included): cuDNN's heuristics
/// (cudnnGet*Algorithm_v7) in their order, the first that succeeds, is
/// deterministic (no atomics) and needs at most kDnnWorkspaceCap of
/// workspace; else the first of cuDNN's always deterministic defaults
/// that fits. On the GPU current to the calling thread.
class DnnConv {
public:
  static Expected<std::unique_ptr<DnnConv>> make(const DnnConvShape &s, DnnConvPass pass);
  /// Workspace of either mode's algorithm.
  size_t workspaceBytes() const { return ws_[0] > ws_[1] ? ws_[0] : ws_[1]; }
  /// "forward: exact IMPLICIT_PRECOMP_GEMM (FMA math, 0 B of workspace),
  /// tf32 ...".
  std::string choice() const;
  /// The pass on `stream` in the stream's math mode: Forward out = x * w
  /// (y unused), BackwardData out = dx from w and y (= dY; x unused),
  /// BackwardFilter out = dw from x and y (w unused); out = result + beta
  /// out. `ws`: workspaceBytes() of device memory.
  Status run(void *stream, const void *x, const void *w, const void *y, void *out, void *ws, float beta) const;

private:
  DnnConv() = default;
  DnnConvPass pass_ = DnnConvPass::Forward;
  DnnTensor x_, y_;
  std::unique_ptr<cudnnFilterStruct, DnnDeleter> w_;
  DnnConvolution conv_[2]; ///< per MathMode: Exact, Tf32
  int algo_[2] = {0, 0};
  cudnnMathType_t math_[2] = {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH};
  size_t ws_[2] = {0, 0};
  bool fallback_[2] = {false, false};
};

// ---- runtime/cuda/DnnKernels.cu: the pools and normalizations. Device
// pointers; a launcher returns the launch's error and does not wait.

/// MaxPool or AveragePool: every output of `g`; MaxPool's Indices where
/// `indices` is given.
Status launchPool(const dnn::PoolGeom &g, dnn::PoolKind kind, bool firstTakes, bool columnMajor, const float *x,
                  float *y, int64_t *indices, void *stream);
/// MaxPoolGrad's first pass: every output's first maximum (plane offset).
Status launchPoolArgmax(const dnn::PoolGeom &g, const float *x, int32_t *argmax, void *stream);
/// The pools' gradients: every input element of `g`.
Status launchPoolGrad(const dnn::PoolGeom &g, dnn::PoolKind kind, const float *dy, const int32_t *argmax, float *dx,
                      void *stream);
/// GlobalAveragePool or GlobalMaxPool: one thread a plane.
Status launchGlobalPool(bool max, const float *x, float *y, int64_t planes, int64_t spatial, void *stream);
Status launchLrn(const dnn::LrnArgs &a, const float *x, float *y, void *stream);
/// A normalization's per-channel pass: a block of dnn::kLanes threads a
/// channel (a.C of them).
Status launchNormChannels(const dnn::NormArgs &a, void *stream);
/// y = x ta + tb over [N, C, inner].
Status launchNormApply(const float *x, const float *ta, const float *tb, float *y, int64_t N, int64_t C, int64_t inner,
                       void *stream);
/// BatchNormalizationGrad's dX from the Grad pass's coefficients.
Status launchBnGradApply(const float *dy, const float *x, const double *coef, float *dx, int64_t N, int64_t C,
                         int64_t inner, bool training, void *stream);

} // namespace pipec::cuda
