#include "client/runtime.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "core/log.h"
#include "schema/outcome.h"

namespace gpupool::internal {

struct Runtime::Connection {
  std::string address;
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  kj::Maybe<wire::Agent::Client> agent;
  kj::Maybe<kj::ForkedPromise<wire::Agent::Client>> connecting;
  kj::Promise<void> watch = nullptr;  // Forgets the connection when the peer disconnects.
};

// This user's token for agents reached over TCP: $GPUPOOL_TOKEN, else the first line of ~/.config/gpupool/token
// if only its owner can read it (a token others can read is refused, with a warning, once). Empty: none.
std::string ClientToken() {
  if (const char* env = std::getenv("GPUPOOL_TOKEN"); env && *env) return env;
  const char* home = std::getenv("HOME");
  if (!home || !*home) return "";
  std::string path = std::string(home) + "/.config/gpupool/token";
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "";
  if ((st.st_mode & 077) != 0) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      GP_WARN("auth", "{} is readable by others (mode {:o}): not used; chmod 600 it", path, st.st_mode & 0777);
    });
    return "";
  }
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  return token;
}

// What a KJ_EXCEPTION(FAILED, "TAG", value) carried: the description after `tag`, past KJ's separators and, where
// present, the "NAME = " before the value (`name`: the expression KJ printed); nullopt without `tag`.
std::optional<std::string> TagDetail(const std::string& desc, std::string_view tag, std::string_view name) {
  auto pos = desc.find(tag);
  if (pos == std::string::npos) return std::nullopt;
  std::string why = desc.substr(pos + tag.size());
  while (!why.empty() && (why[0] == ';' || why[0] == ' ' || why[0] == '=' || why[0] == ',')) why.erase(0, 1);
  std::string prefix = std::string(name) + " = ";
  if (auto at = why.find(prefix); at != std::string::npos) why = why.substr(at + prefix.size());
  return why;
}

namespace {

// A failure to reach a server, in a user's words: KJ's descriptions carry the expressions it evaluated
// ("params.host = ...", "gai_strerror(status) = ..."), which mean nothing to whoever reads the message.
std::string ReachFailure(const std::string& desc) {
  auto value_of = [&desc](std::string_view name) -> std::string {
    auto at = desc.find(std::string(name) + " = ");
    if (at == std::string::npos) return "";
    std::string value = desc.substr(at + name.size() + 3);
    return value.substr(0, value.find(';'));
  };
  if (desc.find("DNS lookup failed") != std::string::npos) {
    std::string why = value_of("gai_strerror(status)");
    return fmt::format("its host name {} cannot be resolved{}: check the name", value_of("params.host"),
                       why.empty() ? "" : " (" + why + ")");
  }
  if (desc.find("Connection refused") != std::string::npos) {
    return "it refused the connection: no gp-agent listens there (is it started? is the port right?)";
  }
  if (desc.find("No such file or directory") != std::string::npos) {
    return "no socket file there: no gp-agent listens on that path (is it started? is the path right?)";
  }
  if (desc.find("Permission denied") != std::string::npos) return "permission denied (by the socket's mode?)";
  if (desc.find("Network is unreachable") != std::string::npos) return "its network is unreachable from here";
  if (desc.find("No route to host") != std::string::npos) return "there is no route to its host";
  if (desc.rfind("TLS with ", 0) == 0) {
    // "TLS with HOST failed: TLS peer's certificate is not trusted; reason = IP address mismatch"
    std::string text = desc.substr(desc.find(": ") == std::string::npos ? 0 : desc.find(": ") + 2);
    std::string what = text.substr(0, text.find("; "));
    if (what.rfind("TLS peer's ", 0) == 0) what = "the agent's " + what.substr(11);
    std::string reason;
    if (auto at = text.find("reason = "); at != std::string::npos) {
      reason = text.substr(at + 9);
      reason = " (" + reason.substr(0, reason.find(';')) + ")";
    }
    return fmt::format("TLS failed: {}{}: its certificate must name the address used (a DNS name, or an IP address as "
                       "an IP SAN) and be signed by a CA in GPUPOOL_TLS_CA", what, reason);
  }
  // Anything else: the last plain sentence KJ gave, without its expressions.
  std::string plain;
  for (size_t pos = 0; pos <= desc.size();) {
    size_t end = desc.find("; ", pos);
    if (end == std::string::npos) end = desc.size();
    std::string part = desc.substr(pos, end - pos);
    if (auto eq = part.find(" = "); eq != std::string::npos) part = part.substr(eq + 3);
    if (!part.empty() && part.find('(') == std::string::npos) plain = part;
    pos = end + 2;
  }
  return plain.empty() ? "the connection failed" : plain;
}

}  // namespace

