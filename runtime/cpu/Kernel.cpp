//===- runtime/cpu/Kernel.cpp - Kernel helpers shared by all kernels ------===//
#include "runtime/cpu/Kernel.h"

#include <cstring>

namespace pipec::cpu {

Expected<std::vector<Tensor>> evaluate(const OpDesc &desc,
                                       const std::vector<Tensor> &inputs,
                                       ExecContext ctx) {
  PIPEC_ASSIGN(KernelPtr kernel, createKernel(desc));
  std::vector<Tensor> outputs;
  outputs.reserve(desc.outputs.size());
  for (const TensorDesc &d : desc.outputs)
    outputs.emplace_back(d);
  std::vector<const void *> in(desc.inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size() && i < in.size(); ++i)
    if (!inputs[i].empty())
      in[i] = inputs[i].raw();
  std::vector<void *> out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    out[i] = outputs[i].raw();
  std::vector<unsigned char> workspace(kernel->workspaceBytes() + 64);
  ctx.workspace = workspace.data();
  PIPEC_TRY(kernel->run(ctx, in.data(), out.data()));
  return outputs;
}

} // namespace pipec::cpu
