#include "gp-bench/bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <latch>
#include <thread>

#include <fmt/format.h>

#include "backend/emu/emu_backend.h"
#include "client/admin.h"
#include "client/lease_core.h"
#include "client/session_client.h"
#include "core/tls.h"
#include "gpupool/gpupool.h"
#include "gpupool/units.h"

namespace gpupool {
namespace {

using Clock = std::chrono::steady_clock;
using internal::RemoteSession;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// `higher_is_better`: a rate (ratio value / baseline) rather than a time (ratio baseline / value). Without a
// baseline the target applies to the value itself.
BenchFigure Figure(std::string name, double value, std::string unit, double baseline, std::string baseline_name,
                   bool higher_is_better, double target, std::string transport) {
  BenchFigure f;
  f.name = std::move(name);
  f.value = value;
  f.unit = std::move(unit);
  f.baseline = baseline;
  f.baseline_name = std::move(baseline_name);
  if (baseline > 0 && value > 0) f.ratio = higher_is_better ? value / baseline : baseline / value;
  f.target = target;
  f.met = target > 0 && (baseline > 0 ? f.ratio >= target : value >= target);
  f.transport = std::move(transport);
  return f;
}

// Moves all `n` bytes at `p` through `io` (read or write), which may move fewer at a time; false at an error or the
// end of the stream.
template <typename Io, typename Byte>
bool AllBytes(Io io, int fd, Byte* p, size_t n) {
  while (n > 0) {
    const ssize_t moved = io(fd, p, n);
    if (moved <= 0) return false;
    p += moved;
    n -= static_cast<size_t>(moved);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) { return AllBytes(read, fd, static_cast<char*>(p), n); }
bool WriteAll(int fd, const void* p, size_t n) { return AllBytes(write, fd, static_cast<const char*>(p), n); }

// A raw byte stream over one transport, with a thread at the far end that echoes pings and acknowledges bulk
// transfers: what the transport alone costs, the baselines of the round trip and of the copies. Blocking reads and
// writes on both ends, the fastest a round trip over that transport can be.
class RawLink {
 public:
  // "unix": a connected pair of Unix stream sockets (the kernel's path of an accepted connection on a socket
  // file); "tcp": a TCP connection on loopback, with Nagle's algorithm off as on the session's connection.
  explicit RawLink(const std::string& transport) {
    int far = -1;
    if (transport.rfind("sink:", 0) == 0) {
      near_ = ConnectTcp(transport.substr(5));  // A sink served elsewhere (bench/migrate_veth.sh): no far end here.
      sink_only_ = near_ >= 0;
      return;
    }
    if (transport == "unix") {
      int pair[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return;
      near_ = pair[0];
      far = pair[1];
    } else {
      far = ConnectTcpLoopback();
      if (far < 0) return;
    }
    far_end_ = std::thread([far] { Serve(far); });
  }
  ~RawLink() {
    if (near_ >= 0) {
      shutdown(near_, SHUT_RDWR);
      close(near_);
    }
    if (far_end_.joinable()) far_end_.join();
  }
  bool ok() const { return far_end_.joinable() || sink_only_; }

  // One 16-byte message there and an 8-byte answer back; -1 on failure.
  double PingMicros() {
    uint64_t message[2] = {kEcho, 0}, reply = 0;
    auto t0 = Clock::now();
    if (!WriteAll(near_, message, sizeof(message)) || !ReadAll(near_, &reply, sizeof(reply))) return -1;
    return Micros(Clock::now() - t0);
  }
  // `data` there until the far end acknowledges having read all of it; -1 on failure.
  double SendSeconds(const std::vector<char>& data) {
    uint64_t header[2] = {kSink, data.size()}, reply = 0;
    auto t0 = Clock::now();
    if (!WriteAll(near_, header, sizeof(header)) || !WriteAll(near_, data.data(), data.size()) ||
        !ReadAll(near_, &reply, sizeof(reply))) {
      return -1;
    }
    return Seconds(Clock::now() - t0);
  }

 private:
  // Message kinds: the header is {kind, bytes}.
  static constexpr uint64_t kEcho = 0, kSink = 1;

  // A TCP connection to "host:port" (an IPv4 address), or -1.
  static int ConnectTcp(const std::string& address) {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
    if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr) != 1) return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  // Returns the accepted end and sets near_ to the connecting one.
  int ConnectTcpLoopback() {
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int far = -1;
    if (listener >= 0 && bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(listener, 1) == 0 &&
        getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      near_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      // The connection completes in the listen backlog, so accepting after connecting does not block.
      if (near_ >= 0 && connect(near_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        far = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      }
    }
    if (listener >= 0) close(listener);
    if (far < 0) return -1;
    int one = 1;
    setsockopt(near_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(far, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return far;
  }

  static void Serve(int fd) {
    std::vector<char> buf(1 << 20);
    uint64_t header[2];
    while (ReadAll(fd, header, sizeof(header))) {
      for (uint64_t left = header[0] == kSink ? header[1] : 0; left > 0;) {
        ssize_t n = read(fd, buf.data(), std::min<uint64_t>(left, buf.size()));
        if (n <= 0) return close(fd), void();
        left -= static_cast<uint64_t>(n);
      }
      if (!WriteAll(fd, header, 8)) break;
    }
    close(fd);
  }

  int near_ = -1;
  bool sink_only_ = false;
  std::thread far_end_;
};

// Whether a TCP agent address is on this host's loopback, where the raw TCP baselines run.
bool OnLoopback(const std::string& tagged) {
  std::string address = tagged;
  StripTlsScheme(&address);
  return address.rfind("127.", 0) == 0 || address.rfind("localhost", 0) == 0 || address.rfind("[::1]", 0) == 0;
}

std::string TcpBaselineName(const std::string& what, const std::string& server) {
  return OnLoopback(server) ? fmt::format("raw TCP {} (loopback)", what)
                            : fmt::format("raw TCP {} on loopback; the agent is remote", what);
}

Status Failed(RemoteSession& s, const std::string& what) {
  return Status(StatusCode::kInternal, fmt::format("{} failed: {}", what, s.last_error()));
}

// ---- latency

Status MeasureLatency(RemoteSession& s, const BenchOptions&, std::vector<BenchFigure>* out) {
  const std::string transport = TransportOf(s.slice().server);
  RawLink raw(transport);
  if (!raw.ok()) {
    return Status(StatusCode::kInternal, "cannot open a raw " + transport + " connection for the baseline");
  }
  std::vector<double> rtt, baseline;
  uint64_t free_bytes = 0, total = 0;
  for (int i = 0; i < 50; ++i) s.MemGetInfo(&free_bytes, &total);  // Warm up.
  // In alternating blocks, so that a neighbour's burst on a shared host slows both sides alike, yet each side runs
  // back to back as a program's calls do: alternating call by call slowed the raw ping-pong by half (its far end
  // went cold while the session's call ran) and so flattered gpupool.
  constexpr int kBlock = 100;
  for (int i = 0; i < 2000; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      auto t0 = Clock::now();
      if (s.MemGetInfo(&free_bytes, &total) != 0) return Failed(s, "a synchronous call");
      rtt.push_back(Micros(Clock::now() - t0));
    }
    for (int j = 0; j < kBlock; ++j) {
      double ping = raw.PingMicros();
      if (ping < 0) return Status(StatusCode::kInternal, "the raw " + transport + " ping-pong failed");
      baseline.push_back(ping);
    }
  }
  std::string raw_name =
      transport == "unix" ? "raw Unix socket ping-pong" : TcpBaselineName("ping-pong", s.slice().server);
  out->push_back(Figure("sync_rtt_p50_" + transport, Percentile(rtt, 0.5), "us", Percentile(baseline, 0.5),
                        raw_name + " p50", false, 1 / 1.5, transport));
  out->push_back(Figure("sync_rtt_p99_" + transport, Percentile(rtt, 0.99), "us", Percentile(baseline, 0.99),
                        raw_name + " p99", false, 0, transport));
  return Status::Ok();
}

// ---- bandwidth

// Over a Unix socket the agent is on this host, where a shared memory path may one day carry copies: their
// baseline is then a memcpy of the same size, not the socket. Over TCP it is a raw TCP transfer.
Status MeasureBandwidth(RemoteSession& s, const BenchOptions&, std::vector<BenchFigure>* out) {
  const std::string transport = TransportOf(s.slice().server);
  const size_t bytes = 64u << 20;
  std::vector<char> host(bytes, 7), spare(bytes, 9);
  std::unique_ptr<RawLink> raw;
  if (transport != "unix") {  // TCP, or TLS over TCP: against raw TCP (TLS has no target; it shows its cost).
    raw = std::make_unique<RawLink>("tcp");
    if (!raw->ok()) return Status(StatusCode::kInternal, "cannot open a raw TCP connection for the baseline");
  }
  uint64_t dev = 0;
  if (s.MemAlloc(bytes, &dev) != 0) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate 64 MiB: " + s.last_error());
  }
  double best_h2d = 1e9, best_d2h = 1e9, best_baseline = 1e9;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    s.CopyToDevice(dev, host.data(), bytes, 0);
    if (s.Synchronize() != 0) return Failed(s, "a 64 MiB host-to-device copy");
    best_h2d = std::min(best_h2d, Seconds(Clock::now() - t0));
    t0 = Clock::now();
    if (s.CopyFromDevice(host.data(), dev, bytes, 0) != 0) return Failed(s, "a 64 MiB device-to-host copy");
    best_d2h = std::min(best_d2h, Seconds(Clock::now() - t0));
    if (raw) {
      double sent = raw->SendSeconds(host);
      if (sent < 0) return Status(StatusCode::kInternal, "the raw TCP transfer failed");
      best_baseline = std::min(best_baseline, sent);
    } else {
      t0 = Clock::now();
      std::memcpy(spare.data(), host.data(), bytes);
      best_baseline = std::min(best_baseline, Seconds(Clock::now() - t0));
    }
  }
  s.MemFree(dev);
  const double gib = static_cast<double>(bytes) / (1 << 30);
  const double baseline = gib / best_baseline;
  std::string name = raw ? TcpBaselineName("throughput", s.slice().server) : "memcpy of 64 MiB (same host)";
  const double target = transport == "tcp" ? 0.9 : transport == "unix" ? 0.5 : 0;
  out->push_back(Figure("h2d_64MiB_" + transport, gib / best_h2d, "GiB/s", baseline, name, true, target, transport));
  out->push_back(Figure("d2h_64MiB_" + transport, gib / best_d2h, "GiB/s", baseline, name, true, target, transport));
  return Status::Ok();
}

// ---- launch

constexpr const char* kEmptyKernel =
    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry empty()\n{\n  ret;\n}\n";

Status MeasureLaunchRate(RemoteSession& s, const BenchOptions&, std::vector<BenchFigure>* out) {
  uint64_t module = 0;
  internal::RemoteFunctionInfo fn;
  if (s.ModuleLoad(kEmptyKernel, std::strlen(kEmptyKernel) + 1, &module) != 0 ||
      s.GetFunction(module, "empty", &fn) != 0) {
    return Failed(s, "loading the empty kernel");
  }
  const uint32_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
  const int n = 20000;
  for (int i = 0; i < 200; ++i) s.Launch(fn.handle, grid, block, 0, 0, nullptr, 0);
  s.Synchronize();
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) s.Launch(fn.handle, grid, block, 0, 0, nullptr, 0);
  if (s.Synchronize() != 0) return Failed(s, "the launches");
  double rate = n / Seconds(Clock::now() - t0);
  s.ModuleUnload(module);
  out->push_back(Figure("async_launches", rate, "launches/s", 0, "", true, 200000, TransportOf(s.slice().server)));
  return Status::Ok();
}

// ---- loop: a training step's shape (a small input up, many small kernels, a small result down, a wait).

constexpr int kLoopLaunches = 50;
constexpr int kLoopWarmupSteps = 20;
constexpr int kLoopRoundSteps = 10;
constexpr uint32_t kLoopThreads = 256;
constexpr size_t kLoopFloats = 16384;  // 64 KiB each way.
constexpr size_t kLoopBytes = kLoopFloats * sizeof(float);
// The launches work on the buffer's first kLoopKernelFloats elements, one per thread: kernels as short as they come,
// so that the transport's share of a step shows (on the emulated device a launch of even this little work costs
// tens of microseconds); the rest of the buffer travels up and back unchanged, and is checked too.
constexpr uint32_t kLoopKernelFloats = kLoopThreads;
// Inputs are the integers 0 .. kLoopValues - 1: every value stays a small integer, exact in float, so the device's
// results must equal the host's bit for bit.
constexpr size_t kLoopValues = 1024;

// One block; each thread takes every blockDim.x-th element below n: x = x * a + b (fused, as the host computes it).
constexpr const char* kLoopKernel = R"(.version 7.0
.target sm_50
.address_size 64
.visible .entry scale_add(.param .u64 data, .param .u32 n, .param .f32 a, .param .f32 b)
{
  .reg .pred %p<2>;
  .reg .b32 %r<4>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [n];
  ld.param.f32 %f1, [a];
  ld.param.f32 %f2, [b];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %ntid.x;
NEXT:
  setp.ge.u32 %p1, %r2, %r1;
  @%p1 bra DONE;
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f3, [%rd3];
  fma.rn.f32 %f3, %f3, %f1, %f2;
  st.global.f32 [%rd3], %f3;
  add.u32 %r2, %r2, %r3;
  bra NEXT;
DONE:
  ret;
}
)";

// Launch k of a step: a sign that alternates (so that the launches' order shows in the result) and a shift of k + 1
// (so that every launch shows).
float LoopScale(int k) { return k % 2 == 0 ? 1.0f : -1.0f; }
float LoopShift(int k) { return static_cast<float>(k + 1); }
float LoopInput(size_t i, int step) { return static_cast<float>((i + static_cast<size_t>(step)) % kLoopValues); }

// The parameter buffers of a step's launches, packed at the offsets the kernel's parameter layout gives.
Result<std::vector<std::vector<uint8_t>>> PackLoopParams(const std::vector<session::KernelParam>& layout,
                                                         uint64_t data) {
  if (layout.size() != 4 || layout[0].size != 8 || layout[1].size != 4 || layout[2].size != 4 || layout[3].size != 4) {
    return Status(StatusCode::kInternal, "the loop kernel's parameters are not laid out as (u64, u32, f32, f32)");
  }
  std::vector<std::vector<uint8_t>> out;
  for (int k = 0; k < kLoopLaunches; ++k) {
    std::vector<uint8_t> buf(layout[3].offset + 4);
    uint32_t n = kLoopKernelFloats;
    float a = LoopScale(k), b = LoopShift(k);
    std::memcpy(buf.data() + layout[0].offset, &data, 8);
    std::memcpy(buf.data() + layout[1].offset, &n, 4);
    std::memcpy(buf.data() + layout[2].offset, &a, 4);
    std::memcpy(buf.data() + layout[3].offset, &b, 4);
    out.push_back(std::move(buf));
  }
  return out;
}

// Where the loop runs: through gpupool, or on an emulated device in this process.
class LoopDevice {
 public:
  virtual ~LoopDevice() = default;
  // `in` up, the launches, the result down into `out`, then a synchronisation.
  virtual Status Step(const std::vector<float>& in, std::vector<float>* out) = 0;
};

// Through the slice's session; `graph`: the launches of a step go as one batch message, recorded by the first step
// and sent again as they are by the others, as a graph launch does.
class RemoteLoop : public LoopDevice {
 public:
  RemoteLoop(RemoteSession& s, bool graph) : s_(s), graph_(graph) {}
  ~RemoteLoop() override {
    if (buffer_) s_.MemFree(buffer_);
    if (module_) s_.ModuleUnload(module_);
  }
  Status Load() {
    internal::RemoteFunctionInfo fn;
    if (s_.ModuleLoad(kLoopKernel, std::strlen(kLoopKernel) + 1, &module_) != 0 ||
        s_.GetFunction(module_, "scale_add", &fn) != 0) {
      return Failed(s_, "loading the loop kernel");
    }
    function_ = fn.handle;
    if (s_.MemAlloc(kLoopBytes, &buffer_) != 0) return Failed(s_, "allocating the loop's buffer");
    auto params = PackLoopParams(fn.params, buffer_);
    if (!params.ok()) return params.status();
    params_ = std::move(params).value();
    return Status::Ok();
  }
  Status Step(const std::vector<float>& in, std::vector<float>* out) override {
    const uint32_t grid[3] = {1, 1, 1}, block[3] = {kLoopThreads, 1, 1};
    s_.CopyToDevice(buffer_, in.data(), kLoopBytes, 0);
    if (graph_ && recorded_) {
      s_.SendRecorded(launches_);  // A graph launched again unchanged, as the interposer's cuGraphLaunch sends it.
    } else {
      if (graph_) s_.BeginBatch(&launches_);
      for (const auto& p : params_) s_.Launch(function_, grid, block, 0, 0, p.data(), p.size());
      if (graph_) recorded_ = s_.EndBatch();
    }
    if (s_.CopyFromDevice(out->data(), buffer_, kLoopBytes, 0) != 0) return Failed(s_, "a loop step");
    if (s_.Synchronize() != 0) return Failed(s_, "a loop step's synchronisation");
    return Status::Ok();
  }

