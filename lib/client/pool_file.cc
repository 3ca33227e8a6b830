// Where the server list comes from: options, $GPUPOOL_SERVERS, or a pool file.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "client/directory.h"
#include "core/toml_config.h"
#include "core/util.h"
#include "gpupool/pool.h"

namespace gpupool {
namespace internal {

Status CheckServerAddress(const std::string& address, const std::string& source) {
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

}  // namespace internal

namespace {

using internal::EtcdConfig;

Result<std::vector<std::string>> Checked(std::vector<std::string> servers, const std::string& source) {
  if (servers.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} names no servers: name at least one agent (host:port or unix:/path)", source));
  }
  for (const auto& s : servers) {
    if (Status st = internal::CheckServerAddress(s, source); !st.ok()) return st;
  }
  return servers;
}

// A directory spec and its settings: from a pool file's [etcd] table, else from $GPUPOOL_ETCD_*.
Result<EtcdConfig> DirectoryOf(const std::string& spec, const TomlFile* file) {
  EtcdConfig config;
  if (Status s = ParseDirectorySpec(spec, &config); !s.ok()) return s;
  if (Status s = ReadEtcdSettings(file, &config); !s.ok()) return s;
  return config;
}

// servers = [...] and/or directory = "etcd:..." with its [etcd] table; a directory needs no servers (those named
// are the ones to fall back to while it does not answer).
Result<internal::PoolSource> ReadPoolFile(const std::string& path) {
  auto file = TomlFile::Load(path);
  if (!file.ok()) return file.status();
  if (Status s = file->CheckKeys(file->root(), {"servers", "directory", "etcd"}, "the pool file"); !s.ok()) return s;
  internal::PoolSource out;
  out.source = path;
  std::string directory;
  if (Status s = file->GetString(file->root(), "directory", &directory); !s.ok()) return s;
  if (Status s = file->GetStringList(file->root(), "servers", &out.servers); !s.ok()) return s;
  if (!directory.empty()) {
    auto config = DirectoryOf(directory, &*file);
    if (!config.ok()) return Status(config.status().code(), path + ": " + config.status().message());
    out.directory = std::move(config).value();
    if (out.servers.empty()) return out;
  } else if (file->root().contains("etcd")) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: an [etcd] table without directory = \"etcd:...\"", path));
  }
  auto servers = Checked(std::move(out.servers), path);
  if (!servers.ok()) return servers.status();
  out.servers = std::move(servers).value();
  return out;
}

// $GPUPOOL_DIRECTORY (else options.directory) set: the directory, its settings from $GPUPOOL_ETCD_*.
Result<std::optional<EtcdConfig>> DirectoryFromEnvironment(const PoolOptions& options) {
  std::string spec = options.directory;
  if (const char* env = std::getenv("GPUPOOL_DIRECTORY"); spec.empty() && env) {
    if (!*env) {
      return Status(StatusCode::kInvalidArgument,
                    "GPUPOOL_DIRECTORY is set but empty: name the pool's directory (GPUPOOL_DIRECTORY=etcd:http://"
                    "HOST:2379), or unset it");
    }
    spec = env;
  }
  if (spec.empty()) return std::optional<EtcdConfig>();
  auto config = DirectoryOf(spec, nullptr);
  if (!config.ok()) return config.status();
  return std::optional<EtcdConfig>(std::move(config).value());
}

}  // namespace

namespace internal {

Result<PoolSource> ResolvePool(const PoolOptions& options) {
  PoolSource out;
  // Agents named to this call are its pool: $GPUPOOL_DIRECTORY is not (gp-agent ctl --server, a lease's token).
  const bool named_only = !options.servers.empty() && options.directory.empty();
  if (!named_only) {
    auto directory = DirectoryFromEnvironment(options);
    if (!directory.ok()) return directory.status();
    out.directory = std::move(directory).value();
  }
  auto named = [&](std::vector<std::string> servers, const std::string& source) -> Result<PoolSource> {
    out.source = source;
    auto checked = Checked(std::move(servers), source);
    if (!checked.ok()) return checked.status();
    out.servers = std::move(checked).value();
    return out;
  };
  if (!options.servers.empty()) return named(options.servers, "the server list");
  // Set at all, these are the pool the user chose: set but empty is a mistake to report, never a reason to fall back
  // to a pool file or to a private agent (a command would run on an emulated GPU where a pool was meant).
  if (const char* env = std::getenv("GPUPOOL_SERVERS"); env) {
    if (!*env) {
      return Status(StatusCode::kInvalidArgument,
                    "GPUPOOL_SERVERS is set but empty: name the pool's agents (GPUPOOL_SERVERS=host:port,...), or "
                    "unset it to use a pool file");
    }
    return named(SplitList(env, ','), "$GPUPOOL_SERVERS");
  }
  if (out.directory) {  // A directory alone: the agents it lists, nobody to fall back to but those seen before.
    out.source = options.directory.empty() ? "$GPUPOOL_DIRECTORY" : "the directory option";
    return out;
  }
  std::vector<std::string> candidates;
  if (!options.pool_file.empty()) return ReadPoolFile(options.pool_file);
  if (const char* env = std::getenv("GPUPOOL_POOL"); env) {
    if (!*env) {
      return Status(StatusCode::kInvalidArgument,
                    "GPUPOOL_POOL is set but empty: name a pool file (GPUPOOL_POOL=/path/pool.toml), or unset it");
    }
    return ReadPoolFile(env);  // Named explicitly: its absence is an error, not a fall-through.
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    candidates.push_back(std::string(home) + "/.config/gpupool/pool.toml");
  }
  candidates.push_back("/etc/gpupool/pool.toml");
  for (const auto& path : candidates) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) return ReadPoolFile(path);
  }
  return Status(StatusCode::kUnavailable,
                "no pool configured: set GPUPOOL_SERVERS=host:port,... or write a pool file "
                "(servers = [\"host:port\"], or directory = \"etcd:http://HOST:2379\") at $GPUPOOL_POOL, "
                "~/.config/gpupool/pool.toml or /etc/gpupool/pool.toml");
}

}  // namespace internal

Result<std::vector<std::string>> ResolveServers(const PoolOptions& options, std::string* source) {
  auto pool = internal::ResolvePool(options);
  if (!pool.ok()) return pool.status();
  if (source) *source = pool->source;
  return std::move(pool->servers);
}

}  // namespace gpupool
