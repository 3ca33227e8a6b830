#include "client/session_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "client/lease_core.h"
#include "client/runtime.h"
#include "core/log.h"
#include "core/util.h"
#include "session.capnp.h"

namespace gpupool::internal {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr size_t kChunk = 4u << 20;  // Copies travel in 4 MiB messages, pipelined.
// Address windows live in [32 TiB, 96 TiB): far from where Linux places ordinary mappings.
constexpr uint64_t kWindowLow = 32ull << 40, kWindowHigh = 96ull << 40;
constexpr int kCudaErrorInvalidValue = 1;
constexpr int kCudaErrorDeviceUnavailable = 46;
constexpr int kCudaErrorLaunchFailure = 719;

int CodeOf(wire::CallStatus::Reader s) { return s.getCode(); }

// printf output of the device goes to the program's stdout, as on a GPU.
void EmitOutput(capnp::Text::Reader text) {
  if (text.size() == 0) return;
  std::fwrite(text.begin(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The worker's address for a client that reached its agent at `server` ("host", "host:port", "[v6]:port").
std::string WorkerAddress(const std::string& server, uint16_t port) {
  std::string host = server;
  if (host.rfind('[', 0) == 0) {
    host = host.substr(0, host.find(']') + 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  } else if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";  // A bare IPv6 address.
  }
  return fmt::format("{}:{}", host, port);
}

// GPUPOOL_DIRECT_SESSIONS=0: every call goes through the agent (to measure the extra hop, or where only the
// agent's port is reachable and connecting elsewhere would wait for a firewall's silence).
bool DirectSessionsWanted() {
  const char* v = std::getenv("GPUPOOL_DIRECT_SESSIONS");
  return v == nullptr || std::string_view(v) != "0";
}

constexpr std::chrono::milliseconds kDirectConnectTimeout{2000};

}  // namespace

struct RemoteSession::Impl : public kj::TaskSet::ErrorHandler {
  kj::Maybe<wire::Session::Client> session;  // Loop thread only.
  kj::Own<kj::TaskSet> tasks;                // Loop thread only.
  // The connection straight to the session's worker, when the agent offered one: it carries every call.
  kj::Own<kj::AsyncIoStream> direct_stream;   // Loop thread only.
  kj::Own<capnp::TwoPartyClient> direct_rpc;  // Loop thread only.
  std::mutex mu;
  int async_error = 0;
  std::string async_message;
  std::shared_ptr<Lease> lease;  // Keeps the lease attached (renewed) while sessions live.

  void taskFailed(kj::Exception&& e) override { Record(kCudaErrorLaunchFailure, e.getDescription().cStr()); }
  void Record(int code, const std::string& message) {
    if (code == 0) return;
    std::lock_guard<std::mutex> lock(mu);
    if (async_error == 0) {
      async_error = code;
      async_message = message;
    }
  }
  wire::Session::Client& S() {
    KJ_IF_MAYBE(s, session) { return *s; }
    KJ_FAIL_REQUIRE("session closed");
  }
  // Enters the worker's door; on any failure the session stays reached through the agent.
  kj::Promise<void> GoDirect(Runtime& rt, const std::string& server, wire::DirectSession::Reader door) {
    std::string address = door.hasPath() && door.getPath().size() > 0 ? "unix:" + std::string(door.getPath())
                                                                       : WorkerAddress(server, door.getPort());
    auto ticket = kj::heapArray<kj::byte>(door.getTicket());
    return rt.ConnectStream(address, kDirectConnectTimeout)
        .then([this, &rt, address, ticket = kj::mv(ticket)](kj::Own<kj::AsyncIoStream> stream) mutable {
          direct_stream = kj::mv(stream);
          direct_rpc = kj::heap<capnp::TwoPartyClient>(*direct_stream);
          auto req = direct_rpc->bootstrap().castAs<wire::SessionDoor>().enterRequest();
          req.setTicket(ticket);
          return rt.Deadline(req.send()).then([this, address](capnp::Response<wire::SessionDoor::EnterResults>&& r) {
            session = r.getSession();  // The agent's forwarding reference goes.
            GP_DEBUG("session", "reached the session's worker directly at {}", address);
          });
        })
        .catch_([this, address](kj::Exception&& e) {
          GP_DEBUG("session", "no direct connection to the session's worker at {} ({}): calls go through the agent",
                   address, e.getDescription().cStr());
          direct_rpc = nullptr;
          direct_stream = nullptr;
        });
  }
};

Result<std::vector<std::unique_ptr<RemoteSession>>> RemoteSession::OpenLease(const std::string& token) {
  auto fields = DecodeToken(token);
  if (!fields.ok()) return fields.status();
  auto lease = Lease::Attach(token);
  if (!lease.ok()) return lease.status();
  auto shared_lease = std::make_shared<Lease>(std::move(lease).value());
  PoolOptions options;
  options.servers = fields->servers;
  auto runtime = std::make_shared<Runtime>(options);
  std::vector<std::unique_ptr<RemoteSession>> out;
  std::set<uint64_t> used;
  for (const Slice& slice : shared_lease->slices()) {
    auto rs = std::unique_ptr<RemoteSession>(new RemoteSession());
    rs->runtime_ = runtime;
    rs->impl_ = std::make_unique<Impl>();
    rs->impl_->lease = shared_lease;
    rs->slice_ = slice;
    rs->window_bytes_ = (slice.memory_bytes + (64ull << 20) + kGiB - 1) / kGiB * kGiB;
    Status last(StatusCode::kInternal, "no window tried");
    for (int attempt = 0; attempt < 16; ++attempt) {
      // A random window that does not overlap this client's others; the agent checks its own side.
      uint64_t slots = (kWindowHigh - kWindowLow - rs->window_bytes_) / kGiB;
      uint64_t base = kWindowLow + static_cast<uint64_t>(RandomUnit() * static_cast<double>(slots)) * kGiB;
      bool overlaps = false;
      for (const auto& other : out) {
        overlaps = overlaps || (base < other->window_base_ + other->window_bytes_ &&
                                other->window_base_ < base + rs->window_bytes_);
      }
      if (overlaps) continue;
      Impl* impl = rs->impl_.get();
      std::string server = slice.server;
      uint32_t device = slice.device;
      uint64_t window = rs->window_bytes_;
      auto props = std::make_shared<RemoteProps>();
      last = runtime->Run([&]() -> kj::Promise<Status> {
        return WithAgent(*runtime, server, "openSession",
                         [&, impl, base, window, device, props](Runtime& rt, wire::Agent::Client agent) {
                           auto req = agent.openSessionRequest();
                           SetKey(req.initLease(), fields->id, fields->secret);
                           req.setDevice(device);
                           req.setWindowBase(base);
                           req.setWindowBytes(window);
                           return rt.Deadline(req.send()).then(
                               [&rt, impl, server, props](capnp::Response<wire::Agent::OpenSessionResults>&& r)
                                   -> kj::Promise<Status> {
                                 Status s = StatusFromOutcome(r.getOutcome(), server);
                                 if (!s.ok()) return s;
                                 impl->session = r.getSession();
                                 impl->tasks = kj::heap<kj::TaskSet>(*impl);
                                 kj::Promise<void> direct = kj::READY_NOW;
                                 if (r.hasDirect() && DirectSessionsWanted()) {
                                   direct = impl->GoDirect(rt, server, r.getDirect());
                                 }
                                 return direct.then([&rt, impl]() {
                                   return rt.Deadline(impl->S().propertiesRequest().send());
                                 })
                                     .then([props](capnp::Response<wire::Session::PropertiesResults>&& p) {
                                       auto d = p.getProps();
                                       props->name = d.getName();
                                       props->total_memory = d.getTotalMemory();
                                       props->cc_major = d.getCcMajor();
                                       props->cc_minor = d.getCcMinor();
                                       auto uuid = d.getUuid();
                                       std::memcpy(props->uuid, uuid.begin(), std::min<size_t>(16, uuid.size()));
                                       props->pci_domain = d.getPciDomain();
                                       props->pci_bus = d.getPciBus();
                                       props->pci_device = d.getPciDevice();
                                       props->emulated = d.getEmulated();
                                       for (auto a : d.getAttributes()) props->attributes[a.getId()] = a.getValue();
                                       return Status::Ok();
                                     });
                               });
                         });
      });
      if (last.ok()) {
        rs->window_base_ = base;
        rs->props_ = *props;
        break;
      }
      if (last.code() != StatusCode::kResourceExhausted) break;  // Only "window taken" is worth another try.
    }
    if (!last.ok()) {
      return Status(last.code(), fmt::format("cannot open a session on {} GPU {}: {}", slice.server_name,
                                             slice.device, last.message()));
    }
    GP_DEBUG("session", "opened {} GPU {} at window 0x{:x}", slice.server_name, slice.device, rs->window_base_);
    out.push_back(std::move(rs));
  }
  return out;
}

RemoteSession::~RemoteSession() {
  if (!impl_) return;
  // Close on the loop thread: dropping the capability ends the session on the agent.
  runtime_->Run([this] {
    impl_->tasks = nullptr;
    impl_->session = nullptr;
    impl_->direct_rpc = nullptr;
    impl_->direct_stream = nullptr;
  });
}

int RemoteSession::TakeAsyncError() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  int code = impl_->async_error;
  if (code) last_error_ = impl_->async_message;
  impl_->async_error = 0;
  return code;
}

// Sends a request whose reply nobody waits for; its error is kept for the next synchronising call.
// The continuation of an unwaited call: keeps its error for the next synchronising call.
auto RecordReply(RemoteSession::Impl* impl) {
  return [impl](auto&& r) { impl->Record(CodeOf(r.getStatus()), r.getStatus().getMessage().cStr()); };
}

// Posted: the caller does not even wait for the hand-off to the loop thread. Everything `fill` uses must be
// captured by value.
#define GP_SEND_ASYNC(method, fill)                                                      \
  do {                                                                                   \
    Impl* impl = impl_.get();                                                            \
    runtime_->Post([=] {                                                                 \
      if (!impl->tasks) return;                                                          \
      auto req = impl->S().method##Request();                                            \
      fill;                                                                              \
      impl->tasks->add(req.send().then(RecordReply(impl)));                              \
    });                                                                                  \
  } while (0)

// Like GP_SEND_ASYNC, but the caller waits for the hand-off: for requests that carry the caller's buffer, which is
// copied into the message before this returns (no extra copy).
#define GP_SEND_ASYNC_NOW(method, fill)                                                  \
  do {                                                                                   \
    Impl* impl = impl_.get();                                                            \
    runtime_->Run([&] {                                                                  \
      auto req = impl->S().method##Request();                                            \
      fill;                                                                              \
      impl->tasks->add(req.send().then(RecordReply(impl)));                              \
    });                                                                                  \
  } while (0)

// Sends a request and waits for its reply; `use(r)` reads the reply on the loop thread.
template <typename Build, typename Use>
int Call(Runtime& rt, RemoteSession::Impl* impl, Build build, Use use, std::string* error) {
  try {
    return rt.Run([&]() {
      return build(impl->S()).then([&](auto&& r) {
        int code = CodeOf(r.getStatus());
        if (code) *error = r.getStatus().getMessage();
        use(r);
        return code;
      });
    });
  } catch (const kj::Exception& e) {
    *error = e.getDescription().cStr();
    return kCudaErrorDeviceUnavailable;
  }
}

int RemoteSession::MemGetInfo(uint64_t* free_bytes, uint64_t* total) {
  return Call(
      *runtime_, impl_.get(), [](auto& s) { return s.memGetInfoRequest().send(); },
      [&](auto& r) {
        *free_bytes = r.getFree();
        *total = r.getTotal();
      },
      &last_error_);
}

int RemoteSession::MemAlloc(uint64_t bytes, uint64_t* address) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.memAllocRequest();
        req.setBytes(bytes);
        return req.send();
      },
      [&](auto& r) { *address = r.getAddress(); }, &last_error_);
}

