//===- support/Error.h - Errors as values ----------------------*- C++ -*-===//
//
// Status and Expected<T>: the error currency of every pipec library. No
// exceptions cross a library boundary; a failure is a value with a message
// that starts lowercase and names the thing that failed and the numbers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cassert>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace pipec {

/// Concatenates any streamable arguments into one string.
template <typename... Args> std::string cat(const Args &...args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// Success, or an error message. An ok Status is a null pointer, so passing
/// and testing one on a hot path costs nothing.
class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.msg_ = std::make_shared<const std::string>(std::move(message));
    return s;
  }
  bool isOk() const { return !msg_; }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const {
    static const std::string kEmpty;
    return msg_ ? *msg_ : kEmpty;
  }
  /// Prefixes the message with context: "importing model.onnx: <message>".
  Status withContext(const std::string &context) const {
    if (isOk())
      return *this;
    return error(context + ": " + *msg_);
  }

private:
  std::shared_ptr<const std::string> msg_;
};

/// Builds an error Status from streamable pieces.
template <typename... Args> Status errorf(const Args &...args) {
  return Status::error(cat(args...));
}

/// A value or the Status that explains why there is none.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Status status) : v_(std::move(status)) {
    assert(!std::get<Status>(v_).isOk() && "Expected built from ok Status");
  }
  bool isOk() const { return v_.index() == 0; }
  explicit operator bool() const { return isOk(); }
  T &operator*() { return std::get<0>(v_); }
  const T &operator*() const { return std::get<0>(v_); }
  T *operator->() { return &std::get<0>(v_); }
  const T *operator->() const { return &std::get<0>(v_); }
  T take() { return std::move(std::get<0>(v_)); }
  Status status() const { return isOk() ? Status::ok() : std::get<1>(v_); }

private:
  std::variant<T, Status> v_;
};

} // namespace pipec

#define PIPEC_CONCAT_IMPL(a, b) a##b
#define PIPEC_CONCAT(a, b) PIPEC_CONCAT_IMPL(a, b)

/// Returns the Status from the enclosing function if `expr` failed.
#define PIPEC_TRY(expr)                                                        \
  do {                                                                         \
    ::pipec::Status pipec_try_status_ = (expr);                                \
    if (!pipec_try_status_.isOk())                                             \
      return pipec_try_status_;                                                \
  } while (0)

/// `PIPEC_ASSIGN(auto x, f())`: binds the value of an Expected or returns
/// its error from the enclosing function.
#define PIPEC_ASSIGN(decl, expr)                                               \
  PIPEC_ASSIGN_IMPL(PIPEC_CONCAT(pipec_expected_, __LINE__), decl, expr)
#define PIPEC_ASSIGN_IMPL(tmp, decl, expr)                                     \
  auto tmp = (expr);                                                           \
  if (!tmp.isOk())                                                             \
    return tmp.status();                                                       \
  decl = tmp.take()
