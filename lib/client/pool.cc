#include "gpupool/pool.h"

#include <algorithm>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "client/directory.h"
#include "client/lease_core.h"
#include "client/placement.h"
#include "core/log.h"
#include "core/util.h"
#include "gpupool/units.h"

namespace gpupool {

using internal::Runtime;

namespace internal {

ServerView PlacementView(const ServerInfo& info, size_t index) {
  ServerView v;
  v.server = index;
  if (!info.up || info.draining) return v;
  v.devices.reserve(info.devices.size());
  for (const DeviceInfo& d : info.devices) {
    DeviceView dv;
    dv.index = d.index;
    dv.model = d.model;
    dv.device_class = d.device_class;
    dv.memory_total = d.memory_total;
    dv.memory_free = d.memory_total - std::min(d.memory_total, d.memory_allocated);
    uint32_t used = ShareFromFraction(d.compute_allocated);
    dv.share_free = used >= kShareWhole ? 0 : kShareWhole - used;
    dv.whole_free = d.memory_allocated == 0 && used == 0;
    if (d.cordoned) {  // Full for now (the agent would refuse it), not gone: --wait waits for the uncordon.
      dv.memory_free = 0;
      dv.share_free = 0;
      dv.whole_free = false;
    }
    v.devices.push_back(std::move(dv));
  }
  return v;
}

void Runtime::Snapshot::Set(std::vector<ServerInfo> fresh, std::chrono::steady_clock::time_point at) {
  servers = std::move(fresh);
  views.clear();
  for (size_t i = 0; i < servers.size(); ++i) views.push_back(PlacementView(servers[i], i));
  taken = at;
  valid = true;
}

ServerInfo* Runtime::Snapshot::Find(const std::string& address, size_t* index) {
  for (size_t i = 0; i < servers.size(); ++i) {
    if (servers[i].address == address) {
      *index = i;
      return &servers[i];
    }
  }
  return nullptr;
}

void Runtime::Snapshot::Restate(size_t index) { views[index] = PlacementView(servers[index], index); }

}  // namespace internal

namespace {

using SteadyClock = std::chrono::steady_clock;

Activity ToActivity(wire::Activity::Reader a) {
  Activity out;
  out.at_unix_s = static_cast<double>(a.getUnixMs()) / 1000.0;
  out.memory_used = a.getMemoryUsed();
  if (a.getUtilization() >= 0) out.utilization = a.getUtilization();
  out.calls_per_s = a.getCallsPerSecond();
  out.bytes_to_device_per_s = a.getBytesToDevicePerSecond();
  out.bytes_from_device_per_s = a.getBytesFromDevicePerSecond();
  if (a.getTemperatureC() >= 0) out.temperature_c = a.getTemperatureC();
  if (a.getPowerW() >= 0) out.power_w = a.getPowerW();
  return out;
}

std::vector<Activity> ToHistory(capnp::List<wire::Activity>::Reader samples) {
  std::vector<Activity> out;
  out.reserve(samples.size());
  for (auto a : samples) out.push_back(ToActivity(a));
  return out;
}

void FillServerInfo(wire::AgentState::Reader st, ServerInfo* info) {
  info->up = true;
  info->error.clear();
  info->name = st.getName();
  info->instance_id = st.getInstanceId();
  info->moves_untold = st.getMovesUntold();
  info->draining = st.getDraining();
  info->protocol_version = st.getProtocolVersion();
  info->lease_ttl_s = static_cast<double>(st.getLeaseTtlMs()) / 1000.0;
  info->idle_after_s = static_cast<double>(st.getIdleAfterMs()) / 1000.0;
  info->personality = st.getPersonality();
  info->personality_next = st.getPersonalityNext();
  info->policy = st.getPolicy();
  info->devices.clear();
  for (auto d : st.getDevices()) {
    DeviceInfo dev = internal::DeviceFromWire(d);
    if (d.hasActivity()) dev.activity = ToActivity(d.getActivity());
    dev.history = ToHistory(d.getHistory());
    info->devices.push_back(std::move(dev));
  }
  info->leases.clear();
  for (auto l : st.getLeases()) {
    LeaseInfo lease;
    lease.id = l.getId();
    lease.user = l.getOwner().getUser();
    lease.host = l.getOwner().getHost();
    lease.pid = l.getOwner().getPid();
    lease.label = l.getOwner().getLabel();
    lease.user_verified = l.getUserVerified();
    lease.user_claimed = l.getUserClaimed();
    lease.committed = l.getCommitted();
    lease.expires_in_s = static_cast<double>(l.getExpiresInMs()) / 1000.0;
    lease.age_s = static_cast<double>(l.getAgeMs()) / 1000.0;
    if (l.hasActivity()) lease.activity = ToActivity(l.getActivity());
    lease.history = ToHistory(l.getHistory());
    lease.sessions = l.getSessions();
    for (auto v : l.getSessionList()) lease.session_list.push_back({v.getDevice(), v.getPid(), ToActivity(v.getActivity())});
    lease.calls_total = l.getCallsTotal();
    lease.bytes_to_device_total = l.getBytesToDeviceTotal();
    lease.bytes_from_device_total = l.getBytesFromDeviceTotal();
    lease.idle_s = static_cast<double>(l.getIdleMs()) / 1000.0;
    lease.idle = l.getIdle();
    lease.suspended = l.getSuspended();
    for (auto s : l.getSlices()) {
      lease.devices.push_back(s.getDevice());
      lease.memory_bytes += s.getMemoryBytes();
      // A suspended lease holds nothing of its devices: it is in their lists again once resumed.
      if (s.getDevice() < info->devices.size() && !lease.suspended) {
        info->devices[s.getDevice()].slices.push_back(
            {lease.id, s.getMemoryBytes(), FractionFromShare(s.getShareMicros()), lease.committed});
      }
    }
    info->leases.push_back(std::move(lease));
  }
}

// Describes every server in parallel. Never fails: a server that does not answer is marked down.
std::vector<ServerInfo> DescribeAll(Runtime& rt, const std::vector<std::string>& servers, bool with_leases,
                                    uint32_t history_seconds = 0) {
  auto infos = std::make_shared<std::vector<ServerInfo>>(servers.size());
  auto statuses = rt.Run([&rt, &servers, infos, with_leases, history_seconds] {
    kj::Vector<kj::Promise<Status>> calls;
    for (size_t i = 0; i < servers.size(); ++i) {
      (*infos)[i].address = servers[i];
      if (auto why = rt.Silent(servers[i])) {
        calls.add(kj::Promise<Status>(Status(StatusCode::kTimeout, *why)));
        continue;
      }
      const std::string address = servers[i];
      // All in parallel, each with a short deadline, connecting included: one silent server must not hold up the
      // answers of the others (it is then skipped for a while: Runtime::MarkSilent).
      auto describe = internal::WithAgent(
          rt, address, "describe", [infos, i, with_leases, history_seconds](Runtime& rt, wire::Agent::Client agent) {
            auto req = agent.describeRequest();
            req.setWithLeases(with_leases);
            req.setHistorySeconds(history_seconds);
            return rt.Deadline(req.send()).then([infos, i](capnp::Response<wire::Agent::DescribeResults>&& r) {
              FillServerInfo(r.getState(), &(*infos)[i]);
              return Status::Ok();
            });
          });
      calls.add(rt.timer()
                    .timeoutAfter(rt.describe_timeout().count() * kj::MILLISECONDS, kj::mv(describe))
                    .catch_([&rt, address](kj::Exception&&) { return rt.MarkSilent(address); }));
    }
    return kj::joinPromises(calls.releaseAsArray());
  });
  for (size_t i = 0; i < servers.size(); ++i) {
    if (!statuses[i].ok()) {
      (*infos)[i].up = false;
      (*infos)[i].error = statuses[i].message();
    }
  }
  return std::move(*infos);
}

// One agent reached at two addresses is one agent: counted twice it would double the pool, and a request placed on
// "both" would reserve one lease id twice on it. Keeps the first address that answered for each.
std::vector<ServerInfo> OncePerAgent(std::vector<ServerInfo> infos) {
  std::vector<ServerInfo> distinct;
  std::map<std::string, std::string> address_of;  // Instance id -> the address kept.
  for (ServerInfo& info : infos) {
    if (info.up && !info.instance_id.empty()) {
      auto [it, first] = address_of.emplace(info.instance_id, info.address);
      if (!first) {
        GP_INFO("client", "{} is agent {} again (as {}): counted once", info.address, info.name, it->second);
        continue;
      }
    }
    distinct.push_back(std::move(info));
  }
  return distinct;
}

std::string DirectoryName(const internal::EtcdConfig& config) {
  return fmt::format("etcd:{}", fmt::join(config.endpoints, ","));
}

// How long a watch of the directory is trusted before the client reads the directory afresh and watches again: a
// member that hangs (rather than closing the stream) would otherwise leave the cache stale for good.
constexpr auto kWatchResync = 10 * kj::SECONDS;

// Loop thread. After `read`, a long-lived client (its second read) watches the directory from the read's revision on
// (DirectoryMemory), unless it watches already.
void WatchFrom(Runtime& rt, const internal::DirectoryRead& read) {
  {
    std::lock_guard<std::mutex> lock(rt.directory_mu);
    auto& memory = rt.directory_memory;
    // Revision 0: no revision in etcd's answer, and a watch from 1 would replay the store's whole history.
    if (++memory.reads < 2 || memory.watching || read.revision <= 0) return;
    memory.watched.clear();
    for (const internal::DirectoryEntryAt& entry : read.entries) memory.watched[entry.info.instance_id] = entry;
  }
  auto etcd = rt.Etcd();
  if (!etcd.ok()) return;
  {
    std::lock_guard<std::mutex> lock(rt.directory_mu);
    rt.directory_memory.watching = true;
    rt.directory_memory.live = false;
  }
  const std::string prefix = internal::AgentsPrefix(rt.directory().value());
  auto watch = (*etcd)->Watch(
      prefix, read.revision + 1,
      [&rt] {
        std::lock_guard<std::mutex> lock(rt.directory_mu);
        rt.directory_memory.live = true;
      },
      [&rt, prefix](const internal::EtcdClient::Change& change) {
        const std::string id = change.key.substr(std::min(change.key.size(), prefix.size()));
        auto info = change.deleted ? Result<ServerInfo>(Status(StatusCode::kNotFound, "deleted"))
                                   : internal::DecodeDirectoryKeyValue(prefix, change.key, change.value);
        std::lock_guard<std::mutex> lock(rt.directory_mu);
        auto& watched = rt.directory_memory.watched;
        if (!info.ok()) {
          watched.erase(id);  // Gone, or no longer an entry to trust.
        } else if (watched.size() < internal::kMaxDirectoryEntries || watched.count(id)) {
          watched[id] = {change.revision, std::move(info).value()};
        }
      });
  auto resync = rt.timer().afterDelay(kWatchResync).then([] {
    return Status(StatusCode::kTimeout, "resynchronising");
  });
  rt.StartTask("directory-watch", watch.exclusiveJoin(kj::mv(resync)).then([&rt](Status why) {
    GP_DEBUG("directory", "watch ended: {}", why.message());
    std::lock_guard<std::mutex> lock(rt.directory_mu);
    rt.directory_memory.live = false;
    rt.directory_memory.watching = false;
  }));
}

struct Gathered {
  std::vector<ServerInfo> servers;
  bool from_directory = false;
  bool watched = false;  // From the watched directory, not a read.
  std::string directory_error;  // The directory did not answer: why (the servers are then the agents known).
};

// The pool as placement, gp-ls and gp-top see it. With a directory: one range read of it (`detail`: then a describe
// of each agent it lists), else, while it does not answer, the agents known (named in the configuration, listed by
// the directory last time) described one by one, with a warning said once per outage. Without one: every agent
// named is described.
Gathered GatherPool(Runtime& rt, const std::vector<std::string>& named, bool detail, bool with_leases,
                    uint32_t history_seconds = 0) {
  Gathered out;
  if (!rt.directory()) {
    out.servers = OncePerAgent(DescribeAll(rt, named, with_leases, history_seconds));
    return out;
  }
  const internal::EtcdConfig& config = *rt.directory();
  auto detailed = [&](std::vector<ServerInfo> servers) {
    out.from_directory = true;
    if (!detail) {
      out.servers = std::move(servers);
      return;
    }
    std::vector<std::string> addresses;
    for (const ServerInfo& info : servers) addresses.push_back(info.address);
    out.servers = OncePerAgent(DescribeAll(rt, addresses, with_leases, history_seconds));
  };
  std::vector<internal::DirectoryEntryAt> watched;
  {
    // Copied under the lock, used after it: describing agents (detail) waits on the loop thread, whose watch takes
    // this lock for every change.
    std::lock_guard<std::mutex> lock(rt.directory_mu);
    if (rt.directory_memory.live) {
      out.watched = true;
      watched.reserve(rt.directory_memory.watched.size());
      for (const auto& [id, entry] : rt.directory_memory.watched) watched.push_back(entry);
    }
  }
  if (out.watched) {  // A watched directory: no read.
    detailed(internal::NewestPerAddress(watched));
    return out;
  }
  auto read = rt.Run([&rt]() -> kj::Promise<Result<internal::DirectoryRead>> {
    auto etcd = rt.Etcd();
    if (!etcd.ok()) return Result<internal::DirectoryRead>(etcd.status());
    return internal::ReadDirectory(**etcd).then([&rt](Result<internal::DirectoryRead>&& read) {
      if (read.ok()) WatchFrom(rt, *read);
      return kj::mv(read);
    });
  });
  if (read.ok()) {
    std::vector<ServerInfo> servers = internal::NewestPerAddress(read->entries);
    std::vector<std::string> addresses;
    for (const ServerInfo& info : servers) addresses.push_back(info.address);
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(rt.directory_mu);
      auto& memory = rt.directory_memory;
      if (memory.down_said) GP_WARN("directory", "the pool's directory {} answers again", DirectoryName(config));
      memory.down_said = false;
      changed = memory.agents != addresses;
      if (changed) memory.agents = addresses;
    }
    if (changed) internal::RememberAgents(config, addresses);  // For a later process, should etcd be down then.
    detailed(std::move(servers));
    return out;
  }
  // The agents known: those named, those the directory listed last in this process, else in an earlier one.
  std::vector<std::string> known = named;
  std::vector<std::string> listed;
  bool say;
  {
    std::lock_guard<std::mutex> lock(rt.directory_mu);
    listed = rt.directory_memory.agents;
    say = !rt.directory_memory.down_said;
    rt.directory_memory.down_said = true;
  }
  if (listed.empty()) listed = internal::RememberedAgents(config);
  for (const auto& a : listed) {
    if (std::find(known.begin(), known.end(), a) == known.end()) known.push_back(a);
  }
  out.directory_error = fmt::format("the pool's directory {} does not answer ({}); {}", DirectoryName(config),
                                    read.status().message(),
                                    known.empty() ? "no agent is known to fall back to"
                                                  : fmt::format("using the {} agent(s) known", known.size()));
  if (say) GP_WARN("directory", "{}", out.directory_error);
  out.servers = OncePerAgent(DescribeAll(rt, known, with_leases, history_seconds));
  return out;
}

// What placement may use: servers that are up, not draining, and whose policy has not refused this request.
std::vector<internal::ServerView> ToViews(const std::vector<ServerInfo>& infos,
                                          const std::map<std::string, Status>& refused_by_policy = {}) {
  std::vector<internal::ServerView> views;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!infos[i].up || infos[i].draining || refused_by_policy.count(infos[i].address)) continue;
    views.push_back(internal::PlacementView(infos[i], i));
  }
  return views;
}

