//===- runtime/cuda/CudaKernels.cpp - The CUDA kernel table ---------------===//
//
// The explicit table of runtime/cuda/kernels/KernelTable.def: no static
// self-registration. Each row names its factory and the element types its
// kernel takes, checked here before the factory runs.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaKernels.h"

#include "runtime/cuda/kernels/CudaCommon.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"

#include <algorithm>

namespace pipec::cuda {

#define PIPEC_CUDA_KERNEL(Domain, OpType, Factory, Types) Expected<KernelPtr> Factory(const OpDesc &);
#include "runtime/cuda/kernels/KernelTable.def"

namespace {

enum class Types { F32, F32Axes, F32BoolMask, F32Attention, F32Product, Own };

struct Entry {
  const char *domain;
  const char *opType;
  Expected<KernelPtr> (*factory)(const OpDesc &);
  Types types;
};

const Entry kKernels[] = {
#define PIPEC_CUDA_KERNEL(Domain, OpType, Factory, T) {Domain, #OpType, &Factory, Types::T},
#include "runtime/cuda/kernels/KernelTable.def"
};

const Entry *find(const std::string &domain, const std::string &opType) {
  const std::string d = domain == "ai.onnx" ? "" : domain;
  for (const Entry &e : kKernels)
    if (d == e.domain && opType == e.opType)
      return &e;
  return nullptr;
}

Status noKernel(const OpDesc &d) {
  return errorf("node '", d.name, "' (op type '", d.opType, "', domain ", d.domain.empty() ? "ai.onnx" : d.domain,
                ", opset ", d.opset, ") has no CUDA kernel");
}

Status checkTypes(const OpDesc &d, Types t) {
  switch (t) {
  case Types::F32: return needF32(d);
  case Types::F32Axes: return needF32(d, d.hasInput(1) ? 1 : -1);
  case Types::F32BoolMask: return needF32(d, 1, DType::Bool);
  case Types::F32Attention:
    return attrString(d.attrs, "mask", "none") == "bool" ? needF32(d, 3, DType::Bool) : needF32(d);
  case Types::F32Product: {
    if (!cpu::linalgIsHalfProduct(d))
      return needF32(d);
    // The mixed-precision pass's product: valid where its f32 form (the
    // operands widened, as the kernels run it) takes float32 throughout.
    PIPEC_ASSIGN(OpDesc f32, cpu::linalgWidenedProduct(d));
    return needF32(f32);
  }
  case Types::Own: return Status::ok();
  }
  return Status::ok();
}

} // namespace

Status checkKernelTypes(const OpDesc &d) {
  const Entry *e = find(d.domain, d.opType);
  if (!e)
    return noKernel(d);
  return checkTypes(d, e->types);
}

Expected<KernelPtr> createKernel(const OpDesc &d) {
  const Entry *e = find(d.domain, d.opType);
  if (!e)
    return noKernel(d);
  PIPEC_TRY(checkTypes(d, e->types));
  return e->factory(d);
}

bool hasKernel(const std::string &domain, const std::string &opType) { return find(domain, opType) != nullptr; }

std::vector<std::string> kernelOpNames() {
  std::vector<std::string> names;
  for (const Entry &e : kKernels)
    names.push_back(std::string(e.domain).empty() ? e.opType : std::string(e.domain) + ":" + e.opType);
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace pipec::cuda
