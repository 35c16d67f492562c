//===- support/ElementwiseProgram.h - A fused elementwise node's program -*- C++ -*-===//
//
// What a pipec:FusedElementwise node computes at every element: a
// straight-line program over its inputs, made by the fuse-elementwise pass
// (passes/Fusion.cpp) and carried in the plan as the node's `program`
// attribute, read by the runtime's kernels (runtime/cpu/ElementwiseJit.h
// generates the loop with LLVM; the CUDA kernel and the reference
// interpreter evaluate it per element). The compiler and the runtime share
// this header and nothing else of each other.
//
// Encoding (INTS): [numInputs, op, a, b, op, a, b, ...]. Step k computes
// op(v[a], v[b]) into v[numInputs + k], where v[0 .. numInputs) are the
// inputs (b unused by one-operand ops, 0); every operand names an input
// or an earlier step. The last step is the output. The opcodes are part of
// the plan format: never renumber them.
//
// Every op is one IEEE-754 float32 operation rounded once (or a
// comparison and a select), the same as the unfused node's CPU kernel: a
// fused program gives bitwise the unfused graph's values (a NaN stays a
// NaN; which operand's NaN an instruction passes on, and so its sign, is
// the compiler's operand order, which IEEE 754 leaves open).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/Attribute.h"
#include "support/Error.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipec {

enum class EwOp : int32_t {
  Add = 0,
  Sub = 1,
  Mul = 2,
  Div = 3,
  Neg = 4,
  Abs = 5,
  Relu = 6,     ///< a < 0 ? 0 : a (a NaN passes)
  Sqrt = 7,
  ReluGrad = 8, ///< (dY, Y): Y <= 0 ? 0 : dY
};
inline constexpr int32_t kEwOpCount = 9;

/// The op's operand count (1 or 2).
inline int ewArity(EwOp op) {
  switch (op) {
  case EwOp::Neg:
  case EwOp::Abs:
  case EwOp::Relu:
  case EwOp::Sqrt: return 1;
  default: return 2;
  }
}

inline const char *ewOpName(EwOp op) {
  static const char *kNames[kEwOpCount] = {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "Sqrt", "ReluGrad"};
  const auto i = static_cast<int32_t>(op);
  return i >= 0 && i < kEwOpCount ? kNames[i] : "?";
}

/// The EwOp of an ONNX (domain "") or pipec op, if it has one.
inline bool ewOpOf(std::string_view domain, std::string_view op, EwOp &out) {
  const bool onnx = domain.empty() || domain == "ai.onnx";
  for (int32_t i = 0; i < kEwOpCount; ++i) {
    const auto e = static_cast<EwOp>(i);
    if (op == ewOpName(e) && (e == EwOp::ReluGrad ? domain == "pipec" : onnx)) {
      out = e;
      return true;
    }
  }
  return false;
}

struct EwStep {
  EwOp op = EwOp::Add;
  int32_t a = 0, b = 0;
};

struct EwProgram {
  int32_t numInputs = 0;
  std::vector<EwStep> steps;

  std::vector<int64_t> encode() const {
    std::vector<int64_t> r{numInputs};
    for (const EwStep &s : steps)
      r.insert(r.end(), {static_cast<int64_t>(s.op), s.a, s.b});
    return r;
  }

  /// "i0 i1 Add i2 Mul ...": readable, and a cache key.
  std::string str() const {
    std::string r = "inputs " + std::to_string(numInputs) + ":";
    for (size_t k = 0; k < steps.size(); ++k) {
      const EwStep &s = steps[k];
      r += " v" + std::to_string(numInputs + static_cast<int32_t>(k)) + "=" + ewOpName(s.op) + "(v" +
           std::to_string(s.a) + (ewArity(s.op) == 2 ? ",v" + std::to_string(s.b) : "") + ")";
    }
    return r;
  }

