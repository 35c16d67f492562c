//===- runtime/cuda/Dnn.cpp - cuDNN handles, descriptors, convolutions ---===//
//
// The cuDNN side of runtime/cuda/Dnn.h. A convolution's algorithms are
// chosen here once per kernel and math mode, from cuDNN's heuristics
// (cudnnGet*Algorithm_v7, which rank without running anything; never
// cudnnFind*, whose timings vary from run to run), so two kernels of one
// node on one GPU model and cuDNN version choose alike.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Dnn.h"

#include <cuda_runtime.h>

#include <map>

namespace pipec::cuda {

Status dnnCheck(cudnnStatus_t s, const char *what) {
  if (s == CUDNN_STATUS_SUCCESS)
    return Status::ok();
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  return errorf(what, " failed: ", cudnnGetErrorString(s), detail[0] ? cat(" (", detail, ")") : std::string());
}

Expected<cudnnHandle_t> dnnFor(void *stream) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
    return errorf("cudaGetDevice failed: ", cudaGetErrorString(e));
  thread_local std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cudnnHandle_t h = nullptr;
    PIPEC_TRY(dnnCheck(cudnnCreate(&h), "cudnnCreate"));
    it = handles.emplace(device, h).first;
  }
  PIPEC_TRY(dnnCheck(cudnnSetStream(it->second, static_cast<cudaStream_t>(stream)), "cudnnSetStream"));
  return it->second;
}

void DnnDeleter::operator()(cudnnTensorStruct *p) const { cudnnDestroyTensorDescriptor(p); }
void DnnDeleter::operator()(cudnnFilterStruct *p) const { cudnnDestroyFilterDescriptor(p); }
void DnnDeleter::operator()(cudnnConvolutionStruct *p) const { cudnnDestroyConvolutionDescriptor(p); }

namespace {

/// `dims` as cuDNN's ints, or an error where one does not fit.
Expected<std::vector<int>> asInts(const std::vector<int64_t> &dims, const char *what) {
  std::vector<int> r;
  int64_t total = 1;
  for (int64_t v : dims) {
    if (v < 0 || v > INT32_MAX)
      return errorf(what, " dimension ", v, " does not fit cuDNN's int");
    r.push_back(static_cast<int>(v));
    total *= v;
  }
  if (total > INT32_MAX)
    return errorf(what, " ", shapeStr(Shape(dims)), " has ", total,
                  " elements; cuDNN's legacy descriptors count them in int");
  return r;
}

Expected<DnnFilter> dnnFilter(const std::vector<int64_t> &dims) {
  PIPEC_ASSIGN(std::vector<int> d, asInts(dims, "filter"));
  cudnnFilterDescriptor_t f = nullptr;
  PIPEC_TRY(dnnCheck(cudnnCreateFilterDescriptor(&f), "cudnnCreateFilterDescriptor"));
  DnnFilter owned(f);
  PIPEC_TRY(
      dnnCheck(cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(d.size()), d.data()),
               "cudnnSetFilterNdDescriptor"));
  return owned;
}

const char *algoName(DnnConvPass pass, int a) {
  static const char *fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                              "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char *data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char *filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  switch (pass) {
  case DnnConvPass::Forward:
    return a >= 0 && a < 8 ? fwd[a] : "?";
  case DnnConvPass::BackwardData:
    return a >= 0 && a < 6 ? data[a] : "?";
  case DnnConvPass::BackwardFilter:
    return a >= 0 && a < 7 ? filter[a] : "?";
  }
  return "?";
}

