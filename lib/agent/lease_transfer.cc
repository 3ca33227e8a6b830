#include "agent/lease_transfer.h"

#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "client/runtime.h"
#include "core/log.h"
#include "pool.capnp.h"

namespace gpupool::agent {

namespace {

// An image's pieces: a Cap'n Proto message each, well under the receiver's limits.
constexpr size_t kPieceBytes = 1 << 20;
// How long the other agent may take to restore the sessions once their images are there (workers started already).
constexpr auto kRestoreWithin = 120 * kj::SECONDS;

Status Failed(const kj::Exception& e, const std::string& server, std::string_view what) {
  return internal::StatusFromException(e, server, what);
}

}  // namespace

struct LeaseTransfers::Arrivals {
  struct Arrival {
    std::string server;
    wire::LeaseArrival::Client client;
  };
  std::map<std::string, Arrival> by_lease;
};

LeaseTransfers::LeaseTransfers() {
  PoolOptions options;
  options.servers = {"unix:/nonexistent"};  // Unused: every call names its agent.
  runtime_ = std::make_unique<internal::Runtime>(options);
  runtime_->Run([this] {
    arrivals_ = new Arrivals();
    return 0;
  });
}

LeaseTransfers::~LeaseTransfers() {
  runtime_->Run([this] {
    delete arrivals_;  // Its capabilities belong to the runtime's thread.
    return 0;
  });
}

kj::Promise<Result<std::vector<uint32_t>>> LeaseTransfers::Adopt(const std::string& server, const LeavingLease& lease) {
  return runtime_->RunAsync([this, server, lease]() -> kj::Promise<Result<std::vector<uint32_t>>> {
    internal::Runtime& rt = *runtime_;
    return rt.Agent(server)
        .then([this, &rt, server, lease](wire::Agent::Client agent) {
          auto req = agent.adoptRequest();
          req.initLease().setId(lease.id);
          req.getLease().setSecret(lease.secret);
          auto owner = req.initOwner();
          owner.setUser(lease.owner.verified ? lease.owner.user : lease.owner.claimed_user);
          owner.setHost(lease.owner.host);
          owner.setPid(lease.owner.pid);
          owner.setLabel(lease.owner.label);
          req.setOwnerVerified(lease.owner.verified);
          auto slices = req.initSlices(static_cast<unsigned>(lease.slices.size()));
          for (size_t i = 0; i < lease.slices.size(); ++i) {
            auto s = slices[static_cast<unsigned>(i)];
            s.setMemoryBytes(lease.slices[i].memory_bytes);
            s.setShareMicros(lease.slices[i].share);
            s.setModel(lease.slices[i].model);
            s.setDeviceClass(lease.slices[i].device_class);
            s.setEmulated(lease.slices[i].emulated);
            s.setFromDevice(lease.slices[i].from_device);
          }
          auto sessions = req.initSessions(static_cast<unsigned>(lease.sessions.size()));
          for (size_t i = 0; i < lease.sessions.size(); ++i) {
            const auto& from = lease.sessions[i];
            auto s = sessions[static_cast<unsigned>(i)];
            s.setSlice(from.slice);
            s.setWindowBase(from.window_base);
            s.setWindowBytes(from.window_bytes);
            auto tickets = s.initTickets(static_cast<unsigned>(from.tickets.size()));
            for (size_t t = 0; t < from.tickets.size(); ++t) {
              tickets.set(static_cast<unsigned>(t),
                          kj::arrayPtr(reinterpret_cast<const kj::byte*>(from.tickets[t].data()), from.tickets[t].size()));
            }
          }
          return rt.Deadline(req.send()).then(
              [this, server, id = lease.id](capnp::Response<wire::Agent::AdoptResults>&& r)
                  -> Result<std::vector<uint32_t>> {
                Status s = internal::StatusFromOutcome(r.getOutcome(), server);
                if (!s.ok()) return s;
                std::vector<uint32_t> devices;
                for (uint32_t device : r.getDevices()) devices.push_back(device);
                arrivals_->by_lease.insert_or_assign(id, Arrivals::Arrival{server, r.getArrival()});
                return devices;
              });
        })
        .catch_([server](kj::Exception&& e) -> Result<std::vector<uint32_t>> { return Failed(e, server, "adopt"); });
  });
}

namespace {

// Sends `image` from `offset` as pieces of session `session`, one after another (each waits for the stream's room).
kj::Promise<void> SendPieces(wire::LeaseArrival::Client arrival, uint32_t session,
                             std::shared_ptr<const std::vector<uint8_t>> image, size_t offset) {
  if (offset >= image->size()) return kj::READY_NOW;
  const size_t n = std::min(kPieceBytes, image->size() - offset);
  auto req = arrival.pieceRequest();
  req.setSession(session);
  req.setOffset(offset);
  req.setData(kj::arrayPtr(image->data() + offset, n));
  req.setTotal(image->size());
  return req.send().then([arrival, session, image, offset, n]() mutable {
    return SendPieces(kj::mv(arrival), session, kj::mv(image), offset + n);
  });
}

// Sends [offset, offset + bytes) of a session's memory file as pieces, read straight into each message.
kj::Promise<void> SendMemory(wire::LeaseArrival::Client arrival, uint32_t session,
                             std::shared_ptr<kj::AutoCloseFd> memory, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return kj::READY_NOW;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, bytes));
  auto req = arrival.memoryRequest();
  req.setSession(session);
  req.setOffset(offset);
  auto data = req.initData(static_cast<unsigned>(n));
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(memory->get(), data.begin() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return KJ_EXCEPTION(FAILED, "reading the session's memory file failed");
    got += static_cast<size_t>(r);
  }
  return req.send().then([arrival, session, memory, offset, bytes, n]() mutable {
    return SendMemory(kj::mv(arrival), session, kj::mv(memory), offset + n, bytes - n);
  });
}

}  // namespace

