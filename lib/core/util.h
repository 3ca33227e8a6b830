// Small helpers shared by the library, the agent and the tools.
#ifndef GPUPOOL_CORE_UTIL_H_
#define GPUPOOL_CORE_UTIL_H_

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

// `bytes` random bytes from the kernel (getrandom): good for secrets.
std::string RandomBytes(size_t bytes);
// RandomBytes as lowercase hex (2 * bytes characters).
std::string RandomHex(size_t bytes);
// Whether `a` and `b` hold the same bytes, in a time that depends on their lengths alone, never on where they first
// differ: for lease secrets, tokens and tickets, where an early "no" would tell a guesser how much of a guess was
// right. (Their lengths are no secret: secrets and tickets have one fixed length, tokens at least 16 characters.)
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// A uniformly random double in [0, 1), for jitter.
double RandomUnit();

// The environment variable's value; empty when it is unset.
std::string EnvOrEmpty(const char* name);

// Splits on `sep`, trimming whitespace and dropping empty pieces.
std::vector<std::string> SplitList(std::string_view text, char sep);

// The CPUs online, at least 1; read once.
long OnlineCpus();
// Whether the host runs at most two threads per CPU (/proc/loadavg's running count, the caller included): where a
// short busy poll beats sleeping. Looked at most every 2 ms, shared by the whole process; true when unknown.
bool HostHasSpareCpu();
// After a write of `pieces` from `*first` on took `written` bytes: moves `*first` past the pieces it took whole and
// trims the one it took part of, so that the next write goes on from there.
void SkipWritten(std::vector<iovec>& pieces, size_t* first, size_t written);
// Polls socket `fd` for bytes to read for up to `limit`, yielding the CPU at each turn; true once there are some
// (or the socket is closed or failed: a read will not block). Keeps the core from going idle while a reply is
// microseconds away: an idle core's wakeup (on a virtual machine an exit to the hypervisor) costs more than that.
bool PollReadable(int fd, std::chrono::microseconds limit);
// How long this process's threads have lately taken to run once another thread told them to (a moving average of
// what NoteWakeup saw; `fallback` until something was): what sleeping through a short wait costs here, from a few
// microseconds on a host's own CPUs to tens where an idle virtual CPU must be woken.
void NoteWakeup(std::chrono::nanoseconds took);
std::chrono::nanoseconds TypicalWakeup(std::chrono::nanoseconds fallback);

// Who is asking: shown next to leases.
struct Identity {
  std::string user;
  std::string host;
  uint32_t pid = 0;
  std::string program;  // Command line of this process, shortened.
};
Identity CurrentIdentity();

// Fraction of a device in millionths, the agent's unit of compute share.
inline constexpr uint32_t kShareWhole = 1000000;
inline uint32_t ShareFromFraction(double fraction) {
  double v = fraction * kShareWhole + 0.5;
  return v >= kShareWhole ? kShareWhole : static_cast<uint32_t>(v);
}
inline double FractionFromShare(uint32_t share) { return static_cast<double>(share) / kShareWhole; }

}  // namespace gpupool

#endif  // GPUPOOL_CORE_UTIL_H_