/// Whether an algorithm transforms the data (FFT, Winograd): its results
/// round otherwise than a sum of products, so exact mode passes it over.
bool transforms(DnnConvPass pass, int a) {
  switch (pass) {
  case DnnConvPass::Forward:
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  case DnnConvPass::BackwardData:
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  case DnnConvPass::BackwardFilter:
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  return true;
}

/// The algorithms cuDNN documents as atomics-based, whatever a heuristic
/// result says.
bool knownNondeterministic(DnnConvPass pass, int a) {
  return (pass == DnnConvPass::BackwardData && a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
         (pass == DnnConvPass::BackwardFilter &&
          (a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
}

/// One heuristic result, whatever the pass.
struct Ranked {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  size_t memory = 0;
  cudnnDeterminism_t determinism = CUDNN_NON_DETERMINISTIC;
  cudnnMathType_t mathType = CUDNN_DEFAULT_MATH;
};

template <typename Perf> std::vector<Ranked> asRanked(const std::vector<Perf> &perf, int n) {
  std::vector<Ranked> r;
  for (int i = 0; i < n && i < static_cast<int>(perf.size()); ++i)
    r.push_back({static_cast<int>(perf[static_cast<size_t>(i)].algo), perf[static_cast<size_t>(i)].status,
                 perf[static_cast<size_t>(i)].memory, perf[static_cast<size_t>(i)].determinism,
                 perf[static_cast<size_t>(i)].mathType});
  return r;
}

std::string bytesStr(size_t b) {
  if (b >= (size_t(1) << 20))
    return cat(b >> 20, " MiB");
  if (b >= 1024)
    return cat(b >> 10, " KiB");
  return cat(b, " B");
}

const char *mathName(cudnnMathType_t m) {
  switch (m) {
  case CUDNN_DEFAULT_MATH:
    return "default math";
  case CUDNN_TENSOR_OP_MATH:
    return "tensor-op math";
  case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
    return "tensor-op math with conversion";
  case CUDNN_FMA_MATH:
    return "FMA math";
  }
  return "?";
}

} // namespace

Expected<DnnTensor> dnnTensor(const std::vector<int64_t> &dims) {
  PIPEC_ASSIGN(std::vector<int> d, asInts(dims, "tensor"));
  std::vector<int> strides(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;)
    strides[i - 1] = strides[i] * d[i];
  cudnnTensorDescriptor_t t = nullptr;
  PIPEC_TRY(dnnCheck(cudnnCreateTensorDescriptor(&t), "cudnnCreateTensorDescriptor"));
  DnnTensor owned(t);
  PIPEC_TRY(
      dnnCheck(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, static_cast<int>(d.size()), d.data(), strides.data()),
               "cudnnSetTensorNdDescriptor"));
  return owned;
}

Expected<std::unique_ptr<DnnConv>> DnnConv::make(const DnnConvShape &s, DnnConvPass pass) {
  const size_t nd = s.in.size();
  if (nd < 1 || nd > 3 || s.out.size() != nd || s.kernel.size() != nd || s.stride.size() != nd ||
      s.dilation.size() != nd || s.pad.size() != nd)
    return errorf("cuDNN convolutions take 1 to 3 spatial dimensions, got ", nd);
  if (s.G < 1 || s.Cin % s.G != 0 || s.Cout % s.G != 0)
    return errorf("group ", s.G, " does not divide the channels ", s.Cin, " and ", s.Cout);
  // One dimension runs as two, the first of size 1.
  auto spatial = [&](const std::vector<int64_t> &v, int64_t unit) {
    std::vector<int64_t> r = v;
    if (nd == 1)
      r.insert(r.begin(), unit);
    return r;
  };
  std::vector<int64_t> xd = {s.N, s.Cin}, yd = {s.N, s.Cout}, wd = {s.Cout, s.Cin / s.G};
  for (int64_t v : spatial(s.in, 1))
    xd.push_back(v);
  for (int64_t v : spatial(s.out, 1))
    yd.push_back(v);
  for (int64_t v : spatial(s.kernel, 1))
    wd.push_back(v);
  PIPEC_ASSIGN(std::vector<int> pad, asInts(spatial(s.pad, 0), "pad"));
  PIPEC_ASSIGN(std::vector<int> stride, asInts(spatial(s.stride, 1), "stride"));
  PIPEC_ASSIGN(std::vector<int> dil, asInts(spatial(s.dilation, 1), "dilation"));

  std::unique_ptr<DnnConv> c(new DnnConv());
  c->pass_ = pass;
  PIPEC_ASSIGN(c->x_, dnnTensor(xd));
  PIPEC_ASSIGN(c->y_, dnnTensor(yd));
  PIPEC_ASSIGN(c->w_, dnnFilter(wd));
  const int sd = static_cast<int>(pad.size());
  for (int m = 0; m < 2; ++m) {
    cudnnConvolutionDescriptor_t cd = nullptr;
    PIPEC_TRY(dnnCheck(cudnnCreateConvolutionDescriptor(&cd), "cudnnCreateConvolutionDescriptor"));
    c->conv_[m].reset(cd);
    PIPEC_TRY(dnnCheck(cudnnSetConvolutionNdDescriptor(cd, sd, pad.data(), stride.data(), dil.data(),
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                       "cudnnSetConvolutionNdDescriptor"));
    PIPEC_TRY(dnnCheck(cudnnSetConvolutionGroupCount(cd, static_cast<int>(s.G)), "cudnnSetConvolutionGroupCount"));
    // Exact: FMA only (no TF32 tensor cores). TF32: cuDNN's default for
    // float32, which lets the heuristics rank tensor-core kernels too.
    PIPEC_TRY(dnnCheck(cudnnSetConvolutionMathType(cd, m == 0 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH),
                       "cudnnSetConvolutionMathType"));
  }
  // The output's shape as cuDNN derives it must be ours: a check of the
  // geometry the factories computed.
  {
    std::vector<int> got(yd.size());
    PIPEC_TRY(dnnCheck(cudnnGetConvolutionNdForwardOutputDim(c->conv_[0].get(), c->x_.get(), c->w_.get(),
                                                             static_cast<int>(got.size()), got.data()),
                       "cudnnGetConvolutionNdForwardOutputDim"));
    for (size_t i = 0; i < yd.size(); ++i)
      if (got[i] != yd[i])
        return errorf("cuDNN derives the convolution's output ", shapeStr(Shape(got.begin(), got.end())),
                      " where the node has ", shapeStr(Shape(yd)));
  }
  PIPEC_ASSIGN(cudnnHandle_t h, dnnFor(nullptr));

  auto ranked = [&](int m) -> Expected<std::vector<Ranked>> {
    cudnnConvolutionDescriptor_t cd = c->conv_[m].get();
    int count = 0, returned = 0;
    switch (pass) {
    case DnnConvPass::Forward: {
      PIPEC_TRY(dnnCheck(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count),
                         "cudnnGetConvolutionForwardAlgorithmMaxCount"));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(count));
      PIPEC_TRY(dnnCheck(cudnnGetConvolutionForwardAlgorithm_v7(h, c->x_.get(), c->w_.get(), cd, c->y_.get(), count,
                                                                &returned, perf.data()),
                         "cudnnGetConvolutionForwardAlgorithm_v7"));
      return asRanked(perf, returned);
    }
    case DnnConvPass::BackwardData: {
      PIPEC_TRY(dnnCheck(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count),
                         "cudnnGetConvolutionBackwardDataAlgorithmMaxCount"));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(count));
      PIPEC_TRY(dnnCheck(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w_.get(), c->y_.get(), cd, c->x_.get(),
                                                                     count, &returned, perf.data()),
                         "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
      return asRanked(perf, returned);
    }
    case DnnConvPass::BackwardFilter: {
      PIPEC_TRY(dnnCheck(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count),
                         "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount"));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(count));
      PIPEC_TRY(dnnCheck(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->x_.get(), c->y_.get(), cd, c->w_.get(),
                                                                       count, &returned, perf.data()),
                         "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
      return asRanked(perf, returned);
    }
    }
    return std::vector<Ranked>{};
  };
  // The workspace of `algo` under descriptor m's math type; false where
  // cuDNN does not run it so.
  auto workspace = [&](int m, int algo, size_t &bytes) {
    cudnnConvolutionDescriptor_t cd = c->conv_[m].get();
    cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
    switch (pass) {
    case DnnConvPass::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, c->x_.get(), c->w_.get(), cd, c->y_.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
      break;
    case DnnConvPass::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w_.get(), c->y_.get(), cd, c->x_.get(),
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      break;
    case DnnConvPass::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x_.get(), c->y_.get(), cd, c->w_.get(),
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      break;
    }
    return st == CUDNN_STATUS_SUCCESS;
  };

  for (int m = 0; m < 2; ++m) {
    PIPEC_ASSIGN(std::vector<Ranked> r, ranked(m));
    bool chosen = false;
    for (const Ranked &p : r) {
      if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC ||
          knownNondeterministic(pass, p.algo) || p.memory > kDnnWorkspaceCap)
        continue;
      // Never float32 converted down to half precision; in exact mode no
      // tensor cores and no transforms either.
      if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
          (m == 0 && (p.mathType == CUDNN_TENSOR_OP_MATH || transforms(pass, p.algo))))
        continue;
      const cudnnMathType_t math = m == 0 ? CUDNN_FMA_MATH : p.mathType;
      PIPEC_TRY(dnnCheck(cudnnSetConvolutionMathType(c->conv_[m].get(), math), "cudnnSetConvolutionMathType"));
      size_t bytes = 0;
      if (!workspace(m, p.algo, bytes) || bytes > kDnnWorkspaceCap)
        continue;
      c->algo_[m] = p.algo;
      c->math_[m] = math;
      c->ws_[m] = bytes > p.memory ? bytes : p.memory;
      chosen = true;
      break;
    }
    if (!chosen) {
      // cuDNN's deterministic defaults, where the heuristics offered none.
      static const int fwd[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM};
      static const int data[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
      static const int filter[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
      const int *list = pass == DnnConvPass::Forward ? fwd : pass == DnnConvPass::BackwardData ? data : filter;
      const int n = pass == DnnConvPass::Forward ? 3 : 1;
      const cudnnMathType_t math = m == 0 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
      PIPEC_TRY(dnnCheck(cudnnSetConvolutionMathType(c->conv_[m].get(), math), "cudnnSetConvolutionMathType"));
      for (int i = 0; i < n && !chosen; ++i) {
        size_t bytes = 0;
        if (!workspace(m, list[i], bytes) || bytes > kDnnWorkspaceCap)
          continue;
        c->algo_[m] = list[i];
        c->math_[m] = math;
        c->ws_[m] = bytes;
        c->fallback_[m] = true;
        chosen = true;
      }
    }
    if (!chosen)
      return errorf("cuDNN has no deterministic ",
                    pass == DnnConvPass::Forward        ? "forward"
                    : pass == DnnConvPass::BackwardData ? "backward-data"
                                                        : "backward-filter",
                    " algorithm for this convolution (", m == 0 ? "exact" : "TF32", " math, X ", shapeStr(Shape(xd)),
                    ", W ", shapeStr(Shape(wd)), ", Y ", shapeStr(Shape(yd)), ") within ", bytesStr(kDnnWorkspaceCap),
                    " of workspace");
  }
  return c;
}