Status StatusFromException(const kj::Exception& e, const std::string& address, std::string_view what) {
  std::string desc = e.getDescription().cStr();
  if (auto why = TagDetail(desc, "gpupool-refused", "why")) {
    return Status(StatusCode::kPermissionDenied, fmt::format("server {} refused this client: {}", address, *why));
  }
  if (desc.find("gpupool-protocol-mismatch") != std::string::npos) {
    auto pos = desc.find_last_of("= ");
    return Status(StatusCode::kProtocolMismatch,
                  fmt::format("server {} speaks gpupool protocol version {}; this client speaks version {}: "
                              "upgrade the older side",
                              address, desc.substr(pos + 1), wire::PROTOCOL_VERSION));
  }
  if (address.rfind("tls:", 0) == 0 &&
      (desc.find("certificate required") != std::string::npos || desc.find("ssl") != std::string::npos ||
       desc.find("SSL") != std::string::npos)) {
    const bool have_cert = std::getenv("GPUPOOL_TLS_CERT") && *std::getenv("GPUPOOL_TLS_CERT");
    return Status(StatusCode::kPermissionDenied,
                  fmt::format("TLS with server {} failed{}: {}", address,
                              have_cert ? "" : " (it may require a client certificate: GPUPOOL_TLS_CERT and "
                                               "GPUPOOL_TLS_KEY)",
                              desc.substr(desc.rfind("= ") == std::string::npos ? 0 : desc.rfind("= ") + 2)));
  }
  // A TLS server closes on the plaintext hello: with a FIN, or with a reset when the hello's bytes were still unread
  // in its socket as it closed (the kernel's choice, a race).
  const bool closed_at_hello = desc.find("Peer disconnected") != std::string::npos ||
                               desc.find("Connection reset by peer") != std::string::npos;
  if (desc.find("gpupool-handshake") != std::string::npos && closed_at_hello && address.rfind("tls:", 0) != 0 &&
      address.rfind("unix:", 0) != 0) {
    return Status(StatusCode::kProtocolMismatch,
                  fmt::format("server {} closed the connection at the gpupool handshake: if it serves TLS, name it "
                              "tls:{}", address, address));
  }
  if (desc.find("gpupool-handshake") != std::string::npos) {
    return Status(StatusCode::kProtocolMismatch,
                  fmt::format("server {} accepted the connection but did not answer the gpupool handshake: it is "
                              "not a gp-agent, or not one of this version (is the address right?)", address));
  }
  if (desc.find("timed out") != std::string::npos) {
    return Status(StatusCode::kTimeout, fmt::format("server {} did not answer {} in time", address, what));
  }
  if (auto why = TagDetail(desc, "gpupool-connect", "e.getDescription()")) {
    return Status(StatusCode::kUnavailable, fmt::format("server {} cannot be reached: {}", address,
                                                        ReachFailure(*why)));
  }
  switch (e.getType()) {
    case kj::Exception::Type::DISCONNECTED:
      return Status(StatusCode::kDisconnected, fmt::format("server {} disconnected during {}: {}", address, what, desc));
    case kj::Exception::Type::OVERLOADED:
      if (desc.find("timed out") != std::string::npos) {
        return Status(StatusCode::kTimeout, fmt::format("server {} did not answer {} in time", address, what));
      }
      return Status(StatusCode::kUnavailable, fmt::format("server {} is overloaded: {}", address, desc));
    default:
      return Status(StatusCode::kInternal, fmt::format("{} on server {} failed: {}", what, address, desc));
  }
}

