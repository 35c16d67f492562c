//===- runtime/cpu/ScheduleJit.cpp - A device's program as native code ----===//
#include "runtime/cpu/ScheduleJit.h"

#include "runtime/cpu/LlvmJit.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Verifier.h>

namespace pipec::cpu {

Expected<CompiledSchedule> compileSchedule(const std::vector<ScheduleCall> &calls, const std::string &name) {
  if (calls.size() > kMaxScheduleCalls)
    return errorf(name, ": ", calls.size(), " calls, more than the ", kMaxScheduleCalls, " compiled at most");
  Jit &j = fastJit();
  std::lock_guard<std::mutex> lock(j.mu);
  if (!j.failure.empty())
    return errorf("LLVM cannot compile for this machine: ", j.failure);
  using namespace llvm;
  auto ctx = std::make_unique<LLVMContext>();
  const std::string fnName = "pipec_schedule_" + std::to_string(j.next++);
  auto mod = std::make_unique<Module>(fnName, *ctx);
  IRBuilder<> b(*ctx);
  Type *i8p = b.getInt8PtrTy(), *i32 = b.getInt32Ty(), *i64 = b.getInt64Ty();
  FunctionType *callee = FunctionType::get(i32, {i8p, i8p, i8p, i8p}, false);
  FunctionType *fty = FunctionType::get(i64, {i8p, i32}, false);
  Function *fn = Function::Create(fty, Function::ExternalLinkage, fnName, *mod);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  Argument *state = fn->getArg(0), *parts = fn->getArg(1);
  auto constPtr = [&](const void *p) {
    return ConstantExpr::getIntToPtr(b.getInt64(reinterpret_cast<uint64_t>(p)), i8p);
  };
  BasicBlock *bb = BasicBlock::Create(*ctx, "entry", fn);
  b.SetInsertPoint(bb);
  // Each call, when its parts meet the run's, then a branch out on a
  // non-zero result; the calls themselves are the interpreter's functions.
  for (size_t k = 0; k < calls.size(); ++k) {
    const ScheduleCall &c = calls[k];
    BasicBlock *next = BasicBlock::Create(*ctx, "", fn);
    if ((c.parts & 3u) != 3u) {
      BasicBlock *doCall = BasicBlock::Create(*ctx, "", fn);
      Value *meets = b.CreateICmpNE(b.CreateAnd(parts, b.getInt32(c.parts)), b.getInt32(0));
      b.CreateCondBr(meets, doCall, next);
      b.SetInsertPoint(doCall);
    }
    Value *target = ConstantExpr::getIntToPtr(b.getInt64(reinterpret_cast<uint64_t>(c.fn)), callee->getPointerTo());
    Value *r = b.CreateCall(callee, target, {state, constPtr(c.a), constPtr(c.b), constPtr(c.c)});
    BasicBlock *fail = BasicBlock::Create(*ctx, "", fn);
    b.CreateCondBr(b.CreateICmpNE(r, b.getInt32(0)), fail, next);
    b.SetInsertPoint(fail);
    b.CreateRet(b.getInt64(static_cast<uint64_t>(k) + 1));
    b.SetInsertPoint(next);
  }
  b.CreateRet(b.getInt64(0));
  std::string broken;
  raw_string_ostream os(broken);
  if (verifyModule(*mod, &os))
    return errorf("internal error: the schedule of ", name, " is invalid LLVM IR: ", os.str());
  mod->setDataLayout(j.tm->createDataLayout());
  mod->setTargetTriple(j.tm->getTargetTriple().str());
  // No IR optimization: the code is already the calls, in order.
  if (llvm::Error e = j.lljit->addIRModule(orc::ThreadSafeModule(std::move(mod), std::move(ctx))))
    return errorf("LLVM could not compile the schedule of ", name, ": ", errorText(std::move(e)));
  auto sym = j.lljit->lookup(fnName);
  if (!sym)
    return errorf("LLVM could not compile the schedule of ", name, ": ", errorText(sym.takeError()));
  return reinterpret_cast<CompiledSchedule>(sym->getAddress());
}

} // namespace pipec::cpu