  /// Checks and reads an encoded program (a plan's attribute).
  static Expected<EwProgram> decode(const std::vector<int64_t> &ints) {
    EwProgram p;
    if (ints.empty() || (ints.size() - 1) % 3 != 0 || ints[0] < 1 || ints[0] > 64)
      return errorf("an elementwise program is [numInputs (1-64), op, a, b, ...], got ", ints.size(), " values");
    p.numInputs = static_cast<int32_t>(ints[0]);
    const size_t n = (ints.size() - 1) / 3;
    if (n < 1 || n > 256)
      return errorf("an elementwise program has 1 to 256 steps, got ", n);
    for (size_t k = 0; k < n; ++k) {
      const int64_t op = ints[1 + 3 * k], a = ints[2 + 3 * k], b = ints[3 + 3 * k];
      const int64_t defined = p.numInputs + static_cast<int64_t>(k);
      if (op < 0 || op >= kEwOpCount)
        return errorf("elementwise program step ", k, ": unknown op ", op);
      const EwOp e = static_cast<EwOp>(op);
      if (a < 0 || a >= defined || (ewArity(e) == 2 && (b < 0 || b >= defined)) || (ewArity(e) == 1 && b != 0))
        return errorf("elementwise program step ", k, " (", ewOpName(e), ") reads v", a, ", v", b,
                      "; only v0 .. v", defined - 1, " are defined");
      p.steps.push_back({e, static_cast<int32_t>(a), static_cast<int32_t>(b)});
    }
    return p;
  }
};

/// The program of a pipec:FusedElementwise node with attributes `attrs`
/// and `numInputs` inputs.
inline Expected<EwProgram> ewProgramOf(const AttrMap &attrs, size_t numInputs) {
  auto it = attrs.find("program");
  if (it == attrs.end() || it->second.kind != Attribute::Kind::Ints)
    return errorf("needs the INTS attribute 'program'");
  PIPEC_ASSIGN(EwProgram p, EwProgram::decode(it->second.ints));
  if (static_cast<size_t>(p.numInputs) != numInputs)
    return errorf("the program reads ", p.numInputs, " inputs, the node has ", numInputs);
  return p;
}

/// How the loop of a fused elementwise node reads its inputs: input k's
/// element (i / div) % mod for output element i, and the output cut into
/// rows of rowLen elements in which every input is contiguous (step 1) or
/// one value (step 0).
struct EwLayout {
  struct Input {
    int64_t div = 1, mod = 1;
    uint8_t step = 0;
  };
  std::vector<Input> inputs;
  int64_t rowLen = 0, rows = 0;
};

/// The layout of inputs of shapes `ins` broadcast (numpy, right-aligned)
/// to `out`, or why the loop cannot read one: an input's axes of more
/// than one element must be one contiguous run of the output's (the
/// output's axes of one element do not break a run), and where
/// an input is neither the whole output nor one value, rows of the last
/// axis must see it contiguous or constant.
inline Expected<EwLayout> ewLoopLayout(const std::vector<std::vector<int64_t>> &ins, const std::vector<int64_t> &out) {
  EwLayout l;
  const auto rank = static_cast<int64_t>(out.size());
  int64_t n = 1;
  for (int64_t d : out)
    n *= d;
  bool rows = false;
  for (const std::vector<int64_t> &x : ins) {
    const auto xr = static_cast<int64_t>(x.size());
    if (xr > rank || rank < 1)
      return errorf("an input of rank ", xr, " does not broadcast to rank ", rank);
    int64_t lo = -1, hi = -1;
    for (int64_t a = 0; a < rank; ++a) {
      const int64_t dim = a - (rank - xr) >= 0 ? x[static_cast<size_t>(a - (rank - xr))] : 1;
      const int64_t od = out[static_cast<size_t>(a)];
      if (dim != 1 && dim != od)
        return errorf("an input's axis ", a, " of ", dim, " does not broadcast to ", od);
      if (od == 1) {
        // An axis of one element is no gap: a run of the input's axes
        // goes on through it ([8,1,16] is 128 contiguous elements).
        if (lo >= 0 && hi == a)
          hi = a + 1;
        continue;
      }
      if (dim == od) {
        if (lo >= 0 && hi != a)
          return errorf("an input broadcasts over axes between its own");
        if (lo < 0)
          lo = a;
        hi = a + 1;
      }
    }
    EwLayout::Input in;
    if (lo >= 0) {
      for (int64_t a = hi; a < rank; ++a)
        in.div *= out[static_cast<size_t>(a)];
      for (int64_t a = lo; a < hi; ++a)
        in.mod *= out[static_cast<size_t>(a)];
    }
    rows = rows || (in.mod != 1 && in.mod != n);
    l.inputs.push_back(in);
  }
  l.rowLen = rows ? out.back() : n;
  l.rows = l.rowLen ? n / l.rowLen : 0;
  for (EwLayout::Input &in : l.inputs) {
    if (in.mod == 1)
      in.step = 0;
    else if (in.div == 1 && in.mod % std::max<int64_t>(l.rowLen, 1) == 0)
      in.step = 1;
    else if (in.div % std::max<int64_t>(l.rowLen, 1) == 0)
      in.step = 0;
    else
      return errorf("an input varies within the output's last axis without running along it");
  }
  return l;
}

} // namespace pipec
