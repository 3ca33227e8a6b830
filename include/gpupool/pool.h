// The entry point: a Pool connects to the agents of a pool and allocates leases from them.
//
//   auto pool = gpupool::Pool::Connect({});
//   if (!pool.ok()) { ... pool.status().ToString() ... }
//   gpupool::Request request;
//   request.count = 2;
//   request.fraction = 0.5;
//   auto lease = pool->Allocate(request);   // Released when `lease` goes out of scope.
#ifndef GPUPOOL_POOL_H_
#define GPUPOOL_POOL_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gpupool/lease.h"
#include "gpupool/request.h"
#include "gpupool/state.h"
#include "gpupool/status.h"

namespace gpupool {

namespace internal {
class Runtime;
}

struct PoolOptions {
  // Agent addresses ("host:port", "unix:/path"). Default: empty, meaning $GPUPOOL_SERVERS
  // ("host:port,host:port"), else the pool file.
  std::vector<std::string> servers;
  // Pool file to read when `servers` is empty. Default: empty, meaning $GPUPOOL_POOL, else
  // ~/.config/gpupool/pool.toml, else /etc/gpupool/pool.toml.
  std::string pool_file;
  // The pool's directory, for pools too large to list: "etcd:http://HOST:2379" (several endpoints separated by
  // commas; https:// for TLS). Agents registered there are the pool; `servers` (or the pool file's) are then the
  // agents to fall back to while the directory does not answer. Default: empty, meaning $GPUPOOL_DIRECTORY, else
  // the pool file's `directory`. Its settings (prefix, user, password_file, ca, cert, key) come from the pool file's
  // [etcd] table, else from $GPUPOOL_ETCD_PREFIX, _USER, _PASSWORD_FILE, _CA, _CERT, _KEY.
  std::string directory;
  // How long to wait for an agent to accept a connection. Default 2 s.
  std::chrono::milliseconds connect_timeout{2000};
  // How long to wait for an agent to answer a call. Default 5 s.
  std::chrono::milliseconds call_timeout{5000};
  // How long State() and placement wait for an agent's description, connecting included. An agent that misses it
  // (one that accepts and never answers, an unreachable address) is reported down and not asked again for 30 s
  // while this Pool probes it in the background, so the rest of the pool answers in the time of its slowest live
  // agent. Default 1.5 s.
  std::chrono::milliseconds describe_timeout{1500};
};

// Thread safety: all methods may be called concurrently from any thread. The Pool may be destroyed while
// leases it granted are still alive; they keep their own connection.
class Pool {
 public:
  // Resolves the server list (see PoolOptions) and checks it is non-empty and well-formed. Does not require any
  // server to answer: State() reports unreachable servers as down, Allocate() fails with kUnavailable.
  static Result<Pool> Connect(PoolOptions options = {});

  Pool(Pool&&) noexcept;
  Pool& operator=(Pool&&) noexcept;
  ~Pool();

  const std::vector<std::string>& servers() const;

  // Asks every server in parallel. Servers that do not answer are listed with up == false and the reason.
  // `history`: also the devices' and leases' telemetry samples of that long ago until now (agents keep 10 min).
  // With a directory (PoolOptions::directory), the agents it lists are asked; while it does not answer, the agents
  // known (named, or listed by it before), and PoolState::directory_error says so.
  PoolState State(std::chrono::seconds history = std::chrono::seconds(0));

  // With a directory: what its agents published there (one read, however large the pool; ServerInfo::summary set:
  // devices without slices or activity, no leases). Without one: the same as State().
  PoolState Summary();

  // As State(), asking only the agents at `addresses` (e.g. those of a Summary() shown to a user).
  PoolState Describe(const std::vector<std::string>& addresses, std::chrono::seconds history = std::chrono::seconds(0));

  bool has_directory() const;

  // Places, reserves and commits `request`. Fails with kInvalidArgument (bad request), kUnsatisfiable (this pool
  // can never grant it, with the reason), kResourceExhausted (busy now; set request.wait to queue), kTimeout
  // (request.wait passed), or kUnavailable (no server answered).
  Result<Lease> Allocate(const Request& request);

 private:
  Pool(std::shared_ptr<internal::Runtime> runtime, std::vector<std::string> servers);
  std::shared_ptr<internal::Runtime> runtime_;
  std::vector<std::string> servers_;
};

// Where Connect() finds the servers; *source says which: "the server list", "$GPUPOOL_SERVERS", or the pool file.
// Returns the resolved list or why there is none.
Result<std::vector<std::string>> ResolveServers(const PoolOptions& options, std::string* source = nullptr);

}  // namespace gpupool

#endif  // GPUPOOL_POOL_H_
