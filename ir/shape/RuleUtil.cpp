//===- ir/shape/RuleUtil.cpp - Helpers shared by the shape rules ----------===//
#include "ir/shape/RuleUtil.h"
#include "support/FusedOps.h"

#include <algorithm>

namespace pipec::ir::shape {

std::string inputLabel(const ShapeContext &ctx, size_t i) {
  const Value *v = ctx.node().input(i);
  return v ? cat("input ", i, " '", v->name(), "'") : cat("input ", i);
}

Status expectRank(const ShapeContext &ctx, size_t i, int64_t rank) {
  const TensorDesc &t = ctx.inputType(i);
  if (t.rank() != rank)
    return ctx.error(cat(inputLabel(ctx, i), " must have rank ", rank, ", got ", t.str()));
  return Status::ok();
}

Status expectMinRank(const ShapeContext &ctx, size_t i, int64_t rank) {
  const TensorDesc &t = ctx.inputType(i);
  if (t.rank() < rank)
    return ctx.error(cat(inputLabel(ctx, i), " must have rank ", rank, " or more, got ", t.str()));
  return Status::ok();
}

Expected<DType> expectProductDType(const ShapeContext &ctx, const std::vector<size_t> &others) {
  auto t = productResultType(ctx.inputType(0).dtype, ctx.inputType(1).dtype, ctx.attrs());
  if (!t)
    return ctx.error(t.status().message());
  for (size_t i : others)
    if (ctx.hasInput(i) && ctx.inputType(i).dtype != *t)
      return ctx.error(cat(inputLabel(ctx, i), " has element type ", dtypeName(ctx.inputType(i).dtype),
                           " but the product gives ", dtypeName(*t)));
  return *t;
}

Status expectSameDType(const ShapeContext &ctx, const std::vector<size_t> &idx) {
  const size_t *first = nullptr;
  for (const size_t &i : idx) {
    if (!ctx.hasInput(i))
      continue;
    if (!first) {
      first = &i;
      continue;
    }
    DType a = ctx.inputType(*first).dtype, b = ctx.inputType(i).dtype;
    if (a != b)
      return ctx.error(cat(inputLabel(ctx, i), " has element type ", dtypeName(b), " but ",
                           inputLabel(ctx, *first), " has ", dtypeName(a)));
  }
  return Status::ok();
}

Status expectDType(const ShapeContext &ctx, size_t i, DType t) {
  DType got = ctx.inputType(i).dtype;
  if (got != t)
    return ctx.error(cat(inputLabel(ctx, i), " must have element type ", dtypeName(t), ", got ",
                         dtypeName(got)));
  return Status::ok();
}

Status expectIndexDType(const ShapeContext &ctx, size_t i) {
  DType got = ctx.inputType(i).dtype;
  if (got != DType::I64 && got != DType::I32)
    return ctx.error(
        cat(inputLabel(ctx, i), " must have element type i64 or i32, got ", dtypeName(got)));
  return Status::ok();
}

Expected<const Tensor *> constValue(const ShapeContext &ctx, size_t i) {
  if (!ctx.hasInput(i))
    return ctx.error(cat("input ", i, " is missing; the output shape depends on its value"));
  const Tensor *t = ctx.inputValue(i);
  if (!t)
    return ctx.error(cat("the output shape depends on the value of ", inputLabel(ctx, i),
                         ", which is not a compile-time constant"));
  return t;
}

Expected<std::vector<int64_t>> constInts(const ShapeContext &ctx, size_t i) {
  PIPEC_ASSIGN(const Tensor *t, constValue(ctx, i));
  if (!isInteger(t->dtype()))
    return ctx.error(cat(inputLabel(ctx, i), " must be an integer tensor, got ", t->desc().str()));
  return t->toInts();
}

Expected<Shape> broadcastInputs(const ShapeContext &ctx, const std::vector<size_t> &idx) {
  Shape out;
  std::string names;
  for (size_t i : idx) {
    if (!ctx.hasInput(i))
      continue;
    const Shape &s = ctx.inputType(i).shape;
    auto b = broadcastShapes(out, s);
    if (!b)
      return ctx.error(cat("cannot broadcast ", inputLabel(ctx, i), " of shape ", shapeStr(s),
                           " with ", names, " (shape ", shapeStr(out),
                           "): ", b.status().message()));
    out = b.take();
    names += names.empty() ? inputLabel(ctx, i) : cat(", ", inputLabel(ctx, i));
  }
  return out;
}

Status expectUnidirectional(const ShapeContext &ctx, const Shape &from, const Shape &to,
                            const std::string &what) {
  auto b = broadcastShapes(to, from);
  if (!b || *b != to)
    return ctx.error(
        cat(what, " of shape ", shapeStr(from), " does not broadcast to ", shapeStr(to)));
  return Status::ok();
}

Expected<int64_t> axisFor(const ShapeContext &ctx, int64_t axis, int64_t rank,
                          const std::string &what) {
  auto a = normalizeAxis(axis, rank);
  if (!a)
    return ctx.error(cat(what, ": ", a.status().message()));
  return *a;
}

Expected<std::vector<int64_t>> axesFor(const ShapeContext &ctx, const std::vector<int64_t> &axes,
                                       int64_t rank, const std::string &what) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    PIPEC_ASSIGN(int64_t n, axisFor(ctx, a, rank, what));
    if (std::find(out.begin(), out.end(), n) != out.end())
      return ctx.error(cat(what, " lists axis ", n, " twice"));
    out.push_back(n);
  }
  return out;
}

} // namespace pipec::ir::shape
