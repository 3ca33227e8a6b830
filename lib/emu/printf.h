// Device printf: formats vprintf(format, argument buffer) the way CUDA does, with arguments packed in the buffer
// at their natural alignment (float promoted to double, integers of 4 or 8 bytes, pointers of 8).
#ifndef GPUPOOL_EMU_PRINTF_H_
#define GPUPOOL_EMU_PRINTF_H_

#include <cstdint>
#include <functional>
#include <string>

namespace gpupool::emu::internal {

// `read_string(address, &out)` and `read_bytes(address, n, dst)` fetch device memory; both return false when the
// address is invalid. Returns false (and a reason in *error) on an invalid format or argument address.
bool FormatDevicePrintf(uint64_t format, uint64_t args,
                        const std::function<bool(uint64_t, std::string*)>& read_string,
                        const std::function<bool(uint64_t, size_t, void*)>& read_bytes, std::string* out,
                        std::string* error);

}  // namespace gpupool::emu::internal

#endif  // GPUPOOL_EMU_PRINTF_H_