// The slice of `share` millionths and `memory_bytes` on device `device` of the agent `info` describes.
Slice SliceOn(const ServerInfo& info, uint32_t device, uint64_t memory_bytes, uint32_t share) {
  Slice slice;
  slice.server = info.address;
  slice.server_name = info.name;
  slice.device = device;
  if (device < info.devices.size()) {
    slice.device_uuid = info.devices[device].uuid;
    slice.model = info.devices[device].model;
  }
  slice.memory_bytes = memory_bytes;
  slice.compute_share = FractionFromShare(share);
  return slice;
}

bool Retryable(StatusCode code) {
  return code == StatusCode::kResourceExhausted || code == StatusCode::kUnavailable ||
         code == StatusCode::kDisconnected || code == StatusCode::kTimeout || code == StatusCode::kNotFound;
}

}  // namespace

// Reserve on every agent involved, then commit on all; any failure rolls everything back. Agents whose policy
// refused their part are added to `refused_by_policy` with their refusal.
static Result<Lease> ReserveAndCommit(const std::shared_ptr<Runtime>& runtime, const std::vector<ServerInfo>& infos,
                                      const std::vector<internal::Assignment>& plan, const Identity& me,
                                      const std::string& label, std::map<std::string, Status>* refused_by_policy) {
  internal::TokenFields fields;
  fields.id = RandomHex(8);
  fields.secret = RandomHex(16);
  std::vector<size_t> order;  // Server indexes in order of first appearance.
  for (const auto& a : plan) {
    if (std::find(order.begin(), order.end(), a.server) == order.end()) order.push_back(a.server);
  }
  for (size_t s : order) fields.servers.push_back(infos[s].address);
  Runtime& rt = *runtime;
  auto renew_ms = std::make_shared<std::vector<uint64_t>>(order.size(), 0);

  auto reserved = rt.Run([&] {
    kj::Vector<kj::Promise<Status>> calls;
    for (size_t s : order) {
      calls.add(internal::WithAgent(rt, infos[s].address, "reserve", [&, s](Runtime& rt, wire::Agent::Client agent) {
        auto req = agent.reserveRequest();
        internal::SetKey(req.initLease(), fields.id, fields.secret);
        auto owner = req.initOwner();
        owner.setUser(me.user);
        owner.setHost(me.host);
        owner.setPid(me.pid);
        owner.setLabel(label);
        size_t n = 0;
        for (const auto& a : plan) n += a.server == s ? 1 : 0;
        auto slices = req.initSlices(static_cast<unsigned>(n));
        unsigned k = 0;
        for (const auto& a : plan) {
          if (a.server != s) continue;
          slices[k].setDevice(a.device);
          slices[k].setMemoryBytes(a.memory_bytes);
          slices[k].setShareMicros(a.share);
          ++k;
        }
        std::string address = infos[s].address;
        auto reserved = rt.Deadline(req.send()).then(
            [address, refused_by_policy](capnp::Response<wire::Agent::ReserveResults>&& r) {
              Status status = internal::StatusFromOutcome(r.getOutcome(), address);
              if (r.getOutcome().getByPolicy()) (*refused_by_policy)[address] = status;
              // A grant with a note: the agent could not verify who this client is (gp-run -v shows it).
              if (status.ok() && r.getOutcome().getMessage().size() > 0) {
                GP_INFO("auth", "{}: {}", address, r.getOutcome().getMessage().cStr());
              }
              return status;
            });
        if (order.size() > 1) return reserved;
        // One agent: send the commit right behind the reserve (calls on one capability arrive in order), saving
        // a round trip. If the reserve fails, the commit fails harmlessly with "not found".
        auto commit = agent.commitRequest();
        internal::SetKey(commit.initLease(), fields.id, fields.secret);
        auto committed = rt.Deadline(commit.send()).then(
            [address, renew_ms](capnp::Response<wire::Agent::CommitResults>&& r) {
              (*renew_ms)[0] = r.getRenewIntervalMs();
              return internal::StatusFromOutcome(r.getOutcome(), address);
            });
        return reserved.then([committed = kj::mv(committed)](Status s) mutable -> kj::Promise<Status> {
          if (!s.ok()) return s;
          return kj::mv(committed);
        });
      }));
    }
    return kj::joinPromises(calls.releaseAsArray());
  });

  auto undo = [&](bool committed) {
    rt.Run([&] {
      kj::Vector<kj::Promise<Status>> calls;
      for (size_t s : order) {
        calls.add(committed ? internal::CallRelease(rt, infos[s].address, fields.id, fields.secret)
                            : internal::CallCancel(rt, infos[s].address, fields.id, fields.secret));
      }
      return kj::joinPromises(calls.releaseAsArray()).ignoreResult();
    });
  };
  auto first_failure = [](const kj::Array<Status>& results) -> Status {
    // A busy answer explains the failure best; otherwise the first error.
    for (const auto& r : results) {
      if (r.code() == StatusCode::kResourceExhausted) return r;
    }
    for (const auto& r : results) {
      if (!r.ok()) return r;
    }
    return Status::Ok();
  };
  if (Status failure = first_failure(reserved); !failure.ok()) {
    undo(order.size() == 1);  // A single agent may have committed already.
    return failure;
  }

  auto committed = order.size() == 1 ? kj::heapArray<Status>({Status::Ok()}) : rt.Run([&] {
    kj::Vector<kj::Promise<Status>> calls;
    for (size_t k = 0; k < order.size(); ++k) {
      std::string address = infos[order[k]].address;
      calls.add(internal::WithAgent(rt, address, "commit", [&, k, address](Runtime& rt, wire::Agent::Client agent) {
        auto req = agent.commitRequest();
        internal::SetKey(req.initLease(), fields.id, fields.secret);
        return rt.Deadline(req.send()).then([address, renew_ms, k](capnp::Response<wire::Agent::CommitResults>&& r) {
          (*renew_ms)[k] = r.getRenewIntervalMs();
          return internal::StatusFromOutcome(r.getOutcome(), address);
        });
      }));
    }
    return kj::joinPromises(calls.releaseAsArray());
  });
  if (Status failure = first_failure(committed); !failure.ok()) {
    undo(true);
    return failure;
  }

  std::vector<Slice> slices;
  for (size_t s : order) {
    for (const auto& a : plan) {
      if (a.server == s) slices.push_back(SliceOn(infos[s], a.device, a.memory_bytes, a.share));
    }
  }
  uint64_t interval = 0;
  for (uint64_t ms : *renew_ms) interval = interval == 0 ? ms : std::min(interval, ms);
  if (interval == 0) interval = 5000;
  GP_DEBUG("client", "lease {} granted: {} slice(s) on {} server(s)", fields.id, slices.size(), order.size());
  return internal::WrapLease(std::make_shared<internal::LeaseCore>(runtime, std::move(fields), std::move(slices), true,
                                                     std::chrono::milliseconds(interval)));
}

