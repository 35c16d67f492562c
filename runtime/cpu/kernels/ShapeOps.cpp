//===- runtime/cpu/kernels/ShapeOps.cpp - Shape, Size, ConstantOfShape, Constant -===//
//
// Ops whose outputs are known when the kernel is prepared, because shapes
// are static in pipec: Shape (start/end since opset 15), Size and Constant
// copy a value computed by the factory; ConstantOfShape fills its output
// with the one-element 'value' attribute (f32 0 by default) of any type.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ConstantOps.h"
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

Expected<Tensor> checked(const OpDesc &d, Tensor value) {
  PIPEC_TRY(dm::checkOutput(d, 0, value.dtype(), value.shape()));
  return value;
}

Expected<Tensor> shapeOutput(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const Shape &s = d.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  auto clampAxis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  const int64_t start = clampAxis(attrInt(d.attrs, "start", 0));
  const int64_t end = clampAxis(attrInt(d.attrs, "end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i)
    dims.push_back(s[i]);
  return checked(d, Tensor::fromInts(dims));
}

Expected<Tensor> sizeOutput(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  Tensor t(DType::I64, {});
  *t.data<int64_t>() = d.inputs[0].numel();
  return checked(d, std::move(t));
}

Expected<Tensor> constantNodeOutput(const OpDesc &d) {
  if (d.attrs.size() != 1)
    return errorf(d.where(), ": needs exactly one value attribute, has ", d.attrs.size());
  const auto &[name, a] = *d.attrs.begin();
  using K = Attribute::Kind;
  if (name == "value" && a.kind == K::Tensor) {
    PIPEC_TRY(dm::elementSize(d, a.t.desc(), "value").status());
    return checked(d, a.t);
  }
  if (name == "value_float" && a.kind == K::Float)
    return checked(d, Tensor::scalarF32(a.f));
  if (name == "value_floats" && a.kind == K::Floats)
    return checked(d, Tensor::fromFloats(a.floats, {static_cast<int64_t>(a.floats.size())}));
  if (name == "value_int" && a.kind == K::Int) {
    Tensor t(DType::I64, {});
    *t.data<int64_t>() = a.i;
    return checked(d, std::move(t));
  }
  if (name == "value_ints" && a.kind == K::Ints)
    return checked(d, Tensor::fromInts(a.ints));
  return errorf(d.where(), ": attribute '", name,
                "' is not supported (value, value_float(s), value_int(s); no strings or sparse)");
}
} // namespace

Expected<Tensor> dm::constantOutput(const OpDesc &d) {
  if (d.opType == "Shape")
    return shapeOutput(d);
  if (d.opType == "Size")
    return sizeOutput(d);
  if (d.opType == "Constant")
    return constantNodeOutput(d);
  if (d.opType == "Range")
    return rangeOutput(d);
  return errorf(d.where(), ": not an op whose output is known at load");
}

Expected<Tensor> dm::constantOfShapeValue(const OpDesc &d) {
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
  return value;
}

Expected<KernelPtr> makeShapeKernel(const OpDesc &d) {
  PIPEC_ASSIGN(Tensor v, dm::constantOutput(d));
  return KernelPtr(new dm::ConstantOutputKernel(std::move(v)));
}
Expected<KernelPtr> makeSizeKernel(const OpDesc &d) { return makeShapeKernel(d); }
Expected<KernelPtr> makeConstantKernel(const OpDesc &d) { return makeShapeKernel(d); }

Expected<KernelPtr> makeConstantOfShapeKernel(const OpDesc &d) {
  PIPEC_ASSIGN(Tensor value, dm::constantOfShapeValue(d));
  return KernelPtr(new FillKernel(value, d.outputs[0].numel()));
}

} // namespace pipec::cpu
