//===- tools/capacity/GptFamily.h - The GPT sample as a layer family -*- C++ -*-===//
//
// samples::buildGpt as a partitioner::LayerFamily for the capacity search
// (tools/capacity/Capacity.h): the generated ONNX model with a loss, imported,
// the pass pipeline run and differentiated, as pipec compiles it for
// training. Its blocks are the forward nodes named "block<l>/...". It lives
// here, not in partitioner/, because it needs the frontend, the samples and
// codegen's pass pipeline, which depend on the partitioner.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tools/capacity/Capacity.h"
#include "passes/MixedPrecision.h"
#include "samples/gen/Models.h"

namespace pipec::capacity {

/// The family of GPTs of `dims` (its `layers` is ignored: the capacity
/// search picks the block counts), its products' operands in `precision`
/// (pipec --precision: passes/MixedPrecision.h).
partitioner::LayerFamily gptFamily(const samples::GptOptions &dims,
                                   passes::Precision precision = passes::Precision::Fp32);

} // namespace pipec::capacity
