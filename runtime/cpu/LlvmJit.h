//===- runtime/cpu/LlvmJit.h - The process's LLVM JIT (internal) -*- C++ -*-===//
//
// One ORC LLJIT per process for the host's target machine (capped by
// PIPEC_MAX_CPU_ISA), shared by the
// code generators of runtime/cpu (ElementwiseJit.cpp, ScheduleJit.cpp).
// Internal to pipec_cpu: it includes LLVM's headers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/CpuIsa.h"
#include "runtime/cpu/ElementwiseJit.h"

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/Mangling.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace pipec::cpu {

inline std::string errorText(llvm::Error e) {
  std::string s;
  llvm::handleAllErrors(std::move(e), [&](const llvm::ErrorInfoBase &info) { s += info.message(); });
  return s;
}

/// One JIT for the process, never destroyed (its code stays callable until
/// exit); compiles one at a time.
struct Jit {
  std::mutex mu;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::string target, failure;
  std::map<std::string, EwLoop> loops; ///< compiled elementwise loops by program and steps
  int next = 0;
};

/// A JIT for the host whose code generator runs at `level`.
inline Jit *makeJit(llvm::CodeGenOpt::Level level) {
  auto *r = new Jit;
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) {
    r->failure = errorText(jtmb.takeError());
    return r;
  }
  jtmb->setCodeGenOptLevel(level);
  // The host's CPU and features, less what PIPEC_MAX_CPU_ISA caps
  // (runtime/cpu/CpuIsa.h): "-avx512f" also clears every feature that
  // implies it (BW, DQ, VL, VNNI, BF16, ...).
  if (!cpuHas(CpuIsa::Avx512))
    jtmb->getFeatures().AddFeature("avx512f", false);
  auto tm = jtmb->createTargetMachine();
  if (!tm) {
    r->failure = errorText(tm.takeError());
    return r;
  }
  r->tm = std::move(*tm);
  r->target = r->tm->getTargetTriple().str() + ", CPU " + r->tm->getTargetCPU().str() + ", features " +
              r->tm->getTargetFeatureString().str();
  auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
  if (!lljit) {
    r->failure = errorText(lljit.takeError());
    return r;
  }
  r->lljit = std::move(*lljit);
  // The code generator turns loops that copy or fill into calls of the C
  // library's memcpy, memmove and memset (a program Neg(Neg(x)) is a
  // copy): the JIT resolves those three, and no other symbol of the
  // process, to the process's own.
  llvm::orc::MangleAndInterner mangle(r->lljit->getExecutionSession(), r->lljit->getDataLayout());
  llvm::orc::SymbolMap libc;
  const std::pair<const char *, void *> kLibc[] = {{"memcpy", reinterpret_cast<void *>(&::memcpy)},
                                                   {"memmove", reinterpret_cast<void *>(&::memmove)},
                                                   {"memset", reinterpret_cast<void *>(&::memset)}};
  for (const auto &[name, address] : kLibc)
    libc[mangle(name)] =
        llvm::JITEvaluatedSymbol(llvm::pointerToJITTargetAddress(address), llvm::JITSymbolFlags::Exported);
  if (llvm::Error e = r->lljit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(libc)))) {
    r->failure = errorText(std::move(e));
    r->lljit.reset();
  }
  return r;
}

/// The JIT of the loops: optimizing code generation.
inline Jit &jit() {
  static Jit *j = makeJit(llvm::CodeGenOpt::Aggressive);
  return *j;
}

/// The JIT of the schedules: straight-line calls, nothing to optimize, and
/// thousands of them, so the fast instruction selector, which compiles them
/// several times faster than the loops' level (bench/results/log.md).
inline Jit &fastJit() {
  static Jit *j = makeJit(llvm::CodeGenOpt::None);
  return *j;
}

} // namespace pipec::cpu
