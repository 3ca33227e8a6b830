// Errors of the emulated device. Codes are the CUDA driver's CUresult values, so that a backend passes them
// through unchanged; messages say what happened in words a CUDA programmer recognises.
#ifndef GPUPOOL_EMU_STATUS_H_
#define GPUPOOL_EMU_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace gpupool::emu {

// Boilerplate by nature: CUresult's values, a table.
enum class Code : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kNoBinaryForGpu = 209,
  kInvalidPtx = 218,
  kInvalidSource = 300,
  kInvalidHandle = 400,
  kNotFound = 500,
  kNotReady = 600,
  kIllegalAddress = 700,
  kLaunchOutOfResources = 701,
  kLaunchTimeout = 702,  // Also: a CTA that can never make progress (barrier deadlock).
  kAssert = 710,
  kIllegalInstruction = 715,
  kMisalignedAddress = 716,
  kLaunchFailed = 719,   // Trap and other kernel faults.
  kCooperativeLaunchTooLarge = 720,  // More CTAs than the device holds at once.
  kNotSupported = 801,
  kUnknown = 999,
};

class EmuStatus {
 public:
  EmuStatus() = default;
  EmuStatus(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static EmuStatus Ok() { return EmuStatus(); }
  bool ok() const { return code_ == Code::kSuccess; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kSuccess;
  std::string message_;
};

template <typename T>
class EmuResult {
 public:
  EmuResult(T value) : value_(std::move(value)) {}            // NOLINT
  EmuResult(EmuStatus status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const EmuStatus& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  std::optional<T> value_;
  EmuStatus status_;
};

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_STATUS_H_
