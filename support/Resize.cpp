//===- support/Resize.cpp - The geometry of Resize and Upsample -----------===//
//
// See support/Resize.h. The coordinate transformations and the cubic
// coefficients follow the ONNX operator specification of Resize (opsets 10,
// 11, 13, 18, 19) and Upsample (7, 9).
//
//===----------------------------------------------------------------------===//
#include "support/Resize.h"

#include "support/Format.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace pipec {

namespace {

/// The attributes each version of the op defines; any other is refused.
Status checkAttributes(const ResizeArgs &a, bool legacy) {
  std::set<std::string> known = {"mode"};
  if (a.opType == "Upsample" && a.opset < 9)
    known.insert("scales");
  if (!legacy)
    known.insert({"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                  "extrapolation_value", "nearest_mode"});
  if (!legacy && a.opset >= 18)
    known.insert({"antialias", "axes", "keep_aspect_ratio_policy"});
  for (const auto &kv : *a.attrs)
    if (!known.count(kv.first))
      return errorf("attribute '", kv.first, "' is not one of ", a.opType, "-", a.opset, "'s");
  return Status::ok();
}

Expected<std::vector<double>> floatValues(const Tensor &t, const char *what) {
  if (t.dtype() != DType::F32 && t.dtype() != DType::F64)
    return errorf(what, " must be float32 or float64, got ", dtypeName(t.dtype()));
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] = t.getDouble(i);
  return v;
}

bool present(const Tensor *t) { return t && t->numel() > 0; }

/// The input coordinate that output coordinate `o` of axis `ax` samples.
double sourceCoord(const ResizeSpec &s, size_t ax, int64_t o) {
  const double in = static_cast<double>(s.in[ax]), out = s.lengths[ax];
  const double scale = s.scales[ax], x = static_cast<double>(o);
  switch (s.coord) {
  case ResizeCoord::HalfPixel:
    return (x + 0.5) / scale - 0.5;
  case ResizeCoord::HalfPixelSymmetric: {
    const double adjustment = static_cast<double>(s.out[ax]) / out;
    const double offset = in / 2 * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  case ResizeCoord::PytorchHalfPixel:
    return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  case ResizeCoord::AlignCorners:
    return out > 1 ? x * (in - 1) / (out - 1) : 0.0;
  case ResizeCoord::Asymmetric:
    return x / scale;
  case ResizeCoord::TfHalfPixelForNn:
    return (x + 0.5) / scale;
  case ResizeCoord::TfCropAndResize: {
    const double a = s.roiStart[ax], b = s.roiEnd[ax];
    return out > 1 ? a * (in - 1) + x * (b - a) * (in - 1) / (out - 1) : 0.5 * (a + b) * (in - 1);
  }
  }
  return x;
}

int64_t nearestIndex(double x, ResizeNearest m, double scale) {
  const double f = std::floor(x);
  switch (m) {
  case ResizeNearest::RoundPreferFloor:
    return static_cast<int64_t>(x - f == 0.5 ? f : std::round(x));
  case ResizeNearest::RoundPreferCeil:
    return static_cast<int64_t>(x - f == 0.5 ? f + 1 : std::round(x));
  case ResizeNearest::Floor:
    return static_cast<int64_t>(f);
  case ResizeNearest::Ceil:
    return static_cast<int64_t>(std::ceil(x));
  case ResizeNearest::Simple:
    return static_cast<int64_t>(scale < 1 ? std::ceil(x) : f);
  }
  return static_cast<int64_t>(f);
}

/// The cubic convolution kernel with parameter A at distance d.
double cubicKernel(double d, double A) {
  d = std::fabs(d);
  if (d <= 1)
    return ((A + 2) * d - (A + 3)) * d * d + 1;
  if (d < 2)
    return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
  return 0.0;
}

} // namespace

ResizeInputSlots resizeInputSlots(const std::string &opType, int64_t opset) {
  if (opType == "Upsample")
    return opset >= 9 ? ResizeInputSlots{-1, 1, -1} : ResizeInputSlots{};
  if (opset < 11)
    return {-1, 1, -1};
  return {1, 2, 3};
}

Expected<ResizeSpec> resolveResize(const ResizeArgs &a) {
  static const AttrMap kNone;
  const AttrMap &attrs = a.attrs ? *a.attrs : kNone;
  ResizeArgs args = a;
  args.attrs = &attrs;
  const bool upsample = a.opType == "Upsample";
  const bool legacy = upsample || a.opset < 11;
  PIPEC_TRY(checkAttributes(args, legacy));
  const auto rank = static_cast<int64_t>(a.x.size());
  ResizeSpec s;
  s.in = a.x;
  s.out = a.x;
  s.scales.assign(a.x.size(), 1.0);
  for (int64_t d : a.x)
    s.lengths.push_back(static_cast<double>(d));
  s.roiStart.assign(a.x.size(), 0.0);
  s.roiEnd.assign(a.x.size(), 1.0);

  const std::string mode = attrString(attrs, "mode", "nearest");
  if (mode == "nearest")
    s.mode = ResizeMode::Nearest;
  else if (mode == "linear")
    s.mode = ResizeMode::Linear;
  else if (mode == "cubic" && !legacy)
    s.mode = ResizeMode::Cubic;
  else
    return errorf("mode '", mode, "' is not ",
                  legacy ? "nearest or linear" : "nearest, linear or cubic");

  std::vector<int64_t> axes;
  std::string policy = "stretch";
  if (legacy) {
    s.coord = ResizeCoord::Asymmetric;
    s.nearest = ResizeNearest::Simple;
  } else {
    const std::string coord = attrString(attrs, "coordinate_transformation_mode", "half_pixel");
    if (coord == "half_pixel")
      s.coord = ResizeCoord::HalfPixel;
    else if (coord == "half_pixel_symmetric" && a.opset >= 19)
      s.coord = ResizeCoord::HalfPixelSymmetric;
    else if (coord == "pytorch_half_pixel")
      s.coord = ResizeCoord::PytorchHalfPixel;
    else if (coord == "align_corners")
      s.coord = ResizeCoord::AlignCorners;
    else if (coord == "asymmetric")
      s.coord = ResizeCoord::Asymmetric;
    else if (coord == "tf_half_pixel_for_nn")
      s.coord = ResizeCoord::TfHalfPixelForNn;
    else if (coord == "tf_crop_and_resize")
      s.coord = ResizeCoord::TfCropAndResize;
    else if (coord == "half_pixel_symmetric")
      return errorf("coordinate_transformation_mode 'half_pixel_symmetric' exists from opset 19");
    else
      return errorf("coordinate_transformation_mode '", coord,
                    "' is not half_pixel, half_pixel_symmetric, pytorch_half_pixel, "
                    "align_corners, asymmetric, tf_half_pixel_for_nn or tf_crop_and_resize");
    const std::string nearest = attrString(attrs, "nearest_mode", "round_prefer_floor");
    if (nearest == "round_prefer_floor")
      s.nearest = ResizeNearest::RoundPreferFloor;
    else if (nearest == "round_prefer_ceil")
      s.nearest = ResizeNearest::RoundPreferCeil;
    else if (nearest == "floor")
      s.nearest = ResizeNearest::Floor;
    else if (nearest == "ceil")
      s.nearest = ResizeNearest::Ceil;
    else
      return errorf("nearest_mode '", nearest,
                    "' is not round_prefer_floor, round_prefer_ceil, floor or ceil");
    s.cubicA = attrFloat(attrs, "cubic_coeff_a", -0.75f);
    const int64_t exclude = attrInt(attrs, "exclude_outside", 0);
    if (exclude != 0 && exclude != 1)
      return errorf("exclude_outside is ", exclude, ", not 0 or 1");
    s.excludeOutside = exclude == 1;
    s.extrapolation = attrFloat(attrs, "extrapolation_value", 0.0f);
    const int64_t antialias = attrInt(attrs, "antialias", 0);
    if (antialias != 0 && antialias != 1)
      return errorf("antialias is ", antialias, ", not 0 or 1");
    s.antialias = antialias == 1;
    if (attrHas(attrs, "axes")) {
      std::set<int64_t> seen;
      for (int64_t ax : attrInts(attrs, "axes")) {
        if (ax < -rank || ax >= rank)
          return errorf("axis ", ax, " is out of range for rank ", rank);
        ax = ax < 0 ? ax + rank : ax;
        if (!seen.insert(ax).second)
          return errorf("axis ", ax, " is listed twice in axes");
        axes.push_back(ax);
      }
    }
    policy = attrString(attrs, "keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      return errorf("keep_aspect_ratio_policy '", policy,
                    "' is not stretch, not_larger or not_smaller");
  }
  if (!attrHas(attrs, "axes"))
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  const size_t n = axes.size();

  // Scales or sizes: exactly one.
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (upsample && a.opset < 9) {
    const Attribute *attr = attrFind(attrs, "scales");
    if (!attr || attr->kind != Attribute::Kind::Floats)
      return errorf("attribute 'scales' is required before opset 9");
    scales.assign(attr->floats.begin(), attr->floats.end());
  } else {
    const bool hasScales = present(a.scales), hasSizes = present(a.sizes);
    if (hasScales && hasSizes)
      return errorf("scales and sizes are both given; give one of them");
    if (hasScales) {
      PIPEC_ASSIGN(scales, floatValues(*a.scales, "scales"));
    } else if (hasSizes) {
      if (a.sizes->dtype() != DType::I64)
        return errorf("sizes must be int64, got ", dtypeName(a.sizes->dtype()));
      sizes = a.sizes->toInts();
    } else {
      return errorf(legacy ? "scales is required" : "one of scales and sizes is required");
    }
  }
  if (!scales.empty()) {
    if (scales.size() != n)
      return errorf("scales has ", scales.size(), " values for ", n, " axes of rank ", rank);
    for (size_t i = 0; i < n; ++i) {
      const auto ax = static_cast<size_t>(axes[i]);
      const double v = scales[i];
      if (!(v > 0) || !std::isfinite(v))
        return errorf("scale ", v, " of axis ", ax, " is not positive");
      if (upsample && v < 1)
        return errorf("scale ", v, " of axis ", ax, " is below 1 (Upsample only enlarges)");
      s.scales[ax] = v;
      s.lengths[ax] = static_cast<double>(a.x[ax]) * v;
      s.out[ax] = static_cast<int64_t>(std::floor(s.lengths[ax]));
    }
  } else {
    if (sizes.size() != n)
      return errorf("sizes has ", sizes.size(), " values for ", n, " axes of rank ", rank);
    for (size_t i = 0; i < n; ++i)
      if (sizes[i] < 0)
        return errorf("size ", sizes[i], " of axis ", axes[i], " is negative");
      else if (sizes[i] > 0 && a.x[static_cast<size_t>(axes[i])] == 0)
        return errorf("axis ", axes[i], " has no elements to resize to ", sizes[i]);
    auto ratio = [&](size_t i) {
      const int64_t in = a.x[static_cast<size_t>(axes[i])];
      return in > 0 ? static_cast<double>(sizes[i]) / static_cast<double>(in) : 1.0;
    };
    if (policy == "stretch") {
      for (size_t i = 0; i < n; ++i) {
        const auto ax = static_cast<size_t>(axes[i]);
        s.out[ax] = sizes[i];
        s.lengths[ax] = static_cast<double>(sizes[i]);
        s.scales[ax] = ratio(i);
      }
    } else {
      double common = n ? ratio(0) : 1.0;
      for (size_t i = 1; i < n; ++i)
        common = policy == "not_larger" ? std::min(common, ratio(i)) : std::max(common, ratio(i));
      for (size_t i = 0; i < n; ++i) {
        const auto ax = static_cast<size_t>(axes[i]);
        s.scales[ax] = common;
        s.lengths[ax] = common * static_cast<double>(a.x[ax]);
        s.out[ax] = static_cast<int64_t>(std::floor(s.lengths[ax] + 0.5));
      }
    }
  }

  if (s.coord == ResizeCoord::TfCropAndResize) {
    if (!present(a.roi))
      return errorf("coordinate_transformation_mode 'tf_crop_and_resize' needs the roi input");
    PIPEC_ASSIGN(std::vector<double> roi, floatValues(*a.roi, "roi"));
    if (roi.size() != 2 * n)
      return errorf("roi has ", roi.size(), " values, expected ", 2 * n,
                    " (start and end of each of ", n, " axes)");
    for (size_t i = 0; i < n; ++i) {
      s.roiStart[static_cast<size_t>(axes[i])] = roi[i];
      s.roiEnd[static_cast<size_t>(axes[i])] = roi[i + n];
    }
  }
  return s;
}

bool ResizeTaps::anyOutside() const {
  return std::any_of(outside.begin(), outside.end(), [](uint8_t o) { return o != 0; });
}

bool ResizeTaps::identity() const {
  if (inSize != outSize || anyOutside())
    return false;
  for (int64_t o = 0; o < outSize; ++o)
    if (start[o + 1] - start[o] != 1 || idx[start[o]] != o || w[start[o]] != 1.0)
      return false;
  return true;
}

ResizeTaps ResizeTaps::transposed() const {
  ResizeTaps t;
  t.inSize = outSize;
  t.outSize = inSize;
  t.start.assign(static_cast<size_t>(inSize + 1), 0);
  for (int64_t i : idx)
    ++t.start[i + 1];
  for (int64_t i = 0; i < inSize; ++i)
    t.start[i + 1] += t.start[i];
  t.idx.resize(idx.size());
  t.w.resize(w.size());
  std::vector<int64_t> fill(t.start.begin(), t.start.end() - 1);
  for (int64_t o = 0; o < outSize; ++o)
    for (int64_t k = start[o]; k < start[o + 1]; ++k) {
      const int64_t pos = fill[idx[k]]++;
      t.idx[pos] = o;
      t.w[pos] = w[k];
    }
  t.outside.assign(static_cast<size_t>(inSize), 0);
  return t;
}

ResizeTaps resizeAxisTaps(const ResizeSpec &s, size_t ax) {
  ResizeTaps t;
  const int64_t in = s.in[ax], out = s.out[ax];
  t.inSize = in;
  t.outSize = out;
  t.start.reserve(static_cast<size_t>(out + 1));
  t.start.push_back(0);
  t.outside.assign(static_cast<size_t>(out), 0);
  const double scale = s.scales[ax];
  const bool stretch = s.antialias && scale < 1 && s.mode != ResizeMode::Nearest;
  auto clampIndex = [&](int64_t j) { return std::clamp<int64_t>(j, 0, in - 1); };
  std::vector<std::pair<int64_t, double>> taps;
  for (int64_t o = 0; o < out; ++o) {
    taps.clear();
    const double x = sourceCoord(s, ax, o);
    if (in == 0 ||
        (s.coord == ResizeCoord::TfCropAndResize && (x < 0 || x > static_cast<double>(in - 1)))) {
      t.outside[o] = 1;
    } else if (s.mode == ResizeMode::Nearest) {
      taps.push_back({clampIndex(nearestIndex(x, s.nearest, scale)), 1.0});
    } else if (stretch) {
      // The filter stretched by 1/scale, cut to the input, renormalised.
      const double radius = (s.mode == ResizeMode::Linear ? 1.0 : 2.0) / scale;
      const auto lo = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(x - radius)));
      const auto hi = std::min<int64_t>(in - 1, static_cast<int64_t>(std::floor(x + radius)));
      double sum = 0;
      for (int64_t j = lo; j <= hi; ++j) {
        const double d = (static_cast<double>(j) - x) * scale;
        const double w = s.mode == ResizeMode::Linear ? std::max(0.0, 1 - std::fabs(d))
                                                      : cubicKernel(d, s.cubicA);
        taps.push_back({j, w});
        sum += w;
      }
      if (sum == 0) {
        taps.assign(1, {clampIndex(static_cast<int64_t>(std::floor(x))), 1.0});
      } else {
        for (auto &tap : taps)
          tap.second /= sum;
      }
    } else if (s.mode == ResizeMode::Linear) {
      const double xc = std::clamp(x, 0.0, static_cast<double>(in - 1));
      const auto i0 = static_cast<int64_t>(std::floor(xc));
      const double r = xc - static_cast<double>(i0);
      taps.push_back({i0, 1 - r});
      taps.push_back({std::min(i0 + 1, in - 1), r});
    } else {
      const auto i0 = static_cast<int64_t>(std::floor(x));
      const double r = x - static_cast<double>(i0), A = s.cubicA;
      double c[4] = {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
                     ((A + 2) * r - (A + 3)) * r * r + 1,
                     ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1,
                     ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A};
      if (s.excludeOutside) {
        double sum = 0;
        for (int k = 0; k < 4; ++k) {
          const int64_t j = i0 - 1 + k;
          if (j < 0 || j >= in)
            c[k] = 0;
          sum += c[k];
        }
        for (double &v : c)
          v /= sum;
      }
      for (int k = 0; k < 4; ++k)
        taps.push_back({clampIndex(i0 - 1 + k), c[k]});
    }
    for (const auto &tap : taps) {
      if (tap.second == 0.0)
        continue;
      t.idx.push_back(tap.first);
      t.w.push_back(tap.second);
    }
    t.start.push_back(static_cast<int64_t>(t.idx.size()));
  }
  return t;
}

