//===- runtime/cpu/kernels/Split.cpp - Split ------------------------------===//
//
// Split (opsets 2-18): sizes from the 'split' attribute (< 13), the constant
// 'split' input (>= 13), or equal chunks of ceil(dim / outputs) with a
// smaller last chunk (num_outputs, opset 18). The mirror of Concat: output k
// is a block of rows taken at a fixed byte offset of each input row.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"

namespace pipec::cpu {

namespace {
class SplitKernel final : public Kernel {
public:
  struct Part {
    int64_t offset;  ///< byte offset of the output's block in an input row
    size_t rowBytes; ///< the output's bytes per outer index
  };
  SplitKernel(std::vector<Part> parts, int64_t outer, int64_t inRow)
      : parts_(std::move(parts)), outer_(outer), inRow_(inRow) {}

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const char *src = static_cast<const char *>(in[0]);
    for (size_t k = 0; k < parts_.size(); ++k)
      if (out[k])
        dm::copyRows(static_cast<char *>(out[k]), static_cast<int64_t>(parts_[k].rowBytes),
                     src + parts_[k].offset, inRow_, outer_, parts_[k].rowBytes);
    return Status::ok();
  }

private:
  std::vector<Part> parts_;
  int64_t outer_, inRow_;
};
} // namespace

Expected<KernelPtr> makeSplitKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  PIPEC_ASSIGN(size_t esize, dm::elementSize(d, x, "input"));
  PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, attrInt(d.attrs, "axis", 0), x.rank()));
  const int64_t dim = x.shape[axis];
  const int64_t outputs = static_cast<int64_t>(d.outputs.size());

  bool given = false;
  PIPEC_ASSIGN(std::vector<int64_t> sizes, dm::intsAttrOrInput(d, "split", 1, 13, given));
  if (given) {
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0)
        return errorf(d.where(), ": split size ", s, " is negative");
      sum += s;
    }
    if (static_cast<int64_t>(sizes.size()) != outputs || sum != dim)
      return errorf(d.where(), ": split sizes ", shapeStr(sizes), " must be ", outputs,
                    " values summing to ", dim, " (axis ", axis, " of ", x.str(), ")");
  } else {
    int64_t parts = attrInt(d.attrs, "num_outputs", outputs);
    if (parts != outputs)
      return errorf(d.where(), ": num_outputs is ", parts, " but the node has ", outputs,
                    " outputs");
    const int64_t chunk = (dim + parts - 1) / parts;
    const int64_t last = dim - chunk * (parts - 1);
    if (last < 0)
      return errorf(d.where(), ": cannot split a dimension of ", dim, " into ", parts,
                    " chunks of ", chunk);
    sizes.assign(static_cast<size_t>(parts), chunk);
    sizes.back() = last;
  }

  int64_t outer = 1, inner = static_cast<int64_t>(esize);
  for (int64_t i = 0; i < axis; ++i)
    outer *= x.shape[i];
  for (int64_t i = axis + 1; i < x.rank(); ++i)
    inner *= x.shape[i];
  std::vector<SplitKernel::Part> parts;
  int64_t offset = 0;
  for (int64_t k = 0; k < outputs; ++k) {
    Shape s = x.shape;
    s[axis] = sizes[k];
    if (d.outputs[k].dtype != DType::Undefined)
      PIPEC_TRY(dm::checkOutput(d, static_cast<size_t>(k), x.dtype, s));
    parts.push_back({offset, static_cast<size_t>(sizes[k] * inner)});
    offset += sizes[k] * inner;
  }
  return KernelPtr(new SplitKernel(std::move(parts), outer, dim * inner));
}

} // namespace pipec::cpu
