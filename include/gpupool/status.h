// Status and Result<T>: how every public gpupool call reports failure. No exceptions cross the API.
#ifndef GPUPOOL_STATUS_H_
#define GPUPOOL_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace gpupool {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // The request or input is malformed; retrying will not help.
  kUnsatisfiable,       // The pool can never grant this request as it is (too big, no such class...).
  kResourceExhausted,   // Busy: the pool could grant it, but not now.
  kUnavailable,         // No server (or not the needed one) answered.
  kDisconnected,        // A peer went away in the middle of a call.
  kTimeout,             // A deadline passed (connect, call or --wait).
  kNotFound,            // The named lease or object does not exist (any more).
  kPermissionDenied,    // The caller may not do this (wrong lease secret, policy).
  kProtocolMismatch,    // The peer speaks another gpupool protocol version, or not gpupool at all.
  kInternal,            // A bug or an unexpected failure inside gpupool.
};

// Returns a stable lowercase name for `code`, e.g. "resource_exhausted".
const char* StatusCodeName(StatusCode code);

// A cheap value type: a code and a human-readable message that says what went wrong and, where possible,
// what to do about it.
class Status {
 public:
  Status() = default;  // OK.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "ok", or "<code name>: <message>".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design.
  // REQUIRES: !status.ok().
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design.
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "Result constructed from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace gpupool

#endif  // GPUPOOL_STATUS_H_
