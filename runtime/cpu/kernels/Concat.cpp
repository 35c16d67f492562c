//===- runtime/cpu/kernels/Concat.cpp - Concat ----------------------------===//
//
// Concat (opsets 4-13; opset 1's default axis 1 too). Viewing every tensor as
// [outer, axis * inner], input k is a block of rows that lands at a fixed
// byte offset of each output row: one strided row copy per input, whatever
// the element type.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"

namespace pipec::cpu {

namespace {
class ConcatKernel final : public Kernel {
public:
  struct Part {
    int64_t offset;  ///< byte offset of the input's block in an output row
    size_t rowBytes; ///< the input's bytes per outer index
  };
  ConcatKernel(std::vector<Part> parts, int64_t outer, int64_t outRow)
      : parts_(std::move(parts)), outer_(outer), outRow_(outRow) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    char *o = static_cast<char *>(out[0]);
    for (size_t k = 0; k < parts_.size(); ++k)
      dm::copyRows(o + parts_[k].offset, outRow_, static_cast<const char *>(in[k]),
                   static_cast<int64_t>(parts_[k].rowBytes), outer_, parts_[k].rowBytes);
    return Status::ok();
  }

private:
  std::vector<Part> parts_;
  int64_t outer_, outRow_;
};
} // namespace

Expected<KernelPtr> makeConcatKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, d.inputs.size(), 1));
  if (d.inputs.empty())
    return errorf(d.where(), ": needs at least one input");
  const TensorDesc &first = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, first, "input 0"));
  if (!attrHas(d.attrs, "axis") && d.opset >= 4)
    return errorf(d.where(), ": attribute 'axis' is required since opset 4");
  PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, attrInt(d.attrs, "axis", 1), first.rank()));

  Shape outShape = first.shape;
  outShape[axis] = 0;
  for (size_t k = 0; k < d.inputs.size(); ++k) {
    const TensorDesc &t = d.inputs[k];
    bool same = t.dtype == first.dtype && t.rank() == first.rank();
    for (int64_t i = 0; same && i < t.rank(); ++i)
      same = i == axis || t.shape[i] == first.shape[i];
    if (!same)
      return errorf(d.where(), ": input ", k, " is ", t.str(), ", input 0 is ", first.str(),
                    "; they must agree except on axis ", axis);
    outShape[axis] += t.shape[axis];
  }
  PIPEC_TRY(dm::checkOutput(d, 0, first.dtype, outShape));

  int64_t outer = 1, inner = static_cast<int64_t>(esize);
  for (int64_t i = 0; i < axis; ++i)
    outer *= outShape[i];
  for (int64_t i = axis + 1; i < first.rank(); ++i)
    inner *= outShape[i];
  std::vector<ConcatKernel::Part> parts;
  int64_t offset = 0;
  for (const TensorDesc &t : d.inputs) {
    parts.push_back({offset, static_cast<size_t>(t.shape[axis] * inner)});
    offset += t.shape[axis] * inner;
  }
  return KernelPtr(new ConcatKernel(std::move(parts), outer, outShape[axis] * inner));
}

} // namespace pipec::cpu
