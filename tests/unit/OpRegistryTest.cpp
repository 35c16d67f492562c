//===- tests/unit/OpRegistryTest.cpp - ir/Ops.def against the op tables ---===//
//
// ir/Ops.def is the registry: each row says which tables implement its op
// (traits Grad, Fusible, Cpu, Cuda, Expanded) and every op that is not
// expanded into others has a shape rule. These
// tests fail when a table lacks an entry its row promises, when a table has
// an entry the row does not declare, or when an entry names no op at all,
// so that adding an op (docs/adding-an-op.md) cannot leave one table behind.
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"
#include "ir/shape/ShapeRules.h"
#include "passes/autodiff/GradRules.h"
#include "passes/expand/Expand.h"
#include "runtime/cpu/Kernel.h"
#include "support/ElementwiseProgram.h"
#include "support/FusedOps.h"
#if PIPEC_TEST_CUDA_TABLE
#include "runtime/cuda/CudaKernels.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace pipec;

namespace {

/// Qualified names ("Gemm", "pipec:Attention") of the rows with `trait`, or
/// of every row when trait is 0.
std::set<std::string> rowsWith(unsigned trait) {
  std::set<std::string> r;
  for (const ir::OpInfo &op : ir::allOps())
    if (trait == 0 || (op.traits & trait) != 0)
      r.insert(op.qualifiedName());
  return r;
}

std::set<std::string> toSet(const std::vector<std::string> &v) { return {v.begin(), v.end()}; }

/// Reports, in one failure each, the names in `want` missing from `have`
/// and those in `have` that `want` lacks.
void expectSameOps(const std::set<std::string> &want, const std::set<std::string> &have,
                   const std::string &table, const std::string &trait) {
  const std::set<std::string> all = rowsWith(0);
  const std::string declared = trait.empty() ? "declares " : "marks ";
  for (const std::string &op : want)
    EXPECT_TRUE(have.count(op)) << "ir/Ops.def " << declared << op << (trait.empty() ? "" : " " + trait)
                                << ", but " << table << " has no entry for it";
  for (const std::string &op : have) {
    if (!all.count(op))
      ADD_FAILURE() << table << " has an entry for " << op << ", which is no op of ir/Ops.def";
    else if (!want.count(op))
      ADD_FAILURE() << table << " has an entry for " << op << ", but ir/Ops.def's row lacks " << trait;
  }
}

} // namespace

TEST(OpRegistry, NamesAreUniqueAndArityConsistent) {
  std::set<std::string> seen;
  for (const ir::OpInfo &op : ir::allOps()) {
    EXPECT_TRUE(seen.insert(op.qualifiedName()).second) << op.qualifiedName() << " is declared twice";
    EXPECT_GE(op.minInputs, 0) << op.name;
    EXPECT_TRUE(op.maxInputs < 0 || op.maxInputs >= op.minInputs) << op.name;
    EXPECT_GE(op.minOutputs, 1) << op.name;
    EXPECT_TRUE(op.maxOutputs < 0 || op.maxOutputs >= op.minOutputs) << op.name;
    const int cost = op.has(ir::op::CostMovement) + op.has(ir::op::CostTranscendental) +
                     op.has(ir::op::CostNormalization);
    EXPECT_LE(cost, 1) << op.name << " has more than one cost class";
    EXPECT_TRUE(!op.has(ir::op::View) || op.has(ir::op::CostMovement))
        << op.name << " is a view but counted as arithmetic";
  }
}

TEST(OpRegistry, EveryOpHasAShapeRule) {
  std::set<std::string> typed = rowsWith(0);
  for (const std::string &op : rowsWith(ir::op::Expanded))
    typed.erase(op);
  expectSameOps(typed, toSet(ir::shapeRuleOps()), "ir/shape/ShapeRules.cpp", "");
}

