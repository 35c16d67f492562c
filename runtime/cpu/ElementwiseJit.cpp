//===- runtime/cpu/ElementwiseJit.cpp - Fused elementwise loops with LLVM --===//
#include "runtime/cpu/ElementwiseJit.h"

#include "runtime/cpu/LlvmJit.h"
#include "runtime/cuda/Bodies.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>

#include <cstdlib>
#include <cstring>

namespace pipec::cpu {

namespace {

std::string keyOf(const EwProgram &p, const std::vector<uint8_t> &steps) {
  std::string k = p.str() + " steps";
  for (uint8_t s : steps)
    k += s ? " 1" : " 0";
  return k;
}

/// void name(const float *const *in, float *out, i64 n): the loop.
std::unique_ptr<llvm::Module> buildLoop(llvm::LLVMContext &ctx, const std::string &name, const EwProgram &p,
                                        const std::vector<uint8_t> &steps) {
  using namespace llvm;
  auto mod = std::make_unique<Module>(name, ctx);
  IRBuilder<> b(ctx);
  Type *f32 = b.getFloatTy();
  PointerType *f32p = f32->getPointerTo();
  FunctionType *fty = FunctionType::get(b.getVoidTy(), {f32p->getPointerTo(), f32p, b.getInt64Ty()}, false);
  Function *fn = Function::Create(fty, Function::ExternalLinkage, name, *mod);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  fn->addParamAttr(1, llvm::Attribute::NoAlias); // the output overlaps no input (the arena planner's promise)
  Argument *inArg = fn->getArg(0), *outArg = fn->getArg(1), *nArg = fn->getArg(2);
  BasicBlock *entry = BasicBlock::Create(ctx, "entry", fn), *loop = BasicBlock::Create(ctx, "loop", fn),
             *exit = BasicBlock::Create(ctx, "exit", fn);
  b.SetInsertPoint(entry);
  std::vector<Value *> ptrs, invariant;
  for (int32_t k = 0; k < p.numInputs; ++k) {
    Value *ptr = b.CreateLoad(f32p, b.CreateConstInBoundsGEP1_64(f32p, inArg, static_cast<uint64_t>(k)));
    ptrs.push_back(ptr);
    invariant.push_back(steps[static_cast<size_t>(k)] ? nullptr : b.CreateLoad(f32, ptr));
  }
  b.CreateCondBr(b.CreateICmpSGT(nArg, b.getInt64(0)), loop, exit);
  b.SetInsertPoint(loop);
  PHINode *i = b.CreatePHI(b.getInt64Ty(), 2);
  i->addIncoming(b.getInt64(0), entry);
  std::vector<Value *> v;
  for (int32_t k = 0; k < p.numInputs; ++k)
    v.push_back(invariant[static_cast<size_t>(k)]
                    ? invariant[static_cast<size_t>(k)]
                    : b.CreateLoad(f32, b.CreateInBoundsGEP(f32, ptrs[static_cast<size_t>(k)], i)));
  Value *zero = ConstantFP::get(f32, 0.0);
  for (const EwStep &s : p.steps) {
    Value *a = v[static_cast<size_t>(s.a)], *c = ewArity(s.op) == 2 ? v[static_cast<size_t>(s.b)] : nullptr;
    Value *r = nullptr;
    switch (s.op) {
    case EwOp::Add: r = b.CreateFAdd(a, c); break;
    case EwOp::Sub: r = b.CreateFSub(a, c); break;
    case EwOp::Mul: r = b.CreateFMul(a, c); break;
    case EwOp::Div: r = b.CreateFDiv(a, c); break;
    case EwOp::Neg: r = b.CreateFNeg(a); break;
    case EwOp::Abs: r = b.CreateUnaryIntrinsic(Intrinsic::fabs, a); break;
    case EwOp::Relu: r = b.CreateSelect(b.CreateFCmpOLT(a, zero), zero, a); break;
    case EwOp::Sqrt: r = b.CreateUnaryIntrinsic(Intrinsic::sqrt, a); break;
    case EwOp::ReluGrad: r = b.CreateSelect(b.CreateFCmpOLE(c, zero), zero, a); break;
    }
    v.push_back(r);
  }
  b.CreateStore(v.back(), b.CreateInBoundsGEP(f32, outArg, i));
  Value *next = b.CreateAdd(i, b.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, nArg), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return mod;
}

} // namespace

bool codegenEnabled() {
  static const bool on = [] {
    const char *v = std::getenv("PIPEC_NO_CODEGEN");
    return !v || std::strcmp(v, "0") == 0;
  }();
  return on;
}

std::string codegenTarget() {
  Jit &j = jit();
  return j.failure.empty() ? j.target : "no JIT: " + j.failure;
}

Expected<EwLoop> compileElementwiseLoop(const EwProgram &p, const std::vector<uint8_t> &steps) {
  if (steps.size() != static_cast<size_t>(p.numInputs))
    return errorf("an elementwise loop of ", p.numInputs, " inputs got ", steps.size(), " steps");
  Jit &j = jit();
  std::lock_guard<std::mutex> lock(j.mu);
  if (!j.failure.empty())
    return errorf("LLVM cannot compile for this machine: ", j.failure);
  const std::string key = keyOf(p, steps);
  if (auto it = j.loops.find(key); it != j.loops.end())
    return it->second;
  const std::string name = "pipec_ew_" + std::to_string(j.next++);
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> mod = buildLoop(*ctx, name, p, steps);
  std::string broken;
  llvm::raw_string_ostream os(broken);
  if (llvm::verifyModule(*mod, &os))
    return errorf("internal error: the loop of '", p.str(), "' is invalid LLVM IR: ", os.str());
  mod->setDataLayout(j.tm->createDataLayout());
  mod->setTargetTriple(j.tm->getTargetTriple().str());
  {
    // O3, with the target's cost model (what lets the vectorizer widen).
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(j.tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*mod, mam);
  }
  if (llvm::Error e = j.lljit->addIRModule(llvm::orc::ThreadSafeModule(std::move(mod), std::move(ctx))))
    return errorf("LLVM could not compile the loop of '", p.str(), "': ", errorText(std::move(e)));
  auto sym = j.lljit->lookup(name);
  if (!sym)
    return errorf("LLVM could not compile the loop of '", p.str(), "': ", errorText(sym.takeError()));
  auto fn = reinterpret_cast<EwLoop>(sym->getAddress());
  j.loops.emplace(key, fn);
  return fn;
}

void interpretElementwiseLoop(const EwProgram &p, const uint8_t *steps, const float *const *in, float *out,
                              int64_t n) {
  std::vector<float> v(static_cast<size_t>(p.numInputs) + p.steps.size());
  for (int64_t j = 0; j < n; ++j) {
    for (int32_t k = 0; k < p.numInputs; ++k)
      v[static_cast<size_t>(k)] = in[k][steps[k] ? j : 0];
    size_t at = static_cast<size_t>(p.numInputs);
    for (const EwStep &s : p.steps)
      v[at++] = cuda::body::ewApply(static_cast<int32_t>(s.op), v[static_cast<size_t>(s.a)],
                                    ewArity(s.op) == 2 ? v[static_cast<size_t>(s.b)] : 0.0f);
    out[j] = v.back();
  }
}

} // namespace pipec::cpu
