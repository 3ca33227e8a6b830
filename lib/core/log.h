// Logging: one macro family over fmt. Level and subsystems come from the environment:
//   GPUPOOL_LOG=error|warn|info|debug|trace   (default: warn; tools may raise it to info)
//   GPUPOOL_LOG_SUBSYS=rpc,agent,client,...   (default: all)
//   GPUPOOL_LOG_FILE=/path                    (default: stderr)
// Never writes to stdout: the interposer shares stdout with the user's program.
#ifndef GPUPOOL_CORE_LOG_H_
#define GPUPOOL_CORE_LOG_H_

#include <string_view>

#include <fmt/format.h>

namespace gpupool::log {

enum class Level { kError = 0, kWarn, kInfo, kDebug, kTrace };

bool Enabled(Level level, std::string_view subsystem);
void Write(Level level, std::string_view subsystem, std::string_view message);
// Overrides the level read from the environment (tools use it for --verbose), unless GPUPOOL_LOG is set.
void SetDefaultLevel(Level level);
// Name shown as the log line's prefix, e.g. "gp-agent". Default: "gpupool".
void SetProgramName(std::string_view name);

}  // namespace gpupool::log

#define GP_LOG(level, subsys, ...)                                                          \
  do {                                                                                      \
    if (::gpupool::log::Enabled(::gpupool::log::Level::level, subsys))                      \
      ::gpupool::log::Write(::gpupool::log::Level::level, subsys, fmt::format(__VA_ARGS__)); \
  } while (0)

#define GP_ERROR(subsys, ...) GP_LOG(kError, subsys, __VA_ARGS__)
#define GP_WARN(subsys, ...) GP_LOG(kWarn, subsys, __VA_ARGS__)
#define GP_INFO(subsys, ...) GP_LOG(kInfo, subsys, __VA_ARGS__)
#define GP_DEBUG(subsys, ...) GP_LOG(kDebug, subsys, __VA_ARGS__)

#endif  // GPUPOOL_CORE_LOG_H_
