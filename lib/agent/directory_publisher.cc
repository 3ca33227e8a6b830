#include "agent/directory_publisher.h"

#include <algorithm>

#include <fmt/format.h>

#include "client/directory.h"
#include "core/log.h"

namespace gpupool::agent {

Result<kj::Own<DirectoryPublisher>> DirectoryPublisher::Make(kj::AsyncIoProvider& io, internal::EtcdConfig config,
                                                             std::chrono::milliseconds ttl, std::string instance_id,
                                                             std::function<std::string()> summarize,
                                                             AgentCounters* counters) {
  std::string key = internal::AgentsPrefix(config) + instance_id;
  auto etcd = internal::EtcdClient::Make(io.getNetwork(), io.getTimer(), std::move(config));
  if (!etcd.ok()) return etcd.status();
  auto publisher = kj::Own<DirectoryPublisher>(
      new DirectoryPublisher(io.getTimer(), ttl, std::move(key), std::move(summarize)),
      kj::_::HeapDisposer<DirectoryPublisher>::instance);
  publisher->etcd_ = std::move(etcd).value();
  publisher->counters_ = counters;
  counters->directory_configured = true;
  return publisher;
}

DirectoryPublisher::DirectoryPublisher(kj::Timer& timer, std::chrono::milliseconds ttl, std::string key,
                                       std::function<std::string()> summarize)
    : timer_(timer), ttl_(ttl), key_(std::move(key)), summarize_(std::move(summarize)),
      last_keepalive_(timer.now()) {}

DirectoryPublisher::~DirectoryPublisher() = default;

void DirectoryPublisher::Failed(const Status& why) {
  ++counters_->directory_failures;
  // Said once per outage: an agent without its directory still serves the clients that know it.
  if (failures_++ == 0) {
    GP_WARN("directory", "cannot {} {} in the pool's directory: {} (serving on; retrying)",
            lease_ == 0 ? "register" : "keep", key_, why.message());
  }
}

kj::Promise<Status> DirectoryPublisher::Register() {
  const int64_t ttl_s = std::max<int64_t>(1, ttl_.count() / 1000);
  return etcd_->Grant(ttl_s).then([this](Result<int64_t>&& lease) -> kj::Promise<Status> {
    if (!lease.ok()) return lease.status();
    std::string entry = summarize_();
    int64_t id = *lease;
    granted_ = id;  // Withdraw() revokes it even if the agent stops before the put is answered.
    return etcd_->Put(key_, entry, id).then([this, id, entry](Status put) {
      if (!put.ok()) return put;
      lease_ = id;
      published_ = entry;
      counters_->directory_registered = true;
      ++counters_->directory_registrations;
      last_keepalive_ = timer_.now();
      GP_INFO("directory", "{} {} (etcd lease {:x}, ttl {} s)", registered_once_ ? "registered again at" : "registered at",
              key_, id, ttl_.count() / 1000);
      registered_once_ = true;
      return put;
    });
  });
}

kj::Promise<Status> DirectoryPublisher::KeepAlive() {
  return etcd_->KeepAlive(lease_).then([this](Result<int64_t>&& left) -> kj::Promise<Status> {
    if (!left.ok()) return left.status();
    if (*left == 0) {
      // etcd no longer has the lease (down longer than its TTL, or rebuilt): the entry is gone with it.
      GP_WARN("directory", "the pool's directory lost {}'s registration; registering again", key_);
      lease_ = 0;
      counters_->directory_registered = false;
      return Status::Ok();
    }
    last_keepalive_ = timer_.now();
    // The lease lives; the entry may not (someone deleted the key): then it is put again below.
    return etcd_->RangePrefix(key_).then([this](Result<internal::EtcdRange>&& range) {
      if (!range.ok()) return range.status();
      if (range->kvs.empty() && lease_ != 0) {
        GP_WARN("directory", "{} was deleted from the pool's directory; publishing it again", key_);
        published_.clear();
      }
      return Status::Ok();
    });
  });
}

kj::Promise<void> DirectoryPublisher::Step() {
  kj::Promise<Status> done = Status::Ok();
  if (lease_ == 0) {
    done = Register();
  } else {
    // The keepalive (when due) and the put of a change in one step: a change waits one interval at most.
    kj::Promise<Status> kept = Status::Ok();
    if (timer_.now() - last_keepalive_ >= ttl_.count() / 3 * kj::MILLISECONDS) kept = KeepAlive();
    done = kept.then([this](Status status) -> kj::Promise<Status> {
      if (!status.ok() || lease_ == 0) return status;
      std::string entry = summarize_();
      if (entry == published_) return Status::Ok();
      return etcd_->Put(key_, entry, lease_).then([this, entry](Status put) {
        if (put.ok()) {
          published_ = entry;
          ++counters_->directory_publishes;
        } else if (put.code() == StatusCode::kNotFound) {
          lease_ = 0;  // "requested lease not found": register again.
          counters_->directory_registered = false;
        }
        return put;
      });
    });
  }
  return done
      .catch_([](kj::Exception&& e) {
        // Whatever went wrong, the agent keeps trying: an exception must not end its registration for good.
        return Status(StatusCode::kInternal, e.getDescription().cStr());
      })
      .then([this](Status status) {
        if (status.ok()) {
          if (failures_ > 0) {
            GP_INFO("directory", "the pool's directory answers again ({} at {})", lease_ ? "registered" : "registering",
                    key_);
          }
          failures_ = 0;
          return timer_.afterDelay(kPublishInterval.count() * kj::MILLISECONDS);
        }
        Failed(status);
        // 0.2 s, doubling to 2 s: a cluster coming back finds the agents registering within seconds.
        int64_t ms = std::min<int64_t>(2000, 200ll << std::min(failures_ - 1, 4));
        return timer_.afterDelay(ms * kj::MILLISECONDS);
      });
}

kj::Promise<void> DirectoryPublisher::Run() {
  return Step().then([this] { return Run(); });
}

kj::Promise<void> DirectoryPublisher::Withdraw() {
  const int64_t lease = lease_ != 0 ? lease_ : granted_;
  if (lease == 0) return kj::READY_NOW;
  lease_ = 0;
  granted_ = 0;
  counters_->directory_registered = false;
  auto revoked = etcd_->Revoke(lease).then([this](Status s) {
    if (s.ok()) GP_INFO("directory", "left the pool's directory ({})", key_);
  });
  return timer_.timeoutAfter(1 * kj::SECONDS, kj::mv(revoked)).catch_([](kj::Exception&&) {});
}

}  // namespace gpupool::agent
