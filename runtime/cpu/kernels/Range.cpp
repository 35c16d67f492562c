//===- runtime/cpu/kernels/Range.cpp - Range ------------------------------===//
//
// Range (opset 11): start, limit and delta are compile-time constant scalars
// in pipec (they fix the output length), so the factory computes the whole
// output, ceil((limit - start) / delta) elements start + i * delta, and
// run() copies it.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ConstantOps.h"
#include "runtime/cpu/kernels/DataMovementCommon.h"

#include <cmath>

namespace pipec::cpu {

namespace {
template <typename T> void fillRange(Tensor &out, T start, T delta) {
  T *o = out.data<T>();
  for (int64_t i = 0; i < out.numel(); ++i)
    o[i] = static_cast<T>(start + static_cast<T>(i) * delta);
}
} // namespace

Expected<Tensor> dm::rangeOutput(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 3, 1));
  const char *names[] = {"start", "limit", "delta"};
  const Tensor *v[3];
  for (size_t i = 0; i < 3; ++i) {
    v[i] = d.constInput(i);
    if (!v[i])
      return errorf(d.where(), ": input ", i, " (", names[i],
                    ") must be a compile-time constant; pipec needs it to fix the output length");
    if (v[i]->numel() != 1 || v[i]->dtype() != v[0]->dtype())
      return errorf(d.where(), ": ", names[i], " must be a scalar of the type of start, got ",
                    v[i]->desc().str());
  }
  const DType t = v[0]->dtype();
  int64_t n = 0;
  if (t == DType::F32 || t == DType::F64) {
    const double start = v[0]->getDouble(0), limit = v[1]->getDouble(0),
                 delta = v[2]->getDouble(0);
    if (delta == 0)
      return errorf(d.where(), ": delta is 0");
    n = static_cast<int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
  } else if (t == DType::I64 || t == DType::I32 || t == DType::I16) {
    const int64_t start = v[0]->getInt(0), limit = v[1]->getInt(0), delta = v[2]->getInt(0);
    if (delta == 0)
      return errorf(d.where(), ": delta is 0");
    const int64_t span = limit - start;
    if ((span > 0) == (delta > 0) && span != 0)
      n = (span + delta + (delta > 0 ? -1 : 1)) / delta;
  } else {
    return errorf(d.where(), ": type ", dtypeName(t), " is not supported (f32, f64, i16, i32, i64)");
  }
  PIPEC_TRY(dm::checkOutput(d, 0, t, {n}));
  Tensor out(t, {n});
  switch (t) {
  case DType::F32: fillRange<float>(out, *v[0]->data<float>(), *v[2]->data<float>()); break;
  case DType::F64: fillRange<double>(out, *v[0]->data<double>(), *v[2]->data<double>()); break;
  case DType::I64: fillRange<int64_t>(out, *v[0]->data<int64_t>(), *v[2]->data<int64_t>()); break;
  case DType::I32: fillRange<int32_t>(out, *v[0]->data<int32_t>(), *v[2]->data<int32_t>()); break;
  default: fillRange<int16_t>(out, *v[0]->data<int16_t>(), *v[2]->data<int16_t>()); break;
  }
  return out;
}

Expected<KernelPtr> makeRangeKernel(const OpDesc &d) {
  PIPEC_ASSIGN(Tensor out, dm::rangeOutput(d));
  return KernelPtr(new dm::ConstantOutputKernel(std::move(out)));
}

} // namespace pipec::cpu
