//===- runtime/SessionResident.h - Training state on the devices -*- C++ -*-===//
//
// The Session's resident training state (runtime/SessionResident.cpp):
// private to the session's sources.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Session.h"

#include <memory>
#include <vector>

namespace pipec::runtime {

struct Session::Resident {
  /// Per params_ entry, its buffers on the device that updates it: the
  /// device's copy of the weight, the step's gradient summed there, the
  /// optimizer's state.
  std::vector<kernel::ParamBuffers> params;
  std::vector<std::vector<int>> paramsOf;     ///< per device: its parameters, in order
  std::vector<std::unique_ptr<kernel::ParamUpdater>> updaters; ///< per device, null without parameters
  /// Collective steps: the all-reduced squared sums, as the last local
  /// device saw them.
  std::vector<double> agreedSquares;
  /// A step changed the devices' state since the host's copies were read.
  bool hostStale = false;
};

} // namespace pipec::runtime
