//===- support/PhaseTimer.h - Wall time of a sequence of phases -*- C++ -*-===//
//
// What `pipec --time-passes` prints besides the passes: the compile's
// phases (training transforms, partition, the parts of plan emission) and
// the writing of the plan directory, each timed from the end of the one
// before.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <iomanip>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace pipec {

class PhaseTimer {
public:
  using Phases = std::vector<std::pair<std::string, double>>;

  /// Ends the phase running since the last call (or construction).
  void done(std::string what) {
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(std::move(what), std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  /// Adds phases timed by someone else, which end now.
  void append(const Phases &more) {
    phases_.insert(phases_.end(), more.begin(), more.end());
    last_ = std::chrono::steady_clock::now();
  }
  const Phases &phases() const { return phases_; }

  /// "title:", a line per phase in milliseconds, and with `total` their sum.
  void print(std::ostream &os, const char *title, bool total) const {
    const auto flags = os.flags();
    os << title << ":\n" << std::fixed << std::setprecision(3);
    double sum = 0;
    for (const auto &[what, sec] : phases_) {
      os << "  " << std::left << std::setw(28) << what << std::right << std::setw(9) << sec * 1e3
         << " ms\n";
      sum += sec;
    }
    if (total)
      os << "  " << std::left << std::setw(28) << "total" << std::right << std::setw(9) << sum * 1e3
         << " ms\n";
    os.flags(flags);
  }

private:
  Phases phases_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

} // namespace pipec