// Describes the agents of `plan` and puts what they answer in place of their entries in *infos (an agent that does
// not answer is marked down). Whether every one of them was described.
static bool RefreshFromAgents(Runtime& rt, const std::vector<internal::Assignment>& plan,
                              std::vector<ServerInfo>* infos, std::vector<size_t>* refreshed) {
  std::vector<size_t>& involved = *refreshed;
  involved.clear();
  for (const auto& a : plan) {
    if (std::find(involved.begin(), involved.end(), a.server) == involved.end()) involved.push_back(a.server);
  }
  std::vector<std::string> addresses;
  for (size_t i : involved) addresses.push_back((*infos)[i].address);
  std::vector<ServerInfo> fresh = DescribeAll(rt, addresses, false);
  bool all = true;
  for (size_t k = 0; k < involved.size(); ++k) {
    all = all && fresh[k].up;
    (*infos)[involved[k]] = std::move(fresh[k]);
  }
  return all;
}

Pool::Pool(std::shared_ptr<Runtime> runtime, std::vector<std::string> servers)
    : runtime_(std::move(runtime)), servers_(std::move(servers)) {}
Pool::Pool(Pool&&) noexcept = default;
Pool& Pool::operator=(Pool&&) noexcept = default;
Pool::~Pool() = default;

