// gp-lease: a lease with no command of its own, for programs that start their work some other way (the Slurm
// plugin, scripts). `hold` allocates, prints the token and renews the lease until told to stop, then releases it;
// `release` releases a lease by its token.
//
// Exit status: 0 done (for hold, also when `gp-lease release` released the lease with its token); 1 the pool did not
// grant the lease or the lease was lost (hold: expired, revoked, the agent restarted), or an agent did not release it
// (both), the reason on stderr; 2 bad usage, no pool configured, or a malformed token.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "lease_notices.h"
#include "output.h"
#include "parse_args.h"
#include "request_args.h"

#include "core/log.h"
#include "gpupool/gpupool.h"

using gpupool::tools::PrintError;

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int Fail(int status, const std::string& message) {
  PrintError("gp-lease: {}\n", message);
  return status;
}

// Waits for SIGTERM/SIGINT/SIGHUP (blocked in every thread, read from `signal_fd`) or, with `watch_stdin`, for stdin
// to reach EOF or hang up; warns on stderr while the lease is in trouble. False when the lease ended meanwhile
// (released by its token elsewhere, which sets `released_elsewhere`; expired, revoked): there is nothing left to hold.
bool HoldUntilTold(gpupool::Lease& lease, int signal_fd, bool watch_stdin, bool* released_elsewhere) {
  bool warned = false;
  gpupool::tools::PolicyEndWarning policy_end("gp-lease");
  for (;;) {
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    int n = poll(fds, watch_stdin ? 2 : 1, 1000);
    if (n < 0 && errno != EINTR) return true;
    if (n > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo info{};
      if (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        GP_INFO("run", "signal {}: releasing lease {}", info.ssi_signo, lease.id());
      }
      return true;
    }
    if (n > 0 && watch_stdin && fds[1].revents != 0) {
      char buffer[512];
      ssize_t got = read(STDIN_FILENO, buffer, sizeof(buffer));
      if (got <= 0) {  // EOF or an error: whoever held the other end is gone.
        GP_INFO("run", "standard input closed: releasing lease {}", lease.id());
        return true;
      }
      continue;  // Whatever is written there means nothing.
    }
    gpupool::Status health = lease.Health();
    // Released with its token (`gp-lease release`): what the holder was waiting for, not a failure. The agent says
    // so in its words for a lease its holder released (agent_service.cc, AgentState::Lost).
    if (health.code() == gpupool::StatusCode::kNotFound &&
        health.message().find(" lost: released by its holder") != std::string::npos) {
      GP_INFO("run", "lease {} was released with its token", lease.id());
      *released_elsewhere = true;
      return false;
    }
    if (health.code() == gpupool::StatusCode::kNotFound) {
      PrintError("gp-lease: {}; nothing left to hold\n", health.message());
      return false;
    }
    if (!health.ok() && !warned) {
      PrintError("gp-lease: warning: lease {} is in trouble: {}\n", lease.id(), health.ToString());
      warned = true;
    } else if (health.ok() && warned) {
      PrintError("gp-lease: lease {} renewed again\n", lease.id());
      warned = false;
    }
    if (health.ok()) policy_end.Check(lease);
  }
}

