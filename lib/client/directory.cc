#include "client/directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <fmt/format.h>

#include "core/log.h"
#include "core/toml_config.h"
#include "core/util.h"
#include "gpupool/units.h"

namespace gpupool::internal {
namespace {

// Bounds on what an entry may hold: entries are written by whoever can write the prefix, so they are checked like
// any message from outside.
constexpr size_t kMaxEntryBytes = 64 * 1024;
constexpr size_t kMaxDevices = 256;
constexpr size_t kMaxText = 256;

Result<std::string> ReadPassword(const std::string& path, std::string_view source) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: etcd password_file {} cannot be read", source, path));
  }
  if ((st.st_mode & 0077) != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: etcd password_file {} is readable by others (mode {:o}): chmod 600 it", source, path,
                              st.st_mode & 0777));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string password = text.str();
  while (!password.empty() && (password.back() == '\n' || password.back() == '\r')) password.pop_back();
  if (!in || password.empty()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: etcd password_file {} is empty", source, path));
  }
  return password;
}

bool ValidText(capnp::Text::Reader text) {
  if (text.size() > kMaxText) return false;
  for (char c : text) {
    if (static_cast<unsigned char>(c) < ' ') return false;
  }
  return true;
}

std::string CacheFile(const EtcdConfig& config) {
  std::string dir = EnvOrEmpty("XDG_CACHE_HOME");
  if (dir.empty()) {
    std::string home = EnvOrEmpty("HOME");
    if (home.empty()) return "";
    dir = home + "/.cache";
  }
  std::string key;
  for (const auto& e : config.endpoints) key += e + ",";
  key += config.prefix;
  return fmt::format("{}/gpupool/directory-{:016x}.txt", dir, std::hash<std::string>{}(key));
}

}  // namespace

Status ReadEtcdSettings(const TomlFile* file, EtcdConfig* config, bool agent) {
  std::string password_file;
  if (file == nullptr) {
    if (std::string p = EnvOrEmpty("GPUPOOL_ETCD_PREFIX"); !p.empty()) config->prefix = p;
    config->user = EnvOrEmpty("GPUPOOL_ETCD_USER");
    password_file = EnvOrEmpty("GPUPOOL_ETCD_PASSWORD_FILE");
    config->tls = {EnvOrEmpty("GPUPOOL_ETCD_CERT"), EnvOrEmpty("GPUPOOL_ETCD_KEY"), EnvOrEmpty("GPUPOOL_ETCD_CA")};
  } else {
    const toml::table* etcd = file->root()["etcd"].as_table();
    if (etcd == nullptr) {
      if (file->root().contains("etcd")) return file->Error(*file->root().get("etcd"), "[etcd] must be a table");
    } else {
      // An agent's [etcd] also has ttl and advertise (agent/agent_config.cc reads them).
      Status s = agent ? file->CheckKeys(*etcd, {"prefix", "user", "password_file", "ca", "cert", "key", "ttl",
                                                 "advertise"}, "[etcd]")
                       : file->CheckKeys(*etcd, {"prefix", "user", "password_file", "ca", "cert", "key"}, "[etcd]");
      if (!s.ok()) return s;
      for (auto [key, out] : {std::pair<const char*, std::string*>{"prefix", &config->prefix}, {"user", &config->user},
                              {"password_file", &password_file}, {"ca", &config->tls.ca}, {"cert", &config->tls.cert},
                              {"key", &config->tls.key}}) {
        if (Status s = file->GetString(*etcd, key, out); !s.ok()) return s;
      }
    }
  }
  const std::string source = file == nullptr ? "$GPUPOOL_ETCD_*" : file->path();
  if (Status s = CheckDirectoryPrefix(config->prefix, source); !s.ok()) return s;
  if (!config->user.empty() && password_file.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: etcd user '{}' needs a password_file", source, config->user));
  }
  if (!password_file.empty()) {
    if (config->user.empty()) {
      return Status(StatusCode::kInvalidArgument, fmt::format("{}: etcd password_file without a user", source));
    }
    auto password = ReadPassword(password_file, source);
    if (!password.ok()) return password.status();
    config->password = std::move(password).value();
  }
  if (config->tls.cert.empty() != config->tls.key.empty()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: etcd cert and key go together", source));
  }
  return Status::Ok();
}

std::string AgentsPrefix(const EtcdConfig& config) { return config.prefix + "/agents/"; }

std::string EncodeDirectoryEntry(wire::DirectoryEntry::Reader entry) {
  capnp::JsonCodec codec;
  // Fields at their defaults (nothing allocated, not cordoned, no class) are left out: every byte of an entry is
  // read by every client placing on the pool, through etcd's JSON gateway.
  codec.setHasMode(capnp::HasMode::NON_DEFAULT);
  return std::string(codec.encode(entry).cStr());
}

DeviceInfo DeviceFromWire(wire::Device::Reader d) {
  DeviceInfo dev;
  dev.index = d.getIndex();
  dev.uuid = d.getUuid();
  dev.model = d.getModel();
  dev.device_class = d.getDeviceClass();
  dev.emulated = d.getEmulated();
  dev.memory_total = d.getMemoryTotal();
  dev.memory_allocated = d.getMemoryAllocated();
  dev.compute_allocated = FractionFromShare(d.getShareAllocatedMicros());
  dev.cordoned = d.getCordoned();
  return dev;
}

