// What the agent's log says of the policy's refusals of reservations. A client waiting with `--wait` asks again every
// second or so for as long as it waits; the log gets its first refusal, then a summary at most once a minute or
// when the reason changes, and one line when the policy finally allows it, instead of a line per retry.
// Pure logic with injected time; the agent's event loop thread only.
#ifndef GPUPOOL_AGENT_REFUSAL_LOG_H_
#define GPUPOOL_AGENT_REFUSAL_LOG_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace gpupool::agent {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  // A summary of the same refusals at most this often.
  static constexpr std::chrono::minutes kSummaryEvery{1};
  // A client not refused for this long is forgotten (its next refusal is a first one again).
  static constexpr std::chrono::minutes kForgetAfter{10};
  // At most this many clients are remembered; the one refused longest ago goes first.
  static constexpr size_t kMaxClients = 1024;

  // `client` ("user@host pid N") was refused for `reason`: the line to log, if one is due.
  std::optional<std::string> Refused(const std::string& client, const std::string& reason, Clock::time_point now);
  // The policy allowed a reservation of `client`'s: a line saying how long it was refused, if it was.
  std::optional<std::string> Allowed(const std::string& client, Clock::time_point now);
  size_t clients() const { return clients_.size(); }

 private:
  struct Refusals {
    std::string reason;                     // The last one logged.
    Clock::time_point first, last, logged;  // The first and the last refusal; when a line was last logged.
    uint64_t total = 0, unlogged = 0;       // Refusals in all; those since the last line.
  };
  std::map<std::string, Refusals> clients_;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_REFUSAL_LOG_H_
