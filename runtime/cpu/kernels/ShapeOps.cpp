//===- runtime/cpu/kernels/ShapeOps.cpp - Shape, Size, ConstantOfShape, Constant -===//
//
// Ops whose outputs are known when the kernel is prepared, because shapes
// are static in pipec: Shape (start/end since opset 15), Size and Constant
// copy a value computed by the factory; ConstantOfShape fills its output
// with the one-element 'value' attribute (f32 0 by default) of any type.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"

#include <algorithm>
#include <cstring>

namespace pipec::cpu {

namespace {
class FillKernel final : public Kernel {
public:
  FillKernel(Tensor value, int64_t count) : value_(std::move(value)), count_(count) {}
  Status run(ExecContext &, const void *const *, void *const *out) override {
    dm::fillElements(static_cast<char *>(out[0]), value_.raw(), count_,
                     dtypeSize(value_.dtype()));
    return Status::ok();
  }

private:
  Tensor value_;
  int64_t count_;
};

Expected<KernelPtr> constant(const OpDesc &d, Tensor value) {
  PIPEC_TRY(dm::checkOutput(d, 0, value.dtype(), value.shape()));
  return KernelPtr(new dm::ConstantOutputKernel(std::move(value)));
}
} // namespace

Expected<KernelPtr> makeShapeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const Shape &s = d.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  auto clampAxis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  const int64_t start = clampAxis(attrInt(d.attrs, "start", 0));
  const int64_t end = clampAxis(attrInt(d.attrs, "end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i)
    dims.push_back(s[i]);
  return constant(d, Tensor::fromInts(dims));
}

Expected<KernelPtr> makeSizeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  Tensor t(DType::I64, {});
  *t.data<int64_t>() = d.inputs[0].numel();
  return constant(d, std::move(t));
}

Expected<KernelPtr> makeConstantOfShapeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  PIPEC_ASSIGN(std::vector<int64_t> shape, dm::constInts(d, 0, "shape"));
  for (int64_t v : shape)
    if (v < 0)
      return errorf(d.where(), ": shape ", shapeStr(shape), " has a negative dimension");
  Tensor value = Tensor::scalarF32(0.0f);
  if (const Attribute *a = attrFind(d.attrs, "value")) {
    if (a->kind != Attribute::Kind::Tensor || a->t.numel() != 1)
      return errorf(d.where(), ": attribute 'value' must be a one-element tensor");
    value = a->t;
  }
  PIPEC_TRY(dm::elementSize(d, value.desc(), "value").status());
  PIPEC_TRY(dm::checkOutput(d, 0, value.dtype(), shape));
  return KernelPtr(new FillKernel(value, numElements(shape)));
}

Expected<KernelPtr> makeConstantKernel(const OpDesc &d) {
  if (d.attrs.size() != 1)
    return errorf(d.where(), ": needs exactly one value attribute, has ", d.attrs.size());
  const auto &[name, a] = *d.attrs.begin();
  using K = Attribute::Kind;
  if (name == "value" && a.kind == K::Tensor) {
    PIPEC_TRY(dm::elementSize(d, a.t.desc(), "value").status());
    return constant(d, a.t);
  }
  if (name == "value_float" && a.kind == K::Float)
    return constant(d, Tensor::scalarF32(a.f));
  if (name == "value_floats" && a.kind == K::Floats)
    return constant(d, Tensor::fromFloats(a.floats, {static_cast<int64_t>(a.floats.size())}));
  if (name == "value_int" && a.kind == K::Int) {
    Tensor t(DType::I64, {});
    *t.data<int64_t>() = a.i;
    return constant(d, std::move(t));
  }
  if (name == "value_ints" && a.kind == K::Ints)
    return constant(d, Tensor::fromInts(a.ints));
  return errorf(d.where(), ": attribute '", name,
                "' is not supported (value, value_float(s), value_int(s); no strings or sparse)");
}

} // namespace pipec::cpu
