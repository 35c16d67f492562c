//===- support/TimelineSvg.cpp - A pipeline timeline as SVG ---------------===//
#include "support/TimelineSvg.h"

#include "support/Format.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace pipec {

std::string timelineSvg(const std::vector<std::vector<TimelineBox>> &devices, double T,
                        const TimelineSvgOptions &opts) {
  std::ostringstream os;
  const int x0 = opts.axisX, plotW = 900, rowH = 26;
  const int K = static_cast<int>(devices.size());
  const int W = x0 + plotW + 10, H = 46 + rowH * K;
  os << "<svg " << opts.attributes << " xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\">\n";
  os << "<text x=\"0\" y=\"14\" font-size=\"12\">" << opts.captionHtml << "</text>\n";
  // A class per kind (for tests and style sheets) and its colour.
  static const std::pair<const char *, const char *> kStyle[] = {
      {"F", "fwd\" fill=\"#6aa84f"},  {"B", "bwd\" fill=\"#3d85c6"},
      {"W", "wgrad\" fill=\"#76a5af"}, {"R", "recompute\" fill=\"#8e7cc3"},
      {"send", "send\" fill=\"#cccccc"}, {"opt", "opt\" fill=\"#e69138"}};
  for (int d = 0; d < K; ++d) {
    const int y = 24 + rowH * d;
    os << "<text x=\"0\" y=\"" << y + 15 << "\" font-size=\"12\">device " << d << "</text>\n";
    for (const TimelineBox &b : devices[static_cast<size_t>(d)]) {
      if (b.kind == "recv" || b.end <= b.start)
        continue;
      const char *style = "opt\" fill=\"#e69138";
      for (const auto &[name, st] : kStyle)
        if (b.kind == name)
          style = st;
      const int x = x0 + scalePixels(b.start, T, plotW), w = std::max(1, scalePixels(b.end - b.start, T, plotW));
      const std::string label = escapeHtml(b.label);
      os << "<rect class=\"" << style << "\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << w
         << "\" height=\"20\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>" << label << " on device " << d
         << ": " << formatSeconds(b.start) << " to " << formatSeconds(b.end) << "</title></rect>\n";
      if (w >= 8 * static_cast<int>(b.label.size()) && b.kind != "send")
        os << "<text x=\"" << x + 2 << "\" y=\"" << y + 14 << "\" font-size=\"10\">" << label << "</text>\n";
    }
  }
  const int ya = 24 + rowH * K + 4;
  os << "<line x1=\"" << x0 << "\" y1=\"" << ya << "\" x2=\"" << x0 + plotW << "\" y2=\"" << ya
     << "\" stroke=\"#000000\"/>\n";
  os << "<text x=\"" << x0 << "\" y=\"" << ya + 14 << "\" font-size=\"10\">0</text>\n";
  os << "<text x=\"" << x0 + plotW - 60 << "\" y=\"" << ya + 14 << "\" font-size=\"10\">"
     << escapeHtml(formatSeconds(T)) << "</text>\n";
  os << "</svg>\n";
  return os.str();
}

} // namespace pipec
