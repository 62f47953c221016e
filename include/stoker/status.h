// Status and StatusOr<T>: how every stoker function reports failure. Errors are values at every boundary;
// exceptions from ZeroMQ, Cap'n Proto, OpenCV or the standard library are caught at the edge of the thread that
// called them and turned into a Status. Expected outcomes (end of epoch, would-block, duplicate) are not errors
// and are modelled in return types instead. The codes mirror wire::StatusCode (schema/common.capnp).
//
// Thread safety: Status and StatusOr are values; const methods may be called concurrently.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "stoker/check.h"

namespace stoker {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: unknown job 'x'" (or "OK").
  std::string ToString() const;

  // Returns a copy with "context: " put before the message; OK stays OK.
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status DeadlineExceededError(std::string message);
Status DataLossError(std::string message);
Status InternalError(std::string message);
Status UnimplementedError(std::string message);
Status AbortedError(std::string message);
Status OutOfRangeError(std::string message);
Status CancelledError(std::string message);
Status PermissionDeniedError(std::string message);

// Either a T or a non-OK Status. Accessing the value of an error is a bug (STOKER_CHECK).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    STOKER_CHECK(!status_.ok(), "StatusOr constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    STOKER_CHECK(ok(), status_.ToString());
    return *value_;
  }
  const T& value() const& {
    STOKER_CHECK(ok(), status_.ToString());
    return *value_;
  }
  T&& value() && {
    STOKER_CHECK(ok(), status_.ToString());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace stoker

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define STOKER_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::stoker::Status stoker_status_ = (expr); \
    if (!stoker_status_.ok()) return stoker_status_; \
  } while (0)

#define STOKER_CONCAT_INNER_(a, b) a##b
#define STOKER_CONCAT_(a, b) STOKER_CONCAT_INNER_(a, b)

// `STOKER_ASSIGN_OR_RETURN(auto x, F());` declares x from a StatusOr or returns its error.
#define STOKER_ASSIGN_OR_RETURN(lhs, expr) \
  STOKER_ASSIGN_OR_RETURN_IMPL_(STOKER_CONCAT_(stoker_statusor_, __LINE__), lhs, expr)
#define STOKER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