 private:
  RemoteSession& s_;
  const bool graph_;
  RemoteSession::RecordedBatch launches_;  // The graph variant's launches, as its first step sent them.
  bool recorded_ = false;
  uint64_t module_ = 0, function_ = 0, buffer_ = 0;
  std::vector<std::vector<uint8_t>> params_;
};

// The same calls on an emulated device in this process, through the backend interface the session server drives
// for the same messages: the loop's work without the transport, the server, or the agent.
class InProcessLoop : public LoopDevice {
 public:
  Status Load() {
    backend::EmuBackendConfig config;
    config.device_name = "gp-bench in-process emulated GPU";
    config.memory_bytes = 64ull << 20;
    auto device = backend::NewEmuBackend(config);
    if (!device.ok()) return device.status();
    device_ = std::move(device).value();
    if (!Check(device_->LoadModule(reinterpret_cast<const uint8_t*>(kLoopKernel), std::strlen(kLoopKernel) + 1,
                                   &module_)) ||
        !Check(device_->GetFunction(module_, "scale_add", &function_, &info_)) ||
        !Check(device_->Alloc(kLoopBytes, &buffer_, &reserved_))) {
      return Status(StatusCode::kInternal, "the in-process emulated device: " + error_);
    }
    auto params = PackLoopParams(info_.params, buffer_);
    if (!params.ok()) return params.status();
    params_ = std::move(params).value();
    return Status::Ok();
  }
  Status Step(const std::vector<float>& in, std::vector<float>* out) override {
    backend::LaunchShape shape;
    shape.block = {kLoopThreads, 1, 1};
    bool ok = Check(device_->CopyToDevice(buffer_, reinterpret_cast<const uint8_t*>(in.data()), kLoopBytes, {}));
    for (const auto& p : params_) ok = ok && Check(device_->Launch(function_, info_, shape, {}, p.data(), p.size()));
    ok = ok && Check(device_->CopyFromDevice(reinterpret_cast<uint8_t*>(out->data()), buffer_, kLoopBytes, {}));
    // The copy's wait, then the synchronisation's, as the server answers each.
    ok = ok && Wait() && Wait();
    return ok ? Status::Ok() : Status(StatusCode::kInternal, "a loop step on the in-process device: " + error_);
  }

