// Where the server list comes from: options, $GPUPOOL_SERVERS, or a pool file.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/toml_config.h"
#include "core/util.h"
#include "gpupool/pool.h"

namespace gpupool {
namespace {

Status CheckAddress(const std::string& address, const std::string& source) {
  auto bad = [&](std::string why) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: server address '{}' {}", source, address, why));
  };
  if (address.rfind("unix:", 0) == 0) {
    if (address.size() <= 5) return bad("has an empty socket path");
    return Status::Ok();
  }
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("must be host:port or unix:/path");
  std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return bad("has no valid port (1..65535)");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> Checked(std::vector<std::string> servers, const std::string& source) {
  if (servers.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} names no servers: name at least one agent (host:port or unix:/path)", source));
  }
  for (const auto& s : servers) {
    if (Status st = CheckAddress(s, source); !st.ok()) return st;
  }
  return servers;
}

Result<std::vector<std::string>> ReadPoolFile(const std::string& path) {
  auto file = TomlFile::Load(path);
  if (!file.ok()) return file.status();
  if (Status s = file->CheckKeys(file->root(), {"servers"}, "the pool file"); !s.ok()) return s;
  std::vector<std::string> servers;
  if (Status s = file->GetStringList(file->root(), "servers", &servers); !s.ok()) return s;
  return Checked(std::move(servers), path);
}

}  // namespace

Result<std::vector<std::string>> ResolveServers(const PoolOptions& options, std::string* source) {
  auto set_source = [&](const std::string& s) {
    if (source) *source = s;
  };
  if (!options.servers.empty()) {
    set_source("the server list");
    return Checked(options.servers, "the server list");
  }
  // Set at all, these are the pool the user chose: set but empty is a mistake to report, never a reason to fall back
  // to a pool file or to a private agent (a command would run on an emulated GPU where a pool was meant).
  if (const char* env = std::getenv("GPUPOOL_SERVERS"); env) {
    set_source("$GPUPOOL_SERVERS");
    if (!*env) {
      return Status(StatusCode::kInvalidArgument,
                    "GPUPOOL_SERVERS is set but empty: name the pool's agents (GPUPOOL_SERVERS=host:port,...), or "
                    "unset it to use a pool file");
    }
    return Checked(SplitList(env, ','), "$GPUPOOL_SERVERS");
  }
  std::vector<std::string> candidates;
  if (!options.pool_file.empty()) {
    set_source(options.pool_file);
    return ReadPoolFile(options.pool_file);
  }
  if (const char* env = std::getenv("GPUPOOL_POOL"); env) {
    set_source("$GPUPOOL_POOL");
    if (!*env) {
      return Status(StatusCode::kInvalidArgument,
                    "GPUPOOL_POOL is set but empty: name a pool file (GPUPOOL_POOL=/path/pool.toml), or unset it");
    }
    set_source(env);
    return ReadPoolFile(env);  // Named explicitly: its absence is an error, not a fall-through.
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    candidates.push_back(std::string(home) + "/.config/gpupool/pool.toml");
  }
  candidates.push_back("/etc/gpupool/pool.toml");
  for (const auto& path : candidates) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      set_source(path);
      return ReadPoolFile(path);
    }
  }
  return Status(StatusCode::kUnavailable,
                "no pool configured: set GPUPOOL_SERVERS=host:port,... or write a pool file "
                "(servers = [\"host:port\"]) at $GPUPOOL_POOL, ~/.config/gpupool/pool.toml or /etc/gpupool/pool.toml");
}

}  // namespace gpupool
