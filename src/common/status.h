// Status and StatusOr<T> for daemons and tools (not for the injected libraries, which use
// plain error codes). An error carries a code and a message that names the problem.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace gs {

// kAborted: a conflict with a concurrent writer, retry after re-reading (HTTP 409);
// kOutOfRange: asked for a version the server no longer has, start over (HTTP 410).
enum class StatusCode {
  kOk,
  kInvalidArgument,
  kNotFound,
  kFailedPrecondition,
  kUnavailable,
  kInternal,
  kAborted,
  kOutOfRange,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
inline Status Internal(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}
inline Status Aborted(std::string m) {
  return {StatusCode::kAborted, std::move(m)};
}
inline Status OutOfRange(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}

template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit like absl::StatusOr
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gs

#define GS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::gs::Status gs_status_ = (expr);        \
    if (!gs_status_.ok()) return gs_status_; \
  } while (0)

// GS_ASSIGN_OR_RETURN(auto x, F()); evaluates F() (a StatusOr), returns its status from
// the enclosing function when it is an error, else moves the value into `x` (a
// declaration or an existing variable). It is several statements: one use per line, and
// never as the body of an `if` without braces.
#define GS_ASSIGN_OR_RETURN(lhs, expr) GS_ASSIGN_OR_RETURN_IMPL_(GS_STATUS_CONCAT_(gs_statusor_, __LINE__), lhs, expr)
#define GS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
#define GS_STATUS_CONCAT_(a, b) GS_STATUS_CONCAT_IMPL_(a, b)
#define GS_STATUS_CONCAT_IMPL_(a, b) a##b
