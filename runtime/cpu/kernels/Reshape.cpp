//===- runtime/cpu/kernels/Reshape.cpp - Reshape, Flatten, Squeeze, Unsqueeze -===//
//
// The four ops that only rename a shape. Each factory recomputes the output
// shape from the spec (Reshape's 0 and -1 and allowzero, Flatten's axis,
// Squeeze/Unsqueeze axes from attributes before opset 13 and constant inputs
// from then on), checks it against the described output, and then runs the
// Identity kernel: a single memcpy.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DataMovementCommon.h"

#include <algorithm>

namespace pipec::cpu {

namespace {
/// Output shape checked, the run is a copy.
Expected<KernelPtr> copyTo(const OpDesc &d, const Shape &shape) {
  PIPEC_TRY(dm::elementSize(d, d.inputs[0], "input").status());
  PIPEC_TRY(dm::checkOutput(d, 0, d.inputs[0].dtype, shape));
  return makeIdentityKernel(d);
}
} // namespace

Expected<KernelPtr> makeReshapeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  std::vector<int64_t> spec;
  if (d.opset < 5) {
    spec = attrInts(d.attrs, "shape");
  } else {
    PIPEC_TRY(dm::checkArity(d, 2, 1));
    PIPEC_ASSIGN(spec, dm::constInts(d, 1, "shape"));
  }
  const bool allowZero = attrInt(d.attrs, "allowzero", 0) != 0;
  Shape out(spec.size());
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t v = spec[i];
    if (v == 0 && !allowZero) {
      if (static_cast<int64_t>(i) >= x.rank())
        return errorf(d.where(), ": shape ", shapeStr(spec), " copies dimension ", i,
                      " of ", x.str(), ", which has no such dimension");
      v = x.shape[i];
    }
    if (v == -1) {
      if (inferred >= 0)
        return errorf(d.where(), ": shape ", shapeStr(spec), " has more than one -1");
      inferred = static_cast<int64_t>(i);
      continue;
    }
    if (v < 0)
      return errorf(d.where(), ": shape ", shapeStr(spec), " has invalid dimension ", v);
    out[i] = v;
    known *= v;
  }
  if (inferred >= 0) {
    if (known == 0 || x.numel() % known != 0)
      return errorf(d.where(), ": cannot reshape ", x.str(), " to ", shapeStr(spec));
    out[inferred] = x.numel() / known;
  }
  if (numElements(out) != x.numel())
    return errorf(d.where(), ": cannot reshape ", x.str(), " (", x.numel(), " elements) to ",
                  shapeStr(out));
  return copyTo(d, out);
}

Expected<KernelPtr> makeFlattenKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  int64_t axis = attrInt(d.attrs, "axis", 1);
  if (axis < -x.rank() || axis > x.rank())
    return errorf(d.where(), ": axis ", axis, " is out of range [", -x.rank(), ", ", x.rank(),
                  "] for ", x.str());
  if (axis < 0)
    axis += x.rank();
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= x.shape[i];
  return copyTo(d, {outer, numElements(Shape(x.shape.begin() + axis, x.shape.end()))});
}

Expected<KernelPtr> makeSqueezeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  bool given = false;
  PIPEC_ASSIGN(std::vector<int64_t> axes, dm::intsAttrOrInput(d, "axes", 1, 13, given));
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (!given) {
    for (int64_t i = 0; i < x.rank(); ++i)
      drop[i] = x.shape[i] == 1;
  }
  for (int64_t a : axes) {
    PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, a, x.rank()));
    if (x.shape[axis] != 1)
      return errorf(d.where(), ": cannot squeeze axis ", axis, " of ", x.str(),
                    ": its size is not 1");
    drop[axis] = true;
  }
  Shape out;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (!drop[i])
      out.push_back(x.shape[i]);
  return copyTo(d, out);
}

Expected<KernelPtr> makeUnsqueezeKernel(const OpDesc &d) {
  PIPEC_TRY(dm::checkArity(d, 1, 1));
  const TensorDesc &x = d.inputs[0];
  bool given = false;
  PIPEC_ASSIGN(std::vector<int64_t> axes, dm::intsAttrOrInput(d, "axes", 1, 13, given));
  if (!given)
    return errorf(d.where(), d.opset < 13 ? ": attribute 'axes' is required"
                                          : ": input 1 (axes) is required");
  const int64_t rank = x.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    PIPEC_ASSIGN(int64_t axis, dm::normalizeAxis(d, a, rank));
    if (inserted[axis])
      return errorf(d.where(), ": axis ", axis, " is listed twice in ", shapeStr(axes));
    inserted[axis] = true;
  }
  Shape out;
  for (int64_t i = 0, k = 0; i < rank; ++i)
    out.push_back(inserted[i] ? 1 : x.shape[k++]);
  return copyTo(d, out);
}

} // namespace pipec::cpu