TEST(OpRegistry, ExpansionsMatchTheExpandedTrait) {
  expectSameOps(rowsWith(ir::op::Expanded), toSet(passes::expand::expansionOps()),
                "passes/expand/Expand.cpp", "Expanded");
  // An expanded op is replaced before anything else sees it: it has nothing
  // of its own.
  for (const ir::OpInfo &op : ir::allOps()) {
    if (op.has(ir::op::Expanded)) {
      EXPECT_EQ(op.traits, unsigned(ir::op::Expanded))
          << op.qualifiedName() << " is expanded but also claims a kernel, gradient or cost class";
    }
  }
}

TEST(OpRegistry, GradientRulesMatchTheGradTrait) {
  expectSameOps(rowsWith(ir::op::Grad), toSet(passes::autodiff::gradRuleOps()),
                "passes/autodiff/GradRules.cpp", "Grad");
  // And the lookup autodiff uses agrees with the listing.
  for (const ir::OpInfo &op : ir::allOps())
    EXPECT_EQ(passes::autodiff::findGradRule(op.domain, op.name) != nullptr, op.has(ir::op::Grad))
        << op.qualifiedName();
}

TEST(OpRegistry, CpuKernelsMatchTheCpuTrait) {
  expectSameOps(rowsWith(ir::op::Cpu), toSet(cpu::kernelOpNames()), "runtime/cpu/KernelTable.def", "Cpu");
  for (const ir::OpInfo &op : ir::allOps())
    EXPECT_EQ(cpu::hasKernel(std::string(op.domain), std::string(op.name)), op.has(ir::op::Cpu))
        << op.qualifiedName();
}

TEST(OpRegistry, CudaKernelsMatchTheCudaTrait) {
#if PIPEC_TEST_CUDA_TABLE
  // The table is host code: this needs the CUDA backend built, not a GPU.
  expectSameOps(rowsWith(ir::op::Cuda), toSet(cuda::kernelOpNames()), "runtime/cuda/CudaKernels.cpp", "Cuda");
#else
  GTEST_SKIP() << "built without the CUDA backend (-DPIPEC_CUDA=OFF or no toolkit): its kernel table "
                  "is not linked";
#endif
}

// The CUDA table's type check (what the emulated GPU refuses by, too)
// takes the mixed-precision pass's products: 16-bit operands, or one an f32
// weight, an f32 bias and result; and refuses 16-bit operands elsewhere.
TEST(OpRegistry, CudaTypeChecksTakeTheMixedPrecisionProducts) {
#if PIPEC_TEST_CUDA_TABLE
  auto product = [](const char *op, const char *domain, DType a, DType b, bool outputDtype) {
    cpu::OpDesc d;
    d.name = "p";
    d.opType = op;
    d.domain = domain;
    d.opset = 17;
    d.inputs = {{a, {4, 8}}, {b, {8, 3}}, {DType::F32, {3}}};
    d.outputs = {{DType::F32, {4, 3}}};
    if (outputDtype)
      d.attrs[kProductOutputDType] = Attribute::ofInt(static_cast<int64_t>(DType::F32));
    return d;
  };
  for (const char *op : {"Gemm", "FusedGemm", "MatMul", "Conv", "ConvGradWeight"}) {
    const char *domain = std::string(op) == "FusedGemm" || std::string(op) == "ConvGradWeight" ? "pipec" : "";
    for (DType t : {DType::BF16, DType::F16}) {
      EXPECT_TRUE(cuda::checkKernelTypes(product(op, domain, t, t, true)).isOk()) << op;
      EXPECT_TRUE(cuda::checkKernelTypes(product(op, domain, t, DType::F32, true)).isOk()) << op;
      EXPECT_TRUE(cuda::checkKernelTypes(product(op, domain, DType::F32, t, true)).isOk()) << op;
      // ONNX's rule without output_dtype: the GPU's are f32 products.
      EXPECT_FALSE(cuda::checkKernelTypes(product(op, domain, t, t, false)).isOk()) << op;
      cpu::OpDesc halfBias = product(op, domain, t, t, true);
      halfBias.inputs[2].dtype = t;
      EXPECT_FALSE(cuda::checkKernelTypes(halfBias).isOk()) << op;
      cpu::OpDesc halfOut = product(op, domain, t, t, true);
      halfOut.outputs[0].dtype = t;
      EXPECT_FALSE(cuda::checkKernelTypes(halfOut).isOk()) << op;
    }
    EXPECT_FALSE(cuda::checkKernelTypes(product(op, domain, DType::BF16, DType::F16, true)).isOk()) << op;
    EXPECT_TRUE(cuda::checkKernelTypes(product(op, domain, DType::F32, DType::F32, false)).isOk()) << op;
  }
  // Einsum reads f32 copies (passes/MixedPrecision.cpp): its kernel is f32.
  cpu::OpDesc einsum = product("Einsum", "", DType::BF16, DType::BF16, false);
  const Status s = cuda::checkKernelTypes(einsum);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("float32 only"), std::string::npos) << s.message();
  cpu::OpDesc none = product("NoSuchOp", "", DType::F32, DType::F32, false);
  EXPECT_NE(cuda::checkKernelTypes(none).message().find("has no CUDA kernel"), std::string::npos);