Status StatusFromOutcome(wire::Outcome::Reader outcome, const std::string& address) {
  Status status = StatusOf(outcome);
  if (status.ok()) return status;
  return Status(status.code(), fmt::format("{}: {}", address, status.message()));
}

Runtime::Runtime(const PoolOptions& options)
    : connect_timeout_(options.connect_timeout),
      call_timeout_(options.call_timeout),
      describe_timeout_(options.describe_timeout) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] {
    // Writes to a peer that vanished must fail with EPIPE, not kill the user's process.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    auto io = kj::setupAsyncIo();
    deferred_ = kj::heap<kj::TaskSet>(static_cast<kj::TaskSet::ErrorHandler&>(*this));
    kj::UnixEventPort::FdObserver wake(io.unixEventPort, wake_fd_, kj::UnixEventPort::FdObserver::OBSERVE_READ);
    auto waking = WakeLoop(wake).eagerlyEvaluate([](kj::Exception&& e) {
      GP_ERROR("client", "posted-call loop failed: {}", e.getDescription().cStr());
    });
    auto paf = kj::newPromiseAndFulfiller<void>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      executor_ = &kj::getCurrentThreadExecutor();
      io_ = &io;
      stop_ = kj::mv(paf.fulfiller);
    }
    started_.notify_all();
    paf.promise.wait(io.waitScope);
    // KJ objects die on the thread that made them.
    tasks_.clear();
    connections_.clear();
    etcd_ = nullptr;
    deferred_ = nullptr;
    io_ = nullptr;
  });
  std::unique_lock<std::mutex> lock(mu_);
  started_.wait(lock, [this] { return executor_ != nullptr; });
}

Runtime::~Runtime() {
  executor_->executeSync([this] {
    Drain();  // Unwaited calls still go out before the connections close.
    stop_->fulfill();
  });
  thread_.join();
  close(wake_fd_);
}

void Runtime::NoteReleased(const std::vector<Slice>& slices) {
  std::lock_guard<std::mutex> lock(snapshot_mu);
  if (!snapshot.valid) return;
  for (const Slice& slice : slices) {
    size_t index = 0;
    ServerInfo* server = snapshot.Find(slice.server, &index);
    if (server == nullptr || slice.device >= server->devices.size()) continue;
    DeviceInfo& d = server->devices[slice.device];
    d.memory_allocated -= std::min(d.memory_allocated, slice.memory_bytes);
    d.compute_allocated = std::max(0.0, d.compute_allocated - slice.compute_share);
    if (d.compute_allocated < 1e-9) d.compute_allocated = 0;
    snapshot.Restate(index);
  }
}

Result<EtcdClient*> Runtime::Etcd() {
  if (!directory_) return Status(StatusCode::kInvalidArgument, "this pool has no directory");
  if (!etcd_) {
    auto made = EtcdClient::Make(io_->provider->getNetwork(), io_->provider->getTimer(), *directory_);
    if (!made.ok()) return made.status();
    etcd_ = std::move(made).value();
  }
  return etcd_.get();
}

void Runtime::Post(std::function<void()> fn) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    posted_.push_back(std::move(fn));
    wake = !wake_pending_;
    wake_pending_ = true;
  }
  if (wake) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
  }
}

void Runtime::Drain() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    batch.swap(posted_);
    wake_pending_ = false;
  }
  for (auto& fn : batch) fn();
}

