// The client library's private KJ thread: connections to agents, RPC with deadlines, lease heartbeats.
// Public calls cross into it with Run(); no KJ object ever leaves this thread (shared/STYLE.md, point 5).
#ifndef GPUPOOL_CLIENT_RUNTIME_H_
#define GPUPOOL_CLIENT_RUNTIME_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include "client/directory.h"
#include "client/etcd.h"
#include "client/placement.h"
#include "core/tls.h"
#include "gpupool/pool.h"
#include "gpupool/state.h"
#include "gpupool/status.h"
#include "pool.capnp.h"

namespace gpupool::internal {

// Converts an exception from an RPC to `address` into a Status that says what happened.
Status StatusFromException(const kj::Exception& e, const std::string& address, std::string_view what);
// Converts an agent's Outcome into a Status.
Status StatusFromOutcome(wire::Outcome::Reader outcome, const std::string& address);

// What placement may use of `info` (client/placement.h), as server `index` of a list: no devices when it is down
// or draining.
ServerView PlacementView(const ServerInfo& info, size_t index);

class Runtime : public kj::TaskSet::ErrorHandler {
 public:
  explicit Runtime(const PoolOptions& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Runs `func` on the loop thread and blocks until the promise it returns resolves. `func` must not throw
  // across; use the helpers below, which turn exceptions into Status.
  template <typename Func>
  auto Run(Func&& func) {
    // Closures posted earlier run first, so a synchronous call never overtakes an unwaited one.
    return executor_->executeSync([this, &func]() {
      Drain();
      return func();
    });
  }

  // Queues `fn` to run on the loop thread and returns at once (no thread hand-off wait): for calls whose reply
  // nobody waits for. Posted closures run in posting order, before the function of any later Run().
  void Post(std::function<void()> fn);

  // The pool state last used for placement. Placement may start from it (saving a describe round to every
  // agent); the agents still decide, and a busy answer or any doubt forces a fresh describe.
  struct Snapshot {
    std::vector<ServerInfo> servers;
    // What placement sees of each server, in step with `servers` (no devices: the server cannot take a lease), so
    // that a placement from the snapshot copies nothing of the pool.
    std::vector<ServerView> views;
    std::chrono::steady_clock::time_point taken;
    bool valid = false;

    void Set(std::vector<ServerInfo> fresh, std::chrono::steady_clock::time_point at);
    // The server at `address` and its index, or nullptr.
    ServerInfo* Find(const std::string& address, size_t* index);
    // servers[index] changed: its view follows.
    void Restate(size_t index);
  };
  std::mutex snapshot_mu;
  Snapshot snapshot;
  void InvalidateSnapshot() {
    std::lock_guard<std::mutex> lock(snapshot_mu);
    snapshot.valid = false;
  }

  // `slices` were released: their capacity is free again in the snapshot (if it is valid and lists their agents).
  void NoteReleased(const std::vector<Slice>& slices);

  // What this runtime last learned from the pool's directory: the agents it listed (to fall back to while it does
  // not answer), and whether it has been said that it does not.
  struct DirectoryMemory {
    std::vector<std::string> agents;
    bool down_said = false;
    // A client that reads the directory more than once is long-lived: from its second read on, it watches the
    // directory and places from what the watch keeps current (`watched`, live while the watch runs), reading it
    // again only when the watch ends (its member went away; and every kWatchResync, in case a member hung).
    int reads = 0;
    bool watching = false;
    bool live = false;
    std::map<std::string, DirectoryEntryAt> watched;  // Instance id -> entry, at most kMaxDirectoryEntries.
  };
  std::mutex directory_mu;
  DirectoryMemory directory_memory;

  // From another thread that runs a KJ event loop (an agent's): runs `func` on the loop thread; the promise it
  // returns resolves on the caller's loop with `func`'s result, which must hold no KJ object of this loop.
  template <typename Func>
  auto RunAsync(Func&& func) {
    return executor_->executeAsync(kj::fwd<Func>(func));
  }

  // ---- Leases moved between agents (an Outcome's `moved`). Any thread.
  // The agent that holds now what lease `id` held on `server`: `server` itself unless an agent said it moved.
  std::string LeaseAgent(const std::string& id, const std::string& server);
  // Where device `device` of `server` is for lease `id` now (its index on LeaseAgent(id, server)).
  uint32_t LeaseDevice(const std::string& id, const std::string& server, uint32_t device);
  // Takes note of `outcome.moved`, as agent `server` answered a call about lease `id`. Whether it had one.
  bool NoteLeaseMoved(const std::string& id, const std::string& server, wire::Outcome::Reader outcome);

  // The pool's directory this runtime reads; set before the first call that reads it.
  void SetDirectory(EtcdConfig config) { directory_ = std::move(config); }
  const std::optional<EtcdConfig>& directory() const { return directory_; }

  // --- Loop thread only. ---

  // The directory's client, made at the first use; fails when it has none or its TLS files cannot be read.
  Result<EtcdClient*> Etcd();

  // A connected, version-checked agent capability, connecting on first use or after a disconnect.
  kj::Promise<wire::Agent::Client> Agent(const std::string& address);
  // `promise` bounded by the call timeout: kj exception "timed out" afterwards.
  template <typename T>
  kj::Promise<T> Deadline(kj::Promise<T> promise) {
    return io_->provider->getTimer().timeoutAfter(call_timeout_.count() * kj::MILLISECONDS, kj::mv(promise));
  }
  kj::Timer& timer() { return io_->provider->getTimer(); }
  std::chrono::milliseconds describe_timeout() const { return describe_timeout_; }
  // Why `address` is skipped now (it missed describe's deadline lately); nullopt when it is asked as usual.
  std::optional<std::string> Silent(const std::string& address) const;
  // `address` missed describe's deadline: it is skipped for a while and probed in the background; an answer to the
  // probe ends that at once. Returns the kTimeout status to report for it.
  Status MarkSilent(const std::string& address);
  // Holds a background task (heartbeat) under `key` until StopTask(key) or shutdown.
  void StartTask(const std::string& key, kj::Promise<void> task);
  void StopTask(const std::string& key);
  // Drops the connection to `address` (after an error) so the next call reconnects.
  void Forget(const std::string& address);
  // A connected stream to `address` (dead peers detected as for agents), failing after `timeout`; over TLS, with
  // the server's certificate checked, for a "tls:host:port" address.
  kj::Promise<kj::Own<kj::AsyncIoStream>> ConnectStream(const std::string& address, std::chrono::milliseconds timeout);

 private:
  struct Connection;
  // Forgets `connection` on a later turn, and only if it is still the one registered for its address: it may be
  // called from inside the connection's own promises, which must not be destroyed while they run.
  void ForgetLater(Connection* connection);
  void taskFailed(kj::Exception&& exception) override;
  void Drain();  // Loop thread: runs the posted closures.
  kj::Promise<void> WakeLoop(kj::UnixEventPort::FdObserver& observer);
  kj::Promise<wire::Agent::Client> AgentUntagged(const std::string& address);
  kj::Promise<wire::Agent::Client> Connect(const std::string& address, Connection* connection);
  // `expected` if it is still the connection registered for `address`; otherwise throws DISCONNECTED.
  Connection* Registered(const std::string& address, Connection* expected);

  kj::Promise<void> ProbeSilent(std::string address);

  std::chrono::milliseconds connect_timeout_, call_timeout_, describe_timeout_;
  // Servers that missed describe's deadline, until when they are skipped and why.
  struct SilentServer {
    std::chrono::steady_clock::time_point until;
    std::string why;
  };
  std::map<std::string, SilentServer> silent_;
  // Where leases went: (lease, agent it left) -> the agent it went to, and each device's index there.
  struct LeaseMove {
    std::string server;
    std::map<uint32_t, uint32_t> devices;
  };
  std::mutex moves_mu_;
  std::map<std::pair<std::string, std::string>, LeaseMove> lease_moves_;  // Guarded by moves_mu_.
  // The agent that holds what lease `id` held on `server`, and (if `device` is set) that device's index there.
  std::string FollowLease(const std::string& id, const std::string& server, uint32_t* device);
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable started_;
  const kj::Executor* executor_ = nullptr;
  kj::AsyncIoContext* io_ = nullptr;
  kj::Own<kj::PromiseFulfiller<void>> stop_;
  // Loop-thread state.
  std::optional<EtcdConfig> directory_;
  kj::Own<EtcdClient> etcd_;
  kj::Own<TlsSetup> tls_;  // For "tls:" agents, made at the first (ClientTlsFiles); outlives the connections.
  std::map<std::string, kj::Own<Connection>> connections_;
  std::map<std::string, kj::Promise<void>> tasks_;
  kj::Own<kj::TaskSet> deferred_;
  int wake_fd_ = -1;  // eventfd: a Post() to an idle loop writes it.
  std::mutex post_mu_;
  std::vector<std::function<void()>> posted_;
  bool wake_pending_ = false;
};

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_RUNTIME_H_
