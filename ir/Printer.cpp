//===- ir/Printer.cpp - Print the IR text form ----------------------------===//
#include "ir/Text.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace pipec::ir {

namespace {

bool isSimpleNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '/' || c == '-';
}

void printQuoted(std::ostream &os, const std::string &s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      os << '\\' << c;
    else if (c == '\n')
      os << "\\n";
    else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      os << buf;
    } else
      os << c;
  }
  os << '"';
}

void printValueName(std::ostream &os, const Value *v) {
  if (!v) {
    os << "none";
    return;
  }
  const std::string &n = v->name();
  bool simple = !n.empty();
  for (char c : n)
    simple = simple && isSimpleNameChar(c);
  os << '%';
  if (simple)
    os << n;
  else
    printQuoted(os, n);
}

void printFloat(std::ostream &os, double f, bool isF32) {
  if (std::isnan(f)) {
    os << "nan";
    return;
  }
  if (std::isinf(f)) {
    os << (f < 0 ? "-inf" : "inf");
    return;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, isF32 ? "%.9g" : "%.17g", f);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  os << s;
}

void printType(std::ostream &os, const Value *v) {
  if (!v->typeKnown())
    os << '?';
  else
    os << v->type().str();
}

void printTensorData(std::ostream &os, const Tensor &t) {
  int64_t n = t.numel();
  if (t.dtype() == DType::F32 || t.dtype() == DType::F64 ||
      isInteger(t.dtype()) || t.dtype() == DType::Bool) {
    os << '[';
    for (int64_t i = 0; i < n; ++i) {
      if (i)
        os << ", ";
      if (t.dtype() == DType::F32)
        printFloat(os, t.data<float>()[i], true);
      else if (t.dtype() == DType::F64)
        printFloat(os, t.data<double>()[i], false);
      else if (t.dtype() == DType::U64)
        os << t.data<uint64_t>()[i];
      else
        os << t.getInt(i);
    }
    os << ']';
    return;
  }
  // Types pipec stores but does not compute with: raw little-endian bytes.
  os << "hex\"";
  const auto *p = static_cast<const unsigned char *>(t.raw());
  char buf[4];
  for (size_t i = 0; i < t.bytes(); ++i) {
    std::snprintf(buf, sizeof buf, "%02x", p[i]);
    os << buf;
  }
  os << '"';
}

void printAttr(std::ostream &os, const Attribute &a) {
  switch (a.kind) {
  case Attribute::Kind::Int: os << a.i; break;
  case Attribute::Kind::Float: printFloat(os, a.f, true); break;
  case Attribute::Kind::String: printQuoted(os, a.s); break;
  case Attribute::Kind::Ints:
    if (a.ints.empty())
      os << "ints ";
    os << '[';
    for (size_t i = 0; i < a.ints.size(); ++i)
      os << (i ? ", " : "") << a.ints[i];
    os << ']';
    break;
  case Attribute::Kind::Floats:
    if (a.floats.empty())
      os << "floats ";
    os << '[';
    for (size_t i = 0; i < a.floats.size(); ++i) {
      if (i)
        os << ", ";
      printFloat(os, a.floats[i], true);
    }
    os << ']';
    break;
  case Attribute::Kind::Strings:
    if (a.strings.empty())
      os << "strings ";
    os << '[';
    for (size_t i = 0; i < a.strings.size(); ++i) {
      if (i)
        os << ", ";
      printQuoted(os, a.strings[i]);
    }
    os << ']';
    break;
  case Attribute::Kind::Tensor:
    os << "tensor " << a.t.desc().str() << ' ';
    printTensorData(os, a.t);
    break;
  }
}

} // namespace

void printGraph(const Graph &g, std::ostream &os, const PrintOptions &opts) {
  os << "graph ";
  printQuoted(os, g.name());
  os << " {\n";
  for (const auto &[domain, version] : g.opsets()) {
    os << "  opset ";
    printQuoted(os, domain);
    os << ' ' << version << '\n';
  }
  for (const Value *v : g.inputs()) {
    os << "  input ";
    printValueName(os, v);
    os << " : ";
    printType(os, v);
    os << '\n';
  }
  for (const Value *v : g.constants()) {
    os << (v->isTrainable() ? "  param " : "  const ");
    printValueName(os, v);
    os << " : " << v->type().str() << " = ";
    if (opts.maxConstantElements >= 0 &&
        v->constant().numel() > opts.maxConstantElements)
      os << "elided";
    else
      printTensorData(os, v->constant());
    os << '\n';
  }
  for (const Node *n : g.nodes()) {
    os << "  node ";
    printQuoted(os, n->name());
    if (n->phase() != Phase::Forward || !n->forwardOf().empty()) {
      os << ' ' << phaseName(n->phase());
      if (!n->forwardOf().empty()) {
        os << '(';
        printQuoted(os, n->forwardOf());
        os << ')';
      }
    }
    os << ' ';
    if (!n->domain().empty())
      os << n->domain() << ':';
    os << n->opType() << '(';
    for (size_t i = 0; i < n->numInputs(); ++i) {
      if (i)
        os << ", ";
      printValueName(os, n->input(i));
    }
    os << ')';
    if (!n->attrs().empty()) {
      os << " {";
      bool first = true;
      for (const auto &[name, a] : n->attrs()) {
        os << (first ? "" : ", ") << name << " = ";
        printAttr(os, a);
        first = false;
      }
      os << '}';
    }
    os << " ->";
    for (size_t i = 0; i < n->numOutputs(); ++i) {
      os << (i ? ", " : " ");
      printValueName(os, n->output(i));
      os << " : ";
      printType(os, n->output(i));
    }
    os << '\n';
  }
  for (const Value *v : g.outputs()) {
    os << "  output ";
    printValueName(os, v);
    os << '\n';
  }
  os << "}\n";
}

std::string printGraph(const Graph &g, const PrintOptions &opts) {
  std::ostringstream os;
  printGraph(g, os, opts);
  return os.str();
}

} // namespace pipec::ir