int RemoteSession::MemFree(uint64_t address) {
  GP_SEND_ASYNC(memFree, req.setAddress(address));
  return 0;
}

int RemoteSession::CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream) {
  // The bytes are copied into the messages before this returns: the caller's buffer is free again at once,
  // as cuMemcpyHtoD promises for pageable memory.
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < bytes; off += kChunk) {
    size_t n = std::min(kChunk, bytes - off);
    GP_SEND_ASYNC_NOW(copyToDevice, {
      req.setDst(dst + off);
      req.setData(kj::arrayPtr(p + off, n));
      req.setStream(stream);
    });
  }
  return 0;
}

int RemoteSession::CopyFromDevice(void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  Impl* impl = impl_.get();
  std::string error;
  int code = 0;
  try {
    code = runtime_->Run([&]() {
      // All chunks in flight at once; each lands in place as its reply arrives.
      kj::Vector<kj::Promise<int>> parts;
      for (size_t off = 0; off < bytes; off += kChunk) {
        size_t n = std::min(kChunk, bytes - off);
        auto req = impl->S().copyFromDeviceRequest();
        req.setSrc(src + off);
        req.setBytes(n);
        req.setStream(stream);
        parts.add(req.send().then([p, off, n, &error](auto&& r) {
          int c = CodeOf(r.getStatus());
          if (c) {
            error = r.getStatus().getMessage();
            return c;
          }
          auto data = r.getData();
          std::memcpy(p + off, data.begin(), std::min(n, data.size()));
          return 0;
        }));
      }
      return kj::joinPromises(parts.releaseAsArray()).then([](kj::Array<int> codes) {
        for (int c : codes) {
          if (c) return c;
        }
        return 0;
      });
    });
  } catch (const kj::Exception& e) {
    error = e.getDescription().cStr();
    code = kCudaErrorDeviceUnavailable;
  }
  if (code) last_error_ = error;
  int pending = TakeAsyncError();
  return pending ? pending : code;
}

