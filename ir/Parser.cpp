//===- ir/Parser.cpp - Parse the IR text form -----------------------------===//
//
// Recursive descent over a small lexer. Grammar in docs/ir.md.
//
//===----------------------------------------------------------------------===//
#include "ir/Text.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

namespace pipec::ir {

namespace {

enum class Tok { End, Ident, Number, String, ValueRef, Punct, Arrow, Error };

struct Token {
  Tok kind = Tok::End;
  std::string text; // identifier, number text, decoded string, value name
  int line = 1, col = 1;
};

class Lexer {
public:
  explicit Lexer(const std::string &s) : s_(s) {}
  /// Characters not read yet.
  size_t remaining() const { return s_.size() - std::min(pos_, s_.size()); }

  Token next() {
    skipSpace();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= s_.size())
      return t;
    char c = s_[pos_];
    if (c == '%') {
      advance();
      if (pos_ < s_.size() && s_[pos_] == '"') {
        if (!readString(t.text))
          return error(t, "unterminated string");
      } else {
        size_t b = pos_;
        while (pos_ < s_.size() && isNameChar(s_[pos_]))
          advance();
        if (b == pos_)
          return error(t, "expected a value name after '%'");
        t.text = s_.substr(b, pos_ - b);
      }
      t.kind = Tok::ValueRef;
      return t;
    }
    if (c == '"') {
      if (!readString(t.text))
        return error(t, "unterminated string");
      t.kind = Tok::String;
      return t;
    }
    if (c == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '>') {
      advance();
      advance();
      t.kind = Tok::Arrow;
      t.text = "->";
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+') {
      size_t b = pos_;
      advance();
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
              ((s_[pos_] == '-' || s_[pos_] == '+') &&
               (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E'))))
        advance();
      t.kind = Tok::Number;
      t.text = s_.substr(b, pos_ - b);
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
              s_[pos_] == '.'))
        advance();
      t.kind = Tok::Ident;
      t.text = s_.substr(b, pos_ - b);
      return t;
    }
    if (std::strchr("{}()[],:=?", c)) {
      advance();
      t.kind = Tok::Punct;
      t.text = std::string(1, c);
      return t;
    }
    return error(t, cat("unexpected character '", c, "'"));
  }

private:
  static bool isNameChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
           c == '/' || c == '-';
  }
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skipSpace() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        advance();
      } else if (s_[pos_] == '#' ||
                 (s_[pos_] == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/')) {
        while (pos_ < s_.size() && s_[pos_] != '\n')
          advance();
      } else {
        break;
      }
    }
  }
  bool readString(std::string &out) {
    advance(); // opening quote
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_];
      if (c == '\n')
        return false;
      if (c == '\\') {
        advance();
        if (pos_ >= s_.size())
          return false;
        char e = s_[pos_];
        if (e == 'n') {
          out += '\n';
        } else if (e == 'x' && pos_ + 2 < s_.size()) {
          out += static_cast<char>(std::strtol(s_.substr(pos_ + 1, 2).c_str(), nullptr, 16));
          advance();
          advance();
        } else {
          out += e;
        }
        advance();
        continue;
      }
      out += c;
      advance();
    }
    if (pos_ >= s_.size())
      return false;
    advance(); // closing quote
    return true;
  }
  Token error(Token t, std::string m) {
    t.kind = Tok::Error;
    t.text = std::move(m);
    return t;
  }

  const std::string &s_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

class Parser {
public:
  Parser(const std::string &text, std::string source)
      : lex_(text), source_(std::move(source)) {
    tok_ = lex_.next();
  }