Result<ServerInfo> DecodeDirectoryEntry(std::string_view json) {
  auto bad = [](std::string why) { return Status(StatusCode::kInvalidArgument, "directory entry: " + why); };
  if (json.size() > kMaxEntryBytes) return bad(fmt::format("{} bytes, more than an entry holds", json.size()));
  capnp::MallocMessageBuilder message;
  auto entry = message.initRoot<wire::DirectoryEntry>();
  try {
    capnp::JsonCodec codec;
    codec.decode(kj::arrayPtr(json.data(), json.size()), entry);
  } catch (const kj::Exception& e) {
    return bad(fmt::format("not an entry: {}", e.getDescription().cStr()));
  }
  auto e = entry.asReader();
  if (e.getFormat() != 1) return bad(fmt::format("format {} is not known here", e.getFormat()));
  if (!ValidText(e.getName()) || !ValidText(e.getInstanceId()) || !ValidText(e.getAddress()) ||
      !ValidText(e.getPersonality())) {
    return bad("a name, id or address is too long or holds control characters");
  }
  ServerInfo info;
  info.address = e.getAddress();
  if (Status s = CheckServerAddress(info.address, "its address"); !s.ok()) return bad(s.message());
  if (info.address.rfind("unix:", 0) == 0) {
    // A socket path means a socket on the reader's own host: not something a shared directory can vouch for.
    return bad(fmt::format("a Unix socket address ({}) is this host's, not the pool's", info.address));
  }
  if (e.getDevices().size() > kMaxDevices) return bad(fmt::format("{} devices", e.getDevices().size()));
  info.up = true;
  info.summary = true;
  info.name = e.getName();
  info.instance_id = e.getInstanceId();
  info.draining = e.getDraining();
  info.personality = e.getPersonality();
  info.protocol_version = e.getProtocolVersion();
  info.lease_ttl_s = static_cast<double>(e.getLeaseTtlMs()) / 1000.0;
  info.lease_count = e.getLeases();
  for (auto d : e.getDevices()) {
    if (!ValidText(d.getUuid()) || !ValidText(d.getModel()) || !ValidText(d.getDeviceClass())) {
      return bad("a device's uuid, model or class is too long or holds control characters");
    }
    if (d.getIndex() != info.devices.size()) return bad("devices out of order");
    DeviceInfo dev = DeviceFromWire(d);
    // Past the device's size: clamped, never trusted to wrap placement's arithmetic.
    dev.memory_allocated = std::min(dev.memory_allocated, dev.memory_total);
    dev.compute_allocated = std::min(dev.compute_allocated, 1.0);
    info.devices.push_back(std::move(dev));
  }
  return info;
}

Result<ServerInfo> DecodeDirectoryKeyValue(const std::string& prefix, const std::string& key, std::string_view value) {
  auto info = DecodeDirectoryEntry(value);
  if (!info.ok()) return info.status();
  // The key names the instance: an entry claiming another's id (a copy, a forgery) is not counted twice.
  if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0 ||
      key.substr(prefix.size()) != info->instance_id) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("directory entry: its key does not name its instance {}", info->instance_id));
  }
  return info;
}

kj::Promise<Result<DirectoryRead>> ReadDirectory(EtcdClient& etcd) {
  const std::string prefix = AgentsPrefix(etcd.config());
  return etcd.RangePrefix(prefix).then([prefix](Result<EtcdRange>&& range) -> Result<DirectoryRead> {
    if (!range.ok()) return range.status();
    DirectoryRead out;
    out.revision = range->revision;
    for (const EtcdKeyValue& kv : range->kvs) {
      if (out.entries.size() >= kMaxDirectoryEntries) break;
      auto info = DecodeDirectoryKeyValue(prefix, kv.key, kv.value);
      if (!info.ok()) {
        GP_DEBUG("directory", "{}: skipped: {}", kv.key, info.status().message());
        continue;
      }
      out.entries.push_back({kv.mod_revision, std::move(info).value()});
    }
    return out;
  });
}

std::vector<ServerInfo> NewestPerAddress(const std::vector<DirectoryEntryAt>& entries) {
  std::map<std::string, size_t> newest;  // Address -> index in `entries`.
  for (size_t i = 0; i < entries.size(); ++i) {
    auto [it, added] = newest.emplace(entries[i].info.address, i);
    if (!added && entries[i].revision > entries[it->second].revision) it->second = i;
  }
  std::vector<ServerInfo> out;
  out.reserve(newest.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (newest[entries[i].info.address] == i) out.push_back(entries[i].info);
  }
  return out;
}

std::vector<std::string> RememberedAgents(const EtcdConfig& config) {
  std::vector<std::string> out;
  const std::string path = CacheFile(config);
  if (path.empty()) return out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line) && out.size() < 100000) {
    if (CheckServerAddress(line, path).ok()) out.push_back(line);
  }
  return out;
}

void RememberAgents(const EtcdConfig& config, const std::vector<std::string>& addresses) {
  const std::string path = CacheFile(config);
  if (path.empty() || addresses.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // Named for this writer alone: two Pools of one process may remember at once.
  const std::string temporary = fmt::format("{}.{}.{}", path, getpid(), RandomHex(6));
  {
    std::ofstream out(temporary, std::ios::trunc);
    for (const auto& a : addresses) out << a << "\n";
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return;
    }
  }
  std::filesystem::rename(temporary, path, ec);  // Whole or not at all, for a process reading it now.
  if (ec) std::filesystem::remove(temporary, ec);
}

}  // namespace gpupool::internal
