//===- runtime/cpu/kernels/ConstantOps.h - Outputs known at load -*- C++ -*-===//
//
// Shape, Size, Constant and Range: shapes are static in pipec, so their
// outputs are known when the node is loaded. These compute them (and
// ConstantOfShape's fill value) once, checked against the node's output;
// the CPU kernels (ShapeOps.cpp, Range.cpp) and the CUDA ones
// (runtime/cuda/kernels/DataMovement.cpp) copy or fill from them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/Kernel.h"

namespace pipec::cpu::dm {

/// The whole output of a Shape, Size, Constant or Range node.
Expected<Tensor> constantOutput(const OpDesc &d);
/// Range's output (start + i * delta from constant scalars).
Expected<Tensor> rangeOutput(const OpDesc &d);
/// ConstantOfShape's one-element value (float32 0 by default); its output
/// holds it at every element.
Expected<Tensor> constantOfShapeValue(const OpDesc &d);

} // namespace pipec::cpu::dm
