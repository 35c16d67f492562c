//===- runtime/cpu/ElementwiseJit.cpp - Fused elementwise loops with LLVM --===//
#include "runtime/cpu/ElementwiseJit.h"

#include "runtime/cpu/LlvmJit.h"
#include "runtime/cuda/Bodies.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace pipec::cpu {

namespace {

std::string keyOf(const EwProgram &p, const std::vector<uint8_t> &steps) {
  std::string k = p.str() + " steps";
  for (uint8_t s : steps)
    k += s ? " 1" : " 0";
  return k;
}

/// The program's steps on the input values `v` (one per input), each
/// appended to `v`, with no fast-math flags: IEEE arithmetic, nothing
/// contracted, bitwise cuda::body::ewApply. Returns the last.
llvm::Value *emitSteps(llvm::IRBuilder<> &b, const EwProgram &p, std::vector<llvm::Value *> &v) {
  using namespace llvm;
  Value *zero = ConstantFP::get(b.getFloatTy(), 0.0);
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
  return v.back();
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
  b.CreateStore(emitSteps(b, p, v), b.CreateInBoundsGEP(f32, outArg, i));
  Value *next = b.CreateAdd(i, b.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, nArg), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return mod;
}

/// LLVM's O3 pipeline on `m`, with `tm`'s cost model (what lets the CPU
/// loop's vectorizer widen).
void optimize(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

/// The GPU kernel of a program (elementwisePtx): a grid-stride loop,
/// input k read at (i / div[k]) % mod[k], the constants folded in.
std::unique_ptr<llvm::Module> buildKernel(llvm::LLVMContext &ctx, const std::string &name, const EwProgram &p,
                                          const std::vector<int64_t> &div, const std::vector<int64_t> &mod,
                                          int64_t n) {
  using namespace llvm;
  auto mod_ = std::make_unique<Module>(name, ctx);
  mod_->setTargetTriple("nvptx64-nvidia-cuda");
  IRBuilder<> b(ctx);
  Type *f32 = b.getFloatTy(), *i64 = b.getInt64Ty();
  PointerType *f32p = f32->getPointerTo(/*global*/ 1);
  std::vector<Type *> params(static_cast<size_t>(p.numInputs) + 1, f32p);
  FunctionType *fty = FunctionType::get(b.getVoidTy(), params, false);
  Function *fn = Function::Create(fty, Function::ExternalLinkage, name, *mod_);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned k = 0; k < params.size(); ++k)
    fn->addParamAttr(k, k + 1 == params.size() ? llvm::Attribute::NoAlias : llvm::Attribute::ReadOnly);
  mod_->getOrInsertNamedMetadata("nvvm.annotations")
      ->addOperand(MDNode::get(ctx, {ValueAsMetadata::get(fn), MDString::get(ctx, "kernel"),
                                     ConstantAsMetadata::get(b.getInt32(1))}));
  BasicBlock *entry = BasicBlock::Create(ctx, "entry", fn), *loop = BasicBlock::Create(ctx, "loop", fn),
             *exit = BasicBlock::Create(ctx, "exit", fn);
  b.SetInsertPoint(entry);
  auto sreg = [&](Intrinsic::ID id) { return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), i64); };
  Value *first = b.CreateAdd(b.CreateMul(sreg(Intrinsic::nvvm_read_ptx_sreg_ctaid_x),
                                         sreg(Intrinsic::nvvm_read_ptx_sreg_ntid_x)),
                             sreg(Intrinsic::nvvm_read_ptx_sreg_tid_x));
  Value *stride =
      b.CreateMul(sreg(Intrinsic::nvvm_read_ptx_sreg_nctaid_x), sreg(Intrinsic::nvvm_read_ptx_sreg_ntid_x));
  Value *count = b.getInt64(static_cast<uint64_t>(n));
  b.CreateCondBr(b.CreateICmpSLT(first, count), loop, exit);
  b.SetInsertPoint(loop);
  PHINode *i = b.CreatePHI(i64, 2);
  i->addIncoming(first, entry);
  std::vector<Value *> v;
  for (int32_t k = 0; k < p.numInputs; ++k) {
    const int64_t d = div[static_cast<size_t>(k)], m = mod[static_cast<size_t>(k)];
    Value *at = m == 1 ? static_cast<Value *>(b.getInt64(0)) : d == 1 ? i : b.CreateUDiv(i, b.getInt64(d));
    if (m != 1 && m < n)
      at = b.CreateURem(at, b.getInt64(m));
    v.push_back(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, fn->getArg(static_cast<unsigned>(k)), at)));
  }
  b.CreateStore(emitSteps(b, p, v), b.CreateInBoundsGEP(f32, fn->getArg(static_cast<unsigned>(p.numInputs)), i));
  Value *next = b.CreateAdd(i, stride, "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, count), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return mod_;
}

