//===- runtime/cuda/kernels/Pool.cpp - Pools and their gradients -----------===//
//
// MaxPool (Indices and storage_order too), AveragePool (count_include_pad),
// GlobalAveragePool, GlobalMaxPool, pipec:MaxPoolGrad and
// pipec:AveragePoolGrad, float32, over any number of spatial dimensions
// (up to dnn::kMaxPoolDims): the CPU kernels' windows (runtime/cpu/kernels/
// LinalgCommon.h's linalgResolveWindow: pads, auto_pad, strides,
// dilations, ceil_mode dropping a window that starts in the end padding as
// the graph's output shape says) run by the kernels of
// runtime/cuda/DnnKernels.cu, not by cuDNN: cuDNN's pooling has no
// dilations, counts the extra end padding of ceil_mode in the
// include-pad divisor, reports no indices and recomputes MaxPool's
// gradient its own way; these bodies (runtime/cuda/DnnBodies.h) are the
// CPU loop's sums and picks, bitwise. MaxPoolGrad finds each window's
// first maximum (the workspace holds them), then every input element
// gathers the outputs that picked it.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/LinalgCommon.h"
#include "runtime/cuda/Dnn.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {

using cpu::LinalgWindowDim;

/// The pool geometry of resolved windows over `planes` planes.
dnn::PoolGeom geomOf(int64_t planes, const std::vector<LinalgWindowDim> &dims) {
  dnn::PoolGeom g;
  g.nd = static_cast<int>(dims.size());
  g.planes = planes;
  for (size_t i = 0; i < dims.size(); ++i) {
    const LinalgWindowDim &w = dims[i];
    g.in[i] = w.in;
    g.out[i] = w.out;
    g.kernel[i] = w.kernel;
    g.stride[i] = w.stride;
    g.dilation[i] = w.dilation;
    g.padBegin[i] = w.padBegin;
    g.padEnd[i] = w.padEnd;
    g.inSp *= w.in;
    g.outSp *= w.out;
  }
  return g;
}

/// The windows of a pool or its gradient: X's shape `x`, Y's `y`
/// (Pool.cpp's poolGeom).
Expected<dnn::PoolGeom> windows(const OpDesc &d, const Shape &x, const Shape &y, bool isMax) {
  if (!attrHas(d.attrs, "kernel_shape"))
    return errorf(d.where(), ": attribute 'kernel_shape' is missing");
  if (x.size() < 3 || x.size() - 2 > static_cast<size_t>(dnn::kMaxPoolDims))
    return errorf(d.where(), ": X ", shapeStr(x), " must have rank 3 to ", dnn::kMaxPoolDims + 2);
  const Shape in(x.begin() + 2, x.end());
  const bool ceil = attrInt(d.attrs, "ceil_mode", 0) != 0;
  // AveragePool has dilations from opset 19 (the pipec gradients take
  // them whatever the opset, as the CPU's).
  if (!isMax && d.domain.empty() && d.opset < 19 && attrHas(d.attrs, "dilations") &&
      attrInts(d.attrs, "dilations") != std::vector<int64_t>(in.size(), 1))
    return errorf(d.where(), ": AveragePool-", d.opset, " has no 'dilations' attribute (it was added in opset 19)");
  std::vector<LinalgWindowDim> dims;
  PIPEC_TRY(cpu::linalgResolveWindow(d, in, {}, ceil, &y, dims));
  PIPEC_TRY(cpu::linalgCheckSpatialOut(d, TensorDesc{DType::F32, y}, x[0], x[1], dims));
  return geomOf(x[0] * x[1], dims);
}

dnn::PoolKind kindOf(const OpDesc &d, bool isMax) {
  return isMax                                      ? dnn::PoolKind::Max
         : attrInt(d.attrs, "count_include_pad", 0) ? dnn::PoolKind::AvgIncludePad
                                                    : dnn::PoolKind::AvgExcludePad;
}

Expected<KernelPtr> makeWindowPool(const OpDesc &d, bool isMax) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.empty() || d.outputs.size() > (isMax ? 2u : 1u))
    return errorf(d.where(), ": expects 1 input and ", isMax ? "1 or 2 outputs" : "1 output", ", got ", d.inputs.size(),
                  " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.dtype != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": X ", x.str(), " and Y ", d.outputs[0].str(), ": the CUDA kernel takes float32 only");
  const bool indices = isMax && d.outputs.size() == 2 && d.outputs[1].dtype != DType::Undefined;
  if (indices && (d.outputs[1].dtype != DType::I64 || d.outputs[1].shape != d.outputs[0].shape))
    return errorf(d.where(), ": Indices ", d.outputs[1].str(), " must be int64 shaped like Y");
  PIPEC_ASSIGN(dnn::PoolGeom g, windows(d, x.shape, d.outputs[0].shape, isMax));
  const dnn::PoolKind kind = kindOf(d, isMax);
  // Pool.cpp's loop keeps the first maximum (a NaN in front stays) with
  // Indices and over 3 or more dimensions; else `v > best ? v : best`.
  const bool firstTakes = indices || g.nd >= 3;
  const bool columnMajor = attrInt(d.attrs, "storage_order", 0) != 0;
  return launchKernel(
      [g, kind, firstTakes, columnMajor, indices](ExecContext &ctx, const void *const *in, void *const *out) {
        return launchPool(g, kind, firstTakes, columnMajor, static_cast<const float *>(in[0]),
                          static_cast<float *>(out[0]), indices ? static_cast<int64_t *>(out[1]) : nullptr, ctx.stream);
      });
}