const std::vector<std::string>& Pool::servers() const { return servers_; }

Result<Pool> Pool::Connect(PoolOptions options) {
  auto source = internal::ResolvePool(options);
  if (!source.ok()) return source.status();
  auto runtime = std::make_shared<Runtime>(options);
  if (source->directory) runtime->SetDirectory(*source->directory);
  return Pool(std::move(runtime), std::move(source->servers));
}

bool Pool::has_directory() const { return runtime_->directory().has_value(); }

static PoolState StateOf(Gathered gathered, const Runtime& rt) {
  PoolState state;
  state.servers = std::move(gathered.servers);
  if (rt.directory()) state.directory = DirectoryName(*rt.directory());
  state.directory_error = std::move(gathered.directory_error);
  state.directory_watched = gathered.watched;
  return state;
}

PoolState Pool::State(std::chrono::seconds history) {
  uint32_t seconds = static_cast<uint32_t>(std::clamp<int64_t>(history.count(), 0, 24 * 3600));
  return StateOf(GatherPool(*runtime_, servers_, true, true, seconds), *runtime_);
}

PoolState Pool::Describe(const std::vector<std::string>& addresses, std::chrono::seconds history) {
  uint32_t seconds = static_cast<uint32_t>(std::clamp<int64_t>(history.count(), 0, 24 * 3600));
  Gathered gathered;
  gathered.servers = OncePerAgent(DescribeAll(*runtime_, addresses, true, seconds));
  return StateOf(std::move(gathered), *runtime_);
}