std::string DnnConv::choice() const {
  const char *what = pass_ == DnnConvPass::Forward        ? "forward"
                     : pass_ == DnnConvPass::BackwardData ? "backward data"
                                                          : "backward filter";
  std::string s = cat(what, ":");
  for (int m = 0; m < 2; ++m)
    s += cat(m ? ", " : " ", m ? "tf32 " : "exact ", algoName(pass_, algo_[m]), " (", mathName(math_[m]), ", ",
             bytesStr(ws_[m]), " of workspace", fallback_[m] ? ", cuDNN's default" : "", ")");
  return s;
}

Status DnnConv::run(void *stream, const void *x, const void *w, const void *y, void *out, void *ws, float beta) const {
  PIPEC_ASSIGN(cudnnHandle_t h, dnnFor(stream));
  const int m = streamMath(stream) == MathMode::Tf32 ? 1 : 0;
  const float alpha = 1.0f;
  switch (pass_) {
  case DnnConvPass::Forward:
    return dnnCheck(cudnnConvolutionForward(h, &alpha, x_.get(), x, w_.get(), w, conv_[m].get(),
                                            static_cast<cudnnConvolutionFwdAlgo_t>(algo_[m]), ws, ws_[m], &beta,
                                            y_.get(), out),
                    "cudnnConvolutionForward");
  case DnnConvPass::BackwardData:
    return dnnCheck(cudnnConvolutionBackwardData(h, &alpha, w_.get(), w, y_.get(), y, conv_[m].get(),
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_[m]), ws, ws_[m],
                                                 &beta, x_.get(), out),
                    "cudnnConvolutionBackwardData");
  case DnnConvPass::BackwardFilter:
    return dnnCheck(cudnnConvolutionBackwardFilter(h, &alpha, x_.get(), x, y_.get(), y, conv_[m].get(),
                                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo_[m]), ws, ws_[m],
                                                   &beta, w_.get(), out),
                    "cudnnConvolutionBackwardFilter");
  }
  return Status::ok();
}

} // namespace pipec::cuda