kj::Promise<void> Runtime::WakeLoop(kj::UnixEventPort::FdObserver& observer) {
  return observer.whenBecomesReadable().then([this, &observer]() {
    uint64_t count;
    while (read(wake_fd_, &count, sizeof(count)) > 0) {
    }
    Drain();
    return WakeLoop(observer);
  });
}

void Runtime::StartTask(const std::string& key, kj::Promise<void> task) {
  tasks_.erase(key);
  tasks_.emplace(key, task.eagerlyEvaluate([key](kj::Exception&& e) {
    GP_WARN("client", "background task {} failed: {}", key, e.getDescription().cStr());
  }));
}

void Runtime::StopTask(const std::string& key) { tasks_.erase(key); }

namespace {
// How long a server that missed describe's deadline is skipped, and how often it is probed meanwhile.
constexpr std::chrono::seconds kSilentFor{30};
constexpr auto kProbeInterval = 1 * kj::SECONDS;
}  // namespace

std::optional<std::string> Runtime::Silent(const std::string& address) const {
  auto it = silent_.find(address);
  const auto now = std::chrono::steady_clock::now();
  if (it == silent_.end() || now >= it->second.until) return std::nullopt;
  return fmt::format("server {} is skipped for {} s more: {}", address,
                     std::chrono::ceil<std::chrono::seconds>(it->second.until - now).count(), it->second.why);
}

Status Runtime::MarkSilent(const std::string& address) {
  Forget(address);  // Whatever it was connecting or saying is given up.
  std::string why = fmt::format("it did not answer within {} ms (it may accept connections but say nothing, or be "
                                "unreachable); it is retried in the background",
                                describe_timeout_.count());
  const bool probing = silent_.count(address) != 0;
  silent_[address] = {std::chrono::steady_clock::now() + kSilentFor, why};
  if (!probing) deferred_->add(ProbeSilent(address));
  return Status(StatusCode::kTimeout, fmt::format("server {} {}; it is skipped for the next {} s", address, why,
                                                  kSilentFor.count()));
}

kj::Promise<void> Runtime::ProbeSilent(std::string address) {
  return timer().afterDelay(kProbeInterval).then([this, address]() {
    return Deadline(Agent(address))
        .then([this, address](wire::Agent::Client) -> kj::Promise<void> {
          GP_INFO("client", "server {} answers again", address);
          silent_.erase(address);
          return kj::READY_NOW;
        })
        .catch_([this, address](kj::Exception&&) -> kj::Promise<void> {
          Forget(address);
          auto it = silent_.find(address);
          if (it == silent_.end()) return kj::READY_NOW;
          // Past its time the next describe asks it itself (and marks it again if it is still silent).
          if (std::chrono::steady_clock::now() >= it->second.until) {
            silent_.erase(it);
            return kj::READY_NOW;
          }
          return ProbeSilent(address);
        });
  });
}

std::string Runtime::FollowLease(const std::string& id, const std::string& server, uint32_t* device) {
  std::lock_guard<std::mutex> lock(moves_mu_);
  std::string at = server;
  // A lease moved back to an agent it left drops that agent's entry (NoteLeaseMoved), so chains have no cycle; the
  // bound is for safety only.
  for (int hop = 0; hop < 16; ++hop) {
    auto it = lease_moves_.find({id, at});
    if (it == lease_moves_.end()) break;
    if (device != nullptr) {
      auto d = it->second.devices.find(*device);
      if (d != it->second.devices.end()) *device = d->second;
    }
    at = it->second.server;
  }
  return at;
}

std::string Runtime::LeaseAgent(const std::string& id, const std::string& server) {
  return FollowLease(id, server, nullptr);
}

uint32_t Runtime::LeaseDevice(const std::string& id, const std::string& server, uint32_t device) {
  FollowLease(id, server, &device);
  return device;
}

