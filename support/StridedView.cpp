//===- support/StridedView.cpp - Slice, Expand and Tile as strided views --===//
#include "support/StridedView.h"

#include "support/Format.h"

#include <algorithm>

namespace pipec {

Expected<StridedView> sliceView(const Shape &in, const std::vector<int64_t> &starts, const std::vector<int64_t> &ends,
                                std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const size_t n = starts.size();
  const int64_t rank = static_cast<int64_t>(in.size());
  if (axes.empty())
    for (size_t i = 0; i < n; ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (steps.empty())
    steps.assign(n, 1);
  if (ends.size() != n || axes.size() != n || steps.size() != n)
    return errorf("starts, ends, axes and steps have ", n, ", ", ends.size(), ", ", axes.size(), " and ",
                  steps.size(), " values; they must agree");
  const std::vector<int64_t> inStrides = rowMajorStrides(in);
  StridedView v;
  v.out = in;
  v.strides = inStrides;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < n; ++i) {
    if (axes[i] < -rank || axes[i] >= rank)
      return errorf("slice axis ", axes[i], " is out of range [", -rank, ", ", rank - 1, "] for rank ", rank);
    const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (seen[static_cast<size_t>(axis)])
      return errorf("axis ", axis, " is sliced twice");
    seen[static_cast<size_t>(axis)] = true;
    // -INT64_MAX for INT64_MIN keeps the negation below defined; either
    // takes one element.
    const int64_t dim = in[static_cast<size_t>(axis)], step = std::max(steps[i], -INT64_MAX);
    if (step == 0)
      return errorf("step of axis ", axis, " is 0");
    int64_t start = starts[i], end = ends[i];
    if (start < 0)
      start += dim;
    if (end < 0)
      end += dim;
    int64_t len = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      len = end > start ? (end - start - 1) / step + 1 : 0;
    } else if (dim > 0) {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      len = start > end ? (start - end - 1) / (-step) + 1 : 0;
    }
    v.out[static_cast<size_t>(axis)] = len;
    v.strides[static_cast<size_t>(axis)] = inStrides[static_cast<size_t>(axis)] * step;
    if (len > 0)
      v.offset += start * inStrides[static_cast<size_t>(axis)];
  }
  v.dims = v.out;
  return v;
}

Expected<StridedView> expandView(const Shape &in, const std::vector<int64_t> &shape) {
  const int64_t xr = static_cast<int64_t>(in.size()), sr = static_cast<int64_t>(shape.size());
  const int64_t rank = std::max(xr, sr);
  const std::vector<int64_t> inStrides = rowMajorStrides(in);
  StridedView v;
  v.out.assign(static_cast<size_t>(rank), 0);
  v.strides.assign(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t xi = i - (rank - xr), si = i - (rank - sr);
    const int64_t a = xi >= 0 ? in[static_cast<size_t>(xi)] : 1, b = si >= 0 ? shape[static_cast<size_t>(si)] : 1;
    if (a != b && a != 1 && b != 1)
      return errorf("cannot broadcast ", shapeStr(in), " to shape ", shapeStr(shape), " (axis ", i, ": ", a, " vs ",
                    b, ")");
    v.out[static_cast<size_t>(i)] = a == 1 ? b : a;
    v.strides[static_cast<size_t>(i)] = a == 1 ? 0 : inStrides[static_cast<size_t>(xi)];
  }
  v.dims = v.out;
  return v;
}

Expected<StridedView> tileView(const Shape &in, const std::vector<int64_t> &repeats) {
  if (repeats.size() != in.size())
    return errorf("repeats ", shapeStr(repeats), " must have one value per axis of ", shapeStr(in));
  const std::vector<int64_t> inStrides = rowMajorStrides(in);
  StridedView v;
  for (size_t i = 0; i < in.size(); ++i) {
    if (repeats[i] < 0)
      return errorf("repeat ", repeats[i], " of axis ", i, " is negative");
    v.out.push_back(in[i] * repeats[i]);
    v.dims.insert(v.dims.end(), {repeats[i], in[i]});
    v.strides.insert(v.strides.end(), {0, inStrides[i]});
  }
  return v;
}

} // namespace pipec
