#include "client/bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "client/session_client.h"

namespace gpupool {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// A loopback TCP server for the baselines: echoes small messages, and acknowledges bulk transfers.
class Loopback {
 public:
  Loopback() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listener_, 1);
    socklen_t len = sizeof(a);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    server_ = std::thread([this] {
      int c = accept(listener_, nullptr, nullptr);
      if (c < 0) return;
      int one = 1;
      setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::vector<char> buf(1 << 20);
      while (true) {
        uint64_t header[2];  // {kind, bytes}: 0 = echo 8 bytes, 1 = sink `bytes` then ack.
        if (!ReadAll(c, header, sizeof(header))) break;
        if (header[0] == 0) {
          if (write(c, header, 8) != 8) break;
          continue;
        }
        uint64_t left = header[1];
        while (left > 0) {
          ssize_t n = read(c, buf.data(), std::min<uint64_t>(left, buf.size()));
          if (n <= 0) return close(c), void();
          left -= static_cast<uint64_t>(n);
        }
        if (write(c, header, 8) != 8) break;
      }
      close(c);
    });
    client_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(client_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  ~Loopback() {
    shutdown(client_, SHUT_RDWR);
    close(client_);
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    server_.join();
  }
  double PingMicros() {
    uint64_t msg[2] = {0, 0}, reply = 0;
    auto t0 = Clock::now();
    if (write(client_, msg, sizeof(msg)) != sizeof(msg) || !ReadAll(client_, &reply, 8)) return -1;
    return Micros(Clock::now() - t0);
  }
  double SendSeconds(const std::vector<char>& data) {
    uint64_t header[2] = {1, data.size()}, reply = 0;
    auto t0 = Clock::now();
    if (write(client_, header, sizeof(header)) != sizeof(header)) return -1;
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = write(client_, data.data() + off, data.size() - off);
      if (n <= 0) return -1;
      off += static_cast<size_t>(n);
    }
    if (!ReadAll(client_, &reply, 8)) return -1;
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  static bool ReadAll(int fd, void* p, size_t n) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      ssize_t r = read(fd, c, n);
      if (r <= 0) return false;
      c += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  int listener_ = -1, client_ = -1;
  uint16_t port_ = 0;
  std::thread server_;
};

constexpr const char* kEmptyKernel =
    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry empty()\n{\n  ret;\n}\n";

}  // namespace

Result<std::vector<BenchFigure>> RunBenchmarks(const std::string& token, const std::string& which) {
  auto sessions = internal::RemoteSession::OpenLease(token);
  if (!sessions.ok()) return sessions.status();
  internal::RemoteSession& s = *sessions->front();
  Loopback loopback;
  std::vector<BenchFigure> out;
  bool all = which == "all";
  if (all || which == "latency") {
    std::vector<double> rtt, tcp;
    uint64_t free_bytes = 0, total = 0;
    for (int i = 0; i < 50; ++i) s.MemGetInfo(&free_bytes, &total);  // Warm up.
    for (int i = 0; i < 2000; ++i) {
      auto t0 = Clock::now();
      if (int rc = s.MemGetInfo(&free_bytes, &total); rc != 0) {
        return Status(StatusCode::kUnavailable, fmt::format("sync call failed: {}", s.last_error()));
      }
      rtt.push_back(Micros(Clock::now() - t0));
      tcp.push_back(loopback.PingMicros());
    }
    double p50 = Percentile(rtt, 0.5), p99 = Percentile(rtt, 0.99), b50 = Percentile(tcp, 0.5),
           b99 = Percentile(tcp, 0.99);
    out.push_back({"sync_rtt_p50", p50, "us", b50, "raw TCP ping-pong p50 (loopback)", b50 / p50, 0.5, b50 / p50 >= 0.5});
    out.push_back({"sync_rtt_p99", p99, "us", b99, "raw TCP ping-pong p99 (loopback)", b99 / p99, 0, false});
  }
  if (all || which == "bandwidth") {
    const size_t bytes = 64u << 20;
    std::vector<char> host(bytes, 7);
    uint64_t dev = 0;
    if (s.MemAlloc(bytes, &dev) != 0) return Status(StatusCode::kResourceExhausted, "cannot allocate 64 MiB: " + s.last_error());
    double best_h2d = 1e9, best_d2h = 1e9, best_tcp = 1e9;
    for (int i = 0; i < 3; ++i) {
      auto t0 = Clock::now();
      s.CopyToDevice(dev, host.data(), bytes, 0);
      if (s.Synchronize() != 0) return Status(StatusCode::kInternal, "copy failed: " + s.last_error());
      best_h2d = std::min(best_h2d, std::chrono::duration<double>(Clock::now() - t0).count());
      t0 = Clock::now();
      if (s.CopyFromDevice(host.data(), dev, bytes, 0) != 0) return Status(StatusCode::kInternal, "copy failed: " + s.last_error());
      best_d2h = std::min(best_d2h, std::chrono::duration<double>(Clock::now() - t0).count());
      best_tcp = std::min(best_tcp, loopback.SendSeconds(host));
    }
    s.MemFree(dev);
    double gib = static_cast<double>(bytes) / (1 << 30);
    double h2d = gib / best_h2d, d2h = gib / best_d2h, tcp = gib / best_tcp;
    out.push_back({"h2d_64MiB", h2d, "GiB/s", tcp, "raw TCP throughput (loopback)", h2d / tcp, 0.7, h2d / tcp >= 0.7});
    out.push_back({"d2h_64MiB", d2h, "GiB/s", tcp, "raw TCP throughput (loopback)", d2h / tcp, 0.7, d2h / tcp >= 0.7});
  }
  if (all || which == "launch") {
    uint64_t module = 0;
    internal::RemoteFunctionInfo fn;
    if (s.ModuleLoad(kEmptyKernel, std::strlen(kEmptyKernel) + 1, &module) != 0 ||
        s.GetFunction(module, "empty", &fn) != 0) {
      return Status(StatusCode::kInternal, "cannot load the empty kernel: " + s.last_error());
    }
    const uint32_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    const int n = 20000;
    for (int i = 0; i < 200; ++i) s.Launch(fn.handle, grid, block, 0, 0, nullptr, 0);
    s.Synchronize();
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) s.Launch(fn.handle, grid, block, 0, 0, nullptr, 0);
    if (s.Synchronize() != 0) return Status(StatusCode::kInternal, "launches failed: " + s.last_error());
    double rate = n / std::chrono::duration<double>(Clock::now() - t0).count();
    out.push_back({"async_launches", rate, "launches/s", 0, "", 0, 100000, rate >= 100000});
  }
  if (out.empty()) return Status(StatusCode::kInvalidArgument, "unknown benchmark '" + which + "' (latency, bandwidth, launch, all)");
  return out;
}

}  // namespace gpupool
