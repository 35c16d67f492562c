//===- runtime/cuda/kernels/DataMovement.cpp - CUDA data movement kernels -===//
//
// Transpose, Concat and Split along an axis, Gather and pipec:GatherGrad,
// Slice, Expand and Tile as strided views (support/StridedView.h), Pad,
// GatherElements, Trilu and Resize (runtime/cuda/Move.cu), and the ops whose
// output is known at load: Shape, Size, Constant and Range copy it from
// pinned host memory, ConstantOfShape fills (runtime/cpu/kernels/
// ConstantOps.h computes both for either backend).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ConstantOps.h"
#include "runtime/cpu/kernels/PadSpec.h"
#include "runtime/cpu/kernels/ResizeCommon.h"
#include "runtime/cuda/kernels/CudaCommon.h"
#include "support/StridedView.h"

#include <cuda_runtime.h>

#include <cstring>

namespace pipec::cuda {

namespace {

/// Elements the movers take: 1, 2, 4 or 8 bytes.
Expected<size_t> moverSize(const OpDesc &d, DType t) {
  const size_t esize = dtypeSize(t);
  if (esize != 1 && esize != 2 && esize != 4 && esize != 8)
    return errorf(d.where(), ": elements of type ", dtypeName(t), " (the CUDA kernel moves 1, 2, 4 or 8 bytes)");
  return esize;
}

/// Bytes a kernel keeps in pinned host memory from its creation on, to
/// copy to the device on its stream at every run (an asynchronous copy, as
/// a kernel's launch is).
class PinnedBytes {
public:
  PinnedBytes() = default;
  PinnedBytes(const PinnedBytes &) = delete;
  PinnedBytes &operator=(const PinnedBytes &) = delete;
  ~PinnedBytes() {
    if (p_)
      cudaFreeHost(p_);
  }
  Status init(const OpDesc &d, const void *src, size_t bytes) {
    bytes_ = bytes;
    if (!bytes)
      return Status::ok();
    if (cudaMallocHost(&p_, bytes) != cudaSuccess)
      return errorf(d.where(), ": cudaMallocHost of ", bytes, " bytes failed: ",
                    cudaGetErrorString(cudaGetLastError()));
    std::memcpy(p_, src, bytes);
    return Status::ok();
  }
  size_t bytes() const { return bytes_; }
  Status copyTo(void *dst, void *stream, const char *what) const {
    if (bytes_ && cudaMemcpyAsync(dst, p_, bytes_, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)) !=
                      cudaSuccess)
      return errorf(what, ": cudaMemcpyAsync failed: ", cudaGetErrorString(cudaGetLastError()));
    return Status::ok();
  }

private:
  void *p_ = nullptr;
  size_t bytes_ = 0;
};

/// An output known at load, copied from pinned host memory at every run.
class ConstantOutputKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  static Expected<KernelPtr> make(const OpDesc &d, const Tensor &value) {
    auto k = std::make_unique<ConstantOutputKernel>();
    PIPEC_TRY(k->value_.init(d, value.raw(), value.bytes()));
    return KernelPtr(std::move(k));
  }
  Status run(ExecContext &ctx, const void *const *, void *const *out) override {
    return value_.copyTo(out[0], ctx.stream, "constant output");
  }

private:
  PinnedBytes value_;
};