PoolState Pool::Summary() { return StateOf(GatherPool(*runtime_, servers_, false, true), *runtime_); }

Result<Lease> Pool::Allocate(const Request& request) {
  if (Status s = ValidateRequest(request); !s.ok()) return s;
  Identity me = CurrentIdentity();
  const std::string label = request.label.empty() ? me.program : request.label;
  const auto start = SteadyClock::now();
  const auto deadline = start + request.wait;
  constexpr int kMaxConflictRetries = 12;
  constexpr auto kSnapshotMaxAge = std::chrono::milliseconds(500);
  int conflicts = 0, waits = 0;
  // Agents whose policy refused this request, and why: placed around until the next wait (a policy's window may
  // open, or the user's other leases end), so that a request one agent's policy forbids lands on another's GPUs.
  std::map<std::string, Status> refused_by_policy;
  // How long an agent may take to publish a change to the directory (a change waits one 100 ms step at most, then
  // one put to etcd), and whether a "does not fit" on the directory's word has been checked on a look taken that
  // much later.
  constexpr auto kDirectoryLag = std::chrono::milliseconds(300);
  bool directory_rechecked = false;
  while (true) {
    Status last;
    bool conflict = false;
    // A young snapshot is good enough to place from; placement failures are only believed on fresh state. From a
    // snapshot, `infos` holds only the servers of the plan (copying a pool of thousands of agents for every
    // allocation would cost more than placing on it).
    std::vector<ServerInfo> infos;
    std::vector<internal::ServerView> views;
    std::optional<Result<std::vector<internal::Assignment>>> plan;
    {
      std::lock_guard<std::mutex> lock(runtime_->snapshot_mu);
      auto& snap = runtime_->snapshot;
      if (snap.valid && SteadyClock::now() - snap.taken < kSnapshotMaxAge) {
        // The snapshot's own views (no copy) unless some agent's policy refused this request.
        if (!refused_by_policy.empty()) views = ToViews(snap.servers, refused_by_policy);
        const std::vector<internal::ServerView>& placing = refused_by_policy.empty() ? snap.views : views;
        auto placed = internal::Place(request, placing);
        if (placing.empty() || !placed.ok()) {
          snap.valid = false;
          continue;
        }
        std::map<size_t, size_t> kept;  // Snapshot index -> index in `infos`.
        for (internal::Assignment& a : *placed) {
          auto [it, added] = kept.emplace(a.server, infos.size());
          if (added) infos.push_back(snap.servers[a.server]);
          a.server = it->second;
        }
        plan = std::move(placed);
      }
    }
    const bool fresh = !plan.has_value();
    bool from_directory = false;
    std::vector<std::string> unusable;
    if (fresh) {
      Gathered gathered = GatherPool(*runtime_, servers_, false, false);
      infos = std::move(gathered.servers);
      from_directory = gathered.from_directory;
      if (!gathered.directory_error.empty()) unusable.push_back(gathered.directory_error);
      {
        std::lock_guard<std::mutex> lock(runtime_->snapshot_mu);
        runtime_->snapshot.Set(infos, SteadyClock::now());
      }
      for (const auto& info : infos) {
        if (!info.up) unusable.push_back(info.error);
        else if (info.draining) unusable.push_back(fmt::format("{} is draining", info.address));
      }
      views = ToViews(infos, refused_by_policy);
      plan = internal::Place(request, views);
    }
    // The directory's summaries trail the agents by up to their publishing delay: capacity freed just now may not be
    // in them yet. A refusal is believed only on a read taken after that delay.
    if (from_directory && !plan->ok() && !directory_rechecked) {
      directory_rechecked = true;
      runtime_->InvalidateSnapshot();
      std::this_thread::sleep_for(kDirectoryLag);
      continue;
    }
    if (!plan->ok() && !refused_by_policy.empty()) {
      // The policies' words explain best. Forbidden for good by every refusing agent's policy, and no other agent
      // could ever hold it: no wait helps.
      bool forever = views.empty() || !internal::CheckSatisfiable(request, views).ok();
      std::vector<std::string> why;
      for (const auto& [address, refusal] : refused_by_policy) {
        forever = forever && refusal.code() == StatusCode::kPermissionDenied;
        why.push_back(refusal.message());
      }
      last = Status(forever ? StatusCode::kPermissionDenied : StatusCode::kResourceExhausted,
                    fmt::format("{}", fmt::join(why, "; ")));
      if (forever) return last;
    } else if (fresh && views.empty()) {  // (From a snapshot, `views` is not filled: its plan succeeded.)
      last = Status(StatusCode::kUnavailable, fmt::format("no server of the pool can take a lease now: {}",
                                                          fmt::join(unusable, "; ")));
    } else if (Status never = plan->ok() ? Status::Ok() : internal::CheckSatisfiable(request, views); !never.ok()) {
      // Only asked when the plan failed: it places again on the whole pool, emptied.
      if (unusable.empty()) return never;
      last = Status(StatusCode::kResourceExhausted,
                    fmt::format("{} ({} server(s) unusable: {})", never.message(), unusable.size(),
                                fmt::join(unusable, "; ")));
    } else if (!plan->ok()) {
      last = Status(StatusCode::kResourceExhausted,
                    fmt::format("pool busy: {} cannot be granted now: {}", DescribeRequest(request),
                                plan->status().message()));
    } else {
      const size_t policy_refusals = refused_by_policy.size();
      auto lease = ReserveAndCommit(runtime_, infos, **plan, me, label, &refused_by_policy);
      if (lease.ok()) {
        // Our own grant is known without asking: keep the snapshot true for this client's next placement.
        std::lock_guard<std::mutex> lock(runtime_->snapshot_mu);
        auto& snap = runtime_->snapshot;
        for (const auto& a : **plan) {
          if (!snap.valid) break;
          size_t index = 0;
          ServerInfo* server = snap.Find(infos[a.server].address, &index);
          if (server == nullptr || a.device >= server->devices.size()) continue;
          DeviceInfo& d = server->devices[a.device];
          d.memory_allocated += a.memory_bytes;
          d.compute_allocated += FractionFromShare(a.share);
          snap.Restate(index);
        }
        return lease;
      }
      last = lease.status();
      if (runtime_->directory() && Retryable(last.code()) && refused_by_policy.size() == policy_refusals &&
          conflicts < kMaxConflictRetries) {
        // The directory said these agents had room and one did not (another client was first, or the summary was
        // stale): ask them, and place again at once on what they say, the rest of the pool as the directory said.
        std::vector<size_t> refreshed;
        if (RefreshFromAgents(*runtime_, **plan, &infos, &refreshed)) {
          ++conflicts;
          std::lock_guard<std::mutex> lock(runtime_->snapshot_mu);
          auto& snap = runtime_->snapshot;
          for (size_t i : refreshed) {
            size_t index = 0;
            if (ServerInfo* server = snap.Find(infos[i].address, &index)) {
              *server = infos[i];
              snap.Restate(index);
            }
          }
          if (snap.valid) continue;
        }
      }
      runtime_->InvalidateSnapshot();
      if (refused_by_policy.size() > policy_refusals) continue;  // Place again around the refusing agent(s).
      if (!Retryable(last.code())) return last;
      conflict = true;  // Another client won the race, or an agent failed mid-placement: retry on fresh state.
    }
    const auto now = SteadyClock::now();
    if (conflict && ++conflicts <= kMaxConflictRetries) {
      // Jittered, growing back-off so that racing clients spread out instead of colliding again.
      auto pause = std::chrono::microseconds(static_cast<int64_t>((200 + 800 * RandomUnit()) * conflicts));
      std::this_thread::sleep_for(pause);
      continue;
    }
    if (now >= deadline) {
      if (request.wait.count() > 0) {
        return Status(StatusCode::kTimeout,
                      fmt::format("waited {} for {}; still: {}", FormatDuration(request.wait), DescribeRequest(request),
                                  last.message()));
      }
      return last;
    }
    if (request.on_wait) request.on_wait(last, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
    runtime_->InvalidateSnapshot();
    refused_by_policy.clear();
    // Waiting for capacity: poll with back-off (50 ms doubling to 1 s), jittered, never past the deadline.
    ++waits;
    auto backoff = std::chrono::milliseconds(std::min<int64_t>(1000, 50ll << std::min(waits, 5)));
    auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(backoff * (0.5 + 0.5 * RandomUnit()));
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(pause, deadline - now));
    conflicts = 0;
  }
}