int Hold(const gpupool::tools::RequestArgs& args, const std::string& label, bool watch_stdin, bool quiet) {
  using namespace gpupool;
  Request request;
  PoolOptions options;
  if (Status s = args.Build(&request, &options); !s.ok()) return Fail(kExitUsage, s.message());
  request.label = label.empty() ? "gp-lease hold" : label;
  if (Status s = ValidateRequest(request); !s.ok()) return Fail(kExitUsage, s.message());
  if (!quiet && request.wait.count() > 0) request.on_wait = tools::WaitNotices("gp-lease", request);

  // Before the pool's threads start, so that they inherit the mask and the signals reach the signalfd alone.
  sigset_t stop;
  sigemptyset(&stop);
  for (int signum : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, signum);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  int signal_fd = signalfd(-1, &stop, SFD_CLOEXEC);
  if (signal_fd < 0) return Fail(kExitFailed, fmt::format("signalfd: {}", std::strerror(errno)));

  auto pool = Pool::Connect(options);
  if (!pool.ok()) return Fail(kExitUsage, pool.status().message());
  auto lease = pool->Allocate(request);
  if (!lease.ok()) return Fail(kExitFailed, lease.status().message());
  for (const Slice& s : lease->slices()) {
    GP_INFO("run", "lease {}: {} GPU {} ({}), {}, {:.0f}% compute", lease->id(), s.server_name, s.device, s.model,
            FormatMemorySize(s.memory_bytes), s.compute_share * 100);
  }
  // The token alone on stdout, which is then closed: a reader sees the line, then EOF.
  std::string line = lease->Token() + "\n";
  bool written = std::fwrite(line.data(), 1, line.size(), stdout) == line.size() && std::fflush(stdout) == 0;
  std::fclose(stdout);
  if (!written) {
    Status released = lease->Release();
    return Fail(kExitFailed, "cannot write the token on stdout; lease released" +
                                 (released.ok() ? std::string() : ": " + released.message()));
  }

  bool released_elsewhere = false;
  if (!HoldUntilTold(*lease, signal_fd, watch_stdin, &released_elsewhere)) return released_elsewhere ? 0 : kExitFailed;
  Status released = lease->Release();
  if (!released.ok()) return Fail(kExitFailed, released.message());
  GP_INFO("run", "lease released");
  return 0;
}

int Release(bool token_from_stdin) {
  std::string token;
  if (token_from_stdin) {
    std::getline(std::cin, token);
  } else if (const char* env = std::getenv("GPUPOOL_LEASE"); env != nullptr) {
    token = env;
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {
    return Fail(kExitUsage, token_from_stdin ? "no lease token on standard input"
                                             : "no lease to release: GPUPOOL_LEASE is not set (or give the token on "
                                               "standard input with `gp-lease release -`)");
  }
  gpupool::Status s = gpupool::Lease::ReleaseToken(token);
  if (s.code() == gpupool::StatusCode::kInvalidArgument) return Fail(kExitUsage, s.message());
  if (!s.ok()) return Fail(kExitFailed, s.message());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpupool;
  log::SetProgramName("gp-lease");
  // A write to a closed pipe fails (the token's write says so) instead of killing the holder with its lease.
  signal(SIGPIPE, SIG_IGN);

  CLI::App app{"gp-lease: hold a lease of GPU slices without running a command, or release one by its token"};
  app.require_subcommand(1);
  auto* hold = app.add_subcommand(
      "hold", "allocate slices, print the lease token on stdout (then close it), renew the lease until SIGTERM, "
              "SIGINT or SIGHUP (or, with --watch-stdin, until stdin closes), then release it");
  tools::RequestArgs request_args;
  request_args.Add(*hold);
  std::string label;
  bool watch_stdin = false, verbose = false;
  hold->add_option("--label", label, "shown beside the lease in gp-ls (default: gp-lease hold)");
  hold->add_flag("--watch-stdin", watch_stdin, "also release when standard input reaches EOF (its writer is gone)");
  bool quiet = false;
  auto* verbose_flag = hold->add_flag("-v,--verbose", verbose, "say what was allocated and released");
  hold->add_flag("-q,--quiet", quiet, "say nothing of what --wait waits for")->excludes(verbose_flag);
  auto* release = app.add_subcommand(
      "release", "release the lease whose token is in $GPUPOOL_LEASE, or on standard input with '-'");
  std::string from;
  release->add_option("source", from, "'-': read the token from standard input")->check(CLI::IsMember({"-"}));
  GP_PARSE_ARGS(app, argc, argv, kExitUsage);
  if (verbose) log::SetDefaultLevel(log::Level::kInfo);

  if (hold->parsed()) return Hold(request_args, label, watch_stdin, quiet);
  return Release(from == "-");
}
