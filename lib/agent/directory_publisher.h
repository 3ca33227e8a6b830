// An agent's registration in the pool's directory (ARCHITECTURE.md, section 3): its entry at PREFIX/agents/ID,
// attached to an etcd lease it keeps alive (the lease's TTL is the agent's liveness: an agent that dies leaves the
// directory within it), published again whenever it changes, at most every kPublishInterval (changes in between
// are folded into one). When etcd does not answer, the agent serves on and retries; when etcd has lost its lease (the
// cluster was down longer than the TTL, or rebuilt), it registers again.
#ifndef GPUPOOL_AGENT_DIRECTORY_PUBLISHER_H_
#define GPUPOOL_AGENT_DIRECTORY_PUBLISHER_H_

#include <chrono>
#include <functional>
#include <string>

#include <kj/async-io.h>

#include "agent/metrics.h"
#include "client/etcd.h"

namespace gpupool::agent {

class DirectoryPublisher {
 public:
  // How soon a change reaches the directory, at most (clients allow for it: client/pool.cc's kDirectoryLag).
  static constexpr std::chrono::milliseconds kPublishInterval{100};

  // `summarize` returns the entry as it should be now; it is called on the agent's loop every kPublishInterval.
  // `counters` (the agent's, for /metrics) must outlive the publisher.
  static Result<kj::Own<DirectoryPublisher>> Make(kj::AsyncIoProvider& io, internal::EtcdConfig config,
                                                  std::chrono::milliseconds ttl, std::string instance_id,
                                                  std::function<std::string()> summarize, AgentCounters* counters);
  ~DirectoryPublisher();

  // Registers, keeps the registration alive and current; never resolves.
  kj::Promise<void> Run();
  // Takes the entry out of the directory now (an agent that stops), within a second at most.
  kj::Promise<void> Withdraw();

 private:
  DirectoryPublisher(kj::Timer& timer, std::chrono::milliseconds ttl, std::string key,
                     std::function<std::string()> summarize);
  kj::Promise<void> Step();
  kj::Promise<Status> Register();
  // Renews the lease; notices a lost lease (lease_ = 0) or a deleted entry (published_ cleared).
  kj::Promise<Status> KeepAlive();
  void Failed(const Status& why);

  kj::Timer& timer_;
  kj::Own<internal::EtcdClient> etcd_;
  const std::chrono::milliseconds ttl_;
  const std::string key_;
  std::function<std::string()> summarize_;
  AgentCounters* counters_ = nullptr;
  int64_t lease_ = 0;    // etcd's lease of the entry; 0: not registered.
  int64_t granted_ = 0;  // The lease last granted, registered or not yet: what Withdraw() revokes.
  std::string published_;
  kj::TimePoint last_keepalive_;
  int failures_ = 0;        // In a row; retries back off with it.
  bool registered_once_ = false;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_DIRECTORY_PUBLISHER_H_