/// Resize, Upsample and pipec:ResizeGrad on float32: the CPU kernel's
/// separable passes (runtime/cpu/kernels/ResizeCommon.h), in its order,
/// one launch each; every run copies the passes' tap tables from pinned
/// host memory to the front of the workspace, the intermediate buffers
/// follow.
class ResizeKernel final : public Kernel {
public:
  bool replayable() const override { return true; }
  static Expected<KernelPtr> make(const OpDesc &d, const cpu::resize::SeparablePlan<float> &plan, int64_t inElems) {
    auto k = std::make_unique<ResizeKernel>();
    k->inElems_ = inElems;
    k->buf_[0] = plan.bufferElems(0);
    k->buf_[1] = plan.bufferElems(1);
    std::vector<char> blob;
    auto put = [&blob](const void *p, size_t bytes) {
      const size_t at = (blob.size() + 7) / 8 * 8;
      blob.resize(at + bytes);
      if (bytes)
        std::memcpy(blob.data() + at, p, bytes);
      return at;
    };
    for (const cpu::resize::Pass<float> &p : plan.passes()) {
      Pass q;
      q.shape.outer = p.outer;
      q.shape.nIn = p.nIn;
      q.shape.nOut = p.nOut;
      q.shape.inner = p.inner;
      q.start = put(p.start.data(), p.start.size() * sizeof(int64_t));
      q.idx = put(p.idx.data(), p.idx.size() * sizeof(int64_t));
      q.w = put(p.w.data(), p.w.size() * sizeof(float));
      k->passes_.push_back(q);
    }
    k->tableBytes_ = (blob.size() + 255) / 256 * 256;
    PIPEC_TRY(k->tables_.init(d, blob.data(), blob.size()));
    return KernelPtr(std::move(k));
  }
  size_t workspaceBytes() const override { return tableBytes_ + (buf_[0] + buf_[1]) * sizeof(float); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    auto stream = static_cast<cudaStream_t>(ctx.stream);
    const auto *x = static_cast<const float *>(in[0]);
    auto *y = static_cast<float *>(out[0]);
    if (passes_.empty()) {
      if (inElems_ && cudaMemcpyAsync(y, x, static_cast<size_t>(inElems_) * sizeof(float), cudaMemcpyDeviceToDevice,
                                      stream) != cudaSuccess)
        return errorf("Resize: cudaMemcpyAsync failed: ", cudaGetErrorString(cudaGetLastError()));
      return Status::ok();
    }
    char *ws = static_cast<char *>(ctx.workspace);
    PIPEC_TRY(tables_.copyTo(ws, ctx.stream, "Resize"));
    float *bufs[2] = {reinterpret_cast<float *>(ws + tableBytes_), reinterpret_cast<float *>(ws + tableBytes_) + buf_[0]};
    const float *src = x;
    for (size_t k = 0; k < passes_.size(); ++k) {
      body::ResizePass p = passes_[k].shape;
      p.start = reinterpret_cast<const int64_t *>(ws + passes_[k].start);
      p.idx = reinterpret_cast<const int64_t *>(ws + passes_[k].idx);
      p.w = reinterpret_cast<const float *>(ws + passes_[k].w);
      float *dst = k + 1 == passes_.size() ? y : bufs[k % 2];
      PIPEC_TRY(launchResizePass(p, src, dst, ctx.stream));
      src = dst;
    }
    return Status::ok();
  }

private:
  struct Pass {
    body::ResizePass shape; ///< the geometry; the pointers are set per run
    size_t start = 0, idx = 0, w = 0; ///< offsets of the tables in the workspace
  };
  std::vector<Pass> passes_;
  PinnedBytes tables_; ///< the passes' tap tables
  size_t tableBytes_ = 0, buf_[2] = {0, 0};
  int64_t inElems_ = 0;
};

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
  for (int64_t p : perm)
    if (p < 0 || p >= static_cast<int64_t>(rank))
      return errorf(d.where(), ": perm ", p, " out of range");
  const body::Broadcast b = transposeView(in, perm);
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
      [=, where = d.where()](ExecContext &ctx, const void *const *in, void *const *out) {
        return withDataFlag(ctx, where, [&](int *flag) {
          return launchGather(static_cast<const float *>(in[0]), static_cast<const int64_t *>(in[1]),
                              static_cast<float *>(out[0]), outer, len, inner, count, flag, ctx.stream);
        });
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

Expected<KernelPtr> makePad(const OpDesc &d) {
  PIPEC_ASSIGN(cpu::dm::PadSpec p, cpu::dm::padSpec(d));
  PIPEC_TRY(moverSize(d, d.inputs[0].dtype).status());
  if (p.dims.size() > static_cast<size_t>(body::kMaxRank))
    return errorf(d.where(), ": rank ", p.dims.size(), " (the CUDA kernel pads up to rank ", body::kMaxRank, ")");
  const body::PadGeometry g = body::padGeometry(p);
  uint64_t value = 0;
  std::memcpy(&value, p.value.data(), p.esize);
  const size_t esize = p.esize;
  const bool runtimeValue = p.runtimeValue;
  const int64_t n = d.outputs[0].numel();
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchPad(in[0], out[0], g, n, esize, value, runtimeValue ? in[2] : nullptr, ctx.stream);
  });
}