int RemoteSession::CopyOnDevice(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream) {
  GP_SEND_ASYNC(copyOnDevice, {
    req.setDst(dst);
    req.setSrc(src);
    req.setBytes(bytes);
    req.setStream(stream);
  });
  return 0;
}

int RemoteSession::Memset(uint64_t dst, uint32_t value, uint8_t element_size, size_t count, uint64_t stream) {
  GP_SEND_ASYNC(memset, {
    req.setDst(dst);
    req.setValue(value);
    req.setElementSize(element_size);
    req.setCount(count);
    req.setStream(stream);
  });
  return 0;
}

int RemoteSession::ModuleLoad(const void* image, size_t bytes, uint64_t* module) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.moduleLoadRequest();
        req.setImage(kj::arrayPtr(static_cast<const uint8_t*>(image), bytes));
        return req.send();
      },
      [&](auto& r) { *module = r.getModule(); }, &last_error_);
}

int RemoteSession::ModuleUnload(uint64_t module) {
  GP_SEND_ASYNC(moduleUnload, req.setModule(module));
  return 0;
}

int RemoteSession::GetFunction(uint64_t module, const std::string& name, RemoteFunctionInfo* info) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.moduleGetFunctionRequest();
        req.setModule(module);
        req.setName(name);
        return req.send();
      },
      [&](auto& r) {
        info->handle = r.getFunction();
        info->params.clear();
        for (auto p : r.getParams()) info->params.push_back({p.getOffset(), p.getSize()});
        info->shared_bytes = r.getSharedBytes();
        info->local_bytes = r.getLocalBytes();
        info->num_regs = r.getNumRegs();
      },
      &last_error_);
}

