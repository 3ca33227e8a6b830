// CallStatus: the one status inside gpupool below the public API. It carries a CUresult value, because every call it
// reports ends at a CUDA program (the emulator's, a backend's, the session server's and the session client's
// outcomes alike), and a message that says what went wrong in words a CUDA programmer recognises. The public
// gpupool::Status (include/gpupool/status.h) is what the library's callers see; ToStatus is the one way between them.
//
// lib/core includes no CUDA header, and the emulator (which returns these) builds without the driver's headers: the
// CUresult values the code names are the constants in `cu` below, which match cuda.h's (the session server checks
// each one against cuda.h at compile time). A backend on a real GPU passes the driver's own values through unchanged.
#ifndef GPUPOOL_CORE_CALL_STATUS_H_
#define GPUPOOL_CORE_CALL_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace gpupool {

// The emulator includes this header without the public API's include path: ToStatus's callers include
// gpupool/status.h.
class Status;

// The CUresult values gpupool produces itself, named as in cuda.h without the CUDA_ERROR_ prefix. A table by nature.
namespace cu {
inline constexpr int kSuccess = 0;
inline constexpr int kInvalidValue = 1;
inline constexpr int kOutOfMemory = 2;
inline constexpr int kDeviceUnavailable = 46;  // The session's connection or worker is gone.
inline constexpr int kInvalidImage = 200;
inline constexpr int kInvalidContext = 201;
inline constexpr int kNoBinaryForGpu = 209;
inline constexpr int kInvalidPtx = 218;
inline constexpr int kInvalidSource = 300;
inline constexpr int kInvalidHandle = 400;
inline constexpr int kNotFound = 500;
inline constexpr int kNotReady = 600;
inline constexpr int kIllegalAddress = 700;
inline constexpr int kLaunchOutOfResources = 701;
inline constexpr int kLaunchTimeout = 702;  // Also: a CTA that can never make progress (barrier deadlock).
inline constexpr int kAssert = 710;
inline constexpr int kIllegalInstruction = 715;
inline constexpr int kMisalignedAddress = 716;
inline constexpr int kLaunchFailed = 719;               // Trap and other kernel faults.
inline constexpr int kCooperativeLaunchTooLarge = 720;  // More CTAs than the device holds at once.
inline constexpr int kNotSupported = 801;
inline constexpr int kUnknown = 999;

// Whether `code` is a kernel fault that ruins its context: every later call of that context returns it, and the
// driver runs none of the host functions queued behind it (CUDA_ERROR_ILLEGAL_ADDRESS ... CUDA_ERROR_LAUNCH_FAILED,
// and the watchdog's CUDA_ERROR_LAUNCH_TIMEOUT; cuda.h: "the context cannot be used, so it must be destroyed").
constexpr bool IsStickyFault(int code) {
  return code == kIllegalAddress || code == kLaunchTimeout || code == kAssert || (code >= 714 && code <= kLaunchFailed);
}
}  // namespace cu

// A call's outcome: a CUresult value (cu::kSuccess = success) and, for errors, what went wrong in words. A cheap
// value type, as gpupool::Status is.
// Boilerplate by nature: the same shape as gpupool::Status (a code, a message), for the driver's codes.
class CallStatus {
 public:
  CallStatus() = default;  // Success.
  CallStatus(int code, std::string message) : code_(code), message_(std::move(message)) {}

  static CallStatus Ok() { return CallStatus(); }

  bool ok() const { return code_ == cu::kSuccess; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_ = cu::kSuccess;
  std::string message_;
};

// Either a value or a failed CallStatus.
template <typename T>
class CallResult {
 public:
  CallResult(T value) : value_(std::move(value)) {}             // NOLINT: implicit by design.
  CallResult(CallStatus status) : status_(std::move(status)) {}  // NOLINT: implicit by design.

  bool ok() const { return value_.has_value(); }
  const CallStatus& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  std::optional<T> value_;
  CallStatus status_;
};

// The public status of an internal one, for where a CallStatus ends a gpupool call rather than a CUDA call (a
// backend that cannot start): out of memory is kResourceExhausted, a bad value kInvalidArgument, an unknown name
// kNotFound, an unsupported request kUnsatisfiable, a lost device kUnavailable, anything else kInternal. The message
// is kept as it is.
Status ToStatus(const CallStatus& status);

}  // namespace gpupool

#endif  // GPUPOOL_CORE_CALL_STATUS_H_