bool Runtime::NoteLeaseMoved(const std::string& id, const std::string& server, wire::Outcome::Reader outcome) {
  if (!outcome.hasMoved() || outcome.getMoved().getServer().size() == 0) return false;
  auto moved = outcome.getMoved();
  LeaseMove to;
  to.server = moved.getServer();
  if (to.server == server) return false;  // Nowhere else to ask.
  auto from = moved.getFromDevices(), into = moved.getToDevices();
  for (unsigned i = 0; i < from.size() && i < into.size(); ++i) to.devices[from[i]] = into[i];
  std::lock_guard<std::mutex> lock(moves_mu_);
  lease_moves_.erase({id, to.server});  // It holds the lease again, if it had let it go.
  GP_DEBUG("client", "lease {} moved from {} to {}", id, server, to.server);
  lease_moves_[{id, server}] = std::move(to);
  return true;
}

void Runtime::Forget(const std::string& address) {
  auto it = connections_.find(address);
  if (it != connections_.end()) ForgetLater(it->second.get());
}

void Runtime::ForgetLater(Connection* connection) {
  // Unregister now so the next call reconnects; destroy on a later turn.
  std::string address = connection->address;
  auto it = connections_.find(address);
  if (it == connections_.end() || it->second.get() != connection) return;
  kj::Own<Connection> owned = kj::mv(it->second);
  connections_.erase(it);
  deferred_->add(kj::evalLater([owned = kj::mv(owned)]() mutable { owned = nullptr; }));
}

void Runtime::taskFailed(kj::Exception&& exception) {
  GP_DEBUG("client", "deferred task failed: {}", exception.getDescription().cStr());
}

kj::Promise<wire::Agent::Client> Runtime::Agent(const std::string& address) {
  // Tag connection failures so that callers report "down" rather than a failure of their own call.
  return AgentUntagged(address).catch_([](kj::Exception&& e) -> kj::Promise<wire::Agent::Client> {
    if (e.getDescription().startsWith("gpupool-")) return kj::mv(e);
    return KJ_EXCEPTION(DISCONNECTED, "gpupool-connect", e.getDescription());
  });
}

kj::Promise<wire::Agent::Client> Runtime::AgentUntagged(const std::string& address) {
  auto it = connections_.find(address);
  if (it != connections_.end()) {
    KJ_IF_MAYBE(agent, it->second->agent) { return *agent; }
    KJ_IF_MAYBE(pending, it->second->connecting) { return pending->addBranch(); }
  }
  auto conn = kj::heap<Connection>();
  conn->address = address;
  Connection* raw = conn.get();
  connections_[address] = kj::mv(conn);
  auto forked = Connect(address, raw).fork();
  auto branch = forked.addBranch();
  raw->connecting = kj::mv(forked);
  return branch;
}

Runtime::Connection* Runtime::Registered(const std::string& address, Connection* expected) {
  auto it = connections_.find(address);
  if (it == connections_.end() || it->second.get() != expected) {
    kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "connection was reset while connecting"));
  }
  return expected;
}