int RemoteSession::GetGlobal(uint64_t module, const std::string& name, uint64_t* address, uint64_t* bytes) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.moduleGetGlobalRequest();
        req.setModule(module);
        req.setName(name);
        return req.send();
      },
      [&](auto& r) {
        if (address) *address = r.getAddress();
        if (bytes) *bytes = r.getBytes();
      },
      &last_error_);
}

int RemoteSession::Launch(uint64_t function, const uint32_t grid[3], const uint32_t block[3], uint32_t shared_bytes,
                          uint64_t stream, const void* params, size_t param_bytes, const uint32_t* cluster) {
  // Parameters are small: copy them and post the launch without waiting for the loop thread.
  auto packed = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(params),
                                                       static_cast<const uint8_t*>(params) + param_bytes);
  const uint32_t g0 = grid[0], g1 = grid[1], g2 = grid[2], b0 = block[0], b1 = block[1], b2 = block[2];
  const bool clustered = cluster != nullptr;
  const uint32_t c0 = clustered ? cluster[0] : 1, c1 = clustered ? cluster[1] : 1, c2 = clustered ? cluster[2] : 1;
  GP_SEND_ASYNC(launch, {
    req.setFunction(function);
    auto g = req.initGrid();
    g.setX(g0);
    g.setY(g1);
    g.setZ(g2);
    auto b = req.initBlock();
    b.setX(b0);
    b.setY(b1);
    b.setZ(b2);
    req.setSharedBytes(shared_bytes);
    req.setStream(stream);
    req.setParams(kj::arrayPtr(packed->data(), packed->size()));
    if (clustered) {
      auto c = req.initCluster();
      c.setX(c0);
      c.setY(c1);
      c.setZ(c2);
    }
  });
  return 0;
}

