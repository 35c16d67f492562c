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
  /// Per params_ entry, its buffers on the device that updates it (null
  /// where that device is another process's): the device's copy of the
  /// weight, the step's gradient summed over the micro-batches (and the
  /// replicas), the optimizer's state.
  std::vector<kernel::ParamBuffers> params;
  /// Per params_ entry and replica: the gradient that replica's device
  /// sums over its micro-batches (null where the device is another
  /// process's); the updater's holds the sum over the replicas before
  /// the update (params' grad).
  std::vector<std::vector<float *>> grads;
  std::vector<std::vector<int>> paramsOf;     ///< per device: the parameters it updates, in order
  std::vector<std::unique_ptr<kernel::ParamUpdater>> updaters; ///< per device, null without parameters
  /// Data parallelism, per device: two buffers of the largest parameter
  /// it updates (scratchHalf floats each), where another replica's
  /// gradient lands before it is added, and where a later replica's
  /// updater sums from replica 0's.
  std::vector<float *> scratch;
  std::vector<size_t> scratchHalf;
  /// Collective steps: the all-reduced squared sums, as the last local
  /// device saw them.
  std::vector<double> agreedSquares;
  /// A step changed the devices' state since the host's copies were read.
  bool hostStale = false;
};

} // namespace pipec::runtime
