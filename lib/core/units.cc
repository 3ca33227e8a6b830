#include "gpupool/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "gpupool/request.h"

namespace gpupool {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "12.5GiB" into the number 12.5 and the suffix "GiB". Fails on no digits or trailing garbage in the number.
bool SplitNumber(std::string_view text, double* number, std::string* suffix) {
  text = Trim(text);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return false;
  std::string digits(text.substr(0, i));
  char* end = nullptr;
  *number = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || !std::isfinite(*number)) return false;
  suffix->clear();
  for (char c : Trim(text.substr(i))) suffix->push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return true;
}

// A unit's suffixes (lower case) and how many of the base unit it is.
struct Unit {
  std::initializer_list<std::string_view> suffixes;
  double scale;
};

// The scale of `suffix` in `units`, or 0 for none of them.
double ScaleOf(const std::initializer_list<Unit>& units, std::string_view suffix) {
  for (const Unit& unit : units) {
    for (std::string_view s : unit.suffixes) {
      if (s == suffix) return unit.scale;
    }
  }
  return 0;
}

}  // namespace

Result<uint64_t> ParseMemorySize(std::string_view text) {
  double number = 0;
  std::string suffix;
  if (!SplitNumber(text, &number, &suffix)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not a memory size (e.g. 512MiB, 16GiB)", text));
  }
  const double scale = ScaleOf({{{"", "b"}, 1},
                                 {{"k", "kib", "ki"}, 1024.0},
                                 {{"m", "mib", "mi"}, 1024.0 * 1024},
                                 {{"g", "gib", "gi"}, 1024.0 * 1024 * 1024},
                                 {{"t", "tib", "ti"}, 1024.0 * 1024 * 1024 * 1024},
                                 {{"kb"}, 1e3},
                                 {{"mb"}, 1e6},
                                 {{"gb"}, 1e9},
                                 {{"tb"}, 1e12}},
                                suffix);
  if (scale == 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("'{}': unknown size unit '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", text, suffix));
  }
  double bytes = number * scale;
  if (bytes > 1.8e19) return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is too large", text));
  return static_cast<uint64_t>(std::llround(bytes));
}

Result<double> ParseFraction(std::string_view text) {
  std::string_view t = Trim(text);
  double value = 0;
  auto slash = t.find('/');
  std::string suffix;
  if (slash != std::string_view::npos) {
    double num = 0, den = 0;
    std::string s1, s2;
    if (!SplitNumber(t.substr(0, slash), &num, &s1) || !SplitNumber(t.substr(slash + 1), &den, &s2) ||
        !s1.empty() || !s2.empty() || den == 0) {
      return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not a fraction (e.g. 0.25, 25%, 1/4)", text));
    }
    value = num / den;
  } else {
    if (!SplitNumber(t, &value, &suffix) || !(suffix.empty() || suffix == "%")) {
      return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not a fraction (e.g. 0.25, 25%, 1/4)", text));
    }
    if (suffix == "%") value /= 100.0;
  }
  // The smallest slice is checked here too, so that the message names the real minimum.
  if (!(value >= kMinFraction - 1e-12) || value > 1.0 + 1e-12) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("fraction '{}' is out of range: it must be at least {} (1/20 of a GPU) and at most 1 "
                              "(a whole GPU)", text, kMinFraction));
  }
  return std::min(value, 1.0);
}

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  double number = 0;
  std::string suffix;
  if (!SplitNumber(text, &number, &suffix)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not a duration (e.g. 500ms, 5s, 2m, 1h)", text));
  }
  const double ms_per_unit =
      ScaleOf({{{"", "s", "sec"}, 1000}, {{"ms"}, 1}, {{"m", "min"}, 60e3}, {{"h"}, 3600e3}, {{"d"}, 86400e3}}, suffix);
  if (ms_per_unit == 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("'{}': unknown duration unit '{}' (use ms, s, m, h, d)", text, suffix));
  }
  double ms = number * ms_per_unit;
  if (ms > 1e15) return Status(StatusCode::kInvalidArgument, fmt::format("duration '{}' is too long", text));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::string FormatMemorySize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  if (value == std::floor(value)) return fmt::format("{:.0f} {}", value, kUnits[unit]);
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string FormatDuration(std::chrono::milliseconds duration) {
  int64_t ms = duration.count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60000) {
    if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
    return fmt::format("{:.1f}s", ms / 1000.0);
  }
  int64_t s = ms / 1000;
  if (s < 3600) return s % 60 ? fmt::format("{}m{}s", s / 60, s % 60) : fmt::format("{}m", s / 60);
  return (s % 3600) / 60 ? fmt::format("{}h{}m", s / 3600, (s % 3600) / 60) : fmt::format("{}h", s / 3600);
}

}  // namespace gpupool
