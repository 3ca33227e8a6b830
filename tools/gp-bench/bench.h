// gp-bench's measurements over one attached slice, each next to a baseline measured in the same run: the
// synchronous round trip against a raw ping-pong over the session's own transport (Unix socket or TCP), 64 MiB
// copies against memcpy (Unix socket: same host) or raw TCP, asynchronous launches per second, a training-like loop
// against the same loop on an emulated device in this process, and round trips under load from several clients.
// gp-bench's own (it links the agent's libraries, for the in-process emulated device).
#ifndef GPUPOOL_TOOLS_GP_BENCH_BENCH_H_
#define GPUPOOL_TOOLS_GP_BENCH_BENCH_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gpupool/status.h"

namespace gpupool {

struct BenchFigure {
  std::string name;  // "sync_rtt_p50_unix", "h2d_64MiB_tcp", "loop_step", ...
  double value = 0;
  std::string unit;     // "us", "ms", "GiB/s", "launches/s"
  double baseline = 0;  // 0 when there is none.
  std::string baseline_name;
  // value / baseline for rates, baseline / value for times: >= 1 means at least as good as the baseline.
  double ratio = 0;
  double target = 0;  // The target for the ratio (or for the value when there is no baseline), 0 if none.
  bool met = false;
  std::string transport;  // How the session reached its agent: "unix" or "tcp".
};

// Every benchmark RunBenchmarks knows, in the order it runs them. `migrate` moves the lease (gp-agent ctl migrate):
// it needs an agent with two GPUs whose administrator runs it, and runs only when asked for.
const std::vector<std::string>& BenchNames();

struct BenchOptions {
  // Which of BenchNames() to run. Default: all of them but `migrate`.
  std::set<std::string> benchmarks{BenchNames().begin(), BenchNames().end() - 1};
  // Measured steps of each variant of `loop` (after 20 unmeasured ones). Default 600.
  int loop_steps = 600;
  // Clients of `load`, each a thread with its own lease and session on the slice's agent. Default 8.
  int load_clients = 8;
  // The fraction of a device each `load` client leases: small, so that they fit beside the measured slice on one
  // emulated device. Default 0.05.
  double load_fraction = 0.05;
  // The lease measured (RunBenchmarks fills it in, for `migrate`).
  std::string lease_id;
  // `migrate`: the agent to move the lease to and back from (its address as clients reach it); empty: another GPU of
  // the lease's own agent.
  std::string migrate_to;
  // `migrate`: a raw sink ("host:port", bench/migrate_veth.sh starts one) across the link between the two agents,
  // whose bandwidth sets the goal; empty: a Unix socket pair on this host (a move within one host).
  std::string link_sink;
};

// "unix" for an agent address "unix:/path", otherwise "tcp".
std::string TransportOf(const std::string& server_address);

// Runs `options.benchmarks` against the first slice of `token`'s lease, in BenchNames() order. Fails when a
// benchmark cannot run, and when the loop's results differ from the host's computation of them.
Result<std::vector<BenchFigure>> RunBenchmarks(const std::string& token, const BenchOptions& options);

}  // namespace gpupool

#endif  // GPUPOOL_TOOLS_GP_BENCH_BENCH_H_
