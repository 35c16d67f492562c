//===- runtime/cpu/kernels/Where.cpp - Where(cond, X, Y) ------------------===//
//
// y = cond ? x : y with three-way numpy broadcasting. Only element bytes are
// moved, so the kernel is instantiated per element size (1, 2, 4, 8 bytes)
// and serves every fixed-size type, float16 and bfloat16 included.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

namespace pipec::cpu {

namespace {
using namespace ew;

template <typename T> class WhereKernel final : public Kernel {
public:
  explicit WhereKernel(BroadcastPlan plan) : plan_(std::move(plan)) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const Bool *c = static_cast<const Bool *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    const T *yv = static_cast<const T *>(in[2]);
    T *r = static_cast<T *>(out[0]);
    const int64_t sc = plan_.innerStride(0), sx = plan_.innerStride(1),
                  sy = plan_.innerStride(2);
    parallelChunks(plan_.total, kChunk, [&](int64_t lo, int64_t hi) {
      forEachSegment(plan_, lo, hi, [&](int64_t o, const auto &off, int64_t len) {
        const Bool *__restrict pc = c + off[0];
        const T *__restrict px = x + off[1];
        const T *__restrict py = yv + off[2];
        T *__restrict pr = r + o;
        if (sc && sx && sy) {
          for (int64_t i = 0; i < len; ++i)
            pr[i] = pc[i] ? px[i] : py[i];
        } else {
          for (int64_t i = 0; i < len; ++i)
            pr[i] = pc[i * sc] ? px[i * sx] : py[i * sy];
        }
      });
    });
    return Status::ok();
  }

private:
  BroadcastPlan plan_;
};
} // namespace

Expected<KernelPtr> makeWhereKernel(const OpDesc &d) {
  PIPEC_TRY(checkArity(d, 3, 3, 1, 1));
  const TensorDesc &c = d.inputs[0], &x = d.inputs[1], &y = d.inputs[2];
  if (c.dtype != DType::Bool)
    return errorf(d.where(), ": condition must be bool, not ", dtypeName(c.dtype));
  if (x.dtype != y.dtype)
    return errorf(d.where(), ": X is ", dtypeName(x.dtype), " but Y is ", dtypeName(y.dtype));
  PIPEC_ASSIGN(Shape shape, broadcastShapes(d, {c.shape, x.shape, y.shape}));
  PIPEC_TRY(checkOutput(d, 0, x.dtype, shape));
  PIPEC_ASSIGN(BroadcastPlan plan, makeBroadcastPlan(d, shape, {c.shape, x.shape, y.shape}));
  switch (dtypeSize(x.dtype)) {
  case 1: return KernelPtr(new WhereKernel<uint8_t>(std::move(plan)));
  case 2: return KernelPtr(new WhereKernel<uint16_t>(std::move(plan)));
  case 4: return KernelPtr(new WhereKernel<uint32_t>(std::move(plan)));
  case 8: return KernelPtr(new WhereKernel<uint64_t>(std::move(plan)));
  default:
    return errorf(d.where(), ": element type ", dtypeName(x.dtype), " is not supported");
  }
}

} // namespace pipec::cpu