#else
  GTEST_SKIP() << "built without the CUDA backend: its kernel table is not linked";
#endif
}

// Every op the CPU runs has a CUDA kernel, or is listed here: a CPU op added
// without a CUDA kernel, or a CUDA kernel added without taking its op off
// this list, fails. The ops still to come (none since issue 39's cuDNN
// convolutions, norms and pools) and those that stay CPU-only, each with its
// reason.
TEST(OpRegistry, EveryCpuOpHasACudaKernelOrIsListed) {
  // Every CPU op has a CUDA kernel (2026-11-28). A new CPU op without one
  // is listed here until it has, or as CPU-only with the reason.
  const std::set<std::string> notYet = {};
  const std::set<std::string> cpuOnly = {};
  std::set<std::string> missing;
  for (const ir::OpInfo &op : ir::allOps())
    if (op.has(ir::op::Cpu) && !op.has(ir::op::Cuda))
      missing.insert(op.qualifiedName());
  std::set<std::string> listed = notYet;
  listed.insert(cpuOnly.begin(), cpuOnly.end());
  for (const std::string &op : missing)
    EXPECT_TRUE(listed.count(op)) << op << " runs on the CPU but has no CUDA kernel (runtime/cuda/kernels/) and is "
                                           "not listed as still to come or CPU-only";
  for (const std::string &op : listed)
    EXPECT_TRUE(missing.count(op)) << op << " is listed as without a CUDA kernel but has one (or is no CPU op): "
                                           "take it off the list";
}

TEST(OpRegistry, FusibleOpsAreTheElementwiseProgramsOps) {
  std::set<std::string> programOps;
  for (const ir::OpInfo &op : ir::allOps()) {
    EwOp e;
    if (ewOpOf(op.domain, op.name, e))
      programOps.insert(op.qualifiedName());
  }
  // Every EwOp is spelled as some row's op.
  for (int32_t i = 0; i < kEwOpCount; ++i) {
    const auto e = static_cast<EwOp>(i);
    const std::string name = ewOpName(e);
    EXPECT_TRUE(programOps.count(name) || programOps.count("pipec:" + name))
        << "support/ElementwiseProgram.h's " << name << " is no op of ir/Ops.def";
  }
  expectSameOps(rowsWith(ir::op::Fusible), programOps, "support/ElementwiseProgram.h", "Fusible");
}

TEST(OpRegistry, ViewsAreTheReshapes) {
  // ir::isView decides by the View trait; the arena planner aliases their
  // bytes. Only ops whose output is their input relabelled may carry it.
  const std::set<std::string> reshapes = {"Flatten", "Reshape", "Squeeze", "Unsqueeze"};
  EXPECT_EQ(rowsWith(ir::op::View), reshapes);
}
