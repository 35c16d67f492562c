//===- passes/autodiff/Einsum.cpp - Einsum gradient ------------------------===//
//
// For Y = einsum("a,b,...->y", X0, X1, ...), the gradient of operand k is
// another Einsum: dX_k = einsum("y,<the other operands>->a'", dY, ...),
// where a' keeps the labels of X_k that occur in the output or in another
// operand (the contraction over everything else is exactly the chain rule).
// Labels that only X_k has were summed away by the forward; dX_k is
// broadcast along them (Reshape with ones, then Expand). A scalar dY is
// multiplied in afterwards rather than passed as an empty operand. The
// implicit form ("ij,jk") gets numpy's output: the labels used once, in
// character order. Refused, by name: the ellipsis, a label repeated within
// one operand (diagonals), and a label whose sizes differ between operands.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/GradRules.h"

#include <algorithm>
#include <map>

namespace pipec::passes::autodiff {

namespace {

struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

Expected<Equation> parseEquation(GradContext &c) {
  std::string eq;
  for (char ch : attrString(c.attrs(), "equation", ""))
    if (ch != ' ')
      eq += ch;
  if (eq.find("...") != std::string::npos)
    return c.error(cat("the ellipsis in equation '", eq, "' is not differentiated"));
  Equation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  std::map<char, int> uses;
  for (const std::string &t : e.inputs)
    for (char ch : t)
      ++uses[ch];
  if (arrow != std::string::npos) {
    e.output = eq.substr(arrow + 2);
  } else {
    for (const auto &[ch, n] : uses) // std::map: character order
      if (n == 1)
        e.output += ch;
  }
  if (e.inputs.size() != c.node().numInputs())
    return c.error(cat("equation '", eq, "' has ", e.inputs.size(), " operands, the node ",
                       c.node().numInputs(), " inputs"));
  for (const std::string &t : e.inputs) {
    std::string sorted = t;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return c.error(cat("operand '", t, "' of equation '", eq,
                         "' repeats a label (diagonals are not differentiated)"));
  }
  return e;
}

} // namespace

Status einsumGrad(GradContext &c) {
  PIPEC_ASSIGN(Equation e, parseEquation(c));
  const size_t n = e.inputs.size();
  std::map<char, int64_t> sizes;
  for (size_t i = 0; i < n; ++i) {
    const Shape &s = c.input(i)->shape();
    if (s.size() != e.inputs[i].size())
      return c.error(cat("operand ", i, " '", e.inputs[i], "' has rank ", s.size()));
    for (size_t j = 0; j < s.size(); ++j) {
      auto [it, fresh] = sizes.emplace(e.inputs[i][j], s[j]);
      if (!fresh && it->second != s[j])
        return c.error(cat("label '", e.inputs[i][j], "' has sizes ", it->second, " and ", s[j],
                           " (broadcasting labels are not differentiated)"));
    }
  }
  ir::Value *dy = c.outGrad(0);
  for (size_t k = 0; k < n; ++k) {
    if (!c.needsGrad(k))
      continue;
    std::vector<std::string> terms;
    std::vector<ir::Value *> operands;
    if (!e.output.empty()) {
      terms.push_back(e.output);
      operands.push_back(dy);
    }
    std::string others = e.output;
    for (size_t j = 0; j < n; ++j)
      if (j != k) {
        terms.push_back(e.inputs[j]);
        operands.push_back(c.input(j));
        others += e.inputs[j];
      }
    // The labels of X_k that survive; the others are broadcast back.
    std::string target;
    Shape kept;
    for (char ch : e.inputs[k]) {
      const bool live = others.find(ch) != std::string::npos;
      if (live)
        target += ch;
      kept.push_back(live ? sizes[ch] : 1);
    }
    ir::Value *g = dy;
    if (!terms.empty()) {
      std::string eq;
      for (size_t t = 0; t < terms.size(); ++t)
        eq += (t ? "," : "") + terms[t];
      eq += "->" + target;
      PIPEC_ASSIGN(g, c.emit("Einsum", operands, {{"equation", Attribute::ofString(eq)}}));
      if (e.output.empty()) {
        PIPEC_ASSIGN(g, c.mul(g, dy));
      }
    }
    PIPEC_ASSIGN(g, c.reshape(g, kept));
    PIPEC_ASSIGN(g, c.expandTo(g, c.input(k)->shape()));
    c.setGrad(k, g);
  }
  return Status::ok();
}

} // namespace pipec::passes::autodiff