Expected<KernelPtr> makeGlobal(const OpDesc &d, bool isMax) {
  if (d.inputs.size() != 1 || !d.hasInput(0) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 1 input and 1 output, got ", d.inputs.size(), " and ", d.outputs.size());
  const TensorDesc &x = d.inputs[0];
  if (x.rank() < 3)
    return errorf(d.where(), ": X ", x.str(), " must have rank >= 3");
  Shape want = {x.shape[0], x.shape[1]};
  want.resize(x.shape.size(), 1);
  if (d.outputs[0].shape != want)
    return errorf(d.where(), ": output ", d.outputs[0].str(), ", expected ", TensorDesc{x.dtype, want}.str());
  const int64_t planes = x.shape[0] * x.shape[1];
  const int64_t spatial = planes ? x.numel() / planes : 0;
  return launchKernel([isMax, planes, spatial](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchGlobalPool(isMax, static_cast<const float *>(in[0]), static_cast<float *>(out[0]), planes, spatial,
                            ctx.stream);
  });
}

/// pipec:MaxPoolGrad (dY, X) and pipec:AveragePoolGrad (dY; X's shape the
/// attribute `shape`) -> dX (GradPool.cpp's checks).
Expected<KernelPtr> makePoolGradient(const OpDesc &d, bool isMax) {
  const size_t nIn = isMax ? 2 : 1;
  if (d.inputs.size() != nIn || !d.hasInput(0) || (isMax && !d.hasInput(1)) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects ", nIn, " input(s) and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &dy = d.inputs[0];
  Shape xs;
  if (isMax) {
    xs = d.inputs[1].shape;
  } else {
    if (!attrHas(d.attrs, "shape"))
      return errorf(d.where(), ": attribute 'shape' is missing");
    xs = attrInts(d.attrs, "shape");
  }
  if (xs.size() < 3 || dy.shape.size() != xs.size())
    return errorf(d.where(), ": X ", shapeStr(xs), " and dY ", dy.str(), " must have the same rank, 3 or more");
  if (d.outputs[0].shape != xs)
    return errorf(d.where(), ": dX ", d.outputs[0].str(), " is not float32", shapeStr(xs));
  PIPEC_ASSIGN(dnn::PoolGeom g, windows(d, xs, dy.shape, isMax));
  const dnn::PoolKind kind = kindOf(d, isMax);
  if (!isMax)
    return launchKernel([g, kind](ExecContext &ctx, const void *const *in, void *const *out) {
      return launchPoolGrad(g, kind, static_cast<const float *>(in[0]), nullptr, static_cast<float *>(out[0]),
                            ctx.stream);
    });
  if (g.inSp > INT32_MAX)
    return errorf(d.where(), ": planes of ", g.inSp, " elements; the CUDA kernel keeps their offsets in int32");
  const size_t argBytes = static_cast<size_t>(g.planes * g.outSp) * sizeof(int32_t);
  return launchKernel(
      [g, kind](ExecContext &ctx, const void *const *in, void *const *out) {
        auto *argmax = static_cast<int32_t *>(ctx.workspace);
        PIPEC_TRY(launchPoolArgmax(g, static_cast<const float *>(in[1]), argmax, ctx.stream));
        return launchPoolGrad(g, kind, static_cast<const float *>(in[0]), argmax, static_cast<float *>(out[0]),
                              ctx.stream);
      },
      argBytes);
}

} // namespace

Expected<KernelPtr> makeMaxPool(const OpDesc &d) { return makeWindowPool(d, true); }
Expected<KernelPtr> makeAveragePool(const OpDesc &d) { return makeWindowPool(d, false); }
Expected<KernelPtr> makeGlobalAveragePool(const OpDesc &d) { return makeGlobal(d, false); }
Expected<KernelPtr> makeGlobalMaxPool(const OpDesc &d) { return makeGlobal(d, true); }
Expected<KernelPtr> makeMaxPoolGrad(const OpDesc &d) { return makePoolGradient(d, true); }
Expected<KernelPtr> makeAveragePoolGrad(const OpDesc &d) { return makePoolGradient(d, false); }

} // namespace pipec::cuda
