//===- runtime/cuda/kernels/DataMovement.cpp - CUDA data movement kernels -===//
//
// Transpose, Concat and Split along an axis, Gather and pipec:GatherGrad,
// and Slice, Expand and Tile as strided views (support/StridedView.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels/CudaCommon.h"
#include "support/StridedView.h"

#include <cuda_runtime.h>

namespace pipec::cuda {

namespace {


} // namespace

Expected<KernelPtr> makeTranspose(const OpDesc &d) {
  const Shape &in = d.inputs[0].shape;
  const size_t rank = in.size();
  if (rank > static_cast<size_t>(body::kMaxRank))
    return errorf(d.where(), ": rank ", rank, " (the CUDA kernel transposes up to rank ", body::kMaxRank, ")");
  std::vector<int64_t> perm = attrInts(d.attrs, "perm");
  if (perm.empty())
    for (size_t a = 0; a < rank; ++a)
      perm.push_back(static_cast<int64_t>(rank - 1 - a));
  if (perm.size() != rank)
    return errorf(d.where(), ": perm has ", perm.size(), " axes for rank ", rank);
  std::vector<int64_t> strides(rank, 1);
  for (size_t a = rank; a-- > 1;)
    strides[a - 1] = strides[a] * in[a];
  // Output axis a reads input axis perm[a].
  body::Broadcast b;
  b.rank = static_cast<int>(rank);
  for (size_t a = 0; a < rank; ++a) {
    if (perm[a] < 0 || perm[a] >= static_cast<int64_t>(rank))
      return errorf(d.where(), ": perm ", perm[a], " out of range");
    b.dims[a] = in[static_cast<size_t>(perm[a])];
    b.strides[a] = strides[static_cast<size_t>(perm[a])];
  }
  const int64_t n = d.outputs[0].numel();
  return launchKernel([b, n](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchBroadcastScale(static_cast<const float *>(in[0]), b, 1.0f, static_cast<float *>(out[0]), n,
                                ctx.stream);
  });
}

/// Concat (parts = inputs) and Split (parts = outputs) along an axis.
Expected<KernelPtr> makeSlices(const OpDesc &d, bool concat) {
  const TensorDesc &whole = concat ? d.outputs[0] : d.inputs[0];
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", concat ? 0 : 0), whole.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(whole.shape.size()))
    return errorf(d.where(), ": axis out of range for ", whole.str());
  const size_t ax = static_cast<size_t>(axis);
  const int64_t inner = prodDims(whole.shape, ax + 1, whole.shape.size());
  const int64_t wholeLen = whole.shape[ax];
  struct Part {
    int64_t n, len, offset;
  };
  std::vector<Part> parts;
  int64_t offset = 0;
  const std::vector<TensorDesc> &ps = concat ? d.inputs : d.outputs;
  for (const TensorDesc &t : ps) {
    if (t.shape.size() != whole.shape.size())
      return errorf(d.where(), ": part ", t.str(), " does not match ", whole.str());
    parts.push_back({t.numel(), t.shape[ax], offset});
    offset += t.shape[ax];
  }
  if (offset != wholeLen)
    return errorf(d.where(), ": the parts add up to ", offset, " along axis ", axis, ", not ", wholeLen);
  return launchKernel([parts, wholeLen, inner, concat](ExecContext &ctx, const void *const *in,
                                                       void *const *out) -> Status {
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part &pt = parts[i];
      if (concat)
        PIPEC_TRY(launchSliceCopy(static_cast<const float *>(in[i]), static_cast<float *>(out[0]), pt.n, pt.len,
                                  wholeLen, pt.offset, inner, true, ctx.stream));
      else
        PIPEC_TRY(launchSliceCopy(static_cast<const float *>(in[0]), static_cast<float *>(out[i]), pt.n, pt.len,
                                  wholeLen, pt.offset, inner, false, ctx.stream));
    }
    return Status::ok();
  });
}

