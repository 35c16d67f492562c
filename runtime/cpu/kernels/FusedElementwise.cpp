//===- runtime/cpu/kernels/FusedElementwise.cpp - pipec:FusedElementwise --===//
//
// One loop over the output for a chain or tree of elementwise nodes that
// fuse-elementwise (passes/Fusion.cpp) merged: the node's `program`
// (support/ElementwiseProgram.h) over f32 inputs that broadcast to the
// output, each in one of the ways a loop can read without index
// arithmetic: the whole output's shape, one value, or one contiguous run
// of the output's axes (a bias over the last axis, a per-row value). The
// output is cut into rows of its last axis (one row where every input is
// whole or one value); in a row each input is either contiguous or one
// value, which is what the generated loop (runtime/cpu/ElementwiseJit.h)
// takes. Rows run as parallel tasks; elements are independent, so the
// result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ElementwiseJit.h"
#include "runtime/cpu/kernels/ElementwiseCommon.h"

namespace pipec::cpu {

namespace {
using namespace ew;

class FusedElementwiseKernel final : public Kernel {
public:
  FusedElementwiseKernel(EwProgram p, EwLayout layout, EwLoop loop)
      : p_(std::move(p)), l_(std::move(layout)), loop_(loop) {
    for (const EwLayout::Input &in : l_.inputs)
      steps_.push_back(in.step);
  }

  Status run(ExecContext &, const void *const *in, void *const *out) override {
    float *y = static_cast<float *>(out[0]);
    const size_t k = l_.inputs.size();
    // Tasks of whole rows, about 16K elements each.
    const int64_t perTask = std::max<int64_t>(1, 16384 / std::max<int64_t>(l_.rowLen, 1));
    const int64_t tasks = (l_.rows + perTask - 1) / perTask;
    parallelTasks(tasks, l_.rows * l_.rowLen, [&](int64_t t) {
      const float *ptr[64];
      for (int64_t r = t * perTask; r < std::min(l_.rows, (t + 1) * perTask); ++r) {
        const int64_t first = r * l_.rowLen;
        for (size_t i = 0; i < k; ++i)
          ptr[i] = static_cast<const float *>(in[i]) + (first / l_.inputs[i].div) % l_.inputs[i].mod;
        if (loop_)
          loop_(ptr, y + first, l_.rowLen);
        else
          interpretElementwiseLoop(p_, steps_.data(), ptr, y + first, l_.rowLen);
      }
    });
    return Status::ok();
  }

private:
  EwProgram p_;
  EwLayout l_;
  EwLoop loop_; ///< null: interpreted
  std::vector<uint8_t> steps_;
};

} // namespace

Expected<KernelPtr> makeFusedElementwiseKernel(const OpDesc &d) {
  auto decoded = ewProgramOf(d.attrs, d.inputs.size());
  if (!decoded || d.outputs.size() != 1)
    return errorf(d.where(), ": ", decoded ? "needs one output" : decoded.status().message());
  EwProgram p = *decoded;
  const TensorDesc &y = d.outputs[0];
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorDesc &x : d.inputs) {
    if (x.dtype != DType::F32)
      return errorf(d.where(), ": input ", x.str(), " is not f32");
    shapes.emplace_back(x.shape.begin(), x.shape.end());
  }
  if (y.dtype != DType::F32)
    return errorf(d.where(), ": the output must be f32, it is ", y.str());
  auto layout = ewLoopLayout(shapes, std::vector<int64_t>(y.shape.begin(), y.shape.end()));
  if (!layout)
    return errorf(d.where(), ": ", layout.status().message(), " (inputs to ", y.str(), ")");
  EwLoop loop = nullptr;
  if (codegenEnabled()) {
    std::vector<uint8_t> steps;
    for (const EwLayout::Input &in : layout->inputs)
      steps.push_back(in.step);
    auto compiled = compileElementwiseLoop(p, steps);
    if (!compiled)
      return errorf(d.where(), ": ", compiled.status().message());
    loop = *compiled;
  }
  return KernelPtr(new FusedElementwiseKernel(std::move(p), std::move(*layout), loop));
}

} // namespace pipec::cpu
