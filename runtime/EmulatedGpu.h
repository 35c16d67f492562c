//===- runtime/EmulatedGpu.h - A GPU emulated on the CPU --*- C++ -*-===//
//
// A backend that behaves as the CUDA backend does towards the executor and
// the session, on the CPU: its memory is apart from the host's (weights
// are copies; the host reads and writes it only through hostView,
// staging, commit and the copies), its programs are interpreted, and it
// trains residently with the device update's host run
// (runtime/cuda/Update.h). The kernels are the CPU's (so it lives here,
// where the runtime joins the CPU and CUDA backends, not in runtime/cuda/). Tests run the GPU
// path's host side with it on machines without a GPU (SessionOptions::
// emulateGpu); results are bitwise the CPU backend's.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernel/Backend.h"

namespace pipec::runtime {

kernel::BackendPtr makeEmulatedGpuBackend();

} // namespace pipec::runtime