Result<Lease> Lease::Attach(const std::string& token, bool take_ownership) {
  auto fields = internal::DecodeToken(token);
  if (!fields.ok()) return fields.status();
  PoolOptions options;
  options.servers = fields->servers;
  auto runtime = std::make_shared<Runtime>(options);
  std::vector<ServerInfo> infos = DescribeAll(*runtime, fields->servers, false);
  for (const auto& info : infos) {
    if (!info.up) return Status(StatusCode::kUnavailable, fmt::format("cannot attach lease: {}", info.error));
  }
  std::vector<std::shared_ptr<std::vector<internal::RemoteSlice>>> remote;
  for (size_t i = 0; i < infos.size(); ++i) remote.push_back(std::make_shared<std::vector<internal::RemoteSlice>>());
  auto statuses = runtime->Run([&] {
    kj::Vector<kj::Promise<Status>> calls;
    for (size_t i = 0; i < infos.size(); ++i) {
      calls.add(internal::CallRenew(*runtime, fields->servers[i], fields->id, fields->secret, remote[i]));
    }
    return kj::joinPromises(calls.releaseAsArray());
  });
  std::vector<Slice> slices;
  uint64_t ttl_ms = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!statuses[i].ok()) {
      return Status(statuses[i].code(), fmt::format("cannot attach lease {}: {}", fields->id, statuses[i].message()));
    }
    ttl_ms = ttl_ms == 0 ? static_cast<uint64_t>(infos[i].lease_ttl_s * 1000)
                         : std::min(ttl_ms, static_cast<uint64_t>(infos[i].lease_ttl_s * 1000));
    // A lease moved to another agent (gp-agent ctl migrate --to) has its slices there now: they are named as that
    // agent's, where this process's sessions then open.
    ServerInfo holder = infos[i];
    if (std::string at = runtime->LeaseAgent(fields->id, fields->servers[i]); at != fields->servers[i]) {
      holder = DescribeAll(*runtime, {at}, false).at(0);
      if (!holder.up) return Status(StatusCode::kUnavailable, fmt::format("cannot attach lease: {}", holder.error));
    }
    for (const auto& r : *remote[i]) slices.push_back(SliceOn(holder, r.device, r.memory_bytes, r.share));
  }
  // Renew at a quarter of the shortest TTL, as the agents advise by default.
  auto interval = std::chrono::milliseconds(std::max<uint64_t>(ttl_ms / 4, 50));
  return internal::WrapLease(std::make_shared<internal::LeaseCore>(runtime, std::move(fields).value(), std::move(slices),
                                                     take_ownership, interval));
}

Status Lease::ReleaseToken(const std::string& token) {
  auto fields = internal::DecodeToken(token);
  if (!fields.ok()) return fields.status();
  PoolOptions options;
  options.servers = fields->servers;
  auto runtime = std::make_shared<Runtime>(options);
  auto results = runtime->Run([&] {
    kj::Vector<kj::Promise<Status>> calls;
    for (const auto& server : fields->servers) {
      calls.add(internal::CallRelease(*runtime, server, fields->id, fields->secret));
    }
    return kj::joinPromises(calls.releaseAsArray());
  });
  std::vector<std::string> failed;
  Status first;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok() || results[i].code() == StatusCode::kNotFound) continue;  // Gone already: as wanted.
    failed.push_back(fields->servers[i]);
    if (first.ok()) first = results[i];
  }
  if (failed.empty()) return Status::Ok();
  return Status(first.code(), fmt::format("lease {} not released on {} of {} server(s) ({}); those slices are freed "
                                          "when the lease expires: {}",
                                          fields->id, failed.size(), fields->servers.size(), fmt::join(failed, ", "),
                                          first.message()));
}

}  // namespace gpupool
