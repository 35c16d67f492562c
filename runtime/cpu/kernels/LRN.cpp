//===- runtime/cpu/kernels/LRN.cpp - LRN (local response normalization) ---===//
//
// ONNX LRN, opsets 1-13, across channels:
//   square_sum[n, c, ...] = sum of X[n, i, ...]^2 for i in
//       [max(0, c - floor((size - 1) / 2)), min(C - 1, c + ceil((size - 1) / 2))]
//   Y = X / (bias + alpha / size * square_sum) ^ beta
// f32 with an odd size runs oneDNN's lrn_forward (across channels, the same
// formula and window; faster than the loop: docs/cpu-linalg-kernels.md).
// Even sizes have an asymmetric window, which oneDNN's is not, so a loop
// does them (and f64):
// (n, c) planes in parallel, each summing its window of channels in
// ascending order (thread-count independent).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "support/Parallel.h"

#include <cmath>

namespace pipec::cpu {

namespace {

template <typename T> class LRNKernel final : public Kernel {
public:
  int64_t N = 0, C = 0, spatial = 0, size = 1;
  double alpha = 1e-4, beta = 0.75, bias = 1.0;

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *x = static_cast<const T *>(in[0]);
    T *y = static_cast<T *>(out[0]);
    int64_t before = (size - 1) / 2, after = size - 1 - before;
    T scale = static_cast<T>(alpha / size), tb = static_cast<T>(bias), nb = static_cast<T>(-beta);
    parallelFor(N * C, N * C * spatial > 8192, [&](int64_t p) {
      int64_t n = p / C, c = p % C;
      int64_t lo = std::max<int64_t>(0, c - before), hi = std::min<int64_t>(C - 1, c + after);
      T *yp = y + p * spatial;
      const T *xp = x + p * spatial;
      // Accumulate the window's squares in Y, then normalize in place.
      std::fill(yp, yp + spatial, T(0));
      for (int64_t i = lo; i <= hi; ++i) {
        const T *xi = x + (n * C + i) * spatial;
        for (int64_t s = 0; s < spatial; ++s)
          yp[s] += xi[s] * xi[s];
      }
      for (int64_t s = 0; s < spatial; ++s)
        yp[s] = xp[s] * std::pow(tb + scale * yp[s], nb);
    });
    return Status::ok();
  }
};

class LRNDnnlKernel final : public Kernel {
public:
  explicit LRNDnnlKernel(LinalgDnnlPrim p) : p_(std::move(p)) {}
  size_t workspaceBytes() const override { return p_.scratchBytes; }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const void *ptrs[2] = {in[0], out[0]};
    return p_.run(ptrs, linalgAlign(ctx.workspace));
  }

private:
  LinalgDnnlPrim p_;
};

LinalgDnnlPrim makeDnnlLRN(const Shape &shape, int64_t size, float alpha, float beta, float bias) {
  LinalgDnnlPrim p;
  if (size % 2 == 0 || shape.size() > 5)
    return p;
  try {
    using namespace dnnl;
    memory::desc md = linalgDnnlPlain(shape);
    lrn_forward::desc ld(prop_kind::forward_inference, algorithm::lrn_across_channels, md, size,
                         alpha, beta, bias);
    lrn_forward::primitive_desc pd(ld, linalgDnnlAttr(), linalgDnnlEngine());
    p.init<lrn_forward>(pd);
    p.args = {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}};
  } catch (const dnnl::error &) {
    return LinalgDnnlPrim();
  }
  return p;
}

} // namespace

Expected<KernelPtr> makeLRNKernel(const OpDesc &d) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 1 input and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3 || d.outputs[0] != x)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 3 and Y ", d.outputs[0].str(),
                  " its type");
  int64_t size = attrInt(d.attrs, "size", 0);
  if (size < 1)
    return errorf(d.where(), ": attribute 'size' is ", size, ", must be >= 1");
  float alpha = attrFloat(d.attrs, "alpha", 1e-4f), beta = attrFloat(d.attrs, "beta", 0.75f),
        bias = attrFloat(d.attrs, "bias", 1.0f);
  if (x.dtype == DType::F32 && oneDnnEnabled()) {
    LinalgDnnlPrim p = makeDnnlLRN(x.shape, size, alpha, beta, bias);
    if (p.valid())
      return KernelPtr(new LRNDnnlKernel(std::move(p)));
  }
  return linalgDispatchFloat(d, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto k = std::make_unique<LRNKernel<T>>();
    k->N = x.shape[0];
    k->C = x.shape[1];
    k->spatial = k->N != 0 && k->C != 0 ? x.numel() / (k->N * k->C) : 0;
    k->size = size;
    k->alpha = alpha;
    k->beta = beta;
    k->bias = bias;
    return KernelPtr(std::move(k));
  });
}

} // namespace pipec::cpu