Expected<KernelPtr> makeGatherElements(const OpDesc &d) {
  if (d.inputs.size() != 2 || d.outputs.size() != 1)
    return errorf(d.where(), ": expects data and indices, and one output");
  const TensorDesc &x = d.inputs[0], &ind = d.inputs[1];
  PIPEC_ASSIGN(size_t esize, moverSize(d, x.dtype));
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32)
    return errorf(d.where(), ": indices must be int32 or int64, got ", dtypeName(ind.dtype));
  if (x.rank() < 1 || ind.rank() != x.rank() || x.rank() > body::kMaxRank)
    return errorf(d.where(), ": data ", x.str(), " and indices ", ind.str(), " must have one rank in [1, ",
                  body::kMaxRank, "]");
  const int64_t axis = normAxis(attrInt(d.attrs, "axis", 0), x.shape.size());
  if (axis < 0 || axis >= x.rank())
    return errorf(d.where(), ": axis out of range for ", x.str());
  for (int64_t k = 0; k < x.rank(); ++k)
    if (k != axis && ind.shape[k] > x.shape[k])
      return errorf(d.where(), ": indices ", ind.str(), " exceed data ", x.str(), " on axis ", k);
  if (d.outputs[0].dtype != x.dtype || d.outputs[0].shape != ind.shape)
    return errorf(d.where(), ": the output must be ", dtypeName(x.dtype), " ", shapeStr(ind.shape));
  const body::GatherElementsGeometry g = body::gatherElementsGeometry(x.shape, ind.shape, static_cast<int>(axis));
  const bool idx64 = ind.dtype == DType::I64;
  const int64_t n = ind.numel();
  return launchKernel(
      [=, where = d.where()](ExecContext &ctx, const void *const *in, void *const *out) {
        return withDataFlag(ctx, where, [&](int *flag) {
          return launchGatherElements(in[0], in[1], idx64, out[0], g, n, esize, flag, ctx.stream);
        });
      },
      256);
}

Expected<KernelPtr> makeTrilu(const OpDesc &d) {
  if (d.inputs.empty() || d.outputs.size() != 1)
    return errorf(d.where(), ": expects an input and one output");
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, moverSize(d, x.dtype));
  if (x.rank() < 2)
    return errorf(d.where(), ": input must have rank >= 2, got ", x.str());
  const bool hasK = d.hasInput(1);
  if (hasK && (d.inputs[1].dtype != DType::I64 || d.inputs[1].numel() != 1))
    return errorf(d.where(), ": k must be an int64 scalar, got ", d.inputs[1].str());
  if (d.outputs[0] != x)
    return errorf(d.where(), ": the output must be ", x.str());
  const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back(), n = x.numel();
  const bool upper = attrInt(d.attrs, "upper", 1) != 0;
  return launchKernel([=](ExecContext &ctx, const void *const *in, void *const *out) {
    return launchTrilu(in[0], out[0], n, rows, cols, 0, hasK ? static_cast<const int64_t *>(in[1]) : nullptr, upper,
                       esize, ctx.stream);
  });
}

Expected<KernelPtr> makeConstantOutput(const OpDesc &d) {
  PIPEC_ASSIGN(Tensor value, cpu::dm::constantOutput(d));
  return ConstantOutputKernel::make(d, value);
}

Expected<KernelPtr> makeConstantOfShape(const OpDesc &d) {
  PIPEC_ASSIGN(Tensor value, cpu::dm::constantOfShapeValue(d));
  PIPEC_ASSIGN(size_t esize, moverSize(d, value.dtype()));
  uint64_t bits = 0;
  std::memcpy(&bits, value.raw(), esize);
  const int64_t n = d.outputs[0].numel();
  return launchKernel([=](ExecContext &ctx, const void *const *, void *const *out) {
    return launchFill(out[0], n, esize, bits, ctx.stream);
  });
}

Expected<KernelPtr> makeResize(const OpDesc &d) {
  PIPEC_ASSIGN(cpu::resize::ResizeNode node, cpu::resize::resizeNode(d));
  if (d.inputs[0].dtype != DType::F32 || d.outputs[0].dtype != DType::F32)
    return errorf(d.where(), ": the CUDA kernel resizes float32, not ", dtypeName(d.inputs[0].dtype));
  const bool grad = d.opType == "ResizeGrad";
  const cpu::resize::SeparablePlan<float> plan(node.in, node.taps, grad ? 0.0 : node.spec.extrapolation);
  if (plan.extrapolates())
    return errorf(d.where(), ": tf_crop_and_resize sampling outside the input (extrapolation_value) is not "
                             "implemented in the CUDA kernel");
  return ResizeKernel::make(d, plan, numElements(node.in));
}

Expected<KernelPtr> makeConcat(const OpDesc &d) { return makeSlices(d, true); }
Expected<KernelPtr> makeSplit(const OpDesc &d) { return makeSlices(d, false); }

} // namespace pipec::cuda