namespace {
const char *const kGradOnly[] = {"forward",   "forward_opset", "shape",
                                 "roi_value", "scales_value",  "sizes_value"};
} // namespace

AttrMap resizeGradAttrs(const ResizeArgs &f) {
  AttrMap a = f.attrs ? *f.attrs : AttrMap{};
  a["forward"] = Attribute::ofString(f.opType);
  a["forward_opset"] = Attribute::ofInt(f.opset);
  a["shape"] = Attribute::ofInts(f.x);
  if (present(f.roi))
    a["roi_value"] = Attribute::ofTensor(f.roi->clone());
  if (present(f.scales))
    a["scales_value"] = Attribute::ofTensor(f.scales->clone());
  if (present(f.sizes))
    a["sizes_value"] = Attribute::ofTensor(f.sizes->clone());
  return a;
}

Expected<ResizeGradForward> resizeGradForward(const AttrMap &g) {
  ResizeGradForward f;
  f.opType = attrString(g, "forward", "");
  if (f.opType != "Resize" && f.opType != "Upsample")
    return errorf("attribute 'forward' is '", f.opType, "', not Resize or Upsample");
  f.opset = attrInt(g, "forward_opset", 0);
  const Attribute *shape = attrFind(g, "shape");
  if (!shape || shape->kind != Attribute::Kind::Ints)
    return errorf("attribute 'shape' (X's shape) is required");
  f.x = shape->ints;
  f.attrs = g;
  for (const char *k : kGradOnly)
    f.attrs.erase(k);
  auto tensor = [&](const char *name, Tensor &t) {
    const Attribute *v = attrFind(g, name);
    if (v && v->kind == Attribute::Kind::Tensor)
      t = v->t;
  };
  tensor("roi_value", f.roi);
  tensor("scales_value", f.scales);
  tensor("sizes_value", f.sizes);
  return f;
}

ResizeArgs ResizeGradForward::args() const {
  ResizeArgs a;
  a.opType = opType;
  a.opset = opset;
  a.attrs = &attrs;
  a.x = x;
  a.roi = roi.empty() ? nullptr : &roi;
  a.scales = scales.empty() ? nullptr : &scales;
  a.sizes = sizes.empty() ? nullptr : &sizes;
  return a;
}

} // namespace pipec
