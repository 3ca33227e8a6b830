#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace gpupool::log {
namespace {

struct Config {
  Level level = Level::kWarn;
  bool level_from_env = false;
  std::string subsystems;  // Comma-separated; empty means all.
  FILE* out = stderr;
  std::string program = "gpupool";
  std::mutex mu;
};

Config& GetConfig() {
  static Config* config = [] {
    auto* c = new Config();  // Leaked on purpose: logging must work during static destruction.
    if (const char* env = std::getenv("GPUPOOL_LOG")) {
      std::string v = env;
      c->level_from_env = true;
      if (v == "error") c->level = Level::kError;
      else if (v == "warn") c->level = Level::kWarn;
      else if (v == "info") c->level = Level::kInfo;
      else if (v == "debug") c->level = Level::kDebug;
      else if (v == "trace") c->level = Level::kTrace;
      else c->level_from_env = false;
    }
    if (const char* env = std::getenv("GPUPOOL_LOG_SUBSYS")) c->subsystems = env;
    if (const char* env = std::getenv("GPUPOOL_LOG_FILE")) {
      if (FILE* f = std::fopen(env, "a")) c->out = f;
    }
    return c;
  }();
  return *config;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
    case Level::kTrace: return "trace";
  }
  return "?";
}

}  // namespace

bool Enabled(Level level, std::string_view subsystem) {
  Config& c = GetConfig();
  if (level > c.level) return false;
  if (c.subsystems.empty() || level == Level::kError) return true;
  std::string_view list = c.subsystems;
  while (!list.empty()) {
    auto comma = list.find(',');
    if (list.substr(0, comma) == subsystem) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

void Write(Level level, std::string_view subsystem, std::string_view message) {
  Config& c = GetConfig();
  std::lock_guard<std::mutex> lock(c.mu);
  // Never fmt::print, which throws when the write fails: a log line to a closed pipe must not end the program
  // (gp-run's stderr read by `| head`, an agent whose terminal went away).
  std::string line = fmt::format("{}[{}] {} {}: {}\n", c.program, getpid(), LevelName(level), subsystem, message);
  (void)!std::fwrite(line.data(), 1, line.size(), c.out);
  std::fflush(c.out);
}

void SetDefaultLevel(Level level) {
  Config& c = GetConfig();
  if (!c.level_from_env) c.level = level;
}

void SetProgramName(std::string_view name) { GetConfig().program = std::string(name); }

}  // namespace gpupool::log