Expected<KernelPtr> makeGather(const OpDesc &d) {
  const bool grad = d.domain == "pipec";
  const TensorDesc &data = grad ? d.outputs[0] : d.inputs[0];
  const TensorDesc &idx = d.inputs[1];
  if (idx.dtype != DType::I64)
    return errorf(d.where(), ": indices are ", dtypeName(idx.dtype), "; the CUDA kernel takes int64");
  if ((grad ? d.inputs[0].dtype : data.dtype) != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": the CUDA kernel takes float32 data");
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", 0), data.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(data.shape.size()))
    return errorf(d.where(), ": axis out of range for ", data.str());
  const size_t ax = static_cast<size_t>(axis);
  const int64_t outer = prodDims(data.shape, 0, ax), len = data.shape[ax];
  const int64_t inner = prodDims(data.shape, ax + 1, data.shape.size()), count = idx.numel();
  if (grad)
    return launchKernel(
        [=](ExecContext &ctx, const void *const *in, void *const *out) {
          return launchGatherGrad(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]),
                                  static_cast<float *>(out[0]), outer, len, inner, count, ctx.workspace, ctx.stream);
        },
        gatherGradWorkspace(count, len));
  return launchKernel(
      [=, where = d.where()](ExecContext &ctx, const void *const *in, void *const *out) -> Status {
        if (ctx.errorFlag) // read by the executor at the step's end
          return launchGather(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]),
                              static_cast<float *>(out[0]), outer, len, inner, count, ctx.errorFlag, ctx.stream);
        if (cudaMemsetAsync(ctx.workspace, 0, sizeof(int), static_cast<cudaStream_t>(ctx.stream)) != cudaSuccess)
          return errorf(where, ": cudaMemsetAsync failed");
        PIPEC_TRY(launchGather(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]),
                               static_cast<float *>(out[0]), outer, len, inner, count,
                               static_cast<int *>(ctx.workspace), ctx.stream));
        return checkFlag(ctx, where);
      },
      256);
}

namespace {

/// Input i, a constant int64 tensor, as integers.
Expected<std::vector<int64_t>> constInts(const OpDesc &d, size_t i, const char *what) {
  const Tensor *t = d.hasInput(i) ? d.constInput(i) : nullptr;
  if (!t || t->dtype() != DType::I64)
    return errorf(d.where(), ": ", what, " must be a constant int64 tensor (the CUDA kernel takes it at load)");
  return t->toInts();
}

/// The strided view's copy as a kernel: `view.out` must be the output.
Expected<KernelPtr> stridedCopy(const OpDesc &d, Expected<StridedView> view) {
  if (!view)
    return view.status().withContext(d.where());
  if (d.outputs.size() != 1 || d.outputs[0].shape != view->out || d.outputs[0].dtype != d.inputs[0].dtype)
    return errorf(d.where(), ": the output must be ", dtypeName(d.inputs[0].dtype), " ", shapeStr(view->out));
  const size_t esize = dtypeSize(d.inputs[0].dtype);
  if (esize != 1 && esize != 2 && esize != 4 && esize != 8)
    return errorf(d.where(), ": elements of ", esize, " bytes");
  if (view->dims.size() > static_cast<size_t>(body::kMaxRank))
    return errorf(d.where(), ": a view of rank ", view->dims.size(), " (the CUDA kernel takes up to ", body::kMaxRank,
                  "; Tile's view has twice the input's rank)");
  body::Broadcast v;
  v.rank = static_cast<int>(view->dims.size());
  for (int a = 0; a < v.rank; ++a) {
    v.dims[a] = view->dims[static_cast<size_t>(a)];
    v.strides[a] = view->strides[static_cast<size_t>(a)];
  }
  const int64_t offset = view->offset, n = d.outputs[0].numel();
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchStridedCopy(in[0], out[0], v, offset, n, esize, ctx.stream);
  });
}

} // namespace

Expected<KernelPtr> makeSlice(const OpDesc &d) {
  if (d.inputs.empty())
    return errorf(d.where(), ": no input");
  std::vector<int64_t> starts, ends, axes, steps;
  if (d.opset < 10) {
    starts = attrInts(d.attrs, "starts");
    ends = attrInts(d.attrs, "ends");
    axes = attrInts(d.attrs, "axes");
  } else {
    PIPEC_ASSIGN(starts, constInts(d, 1, "starts"));
    PIPEC_ASSIGN(ends, constInts(d, 2, "ends"));
    if (d.hasInput(3)) {
      PIPEC_ASSIGN(axes, constInts(d, 3, "axes"));
    }
    if (d.hasInput(4)) {
      PIPEC_ASSIGN(steps, constInts(d, 4, "steps"));
    }
  }
  return stridedCopy(d, sliceView(d.inputs[0].shape, starts, ends, axes, steps));
}

Expected<KernelPtr> makeExpand(const OpDesc &d) {
  PIPEC_ASSIGN(std::vector<int64_t> shape, constInts(d, 1, "shape"));
  return stridedCopy(d, expandView(d.inputs[0].shape, shape));
}

Expected<KernelPtr> makeTile(const OpDesc &d) {
  PIPEC_ASSIGN(std::vector<int64_t> repeats, constInts(d, 1, "repeats"));
  return stridedCopy(d, tileView(d.inputs[0].shape, repeats));
}

Expected<KernelPtr> makeConcat(const OpDesc &d) { return makeSlices(d, true); }
Expected<KernelPtr> makeSplit(const OpDesc &d) { return makeSlices(d, false); }

} // namespace pipec::cuda