kj::Promise<Status> LeaseTransfers::Restore(const std::string& lease_id, std::vector<LeavingImage> images) {
  return runtime_->RunAsync([this, lease_id, images = std::move(images)]() mutable -> kj::Promise<Status> {
    auto it = arrivals_->by_lease.find(lease_id);
    if (it == arrivals_->by_lease.end()) {
      return Status(StatusCode::kInternal, "no adoption of lease " + lease_id + " under way");
    }
    wire::LeaseArrival::Client arrival = it->second.client;
    const std::string server = it->second.server;
    kj::Promise<void> sent = kj::READY_NOW;
    for (size_t i = 0; i < images.size(); ++i) {
      sent = sent.then([arrival, i, image = images[i].image]() mutable {
        return SendPieces(arrival, static_cast<uint32_t>(i), image, 0);
      });
      if (!images[i].memory) continue;
      for (const auto& [offset, bytes] : images[i].ranges) {
        sent = sent.then([arrival, i, memory = images[i].memory, offset = offset, bytes = bytes]() mutable {
          return SendMemory(arrival, static_cast<uint32_t>(i), memory, offset, bytes);
        });
      }
    }
    std::vector<uint64_t> consumed;
    for (const LeavingImage& image : images) consumed.push_back(image.consumed);
    internal::Runtime& rt = *runtime_;
    return sent
        .then([&rt, arrival, consumed]() mutable {
          auto req = arrival.restoreRequest();
          auto list = req.initConsumed(static_cast<unsigned>(consumed.size()));
          for (size_t i = 0; i < consumed.size(); ++i) list.set(static_cast<unsigned>(i), consumed[i]);
          return rt.timer().timeoutAfter(kRestoreWithin, req.send());
        })
        .then([server](capnp::Response<wire::LeaseArrival::RestoreResults>&& r) {
          return internal::StatusFromOutcome(r.getOutcome(), server);
        })
        .catch_([server](kj::Exception&& e) { return Failed(e, server, "restore"); });
  });
}

kj::Promise<Status> LeaseTransfers::Commit(const std::string& lease_id) {
  return runtime_->RunAsync([this, lease_id]() -> kj::Promise<Status> {
    auto it = arrivals_->by_lease.find(lease_id);
    if (it == arrivals_->by_lease.end()) {
      return Status(StatusCode::kInternal, "no adoption of lease " + lease_id + " under way");
    }
    const std::string server = it->second.server;
    return runtime_->Deadline(it->second.client.commitRequest().send())
        .then([this, lease_id, server](capnp::Response<wire::LeaseArrival::CommitResults>&& r) {
          Status s = internal::StatusFromOutcome(r.getOutcome(), server);
          if (s.ok()) arrivals_->by_lease.erase(lease_id);  // Dropped after its commit: the lease stays there.
          return s;
        })
        .catch_([server](kj::Exception&& e) { return Failed(e, server, "commit"); });
  });
}

void LeaseTransfers::Abandon(const std::string& lease_id) {
  runtime_->Post([this, lease_id] { arrivals_->by_lease.erase(lease_id); });
}

}  // namespace gpupool::agent