/// LLVM's NVPTX code generator, made once: sm_80 and PTX 7.0 (CUDA 11),
/// which the driver compiles for any later card; default TargetOptions,
/// so nothing is contracted into an FMA and every operation carries .rn.
struct Ptx {
  std::mutex mu;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::string failure;
  /// The PTX made so far, by program, broadcast strides, size and name:
  /// a model's layers repeat their programs, each compiled once.
  std::map<std::string, std::string> made;
};

Ptx &ptx() {
  static Ptx *p = [] {
    auto *r = new Ptx;
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    std::string err;
    const std::string triple = "nvptx64-nvidia-cuda";
    const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
    if (!t) {
      r->failure = err;
      return r;
    }
    r->tm.reset(t->createTargetMachine(triple, "sm_80", "+ptx70", llvm::TargetOptions(), llvm::None, llvm::None,
                                       llvm::CodeGenOpt::Aggressive));
    if (!r->tm)
      r->failure = "LLVM has no NVPTX target machine for sm_80";
    return r;
  }();
  return *p;
}

} // namespace

Expected<std::string> elementwisePtx(const EwProgram &p, const std::vector<int64_t> &div,
                                     const std::vector<int64_t> &mod, int64_t n, const std::string &name) {
  if (div.size() != static_cast<size_t>(p.numInputs) || mod.size() != div.size())
    return errorf("an elementwise kernel of ", p.numInputs, " inputs got ", div.size(), " strides");
  for (size_t k = 0; k < div.size(); ++k)
    if (div[k] < 1 || mod[k] < 1)
      return errorf("an elementwise kernel's input ", k, " has stride ", div[k], " and extent ", mod[k]);
  if (p.steps.empty())
    return errorf("an elementwise kernel needs a program of at least one step");
  Ptx &x = ptx();
  std::lock_guard<std::mutex> lock(x.mu);
  if (!x.failure.empty())
    return errorf("LLVM cannot generate PTX: ", x.failure);
  std::string key = name + "|" + p.str() + "|" + std::to_string(n);
  for (size_t k = 0; k < div.size(); ++k)
    key += "|" + std::to_string(div[k]) + "/" + std::to_string(mod[k]);
  if (auto it = x.made.find(key); it != x.made.end())
    return it->second;
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> mod_ = buildKernel(ctx, name, p, div, mod, n);
  mod_->setDataLayout(x.tm->createDataLayout());
  std::string broken;
  llvm::raw_string_ostream os(broken);
  if (llvm::verifyModule(*mod_, &os))
    return errorf("internal error: the kernel of '", p.str(), "' is invalid LLVM IR: ", os.str());
  optimize(*mod_, *x.tm);
  llvm::SmallString<4096> text;
  llvm::raw_svector_ostream out(text);
  llvm::legacy::PassManager pm;
  if (x.tm->addPassesToEmitFile(pm, out, nullptr, llvm::CGFT_AssemblyFile))
    return errorf("LLVM's NVPTX target cannot emit PTX");
  pm.run(*mod_);
  return x.made.emplace(std::move(key), std::string(text.str())).first->second;
}

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
  optimize(*mod, *j.tm);
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
