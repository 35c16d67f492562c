//===- ir/shape/Einsum.cpp - Einsum equations -----------------------------===//
//
// Parses an Einsum equation ("bij,bjk->bik", "...ii->...i", "i,i") as numpy
// does: letters label dimensions, "..." stands for the dimensions no letter
// names (broadcast across operands), and without "->" the output lists the
// ellipsis dimensions and then the letters used exactly once, in order of
// their character codes.
//
//===----------------------------------------------------------------------===//
#include "ir/shape/RuleUtil.h"

#include <array>
#include <cctype>

namespace pipec::ir::shape {

namespace {

/// One side of an equation term: its letters, and where "..." sits (-1: no
/// ellipsis), counted in letters before it.
struct Term {
  std::string letters;
  int ellipsisAt = -1;
};

Expected<Term> parseTerm(const ShapeContext &ctx, const std::string &s) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') {
      if (s.compare(i, 3, "...") != 0 || t.ellipsisAt >= 0)
        return ctx.error(cat("bad ellipsis in equation term '", s, "'"));
      t.ellipsisAt = static_cast<int>(t.letters.size());
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(s[i]))) {
      t.letters += s[i];
    } else {
      return ctx.error(cat("unexpected character '", s[i], "' in equation term '", s, "'"));
    }
  }
  return t;
}

} // namespace

Status einsumRule(const ShapeContext &ctx, Outputs &out) {
  std::string eq;
  for (char c : attrString(ctx.attrs(), "equation", ""))
    if (!std::isspace(static_cast<unsigned char>(c)))
      eq += c;
  if (eq.empty())
    return ctx.error("attribute 'equation' is required");
  std::vector<size_t> all;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.hasInput(i))
      return ctx.error(cat("input ", i, " is missing (Einsum has no optional inputs)"));
    all.push_back(i);
  }
  PIPEC_TRY(expectSameDType(ctx, all));

  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t b = 0;;) {
    size_t e = lhs.find(',', b);
    PIPEC_ASSIGN(Term t, parseTerm(ctx, lhs.substr(b, e == std::string::npos ? e : e - b)));
    terms.push_back(std::move(t));
    if (e == std::string::npos)
      break;
    b = e + 1;
  }
  if (terms.size() != ctx.numInputs())
    return ctx.error(cat("equation '", eq, "' has ", terms.size(), " operands, the node has ",
                         ctx.numInputs(), " inputs"));

  // Bind letters to sizes and broadcast the ellipsis dimensions.
  std::array<int64_t, 256> size;
  std::array<int, 256> uses{};
  size.fill(-1);
  Shape ellipsis;
  for (size_t k = 0; k < terms.size(); ++k) {
    const Term &t = terms[k];
    const Shape &s = ctx.inputType(k).shape;
    auto letters = static_cast<int64_t>(t.letters.size());
    auto rank = static_cast<int64_t>(s.size());
    int64_t ellRank = t.ellipsisAt >= 0 ? rank - letters : 0;
    if (ellRank < 0 || (t.ellipsisAt < 0 && rank != letters))
      return ctx.error(cat("equation term ", k, " names ", letters, " dimensions but ",
                           inputLabel(ctx, k), " has shape ", shapeStr(s)));
    for (int64_t j = 0; j < letters; ++j) {
      auto c = static_cast<unsigned char>(t.letters[j]);
      int64_t dim = s[j < t.ellipsisAt || t.ellipsisAt < 0 ? j : j + ellRank];
      ++uses[c];
      if (size[c] < 0 || size[c] == 1)
        size[c] = dim;
      else if (dim != size[c] && dim != 1)
        return ctx.error(cat("equation label '", t.letters[j], "' is ", size[c], " and ", dim, " (",
                             inputLabel(ctx, k), " has shape ", shapeStr(s), ")"));
    }
    if (t.ellipsisAt >= 0) {
      Shape e(s.begin() + t.ellipsisAt, s.begin() + t.ellipsisAt + ellRank);
      auto b = broadcastShapes(ellipsis, e);
      if (!b)
        return ctx.error(cat("the '...' dimensions do not broadcast: ", b.status().message()));
      ellipsis = b.take();
    }
  }

  Shape y;
  if (arrow == std::string::npos) {
    y = ellipsis;
    for (int c = 0; c < 256; ++c)
      if (uses[c] == 1)
        y.push_back(size[c]);
  } else {
    PIPEC_ASSIGN(Term o, parseTerm(ctx, eq.substr(arrow + 2)));
    for (size_t j = 0; j <= o.letters.size(); ++j) {
      if (static_cast<int>(j) == o.ellipsisAt)
        y.insert(y.end(), ellipsis.begin(), ellipsis.end());
      if (j == o.letters.size())
        break;
      auto c = static_cast<unsigned char>(o.letters[j]);
      if (uses[c] == 0)
        return ctx.error(cat("output label '", o.letters[j], "' of equation '", eq,
                             "' names no input dimension"));
      if (o.letters.find(o.letters[j]) != j)
        return ctx.error(cat("output label '", o.letters[j], "' appears twice"));
      y.push_back(size[c]);
    }
  }
  out[0] = {ctx.inputType(0).dtype, std::move(y)};
  return Status::ok();
}

} // namespace pipec::ir::shape
