// Status and StatusOr: how every user-caused error travels to the command line.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace autopar {

// A user-facing error: one line saying where (file, node, field) and what is wrong.
// Invariant violations are asserts, never a Status.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message), true); }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }

  // Prefixes context ("while reading model.onnx: ...") and returns the result.
  Status with_context(std::string_view where) const {
    if (is_ok()) return *this;
    return Status(fmt::format("{}: {}", where, message_), true);
  }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

template <typename... Args>
Status error(fmt::format_string<Args...> format, Args&&... args) {
  return Status::error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.is_ok() && "StatusOr built from an ok Status carries no value");
  }

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(is_ok());
    return *value_;
  }
  const T& value() const& {
    assert(is_ok());
    return *value_;
  }
  T&& value() && {
    assert(is_ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace autopar

#define AUTOPAR_CONCAT_INNER(a, b) a##b
#define AUTOPAR_CONCAT(a, b) AUTOPAR_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                             \
  do {                                                    \
    ::autopar::Status autopar_status_ = (expr);           \
    if (!autopar_status_.is_ok()) return autopar_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.is_ok()) return tmp.status();      \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(AUTOPAR_CONCAT(autopar_statusor_, __LINE__), lhs, expr)
