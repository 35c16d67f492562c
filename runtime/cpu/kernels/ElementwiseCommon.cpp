//===- runtime/cpu/kernels/ElementwiseCommon.cpp - Elementwise helpers ----===//
//
// Non-template parts of ElementwiseCommon.h: broadcast planning and the
// desc checks every elementwise and reduction factory shares.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/ElementwiseCommon.h"

namespace pipec::cpu::ew {

Expected<Shape> broadcastShapes(const OpDesc &d, const std::vector<Shape> &shapes) {
  size_t rank = 0;
  for (const Shape &s : shapes)
    rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape &s : shapes) {
    size_t lead = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[lead + i];
      if (s[i] == o || s[i] == 1)
        continue;
      if (o != 1)
        return errorf(d.where(), ": shapes do not broadcast: dimension ", lead + i,
                      " is ", o, " in one input and ", s[i], " in another");
      o = s[i];
    }
  }
  return out;
}

Expected<BroadcastPlan> makeBroadcastPlan(const OpDesc &d, const Shape &out,
                                          const std::vector<Shape> &inputs) {
  BroadcastPlan p;
  if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxBroadcastInputs))
    return errorf(d.where(), ": broadcast of ", inputs.size(), " inputs");
  p.numInputs = static_cast<int>(inputs.size());
  p.total = numElements(out);
  const size_t rank = out.size();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Shape &s = inputs[k];
    if (s.size() > rank)
      return errorf(d.where(), ": input of shape ", shapeStr(s),
                    " has a higher rank than the output ", shapeStr(out));
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t o = out[rank - s.size() + i];
      if (s[i] < 0 || (s[i] != o && s[i] != 1))
        return errorf(d.where(), ": input of shape ", shapeStr(s),
                      " does not broadcast to the output shape ", shapeStr(out));
    }
  }
  p.flat = true;
  for (const Shape &s : inputs)
    p.flat = p.flat && numElements(s) == p.total;

  // Collapse: drop unit output dims, merge neighbours whose pattern of
  // present/broadcast inputs is the same.
  auto present = [&](size_t k, size_t dim) {
    const Shape &s = inputs[k];
    size_t lead = rank - s.size();
    return dim >= lead && s[dim - lead] == out[dim];
  };
  std::vector<unsigned> patterns;
  const unsigned allPresent = (1u << inputs.size()) - 1;
  for (size_t dim = 0; dim < rank; ++dim) {
    if (out[dim] == 1)
      continue;
    unsigned pat = 0;
    for (size_t k = 0; k < inputs.size(); ++k)
      pat |= present(k, dim) ? 1u << k : 0u;
    if (!patterns.empty() && patterns.back() == pat) {
      p.dims.back() *= out[dim];
    } else {
      p.dims.push_back(out[dim]);
      patterns.push_back(pat);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    patterns.push_back(allPresent);
  }
  if (p.rank() > kMaxRank)
    return errorf(d.where(), ": broadcast needs ", p.rank(),
                  " dimensions after merging; the CPU kernel handles ", kMaxRank);
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::vector<int64_t> &st = p.strides[k];
    st.assign(p.dims.size(), 0);
    int64_t acc = 1;
    for (int i = p.rank() - 1; i >= 0; --i) {
      if (patterns[i] & (1u << k)) {
        st[i] = acc;
        acc *= p.dims[i];
      }
    }
  }
  return p;
}

Status checkArity(const OpDesc &d, size_t minIn, size_t maxIn, size_t minOut,
                  size_t maxOut) {
  if (d.inputs.size() < minIn || d.inputs.size() > maxIn)
    return errorf(d.where(), ": expected ", minIn, "..", maxIn, " inputs, got ",
                  d.inputs.size());
  if (d.outputs.size() < minOut || d.outputs.size() > maxOut)
    return errorf(d.where(), ": expected ", minOut, "..", maxOut, " outputs, got ",
                  d.outputs.size());
  for (size_t i = 0; i < minIn; ++i)
    if (!d.hasInput(i))
      return errorf(d.where(), ": required input ", i, " is missing");
  for (const TensorDesc &t : d.inputs)
    for (int64_t s : t.shape)
      if (s < 0)
        return errorf(d.where(), ": input shape ", shapeStr(t.shape), " is not static");
  for (const TensorDesc &t : d.outputs)
    for (int64_t s : t.shape)
      if (s < 0)
        return errorf(d.where(), ": output shape ", shapeStr(t.shape), " is not static");
  return Status::ok();
}

Status checkOutput(const OpDesc &d, size_t i, DType t, const Shape &s) {
  if (i >= d.outputs.size())
    return errorf(d.where(), ": output ", i, " is missing");
  const TensorDesc &o = d.outputs[i];
  if (o.dtype != t || o.shape != s)
    return errorf(d.where(), ": output ", i, " is ", o.str(), ", expected ",
                  TensorDesc{t, s}.str());
  return Status::ok();
}

Expected<int64_t> normalizeAxis(const OpDesc &d, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return errorf(d.where(), ": axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Expected<double> scalarValue(const OpDesc &d, const Tensor &t, const char *what) {
  if (t.numel() != 1)
    return errorf(d.where(), ": ", what, " must have one element, it has shape ",
                  shapeStr(t.shape()));
  if (!inTypeSet(t.dtype(), kAll))
    return errorf(d.where(), ": ", what, " has unsupported type ", dtypeName(t.dtype()));
  return t.getDouble(0);
}

} // namespace pipec::cpu::ew
