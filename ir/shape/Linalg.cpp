//===- ir/shape/Linalg.cpp - MatMul and Gemm ------------------------------===//
//
// MatMul follows numpy.matmul: a 1-D operand gains a unit dimension that is
// dropped again from the result, and batch dimensions broadcast. Gemm takes
// 2-D operands with optional transposes and a C that broadcasts
// unidirectionally to (M, N) (optional from opset 11).
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"
#include "support/FusedOps.h"

namespace pipec::ir::shape {

namespace {
/// The result type of the product's operands 0 and 1
/// (support/FusedOps.h: f32 from 16-bit operands under output_dtype).
Expected<DType> resultType(const ShapeContext &ctx) {
  auto t = productResultType(ctx.inputType(0).dtype, ctx.inputType(1).dtype, ctx.attrs());
  if (!t)
    return ctx.error(t.status().message());
  return t;
}
} // namespace

Status matMulRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_ASSIGN(const DType type, resultType(ctx));
  Shape a = ctx.inputType(0).shape, b = ctx.inputType(1).shape;
  if (a.empty() || b.empty())
    return ctx.error(cat("MatMul needs operands of rank 1 or more, got ", ctx.inputType(0).str(),
                         " and ", ctx.inputType(1).str()));
  bool aVector = a.size() == 1, bVector = b.size() == 1;
  if (aVector)
    a.insert(a.begin(), 1);
  if (bVector)
    b.push_back(1);
  int64_t k = a[a.size() - 1], kb = b[b.size() - 2];
  if (k != kb)
    return ctx.error(cat("inner dimensions differ: ", inputLabel(ctx, 0), " ",
                         ctx.inputType(0).str(), " has K = ", k, ", ", inputLabel(ctx, 1), " ",
                         ctx.inputType(1).str(), " has K = ", kb));
  Shape batchA(a.begin(), a.end() - 2), batchB(b.begin(), b.end() - 2);
  auto batch = broadcastShapes(batchA, batchB);
  if (!batch)
    return ctx.error(cat("batch dimensions of ", ctx.inputType(0).str(), " and ",
                         ctx.inputType(1).str(), " do not broadcast: ", batch.status().message()));
  Shape s = batch.take();
  if (!aVector)
    s.push_back(a[a.size() - 2]);
  if (!bVector)
    s.push_back(b.back());
  out[0] = {type, std::move(s)};
  return Status::ok();
}

Status gemmRule(const ShapeContext &ctx, Outputs &out) {
  PIPEC_ASSIGN(const DType type, resultType(ctx));
  if (ctx.hasInput(2) && ctx.inputType(2).dtype != type)
    return ctx.error(cat(inputLabel(ctx, 2), " has element type ", dtypeName(ctx.inputType(2).dtype),
                         " but the product's result has ", dtypeName(type)));
  PIPEC_TRY(expectRank(ctx, 0, 2));
  PIPEC_TRY(expectRank(ctx, 1, 2));
  const Shape &a = ctx.inputType(0).shape, &b = ctx.inputType(1).shape;
  bool transA = attrInt(ctx.attrs(), "transA", 0) != 0;
  bool transB = attrInt(ctx.attrs(), "transB", 0) != 0;
  int64_t m = transA ? a[1] : a[0], ka = transA ? a[0] : a[1];
  int64_t kb = transB ? b[1] : b[0], n = transB ? b[0] : b[1];
  if (ka != kb)
    return ctx.error(cat("inner dimensions differ: A ", shapeStr(a), transA ? " (transposed)" : "",
                         " has K = ", ka, ", B ", shapeStr(b), transB ? " (transposed)" : "",
                         " has K = ", kb));
  Shape y = {m, n};
  if (ctx.hasInput(2)) {
    const Shape &c = ctx.inputType(2).shape;
    if (c.size() > 2)
      return ctx.error(cat("C must have rank 2 or less, got ", shapeStr(c)));
    PIPEC_TRY(expectUnidirectional(ctx, c, y, "C"));
  } else if (ctx.opset() < 11) {
    return ctx.error("input C is required before opset 11");
  }
  out[0] = {type, std::move(y)};
  return Status::ok();
}

} // namespace pipec::ir::shape
