//===- support/TimelineSvg.h - A pipeline timeline as SVG ------*- C++ -*-===//
//
// GPipe's figure 2: one row per device, one box per instruction over time
// (F forward, B backward, W weight gradient, R recompute, send, opt the
// optimizer), gaps the bubble. The one renderer of the partition report's
// predicted timeline (codegen/Report.cpp) and of piperun's predicted and
// measured ones (runtime/RunReport.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace pipec {

/// One instruction on a device's row.
struct TimelineBox {
  std::string kind;  ///< F, B, W, R, send, recv (not drawn), opt
  std::string label; ///< e.g. "F3", "opt"
  double start = 0, end = 0;
};

struct TimelineSvgOptions {
  /// The svg element's attributes after "<svg ", e.g. `id="pipeline-timeline"`.
  std::string attributes;
  /// The caption above the rows, as HTML (escaped by the caller).
  std::string captionHtml;
  /// Where the time axis starts, in pixels (room for "device N").
  int axisX = 70;
};

/// The rows of `devices` on the time scale [0, T] (seconds).
std::string timelineSvg(const std::vector<std::vector<TimelineBox>> &devices, double T,
                        const TimelineSvgOptions &opts);

/// Pixels of `v` on a scale where `max` is `width` pixels (0 when max is 0).
inline int scalePixels(double v, double max, int width) {
  return max > 0 ? static_cast<int>(v / max * width + 0.5) : 0;
}

} // namespace pipec