 private:
  bool Check(const CallStatus& s) {
    if (!s.ok()) error_ = s.message();
    return s.ok();
  }
  // Until the device has run everything queued.
  bool Wait() {
    std::promise<void> reached;
    if (!Check(device_->WhenReached({}, [&reached] { reached.set_value(); }))) return false;
    reached.get_future().wait();
    return Check(device_->Settled({}));
  }

  std::unique_ptr<backend::DeviceBackend> device_;
  backend::ModuleRef module_;
  backend::FunctionRef function_;
  backend::KernelInfo info_;
  uint64_t buffer_ = 0, reserved_ = 0;
  std::vector<std::vector<uint8_t>> params_;
  std::string error_;
};

// What the device must answer for each input value, computed on the host.
std::vector<float> LoopReference() {
  std::vector<float> ref(kLoopValues);
  for (size_t v = 0; v < kLoopValues; ++v) {
    float x = static_cast<float>(v);
    for (int k = 0; k < kLoopLaunches; ++k) x = std::fma(x, LoopScale(k), LoopShift(k));
    ref[v] = x;
  }
  return ref;
}

// Runs `steps` steps from `first_step` on `device`, checking every result; adds the time of the steps alone.
Status RunLoopSteps(LoopDevice& device, const char* where, int first_step, int steps, const std::vector<float>& ref,
                    double* seconds) {
  std::vector<float> in(kLoopFloats), out(kLoopFloats);
  for (int step = first_step; step < first_step + steps; ++step) {
    for (size_t i = 0; i < kLoopFloats; ++i) in[i] = LoopInput(i, step);
    std::fill(out.begin(), out.end(), -1.0f);
    auto t0 = Clock::now();
    if (Status s = device.Step(in, &out); !s.ok()) return s;
    *seconds += Seconds(Clock::now() - t0);
    for (size_t i = 0; i < kLoopFloats; ++i) {
      float want = i < kLoopKernelFloats ? ref[(i + static_cast<size_t>(step)) % kLoopValues] : in[i];
      if (out[i] != want) {
        return Status(StatusCode::kInternal,
                      fmt::format("loop: WRONG RESULT {}: step {} element {} is {} where the host computes {}", where,
                                  step, i, out[i], want));
      }
    }
  }
  return Status::Ok();
}

Status MeasureLoop(RemoteSession& s, const BenchOptions& options, std::vector<BenchFigure>* out) {
  if (options.loop_steps < 1) return Status(StatusCode::kInvalidArgument, "loop: at least one step");
  RemoteLoop stream(s, false), graph(s, true);
  InProcessLoop local;
  if (Status st = stream.Load(); !st.ok()) return st;
  if (Status st = graph.Load(); !st.ok()) return st;
  if (Status st = local.Load(); !st.ok()) return st;
  const std::vector<float> ref = LoopReference();
  struct Variant {
    LoopDevice* device;
    const char* where;
    double seconds = 0;
  };
  Variant variants[] = {{&local, "on the in-process emulated device"},
                        {&stream, "through gpupool"},
                        {&graph, "through gpupool, launches batched as a graph"}};
  for (Variant& v : variants) {
    double ignored = 0;
    if (Status st = RunLoopSteps(*v.device, v.where, 0, kLoopWarmupSteps, ref, &ignored); !st.ok()) return st;
  }
  // In short rounds (about kLoopRoundSteps steps each), the variants' order turning every round, so that a change
  // in the host's load during the run weighs on every variant alike.
  const int rounds = std::max(1, options.loop_steps / kLoopRoundSteps);
  for (int r = 0; r < rounds; ++r) {
    int first = options.loop_steps * r / rounds, last = options.loop_steps * (r + 1) / rounds;
    for (int i = 0; i < 3; ++i) {
      Variant& v = variants[(r + i) % 3];
      Status st = RunLoopSteps(*v.device, v.where, kLoopWarmupSteps + first, last - first, ref, &v.seconds);
      if (!st.ok()) return st;
    }
  }
  const std::string transport = TransportOf(s.slice().server);
  const double steps = options.loop_steps;
  const double baseline_ms = variants[0].seconds * 1000 / steps;
  // The baseline is an emulated device: against a physical GPU's slice the ratio measures the GPU, not gpupool.
  const bool comparable = s.props().emulated;
  std::string name = comparable ? "the same loop on an emulated device in this process"
                                : "the same loop on an emulated device in this process; the slice is a GPU";
  out->push_back(Figure("loop_step", variants[1].seconds * 1000 / steps, "ms", baseline_ms, name, false,
                        comparable ? 1 / 1.2 : 0, transport));
  out->push_back(Figure("loop_step_graph", variants[2].seconds * 1000 / steps, "ms", baseline_ms, name, false,
                        comparable ? 1 / 1.05 : 0, transport));
  return Status::Ok();
}

// ---- load: several clients' synchronous round trips at once on one agent.

constexpr int kLoadRoundTrips = 1000;  // Per client.

// Runs `round_trip` from `clients` threads at once, kLoadRoundTrips measured calls each, and answers every call's
// time in microseconds. A thread that has its samples goes on calling, unmeasured, until every thread has its own:
// the load stays at all the threads for every measured call, and each thread counts as much as any other.
// `round_trip(c)` runs one call of thread c and answers its time, or a negative figure on failure; `failure(c)`
// then says why, and the thread stops.
template <typename RoundTrip, typename Failure>
Status RoundTripsAtOnce(size_t clients, RoundTrip round_trip, Failure failure, std::vector<double>* all) {
  std::vector<std::vector<double>> samples(clients);
  std::vector<std::string> errors(clients);
  std::latch start(static_cast<std::ptrdiff_t>(clients));
  std::atomic<int> measuring(static_cast<int>(clients));  // Threads still taking their samples.
  std::vector<std::thread> threads;
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < 50; ++i) round_trip(c);
      start.arrive_and_wait();  // Measured only while every thread is at it.
      samples[c].reserve(kLoadRoundTrips);
      for (int i = 0; i < kLoadRoundTrips || measuring.load(std::memory_order_relaxed) > 0; ++i) {
        const double took = round_trip(c);
        if (took < 0) {
          errors[c] = failure(c);
          if (i < kLoadRoundTrips) measuring.fetch_sub(1);
          return;
        }
        if (i < kLoadRoundTrips) {
          samples[c].push_back(took);
          if (i + 1 == kLoadRoundTrips) measuring.fetch_sub(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t c = 0; c < clients; ++c) {
    if (!errors[c].empty()) {
      return Status(StatusCode::kInternal, fmt::format("load: client {} failed: {}", c + 1, errors[c]));
    }
    all->insert(all->end(), samples[c].begin(), samples[c].end());
  }
  return Status::Ok();
}

Status MeasureLoad(RemoteSession& s, const BenchOptions& options, std::vector<BenchFigure>* out) {
  if (options.load_clients < 1) return Status(StatusCode::kInvalidArgument, "load: at least one client");
  // One session's synchronous call, timed in microseconds; negative if it failed.
  auto timed_call = [](RemoteSession& session) {
    uint64_t free_bytes = 0, total = 0;
    auto t0 = Clock::now();
    return session.MemGetInfo(&free_bytes, &total) == 0 ? Micros(Clock::now() - t0) : -1.0;
  };
  std::vector<double> alone;  // The measured session's calls with nothing else calling: the p50's baseline.
  Status measured_alone = RoundTripsAtOnce(
      1, [&](size_t) { return timed_call(s); }, [&](size_t) { return s.last_error(); }, &alone);
  if (!measured_alone.ok()) return measured_alone;

  // Every client on the measured slice's agent, whatever else the pool holds.
  PoolOptions pool_options;
  pool_options.servers = {s.slice().server};
  auto pool = Pool::Connect(pool_options);
  if (!pool.ok()) return pool.status();
  Request request;
  request.fraction = options.load_fraction;
  request.label = "gp-bench load";
  std::vector<Lease> leases;  // Declared first: released after the sessions on them close.
  std::vector<std::unique_ptr<RemoteSession>> sessions;
  for (int i = 0; i < options.load_clients; ++i) {
    auto lease = pool->Allocate(request);
    if (!lease.ok()) {
      return Status(lease.status().code(),
                    fmt::format("load: client {} of {} got no lease: {}", i + 1, options.load_clients,
                                lease.status().message()));
    }
    auto opened = RemoteSession::OpenLease(lease->Token());
    if (!opened.ok()) return opened.status();
    leases.push_back(std::move(lease).value());
    sessions.push_back(std::move(opened->front()));
  }

  std::vector<double> all;
  Status measured = RoundTripsAtOnce(
      sessions.size(), [&](size_t c) { return timed_call(*sessions[c]); },
      [&](size_t c) { return sessions[c]->last_error(); }, &all);
  if (!measured.ok()) return measured;

  // What the host itself gives under the same load: as many raw ping-pongs at once over the same transport, each
  // with a thread at its far end as each session has a worker. Not a target, a reference: on a small host, the
  // scheduler's spread of many threads over few CPUs sets the tail, and that spread is the same for both.
  const std::string transport = TransportOf(s.slice().server);
  const std::string raw_transport = transport == "unix" ? "unix" : "tcp";
  std::vector<std::unique_ptr<RawLink>> links;
  for (size_t c = 0; c < sessions.size(); ++c) {
    links.push_back(std::make_unique<RawLink>(raw_transport));
    if (!links.back()->ok()) {
      return Status(StatusCode::kInternal, "cannot open a raw " + raw_transport + " connection for the reference");
    }
  }
  std::vector<double> raw;
  Status raw_measured = RoundTripsAtOnce(
      links.size(), [&](size_t c) { return links[c]->PingMicros(); },
      [&](size_t) { return "the raw " + raw_transport + " ping-pong failed"; }, &raw);
  if (!raw_measured.ok()) return raw_measured;

  const double p50 = Percentile(all, 0.5);
  out->push_back(Figure("load_rtt_p50", p50, "us", Percentile(alone, 0.5), "one client alone, p50", false, 0,
                        transport));
  out->push_back(Figure("load_rtt_p99", Percentile(all, 0.99), "us", p50,
                        fmt::format("p50 of the same {} clients", sessions.size()), false, 1 / 3.0, transport));
  out->push_back(Figure("load_raw_rtt_p99", Percentile(raw, 0.99), "us", Percentile(raw, 0.5),
                        fmt::format("p50 of {} raw {} ping-pongs at once (the host's own spread, no target)",
                                    links.size(), raw_transport == "unix" ? "Unix socket" : "TCP loopback"),
                        false, 0, raw_transport));
  return Status::Ok();
}

// ---- migrate: the pause a program sees when its lease is moved to another GPU or agent, against the bytes moved.

// The goal (issue 43): pause <= bytes / (0.9 x the link's bandwidth) + 50 ms. Within one host the images cross the
// agent's sockets to its workers, so the link is a Unix socket, measured here with the same bytes; between agents it
// is the network between them, measured through a raw sink across it (BenchOptions::link_sink).
Status MeasureMigrate(RemoteSession& s, const BenchOptions& options, std::vector<BenchFigure>* out) {
  const std::string server = s.slice().server;
  const std::string transport = TransportOf(server);
  const bool between = !options.migrate_to.empty();
  const std::string link_name = options.link_sink.empty() ? "a Unix socket" : "the link (raw TCP to its sink)";
  RawLink link(options.link_sink.empty() ? "unix" : "sink:" + options.link_sink);
  if (!link.ok()) return Status(StatusCode::kInternal, "cannot open the link's baseline connection (" + link_name + ")");
  // Each move, and between agents the move back: the lease ends every round where it began.
  struct Leg {
    std::string name, from, to;
  };
  std::vector<Leg> legs = {{"migrate_pause", server, options.migrate_to}};
  if (between) legs.push_back({"migrate_back_pause", options.migrate_to, server});
  for (size_t mib : {16, 64, 256}) {
    const size_t bytes = mib << 20;
    if (bytes > s.slice().memory_bytes / 2) break;
    std::vector<char> host(bytes), back(bytes);
    for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<char>(i * 2654435761u >> 13);
    uint64_t dev = 0;
    if (s.MemAlloc(bytes, &dev) != 0) return Failed(s, fmt::format("allocating {} MiB", mib));
    s.CopyToDevice(dev, host.data(), bytes, 0);
    if (s.Synchronize() != 0) return Failed(s, "filling the memory to move");
    for (const Leg& leg : legs) {
      auto t0 = Clock::now();
      auto moved = leg.to.empty() ? admin::Migrate(leg.from, options.lease_id, std::nullopt)
                                  : admin::MigrateTo(leg.from, options.lease_id, leg.to);
      if (!moved.ok()) {
        return Status(moved.status().code(), "the move (gp-bench migrate asks the agent as its administrator): " +
                                                 moved.status().message());
      }
      // The program's view: its next call follows the session to its new worker.
      uint64_t free_bytes = 0, total = 0;
      if (s.MemGetInfo(&free_bytes, &total) != 0) return Failed(s, "the first call after the move");
      const double pause_ms = Seconds(Clock::now() - t0) * 1000;
      if (s.CopyFromDevice(back.data(), dev, bytes, 0) != 0 || back != host) {
        return Status(StatusCode::kInternal, fmt::format("the {} MiB moved are not the bytes written", mib));
      }
      const double sent = link.SendSeconds(host);
      if (sent < 0) return Status(StatusCode::kInternal, "the raw transfer over " + link_name + " failed");
      const double moved_bytes = static_cast<double>(moved->bytes);
      const double goal_ms = moved_bytes / (0.9 * (static_cast<double>(bytes) / sent)) * 1000 + 50;
      // Within one agent the memory stays in its file for the next worker: the images are what is left to move.
      const std::string what = moved->bytes >= bytes ? FormatMemorySize(moved->bytes) + " moved"
                                                     : fmt::format("{} of images (its {} MiB of memory handed over in "
                                                                   "place)", FormatMemorySize(moved->bytes), mib);
      out->push_back(Figure(fmt::format("{}_{}MiB", leg.name, mib), pause_ms, "ms", goal_ms,
                            fmt::format("goal: {} at 0.9 x {}'s bandwidth + 50 ms", what, link_name), false, 1.0,
                            between ? "agents" : transport));
    }
    s.MemFree(dev);
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& BenchNames() {
  static const std::vector<std::string> names = {"latency", "bandwidth", "launch", "loop", "load", "migrate"};
  return names;
}

std::string TransportOf(const std::string& server_address) {
  return server_address.rfind("unix:", 0) == 0 ? "unix" : server_address.rfind("tls:", 0) == 0 ? "tls" : "tcp";
}

Result<std::vector<BenchFigure>> RunBenchmarks(const std::string& token, const BenchOptions& options) {
  for (const std::string& name : options.benchmarks) {
    if (std::find(BenchNames().begin(), BenchNames().end(), name) == BenchNames().end()) {
      return Status(StatusCode::kInvalidArgument, "unknown benchmark '" + name + "'");
    }
  }
  auto fields = internal::DecodeToken(token);
  if (!fields.ok()) return fields.status();
  BenchOptions with_lease = options;
  with_lease.lease_id = fields->id;
  auto sessions = RemoteSession::OpenLease(token);
  if (!sessions.ok()) return sessions.status();
  RemoteSession& s = *sessions->front();
  std::vector<BenchFigure> out;
  using Measure = Status (*)(RemoteSession&, const BenchOptions&, std::vector<BenchFigure>*);
  const std::pair<const char*, Measure> measures[] = {{"latency", MeasureLatency},
                                                      {"bandwidth", MeasureBandwidth},
                                                      {"launch", MeasureLaunchRate},
                                                      {"loop", MeasureLoop},
                                                      {"load", MeasureLoad},
                                                      {"migrate", MeasureMigrate}};
  for (const auto& [name, measure] : measures) {
    if (options.benchmarks.count(name) == 0) continue;
    if (Status st = measure(s, with_lease, &out); !st.ok()) return st;
  }
  return out;
}

}  // namespace gpupool