// A peer that vanishes without closing (cable cut, host down, link down) sends no reset: without this a pending
// call would wait for TCP's own timeouts (many minutes). Keepalive probes notice an idle dead peer in about 10 s,
// TCP_USER_TIMEOUT one that stopped acknowledging data in 10 s: the connection breaks, every pending call fails
// with "disconnected", and the program gets an error well within the default lease TTL (20 s). Unix sockets
// take no TCP options: ignored.
void DetectDeadPeers(kj::AsyncIoStream& stream) {
  const int on = 1, idle_s = 4, interval_s = 2, probes = 3;
  const unsigned user_timeout_ms = 10000;
  try {
    stream.setsockopt(SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    stream.setsockopt(IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
    stream.setsockopt(IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
    stream.setsockopt(IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
    stream.setsockopt(IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
  } catch (const kj::Exception&) {
  }
}

kj::Promise<kj::Own<kj::AsyncIoStream>> Runtime::ConnectStream(const std::string& address,
                                                             std::chrono::milliseconds timeout) {
  std::string target = address;
  const bool tls = StripTlsScheme(&target);
  if (tls && !tls_) {
    auto made = MakeTls(ClientTlsFiles(), false);
    if (!made.ok()) return KJ_EXCEPTION(FAILED, "gpupool-connect", made.status().message());
    tls_ = std::move(made).value();
  }
  auto connected =
      io_->provider->getNetwork()
          .parseAddress(target, 7450)
          .then([](kj::Own<kj::NetworkAddress> a) { return a->connect().attach(kj::mv(a)); });
  if (tls) {
    std::string host = target.substr(0, target.rfind(':'));
    connected = connected.then([this, host](kj::Own<kj::AsyncIoStream> stream) {
      return tls_->context->wrapClient(kj::mv(stream), host).catch_([host](kj::Exception&& e) -> kj::Own<kj::AsyncIoStream> {
        kj::throwFatalException(KJ_EXCEPTION(FAILED, "gpupool-connect", "TLS with " + host + " failed: " +
                                                                           std::string(e.getDescription().cStr())));
      });
    });
  }
  return io_->provider->getTimer()
      .timeoutAfter(timeout.count() * kj::MILLISECONDS, kj::mv(connected))
      .then([](kj::Own<kj::AsyncIoStream> stream) {
        DetectDeadPeers(*stream);
        return stream;
      });
}

kj::Promise<wire::Agent::Client> Runtime::Connect(const std::string& address, Connection* raw) {
  std::string addr = address;
  return ConnectStream(address, connect_timeout_)
      .then([this, addr, raw](kj::Own<kj::AsyncIoStream> stream) {
        Connection& c = *Registered(addr, raw);
        c.stream = kj::mv(stream);
        c.rpc = kj::heap<capnp::TwoPartyClient>(*c.stream);
        auto agent = c.rpc->bootstrap().castAs<wire::Agent>();
        auto request = agent.helloRequest();
        request.setClientVersion(wire::PROTOCOL_VERSION);
        // Only over TCP: on a Unix socket the agent asks the kernel, and a token would only be one more secret sent.
        if (addr.rfind("unix:", 0) != 0) request.setToken(ClientToken());
        return Deadline(request.send()).then(
            [this, addr, raw, agent](capnp::Response<wire::Agent::HelloResults>&& hello) mutable
            -> kj::Promise<wire::Agent::Client> {
              if (hello.getServerVersion() != wire::PROTOCOL_VERSION) {
                return KJ_EXCEPTION(FAILED, "gpupool-protocol-mismatch", hello.getServerVersion());
              }
              if (hello.hasRefused() && hello.getRefused().size() > 0) {
                std::string why = hello.getRefused();
                return KJ_EXCEPTION(FAILED, "gpupool-refused", why);
              }
              Connection& c = *Registered(addr, raw);
              c.agent = agent;
              c.watch = c.rpc->onDisconnect()
                            .then([this, addr, &c]() {
                              GP_DEBUG("rpc", "{} disconnected", addr);
                              ForgetLater(&c);
                            })
                            .eagerlyEvaluate(nullptr);
              GP_DEBUG("rpc", "connected to {} ({})", addr, hello.getName().cStr());
              return agent;
            },
            [](kj::Exception&& e) -> kj::Promise<wire::Agent::Client> {
              // Connected, but the peer did not answer hello like a gp-agent of any version.
              if (e.getDescription().startsWith("gpupool-")) return kj::mv(e);
              return KJ_EXCEPTION(FAILED, "gpupool-handshake", e.getDescription());
            });
      })
      .catch_([this, addr, raw](kj::Exception&& e) -> kj::Promise<wire::Agent::Client> {
        auto it = connections_.find(addr);
        if (it != connections_.end() && it->second.get() == raw) ForgetLater(raw);
        return kj::mv(e);
      });
}

}  // namespace gpupool::internal
