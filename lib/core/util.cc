#include "core/util.h"

#include <cstdlib>

#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>

#include <fmt/format.h>

namespace gpupool {

long OnlineCpus() {
  static const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  return cpus;
}

bool HostHasSpareCpu() {
  using Clock = std::chrono::steady_clock;
  static std::atomic<int64_t> checked_at{0};
  static std::atomic<bool> spare{true};
  constexpr int64_t kRecheckNanos = 2'000'000;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  int64_t last = checked_at.load(std::memory_order_relaxed);
  if (now - last < kRecheckNanos || !checked_at.compare_exchange_strong(last, now)) {
    return spare.load(std::memory_order_relaxed);
  }
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return spare.load(std::memory_order_relaxed);
  char text[128] = {};
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  long running = 0;  // "0.12 0.34 0.56 RUNNING/TOTAL LASTPID"
  if (n > 0 && std::sscanf(text, "%*f %*f %*f %ld/", &running) == 1) spare.store(running <= 2 * OnlineCpus());
  return spare.load(std::memory_order_relaxed);
}

namespace {
std::atomic<int64_t> typical_wakeup_nanos{0};  // 0: none noted yet.
}  // namespace

void NoteWakeup(std::chrono::nanoseconds took) {
  // Longer, the thread waited its turn behind others (a busy host), which no poll saves.
  constexpr int64_t kMaxNanos = 200'000;
  const int64_t sample = std::clamp<int64_t>(took.count(), 1, kMaxNanos);
  int64_t last = typical_wakeup_nanos.load(std::memory_order_relaxed);
  // Racing notes may lose one sample: it is an average.
  typical_wakeup_nanos.store(last == 0 ? sample : last + (sample - last) / 4, std::memory_order_relaxed);
}

std::chrono::nanoseconds TypicalWakeup(std::chrono::nanoseconds fallback) {
  const int64_t typical = typical_wakeup_nanos.load(std::memory_order_relaxed);
  return typical == 0 ? fallback : std::chrono::nanoseconds(typical);
}

void SkipWritten(std::vector<iovec>& pieces, size_t* first, size_t written) {
  while (*first < pieces.size() && written >= pieces[*first].iov_len) written -= pieces[(*first)++].iov_len;
  if (written > 0) {
    pieces[*first].iov_base = static_cast<char*>(pieces[*first].iov_base) + written;
    pieces[*first].iov_len -= written;
  }
}

bool PollReadable(int fd, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  char byte;
  for (;;) {
    if (recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != -1 || errno != EAGAIN) return true;
    // Looked at once more after the limit: a poller that yielded to the very thread that sent the bytes may get
    // the CPU back only after the limit, and would otherwise sleep on bytes already there.
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();
  }
}

std::string RandomBytes(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < bytes) {  // getrandom cannot fail on Linux >= 3.17 with these flags; stay safe anyway.
    std::random_device rd;
    for (size_t i = got; i < bytes; ++i) raw[i] = static_cast<char>(rd());
  }
  return raw;
}

std::string RandomHex(size_t bytes) {
  std::string raw = RandomBytes(bytes);
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of `a` is looked at whatever the other holds; volatile keeps the compiler from returning early.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

double RandomUnit() {
  thread_local std::mt19937_64 gen(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, 1.0)(gen);
}

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::vector<std::string> SplitList(std::string_view text, char sep) {
  std::vector<std::string> out;
  while (true) {
    auto pos = text.find(sep);
    std::string_view piece = text.substr(0, pos);
    while (!piece.empty() && std::isspace(static_cast<unsigned char>(piece.front()))) piece.remove_prefix(1);
    while (!piece.empty() && std::isspace(static_cast<unsigned char>(piece.back()))) piece.remove_suffix(1);
    if (!piece.empty()) out.emplace_back(piece);
    if (pos == std::string_view::npos) break;
    text.remove_prefix(pos + 1);
  }
  return out;
}

Identity CurrentIdentity() {
  // Looked up once per process (a user lookup and a /proc read cost more than an allocation's RPCs);
  // keyed by pid so that a forked child reports itself.
  static std::mutex mu;
  static Identity cached;
  std::lock_guard<std::mutex> lock(mu);
  if (cached.pid == static_cast<uint32_t>(getpid())) return cached;
  Identity id;
  id.pid = static_cast<uint32_t>(getpid());
  if (struct passwd* pw = getpwuid(getuid())) id.user = pw->pw_name;
  else id.user = fmt::format("uid{}", getuid());
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) id.host = host;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(cmdline, arg, '\0')) {
    if (!id.program.empty()) id.program += ' ';
    id.program += arg;
    if (id.program.size() > 120) {
      id.program.resize(117);
      id.program += "...";
      break;
    }
  }
  cached = id;
  return id;
}

}  // namespace gpupool
