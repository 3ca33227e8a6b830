// Parsing and printing of the units users type: memory sizes, fractions and durations.
#ifndef GPUPOOL_UNITS_H_
#define GPUPOOL_UNITS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpupool/status.h"

namespace gpupool {

// "16GiB", "512MiB", "1.5GB", "4096" (bytes), "2 KiB". Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB)
// suffixes, case-insensitive; "K"/"M"/"G"/"T" alone are binary.
Result<uint64_t> ParseMemorySize(std::string_view text);
// "0.25", "25%", "1/4". The result is in (0, 1] or the call fails; range policy is the caller's.
Result<double> ParseFraction(std::string_view text);
// "500ms", "5s", "2m", "1h", "1.5s"; a bare number means seconds.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

// "16.0 GiB", "512 MiB", "100 B".
std::string FormatMemorySize(uint64_t bytes);
// "500ms", "5s", "2m30s".
std::string FormatDuration(std::chrono::milliseconds duration);

}  // namespace gpupool

#endif  // GPUPOOL_UNITS_H_
