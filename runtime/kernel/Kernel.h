//===- runtime/kernel/Kernel.h - The interface every kernel implements -*- C++ -*-===//
//
// A kernel is prepared once per node from its OpDesc (static shapes, so all
// index arithmetic, broadcast strides and library primitives are set up at
// load time) and then run on raw pointers (in its device's memory) as often
// as the schedule says. Every backend's kernels implement it: the CPU's
// (runtime/cpu/, table runtime/cpu/KernelTable.def) and CUDA's
// (runtime/cuda/); a backend (runtime/kernel/Backend.h) makes them. This
// header knows nothing of the compiler's IR: the runtime and constant
// folding both describe ops with OpDesc.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Attribute.h"
#include "support/Error.h"
#include "support/Format.h"
#include "support/Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipec::kernel {

/// Everything a kernel factory may know about a node.
struct OpDesc {
  std::string name;   ///< node name, for messages
  std::string opType; ///< e.g. "MatMul"
  std::string domain; ///< "" for ai.onnx
  int64_t opset = 0;  ///< opset version of the node's domain
  AttrMap attrs;
  /// One per input slot; dtype Undefined for an omitted optional input.
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  /// Values of inputs known when the kernel is prepared (constants), else
  /// empty tensors. Kernels may read attributes-turned-inputs (Slice starts,
  /// Reshape shape, Clip min...) from here; when an input is not constant
  /// they must read it at run time.
  std::vector<Tensor> constInputs;
  /// Per input: its bytes, at the same address, do not change during a
  /// step (ExecContext::step): a trained parameter, which the optimizer
  /// updates after the step's last backward, or a constant no state update
  /// writes. A kernel may keep something derived from such an input (a
  /// reordered copy of a convolution's weights) from the first run of a
  /// step to the last. Empty or false where unknown.
  std::vector<bool> stepInvariant;

  bool hasInput(size_t i) const {
    return i < inputs.size() && inputs[i].dtype != DType::Undefined;
  }
  bool isStepInvariant(size_t i) const { return i < stepInvariant.size() && stepInvariant[i]; }
  const Tensor *constInput(size_t i) const {
    return i < constInputs.size() && !constInputs[i].empty() ? &constInputs[i]
                                                             : nullptr;
  }
  /// "node 'fc1' (Gemm)": the prefix of kernel error messages.
  std::string where() const {
    return cat("node '", name, "' (", domain.empty() ? "" : domain + ":", opType, ")");
  }
};

/// One device's 16-bit roundings of the step-invariant f32 operands that
/// products under output_dtype read (the weights; support/FusedOps.h):
/// one per weight and type, made by its first reader in a step and shared
/// by the others, so that a step rounds each weight once whatever the
/// number of micro-batches and of products reading it.
class HalfWeights {
public:
  virtual ~HalfWeights() = default;
  /// The `n` values at `src` rounded to `t` (BF16 or F16) to nearest even,
  /// made now unless made from `src` for `step` already.
  virtual const uint16_t *rounded(const float *src, int64_t n, DType t, uint64_t step) = 0;
  /// Bytes the roundings take.
  virtual size_t bytes() const = 0;
};

/// Per-run state passed to every kernel call.
struct ExecContext {
  /// Identifiers for counter-based random number generation (Dropout):
  /// results depend on these, never on the schedule or partition.
  uint64_t seed = 0;
  /// Counts the session's runs (training steps and inference calls alike):
  /// what OpDesc::stepInvariant inputs keep constant.
  uint64_t step = 0;
  uint64_t microBatch = 0;
  /// Training mode (Dropout draws masks, BatchNormalization uses batch
  /// statistics) versus inference.
  bool training = false;
  /// Scratch memory of at least the kernel's workspaceBytes().
  void *workspace = nullptr;
  /// The stream a device's kernels launch on where its backend has one
  /// (a CUDA stream: runtime/cuda/); null for the CPU kernels.
  void *stream = nullptr;
  /// Add the result to what out[0] holds instead of overwriting it; set
  /// only for kernels that canAccumulate() (gradients summed over
  /// micro-batches in place, DeviceExecutor::accumulateInto).
  bool accumulate = false;
  /// Device memory (an int) a GPU kernel sets to nonzero for an error in
  /// its data it cannot return at once (an index out of range), which the
  /// executor reads at the step's end without waiting inside the step;
  /// null: the kernel checks and returns the error itself.
  int *errorFlag = nullptr;
  /// Device memory holding `step` (written on the device's stream before
  /// the step's work), for a kernel whose launch is recorded once (a CUDA
  /// graph) yet depends on the step: it reads the step there (Dropout's
  /// random stream). Null where the backend keeps none (the CPU).
  const uint64_t *deviceStep = nullptr;
  /// The device's shared weight roundings where its backend keeps them
  /// (the CPU's); null: a kernel that needs one keeps its own.
  HalfWeights *halfWeights = nullptr;
};

class Kernel {
public:
  virtual ~Kernel() = default;
  /// `in[i]` is null for an omitted optional input. Outputs never alias
  /// inputs unless the kernel says so.
  virtual Status run(ExecContext &ctx, const void *const *in, void *const *out) = 0;
  virtual size_t workspaceBytes() const { return 0; }
  /// Memory the kernel holds from run to run (a reordered copy of weights,
  /// OpDesc::stepInvariant), outside the arena and the workspace.
  virtual size_t heldBytes() const { return 0; }
  /// Whether run() honours ExecContext::accumulate.
  virtual bool canAccumulate() const { return false; }
  /// Whether the device work one run enqueues, recorded once (a CUDA
  /// graph: Backend::beginRecording), may be replayed at every later step
  /// of the instruction instead of running run() again: it depends only
  /// on the operands' addresses and on the ExecContext fields an
  /// instruction fixes (micro-batch, accumulate, training, workspace,
  /// stream, errorFlag), not on `step`, and run() does nothing on the host
  /// that a later step needs done again. False (the default) keeps a node
  /// and its instruction out of recordings. A kernel drawing random
  /// numbers per step must read the step from ExecContext::deviceStep
  /// there to say true (Dropout's CUDA kernel does).
  virtual bool replayable() const { return false; }
  /// A stable id for the node, used to key random streams.
  uint64_t nodeId = 0;
};

using KernelPtr = std::unique_ptr<Kernel>;
using KernelFactory = Expected<KernelPtr> (*)(const OpDesc &);

} // namespace pipec::kernel