  Expected<std::unique_ptr<Graph>> parse() {
    auto g = std::make_unique<Graph>();
    g_ = g.get();
    PIPEC_TRY(expectIdent("graph"));
    if (tok_.kind != Tok::String)
      return err("expected the graph name as a string");
    g->setName(tok_.text);
    bump();
    PIPEC_TRY(expectPunct("{"));
    while (!isPunct("}")) {
      if (tok_.kind != Tok::Ident)
        return err("expected 'opset', 'input', 'const', 'param', 'node', 'output' or '}'");
      std::string kw = tok_.text;
      if (kw == "opset") {
        PIPEC_TRY(parseOpset());
      } else if (kw == "input") {
        PIPEC_TRY(parseInput());
      } else if (kw == "const" || kw == "param") {
        PIPEC_TRY(parseConst(kw == "param"));
      } else if (kw == "node") {
        PIPEC_TRY(parseNode());
      } else if (kw == "output") {
        bump();
        const Token at = tok_;
        PIPEC_ASSIGN(Value * v, useValue());
        if (!v) // `none` stands for an omitted optional input only
          return errorf(source_, ":", at.line, ":", at.col, ": a graph output must name a value, not none");
        g->addOutput(v);
      } else {
        return err(cat("unknown keyword '", kw, "'"));
      }
    }
    bump();
    if (tok_.kind != Tok::End)
      return err("text after the end of the graph");
    return g;
  }

private:
  void bump() { tok_ = lex_.next(); }
  bool isPunct(const char *p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool isIdent(const char *p) const { return tok_.kind == Tok::Ident && tok_.text == p; }

  Status err(const std::string &m) const {
    if (tok_.kind == Tok::Error)
      return errorf(source_, ":", tok_.line, ":", tok_.col, ": ", tok_.text);
    return errorf(source_, ":", tok_.line, ":", tok_.col, ": ", m);
  }
  Status expectPunct(const char *p) {
    if (!isPunct(p))
      return err(cat("expected '", p, "'"));
    bump();
    return Status::ok();
  }
  Status expectIdent(const char *p) {
    if (!isIdent(p))
      return err(cat("expected '", p, "'"));
    bump();
    return Status::ok();
  }

  Expected<int64_t> parseInt() {
    if (tok_.kind != Tok::Number)
      return err("expected an integer");
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(tok_.text.c_str(), &end, 10);
    if (*end || errno)
      return err(cat("bad integer '", tok_.text, "'"));
    bump();
    return static_cast<int64_t>(v);
  }

  // A number that may be int or float; `isFloat` tells which it looked like.
  Status parseNumber(double &d, int64_t &i, bool &isFloat) {
    bool neg = false;
    if (tok_.kind == Tok::Ident && (tok_.text == "inf" || tok_.text == "nan")) {
      d = tok_.text == "inf" ? std::numeric_limits<double>::infinity()
                             : std::numeric_limits<double>::quiet_NaN();
      isFloat = true;
      bump();
      return Status::ok();
    }
    if (tok_.kind != Tok::Number)
      return err("expected a number");
    std::string t = tok_.text;
    if (t == "-inf" || t == "-nan" || t == "+inf") {
      neg = t[0] == '-';
      d = t.find("inf") != std::string::npos ? std::numeric_limits<double>::infinity()
                                             : std::numeric_limits<double>::quiet_NaN();
      if (neg)
        d = -d;
      isFloat = true;
      bump();
      return Status::ok();
    }
    isFloat = t.find_first_of(".eE") != std::string::npos &&
              t.compare(0, 2, "0x") != 0;
    char *end = nullptr;
    errno = 0;
    if (isFloat) {
      d = std::strtod(t.c_str(), &end);
    } else {
      i = std::strtoll(t.c_str(), &end, 10);
      d = static_cast<double>(i);
    }
    if (*end || errno)
      return err(cat("bad number '", t, "'"));
    bump();
    return Status::ok();
  }

  Expected<TensorDesc> parseType() {
    if (tok_.kind != Tok::Ident)
      return err("expected a tensor type such as f32[2,3]");
    TensorDesc d;
    d.dtype = dtypeFromName(tok_.text);
    if (d.dtype == DType::Undefined)
      return err(cat("unknown element type '", tok_.text, "'"));
    bump();
    PIPEC_TRY(expectPunct("["));
    while (!isPunct("]")) {
      PIPEC_ASSIGN(int64_t v, parseInt());
      if (v < 0)
        return err("negative dimension");
      d.shape.push_back(v);
      if (isPunct(","))
        bump();
      else if (!isPunct("]"))
        return err("expected ',' or ']' in a shape");
    }
    bump();
    return d;
  }

  Status parseOpset() {
    bump();
    if (tok_.kind != Tok::String)
      return err("expected the opset domain as a string");
    std::string domain = tok_.text;
    bump();
    PIPEC_ASSIGN(int64_t v, parseInt());
    g_->setOpset(domain, v);
    return Status::ok();
  }

  Expected<std::string> valueName() {
    if (tok_.kind != Tok::ValueRef)
      return err("expected a value name such as %x");
    std::string n = tok_.text;
    bump();
    return n;
  }

  Expected<Value *> useValue() {
    if (isIdent("none")) {
      bump();
      return static_cast<Value *>(nullptr);
    }
    Token at = tok_;
    PIPEC_ASSIGN(std::string n, valueName());
    Value *v = g_->findValue(n);
    if (!v)
      return errorf(source_, ":", at.line, ":", at.col, ": use of undefined value %",
                    n);
    return v;
  }

  Status parseInput() {
    bump();
    PIPEC_ASSIGN(std::string n, valueName());
    PIPEC_TRY(expectPunct(":"));
    PIPEC_ASSIGN(TensorDesc t, parseType());
    auto v = g_->addInput(n, t);
    if (!v)
      return err(v.status().message());
    return Status::ok();
  }

  Status parseTensorData(Tensor &t) {
    if (tok_.kind == Tok::Ident && tok_.text == "elided")
      return err("constant data was elided when printed; it cannot be parsed "
                 "back (print with all constants to round-trip)");
    if (tok_.kind == Tok::Ident && tok_.text == "hex") {
      bump();
      if (tok_.kind != Tok::String)
        return err("expected a hex string");
      const std::string &h = tok_.text;
      if (h.size() != t.bytes() * 2)
        return err(cat("hex data has ", h.size() / 2, " bytes, the type needs ",
                       t.bytes()));
      auto *p = static_cast<unsigned char *>(t.raw());
      for (size_t i = 0; i < t.bytes(); ++i)
        p[i] = static_cast<unsigned char>(std::strtol(h.substr(2 * i, 2).c_str(), nullptr, 16));
      bump();
      return Status::ok();
    }
    PIPEC_TRY(expectPunct("["));
    int64_t n = 0;
    while (!isPunct("]")) {
      double d = 0;
      int64_t i = 0;
      bool isF = false;
      PIPEC_TRY(parseNumber(d, i, isF));
      if (n >= t.numel())
        return err(cat("more than ", t.numel(), " elements for ", t.desc().str()));
      switch (t.dtype()) {
      case DType::F32: t.data<float>()[n] = static_cast<float>(d); break;
      case DType::F64: t.data<double>()[n] = d; break;
      case DType::I64:
        if (isF && !(d >= -9.2e18 && d <= 9.2e18)) // also NaN
          return err(cat("value ", d, " is not an int64"));
        t.data<int64_t>()[n] = isF ? static_cast<int64_t>(d) : i;
        break;
      case DType::I32: t.data<int32_t>()[n] = static_cast<int32_t>(i); break;
      case DType::I16: t.data<int16_t>()[n] = static_cast<int16_t>(i); break;
      case DType::I8: t.data<int8_t>()[n] = static_cast<int8_t>(i); break;
      case DType::U8: t.data<uint8_t>()[n] = static_cast<uint8_t>(i); break;
      case DType::U16: t.data<uint16_t>()[n] = static_cast<uint16_t>(i); break;
      case DType::U32: t.data<uint32_t>()[n] = static_cast<uint32_t>(i); break;
      case DType::U64: t.data<uint64_t>()[n] = static_cast<uint64_t>(i); break;
      case DType::Bool: t.data<uint8_t>()[n] = i != 0; break;
      default: return err(cat("element type ", dtypeName(t.dtype()), " needs hex data"));
      }
      ++n;
      if (isPunct(","))
        bump();
      else if (!isPunct("]"))
        return err("expected ',' or ']'");
    }
    bump();
    if (n != t.numel())
      return err(cat("got ", n, " elements, ", t.desc().str(), " needs ", t.numel()));
    return Status::ok();
  }

  /// A tensor for a constant of the text. Its shape is checked first, and
  /// its size capped, then bounded by the text left to read: every element
  /// takes at least one character (a hex string two per byte), so a short
  /// text cannot make a large allocation before its data is found missing.
  Expected<Tensor> allocate(const TensorDesc &type) {
    constexpr uint64_t kMaxTextTensorBytes = uint64_t(1) << 31;
    if (auto n = validShape(type.shape, cat("constant ", type.str())); !n)
      return err(n.status().message());
    if (type.bytes() > kMaxTextTensorBytes)
      return err(cat("constant ", type.str(), " has ", type.bytes(),
                     " bytes; the IR text form holds constants up to 2 GiB"));
    const uint64_t left = lex_.remaining() + tok_.text.size() + 1;
    if (static_cast<uint64_t>(type.numel()) > left)
      return err(cat("constant ", type.str(), " needs ", type.numel(), " values; the text has ", left,
                     " characters left"));
    return Tensor(type);
  }

  Status parseConst(bool trainable) {
    bump();
    PIPEC_ASSIGN(std::string n, valueName());
    PIPEC_TRY(expectPunct(":"));
    PIPEC_ASSIGN(TensorDesc type, parseType());
    PIPEC_TRY(expectPunct("="));
    PIPEC_ASSIGN(Tensor t, allocate(type));
    PIPEC_TRY(parseTensorData(t));
    auto v = g_->addConstant(n, std::move(t));
    if (!v)
      return err(v.status().message());
    (*v)->setTrainable(trainable);
    return Status::ok();
  }

  Expected<Attribute> parseAttrValue() {
    if (tok_.kind == Tok::String) {
      std::string s = tok_.text;
      bump();
      return Attribute::ofString(std::move(s));
    }
    if (tok_.kind == Tok::Ident && tok_.text == "tensor") {
      bump();
      PIPEC_ASSIGN(TensorDesc type, parseType());
      PIPEC_ASSIGN(Tensor t, allocate(type));
      PIPEC_TRY(parseTensorData(t));
      return Attribute::ofTensor(std::move(t));
    }
    std::string listKind;
    if (tok_.kind == Tok::Ident &&
        (tok_.text == "ints" || tok_.text == "floats" || tok_.text == "strings")) {
      listKind = tok_.text;
      bump();
    }
    if (isPunct("[")) {
      bump();
      std::vector<int64_t> ints;
      std::vector<double> floats;
      std::vector<std::string> strings;
      bool anyFloat = false;
      while (!isPunct("]")) {
        if (tok_.kind == Tok::String) {
          strings.push_back(tok_.text);
          bump();
        } else {
          double d = 0;
          int64_t i = 0;
          bool isF = false;
          PIPEC_TRY(parseNumber(d, i, isF));
          anyFloat = anyFloat || isF;
          ints.push_back(i);
          floats.push_back(d);
        }
        if (isPunct(","))
          bump();
        else if (!isPunct("]"))
          return err("expected ',' or ']'");
      }
      bump();
      if (!strings.empty() && !floats.empty())
        return err("a list mixes strings and numbers");
      if (!strings.empty() || listKind == "strings")
        return Attribute::ofStrings(std::move(strings));
      if (anyFloat || listKind == "floats") {
        std::vector<float> f(floats.begin(), floats.end());
        return Attribute::ofFloats(std::move(f));
      }
      return Attribute::ofInts(std::move(ints));
    }
    double d = 0;
    int64_t i = 0;
    bool isF = false;
    PIPEC_TRY(parseNumber(d, i, isF));
    if (isF)
      return Attribute::ofFloat(static_cast<float>(d));
    return Attribute::ofInt(i);
  }

  Status parseNode() {
    bump();
    if (tok_.kind != Tok::String)
      return err("expected the node name as a string");
    std::string name = tok_.text;
    bump();
    Phase phase = Phase::Forward;
    std::string forwardOf;
    if (isIdent("fwd") || isIdent("bwd") || isIdent("wgrad") || isIdent("opt") ||
        isIdent("remat")) {
      phase = tok_.text == "fwd"     ? Phase::Forward
              : tok_.text == "bwd"   ? Phase::Backward
              : tok_.text == "wgrad" ? Phase::WeightGrad
              : tok_.text == "remat" ? Phase::Recompute
                                     : Phase::Optimizer;
      bump();
      if (isPunct("(")) {
        bump();
        if (tok_.kind != Tok::String)
          return err("expected the forward node name as a string");
        forwardOf = tok_.text;
        bump();
        PIPEC_TRY(expectPunct(")"));
      }
    }
    if (tok_.kind != Tok::Ident)
      return err("expected an op name");
    std::string domain, op = tok_.text;
    Token opTok = tok_;
    bump();
    if (isPunct(":")) {
      bump();
      if (tok_.kind != Tok::Ident)
        return err("expected an op name after the domain");
      domain = op;
      op = tok_.text;
      bump();
    }
    PIPEC_TRY(expectPunct("("));
    std::vector<Value *> inputs;
    while (!isPunct(")")) {
      PIPEC_ASSIGN(Value * v, useValue());
      inputs.push_back(v);
      if (isPunct(","))
        bump();
      else if (!isPunct(")"))
        return err("expected ',' or ')'");
    }
    bump();
    AttrMap attrs;
    if (isPunct("{")) {
      bump();
      while (!isPunct("}")) {
        if (tok_.kind != Tok::Ident)
          return err("expected an attribute name");
        std::string an = tok_.text;
        bump();
        PIPEC_TRY(expectPunct("="));
        PIPEC_ASSIGN(Attribute a, parseAttrValue());
        if (attrs.count(an))
          return err(cat("attribute '", an, "' given twice"));
        attrs[an] = std::move(a);
        if (isPunct(","))
          bump();
        else if (!isPunct("}"))
          return err("expected ',' or '}'");
      }
      bump();
    }
    if (tok_.kind != Tok::Arrow)
      return err("expected '->' and the node's outputs");
    bump();
    std::vector<std::string> outNames;
    std::vector<std::optional<TensorDesc>> outTypes;
    while (true) {
      PIPEC_ASSIGN(std::string on, valueName());
      PIPEC_TRY(expectPunct(":"));
      if (isPunct("?")) {
        bump();
        outTypes.emplace_back();
      } else {
        PIPEC_ASSIGN(TensorDesc t, parseType());
        outTypes.emplace_back(t);
      }
      outNames.push_back(on);
      if (!isPunct(","))
        break;
      bump();
    }
    auto n = g_->addNode(name, op, domain, inputs, outNames, std::move(attrs));
    if (!n)
      return errorf(source_, ":", opTok.line, ":", opTok.col, ": ",
                    n.status().message());
    (*n)->setPhase(phase);
    (*n)->setForwardOf(forwardOf);
    for (size_t i = 0; i < outTypes.size(); ++i)
      if (outTypes[i])
        (*n)->output(i)->setType(*outTypes[i]);
    return Status::ok();
  }

  Lexer lex_;
  std::string source_;
  Token tok_;
  Graph *g_ = nullptr;
};

} // namespace

Expected<std::unique_ptr<Graph>> parseGraph(const std::string &text,
                                            const std::string &sourceName) {
  Parser p(text, sourceName);
  return p.parse();
}

} // namespace pipec::ir
