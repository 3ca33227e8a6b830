#include "integration/fake_agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>

#include "pool.capnp.h"

namespace gpupool::testing {
namespace {

class VersionedAgent final : public wire::Agent::Server {
 public:
  explicit VersionedAgent(uint32_t version) : version_(version) {}
  kj::Promise<void> hello(HelloContext context) override {
    context.getResults().setServerVersion(version_);
    context.getResults().setName("from-the-future");
    return kj::READY_NOW;
  }

 private:
  uint32_t version_;
};

// Grants every lease on its one emulated GPU and refuses every session it is asked for, as openSession's
// outcome `busy` with `message` and `window_taken`.
class SessionRefusingAgent final : public wire::Agent::Server {
 public:
  SessionRefusingAgent(bool window_taken, std::string message, std::atomic<int>* asked)
      : window_taken_(window_taken), message_(std::move(message)), asked_(asked) {}
  kj::Promise<void> hello(HelloContext context) override {
    context.getResults().setServerVersion(wire::PROTOCOL_VERSION);
    context.getResults().setName("refusing");
    return kj::READY_NOW;
  }
  kj::Promise<void> describe(DescribeContext context) override {
    auto state = context.getResults().initState();
    state.setName("refusing");
    state.setProtocolVersion(wire::PROTOCOL_VERSION);
    state.setLeaseTtlMs(20000);
    state.setRenewIntervalMs(5000);
    auto device = state.initDevices(1)[0];
    device.setUuid("GPU-refusing");
    device.setModel("fake GPU");
    device.setEmulated(true);
    device.setMemoryTotal(1ull << 30);
    return kj::READY_NOW;
  }
  kj::Promise<void> renew(RenewContext context) override {
    auto slice = context.getResults().initSlices(1)[0];
    slice.setMemoryBytes(1ull << 30);
    slice.setShareMicros(1000000);
    context.getResults().setLeaseTtlMs(20000);
    return kj::READY_NOW;
  }
  kj::Promise<void> openSession(OpenSessionContext context) override {
    ++*asked_;
    auto outcome = context.getResults().initOutcome();
    outcome.setCode(wire::Outcome::Code::BUSY);
    outcome.setMessage(message_);
    outcome.setWindowTaken(window_taken_);
    return kj::READY_NOW;
  }

 private:
  bool window_taken_;
  std::string message_;
  std::atomic<int>* asked_;
};

class CapnpFake final : public FakeServer {
 public:
  // `make` builds the server's main capability, on the server's thread.
  explicit CapnpFake(std::function<capnp::Capability::Client()> make) {
    thread_ = std::thread([this, make] {
      auto io = kj::setupAsyncIo();
      auto addr = io.provider->getNetwork().parseAddress("127.0.0.1:0").wait(io.waitScope);
      auto receiver = addr->listen();
      capnp::TwoPartyServer server(make());
      auto listening = server.listen(*receiver);
      auto paf = kj::newPromiseAndFulfiller<void>();
      {
        std::lock_guard<std::mutex> lock(mu_);
        address_ = fmt::format("127.0.0.1:{}", receiver->getPort());
        executor_ = &kj::getCurrentThreadExecutor();
        stop_ = kj::mv(paf.fulfiller);
      }
      cv_.notify_all();
      paf.promise.exclusiveJoin(kj::mv(listening)).wait(io.waitScope);
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return executor_ != nullptr; });
  }
  ~CapnpFake() override {
    executor_->executeSync([this] { stop_->fulfill(); });
    thread_.join();
  }
  const std::string& address() const override { return address_; }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string address_;
  const kj::Executor* executor_ = nullptr;
  kj::Own<kj::PromiseFulfiller<void>> stop_;
};

class HttpFake final : public FakeServer {
 public:
  HttpFake() {
    fd_ = ListenOnLoopback(&address_);
    thread_ = std::thread([this] {
      while (!stop_) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) break;
        const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        char buf[256];
        (void)!read(c, buf, sizeof(buf));
        (void)!write(c, reply, sizeof(reply) - 1);
        close(c);
      }
    });
  }
  ~HttpFake() override {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  const std::string& address() const override { return address_; }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::string address_;
};

}  // namespace

std::unique_ptr<FakeServer> StartAgentOfVersion(uint32_t version) {
  return std::make_unique<CapnpFake>([version] { return kj::heap<VersionedAgent>(version); });
}

std::unique_ptr<FakeServer> StartSessionRefusingAgent(bool window_taken, const std::string& message,
                                                      std::atomic<int>* asked) {
  return std::make_unique<CapnpFake>([window_taken, message, asked] {
    return kj::heap<SessionRefusingAgent>(window_taken, message, asked);
  });
}
std::unique_ptr<FakeServer> StartHttpServer() { return std::make_unique<HttpFake>(); }

int ListenOnLoopback(std::string* address) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    throw std::runtime_error(fmt::format("listening on loopback: {}", std::strerror(error)));
  }
  *address = fmt::format("127.0.0.1:{}", ntohs(addr.sin_port));
  return fd;
}

}  // namespace gpupool::testing