int RemoteSession::OccupancyMaxActiveClusters(uint64_t function, const uint32_t grid[3], const uint32_t block[3],
                                              uint32_t shared_bytes, const uint32_t cluster[3], int* clusters) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.occupancyMaxActiveClustersRequest();
        req.setFunction(function);
        auto g = req.initGrid();
        g.setX(grid[0]);
        g.setY(grid[1]);
        g.setZ(grid[2]);
        auto b = req.initBlock();
        b.setX(block[0]);
        b.setY(block[1]);
        b.setZ(block[2]);
        req.setSharedBytes(shared_bytes);
        auto c = req.initCluster();
        c.setX(cluster[0]);
        c.setY(cluster[1]);
        c.setZ(cluster[2]);
        return req.send();
      },
      [&](auto& r) { *clusters = r.getClusters(); }, &last_error_);
}

int RemoteSession::FunctionSetAttribute(uint64_t function, int attribute, int value) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.functionSetAttributeRequest();
        req.setFunction(function);
        req.setAttribute(attribute);
        req.setValue(value);
        return req.send();
      },
      [](auto&) {}, &last_error_);
}

int RemoteSession::StreamCreate(uint64_t* stream) {
  return Call(
      *runtime_, impl_.get(), [](auto& s) { return s.streamCreateRequest().send(); },
      [&](auto& r) { *stream = r.getStream(); }, &last_error_);
}

int RemoteSession::StreamDestroy(uint64_t stream) {
  GP_SEND_ASYNC(streamDestroy, req.setStream(stream));
  return 0;
}

#define GP_SYNC_CALL(method, fill)                                                        \
  int code = Call(                                                                        \
      *runtime_, impl_.get(),                                                             \
      [&](auto& s) {                                                                      \
        auto req = s.method##Request();                                                   \
        fill;                                                                             \
        return req.send();                                                                \
      },                                                                                  \
      [&](auto& r) { EmitOutput(r.getOutput()); }, &last_error_);                         \
  int pending = TakeAsyncError();                                                         \
  return pending ? pending : code

int RemoteSession::StreamSynchronize(uint64_t stream) { GP_SYNC_CALL(streamSynchronize, req.setStream(stream)); }
int RemoteSession::StreamQuery(uint64_t stream) { GP_SYNC_CALL(streamQuery, req.setStream(stream)); }
int RemoteSession::EventSynchronize(uint64_t event) { GP_SYNC_CALL(eventSynchronize, req.setEvent(event)); }
int RemoteSession::Synchronize() { GP_SYNC_CALL(synchronize, (void)req); }

int RemoteSession::StreamWaitEvent(uint64_t stream, uint64_t event) {
  GP_SEND_ASYNC(streamWaitEvent, {
    req.setStream(stream);
    req.setEvent(event);
  });
  return 0;
}

int RemoteSession::EventCreate(uint64_t* event) {
  return Call(
      *runtime_, impl_.get(), [](auto& s) { return s.eventCreateRequest().send(); },
      [&](auto& r) { *event = r.getEvent(); }, &last_error_);
}

int RemoteSession::EventDestroy(uint64_t event) {
  GP_SEND_ASYNC(eventDestroy, req.setEvent(event));
  return 0;
}

int RemoteSession::EventRecord(uint64_t event, uint64_t stream) {
  GP_SEND_ASYNC(eventRecord, {
    req.setEvent(event);
    req.setStream(stream);
  });
  return 0;
}

int RemoteSession::EventQuery(uint64_t event) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.eventQueryRequest();
        req.setEvent(event);
        return req.send();
      },
      [](auto&) {}, &last_error_);
}

int RemoteSession::EventElapsed(uint64_t start, uint64_t end, float* ms) {
  return Call(
      *runtime_, impl_.get(),
      [&](auto& s) {
        auto req = s.eventElapsedRequest();
        req.setStart(start);
        req.setEnd(end);
        return req.send();
      },
      [&](auto& r) { *ms = r.getMs(); }, &last_error_);
}

}  // namespace gpupool::internal
