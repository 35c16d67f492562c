//===- runtime/cpu/KernelTable.cpp - The explicit CPU kernel table --------===//
//
// No static self-registration: the table below is the whole list, built
// from runtime/cpu/KernelTable.def.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernel.h"

#include <algorithm>

namespace pipec::cpu {

#define PIPEC_KERNEL(Domain, OpType, Factory) Expected<KernelPtr> Factory(const OpDesc &);
#include "runtime/cpu/KernelTable.def"

namespace {
struct KernelEntry {
  const char *domain;
  const char *opType;
  KernelFactory factory;
};

const KernelEntry kKernels[] = {
#define PIPEC_KERNEL(Domain, OpType, Factory) {Domain, #OpType, &Factory},
#include "runtime/cpu/KernelTable.def"
};

const KernelEntry *findKernel(const std::string &domain, const std::string &opType) {
  std::string d = domain == "ai.onnx" ? "" : domain;
  for (const KernelEntry &k : kKernels)
    if (d == k.domain && opType == k.opType)
      return &k;
  return nullptr;
}
} // namespace

bool hasKernel(const std::string &domain, const std::string &opType) {
  return findKernel(domain, opType) != nullptr;
}

std::vector<std::string> kernelOpNames() {
  std::vector<std::string> r;
  for (const KernelEntry &k : kKernels)
    r.push_back(std::string(k.domain).empty() ? k.opType
                                              : cat(k.domain, ":", k.opType));
  std::sort(r.begin(), r.end());
  return r;
}

Expected<KernelPtr> createKernel(const OpDesc &desc) {
  const KernelEntry *k = findKernel(desc.domain, desc.opType);
  if (!k)
    return errorf(desc.where(), ": no CPU kernel for op ", desc.opType);
  return k->factory(desc);
}

} // namespace pipec::cpu
