// The pool's directory (ARCHITECTURE.md, section 3): where agents publish a compact summary of themselves (etcd,
// under PREFIX/agents/INSTANCE-ID, kept alive by an etcd lease), and where clients read the pool from in one range
// read instead of describing every agent. A hint for placement: the agent still decides every reservation.
#ifndef GPUPOOL_CLIENT_DIRECTORY_H_
#define GPUPOOL_CLIENT_DIRECTORY_H_

#include <string>
#include <string_view>
#include <vector>

#include <kj/async.h>

#include "client/etcd.h"
#include "core/toml_config.h"
#include "gpupool/pool.h"
#include "gpupool/state.h"
#include "gpupool/status.h"
#include "pool.capnp.h"

namespace gpupool::internal {

// Where a pool comes from: the agents named (pool file, $GPUPOOL_SERVERS, options), and the directory if one is
// configured (then the named agents are those to fall back to when it does not answer).
struct PoolSource {
  std::vector<std::string> servers;
  std::optional<EtcdConfig> directory;
  std::string source;  // Where it was configured, for messages.
};
Result<PoolSource> ResolvePool(const PoolOptions& options);
// "host:port", "tls:host:port" or "unix:/path"; kInvalidArgument naming `source` otherwise.
Status CheckServerAddress(const std::string& address, const std::string& source);

// Reads the [etcd] table of a TOML file (prefix, user, password_file, ca, cert, key; an agent's also ttl and
// advertise, which it reads itself) or, without a file, the GPUPOOL_ETCD_* variables of the same names.
Status ReadEtcdSettings(const TomlFile* file, EtcdConfig* config, bool agent = false);

// PREFIX/agents/: the keys agents register under.
std::string AgentsPrefix(const EtcdConfig& config);

// A device as an agent describes it (describe, or its directory entry), without activity.
DeviceInfo DeviceFromWire(wire::Device::Reader device);

// An agent's entry as stored (JSON), and back. Decoding checks everything: entries are anybody's writes to etcd.
std::string EncodeDirectoryEntry(wire::DirectoryEntry::Reader entry);
Result<ServerInfo> DecodeDirectoryEntry(std::string_view json);

// The agents registered now, one per instance, in key order (entries that do not decode are skipped and logged), and
// the store's revision the read saw.
struct DirectoryEntryAt {
  int64_t revision = 0;  // When it was last put (etcd's mod_revision).
  ServerInfo info;
};
struct DirectoryRead {
  std::vector<DirectoryEntryAt> entries;
  int64_t revision = 0;
};
// One entry per address, the newest (an agent restarted at its address registers under a new instance id while its
// old entry lives on until its TTL; a forged entry may name a live agent's address), in the order given.
std::vector<ServerInfo> NewestPerAddress(const std::vector<DirectoryEntryAt>& entries);
// The most entries a directory read or watch keeps: past it, the rest is not an agent pool of ours.
inline constexpr size_t kMaxDirectoryEntries = 100000;
kj::Promise<Result<DirectoryRead>> ReadDirectory(EtcdClient& etcd);
// The entry stored at `key` (under AgentsPrefix), checked as ReadDirectory checks it: its key must name its instance.
Result<ServerInfo> DecodeDirectoryKeyValue(const std::string& prefix, const std::string& key, std::string_view value);

// The agents a directory listed last time one was read on this host by this user, for a later process to fall back
// to when the directory does not answer ($XDG_CACHE_HOME/gpupool or ~/.cache/gpupool; one file per directory).
std::vector<std::string> RememberedAgents(const EtcdConfig& config);
void RememberAgents(const EtcdConfig& config, const std::vector<std::string>& addresses);

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_DIRECTORY_H_
