// gp-run: allocate slices from the pool, run a command on them, release them however it ends.
//
// Exit status: the command's, or 128+N when signal N killed it; 125 when gp-run itself fails (bad options, no
// capacity), 126 when the command cannot be executed, 127 when it is not found. A lease lost while the command ran
// (its agent restarted, it expired, an administrator revoked it, the agent's policy ended it) is reported with the
// reason, and gp-run then exits non-zero: the command's status where that is not 0, else 125.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lease_notices.h"
#include "output.h"
#include "parse_args.h"
#include "request_args.h"

#include "client/local_agent.h"
#include "core/log.h"
#include "gpupool/gpupool.h"

using gpupool::tools::PrintError;

extern char** environ;

namespace {

constexpr int kExitFailure = 125;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;

struct Supervisor {
  uv_loop_t* loop = nullptr;
  uv_process_t child{};
  uv_signal_t signals[3]{};
  uv_timer_t health_timer{};
  gpupool::Lease* lease = nullptr;
  bool lease_warned = false;
  gpupool::tools::PolicyEndWarning policy_end{"gp-run"};
  std::string lease_lost;  // Why the lease ended under the command; empty while it holds.
  int64_t exit_status = 0;
  int term_signal = 0;
};

void OnChildExit(uv_process_t* process, int64_t exit_status, int term_signal) {
  auto* sup = static_cast<Supervisor*>(process->data);
  sup->exit_status = exit_status;
  sup->term_signal = term_signal;
  // Stop watching; the loop then ends and main releases the lease.
  for (auto& s : sup->signals) uv_close(reinterpret_cast<uv_handle_t*>(&s), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sup->health_timer), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(process), nullptr);
}

void OnSignal(uv_signal_t* handle, int signum) {
  auto* sup = static_cast<Supervisor*>(handle->data);
  GP_DEBUG("run", "forwarding signal {} to pid {}", signum, sup->child.pid);
  uv_process_kill(&sup->child, signum);
}

// Says once that the lease is gone and why; the command's next CUDA call fails with the same reason.
void ReportLost(Supervisor* sup, const gpupool::Status& health) {
  if (!sup->lease_lost.empty()) return;
  sup->lease_lost = health.message();
  PrintError("gp-run: {}; the command's CUDA calls fail from now on: run it again for a new lease\n",
             sup->lease_lost);
}

void OnHealthTimer(uv_timer_t* timer) {
  auto* sup = static_cast<Supervisor*>(timer->data);
  gpupool::Status health = sup->lease->Health();
  if (health.code() == gpupool::StatusCode::kNotFound) {
    ReportLost(sup, health);
  } else if (!health.ok() && !sup->lease_warned) {
    PrintError("gp-run: warning: lease {} is in trouble: {}\n", sup->lease->id(), health.ToString());
    sup->lease_warned = true;
  } else if (health.ok() && sup->lease_warned) {
    PrintError("gp-run: lease {} renewed again\n", sup->lease->id());
    sup->lease_warned = false;
  }
  if (health.ok()) sup->policy_end.Check(*sup->lease);
}

// Where our libcuda.so.1 lives: $GPUPOOL_INTERPOSER_DIR, else ../lib/gpupool/cuda beside this executable (the same
// relative place in the build tree and in an installation).
std::string InterposerDirectory() {
  if (const char* env = std::getenv("GPUPOOL_INTERPOSER_DIR"); env && *env) return env;
  std::string dir = gpupool::SiblingPath("../lib/gpupool/cuda");
  if (access((dir + "/libcuda.so.1").c_str(), R_OK) == 0) {
    char real[PATH_MAX];
    if (realpath(dir.c_str(), real)) return real;
    return dir;
  }
  return "";
}

// Whether `command` can be executed as uv_spawn (execvp) will look for it, through $PATH when it has no '/': 0 if so,
// else kExitNotFound or kExitCannotExecute with `why` in a user's words.
int CheckCommand(const std::string& command, std::string* why) {
  auto check = [why](const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      *why = errno == ENOENT || errno == ENOTDIR ? "no such file" : std::strerror(errno);
      return errno == ENOENT || errno == ENOTDIR ? kExitNotFound : kExitCannotExecute;
    }
    if (S_ISDIR(st.st_mode)) {
      *why = "it is a directory";
      return kExitCannotExecute;
    }
    if (access(path.c_str(), X_OK) != 0) {
      *why = "permission denied (not executable)";
      return kExitCannotExecute;
    }
    return 0;
  };
  if (command.find('/') != std::string::npos) return check(command);
  const char* path_env = std::getenv("PATH");
  std::string path = path_env && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  int status = kExitNotFound;
  std::string first_why;
  for (size_t pos = 0; pos <= path.size();) {
    size_t colon = path.find(':', pos);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = colon > pos ? path.substr(pos, colon - pos) : ".";
    pos = colon + 1;
    int found = check(dir + "/" + command);
    if (found == 0) return 0;
    // As execvp: a file found but not executable is what is reported, unless an executable one comes later.
    if (found == kExitCannotExecute && status == kExitNotFound) {
      status = kExitCannotExecute;
      first_why = dir + "/" + command + ": " + *why;
    }
  }
  *why = status == kExitNotFound ? "command not found in $PATH" : first_why;
  return status;
}

}  // namespace

int ToolMain(int argc, char** argv) {
  using namespace gpupool;
  log::SetProgramName("gp-run");

  CLI::App app{"gp-run: run a command on GPU slices from the pool; they return to the pool when it exits\n"
               "usage: gp-run [-n N] [-p FRACTION | -m SIZE] [--class TAG] [--same-server] [--wait DURATION] -- CMD..."};
  tools::RequestArgs request_args;
  bool verbose = false, quiet = false;
  std::vector<std::string> command;
  request_args.Add(app);
  auto* verbose_flag = app.add_flag("-v,--verbose", verbose, "say what was allocated and released");
  app.add_flag("-q,--quiet", quiet,
               "no line saying where the command runs when no pool is configured, nor what --wait waits for")
      ->excludes(verbose_flag);
  app.add_option("command", command, "the command to run, after --")->required();
  GP_PARSE_ARGS(app, argc, argv, kExitFailure);
  if (verbose) log::SetDefaultLevel(log::Level::kInfo);

  auto fail = [](const std::string& message) {
    PrintError("gp-run: {}\n", message);
    return kExitFailure;
  };
  Request request;
  PoolOptions options;
  if (Status s = request_args.Build(&request, &options); !s.ok()) return fail(s.message());
  std::string label;
  for (const auto& c : command) label += (label.empty() ? "" : " ") + c;
  request.label = label.size() > 120 ? label.substr(0, 117) + "..." : label;
  if (Status s = ValidateRequest(request); !s.ok()) return fail(s.message());
  if (!quiet && request.wait.count() > 0) request.on_wait = tools::WaitNotices("gp-run", request);
  // Before anything is allocated: a command that cannot run would only hold slices others wait for.
  if (std::string why; int status = CheckCommand(command[0], &why)) {
    PrintError("gp-run: cannot run '{}': {} (nothing was allocated)\n", command[0], why);
    return status;
  }

  // No pool configured at all: a private agent for this command (local GPUs, else one emulated device). An explicit
  // but empty configuration is an error (ResolveServers says which), never a reason to run here instead.
  std::unique_ptr<LocalAgent> local_agent;
  if (options.servers.empty()) {
    auto resolved = ResolveServers(options);
    if (!resolved.ok() && resolved.status().code() == StatusCode::kUnavailable) {
      auto started = LocalAgent::Start(SiblingPath("gp-agent"), LocalAgent::Listen::kUnixSocket, request.count);
      if (!started.ok()) return fail(started.status().message());
      local_agent = std::move(started).value();
      options.servers = {local_agent->address()};
      if (!quiet) {
        PrintError("gp-run: no pool configured, so a private gp-agent{} runs the command on {}; -q hides this line\n",
                   verbose ? " at " + local_agent->address() : "", local_agent->Devices());
      }
    }
  }
  auto pool = Pool::Connect(options);
  if (!pool.ok()) return fail(pool.status().message());
  auto lease = pool->Allocate(request);
  if (!lease.ok()) {
    std::string hint = lease.status().code() == StatusCode::kResourceExhausted ? " (use --wait to queue)" : "";
    if (local_agent && lease.status().code() == StatusCode::kUnsatisfiable) {
      hint = "; " + local_agent->MoreDevicesHint();
    }
    return fail(lease.status().message() + hint);
  }
  if (verbose) {
    for (const Slice& s : lease->slices()) {
      PrintError("gp-run: lease {}: {} GPU {} ({}), {}, {:.0f}% compute\n", lease->id(), s.server_name,
                 s.device, s.model, FormatMemorySize(s.memory_bytes), s.compute_share * 100);
    }
  }

  // The child's environment: ours plus the lease token.
  std::vector<std::string> env_storage;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "GPUPOOL_LEASE=", 14) != 0) env_storage.emplace_back(*e);
  }
  env_storage.push_back("GPUPOOL_LEASE=" + lease->Token());
  // A suspended lease's program waits for room to resume as gp-run waited for room to start: up to --wait.
  if (request.wait.count() > 0) env_storage.push_back(fmt::format("GPUPOOL_RESUME_WAIT_MS={}", request.wait.count()));
  // Our libcuda.so.1 first on the library path, so the command's CUDA calls reach the lease's slices.
  std::string interposer = InterposerDirectory();
  if (!interposer.empty()) {
    std::string path = interposer;
    for (auto it = env_storage.begin(); it != env_storage.end(); ++it) {
      if (it->rfind("LD_LIBRARY_PATH=", 0) == 0) {
        if (it->size() > 16) path += ":" + it->substr(16);
        env_storage.erase(it);
        break;
      }
    }
    env_storage.push_back("LD_LIBRARY_PATH=" + path);
  } else {
    PrintError("gp-run: warning: gpupool's libcuda.so.1 was not found (set GPUPOOL_INTERPOSER_DIR); "
               "the command's CUDA calls will not reach the lease\n");
  }
  std::vector<char*> env;
  for (auto& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<char*> args;
  for (auto& c : command) args.push_back(c.data());
  args.push_back(nullptr);

  Supervisor sup;
  sup.loop = uv_default_loop();
  sup.lease = &*lease;
  uv_stdio_container_t stdio[3];
  for (int fd = 0; fd < 3; ++fd) {
    stdio[fd].flags = UV_INHERIT_FD;
    stdio[fd].data.fd = fd;
  }
  uv_process_options_t opts{};
  opts.exit_cb = OnChildExit;
  opts.file = args[0];
  opts.args = args.data();
  opts.env = env.data();
  opts.stdio_count = 3;
  opts.stdio = stdio;
  sup.child.data = &sup;
  // Signals first, so none arriving right after the spawn is lost.
  const int kForwarded[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; ++i) {
    uv_signal_init(sup.loop, &sup.signals[i]);
    sup.signals[i].data = &sup;
    uv_signal_start(&sup.signals[i], OnSignal, kForwarded[i]);
  }
  if (int rc = uv_spawn(sup.loop, &sup.child, &opts); rc != 0) {
    PrintError("gp-run: cannot run '{}': {}\n", command[0], uv_strerror(rc));
    for (auto& s : sup.signals) uv_close(reinterpret_cast<uv_handle_t*>(&s), nullptr);
    uv_run(sup.loop, UV_RUN_DEFAULT);
    Status released = lease->Release();
    if (!released.ok()) PrintError("gp-run: {}\n", released.message());
    return rc == UV_ENOENT ? kExitNotFound : kExitCannotExecute;
  }
  uv_timer_init(sup.loop, &sup.health_timer);
  sup.health_timer.data = &sup;
  uv_timer_start(&sup.health_timer, OnHealthTimer, 1000, 1000);
  uv_run(sup.loop, UV_RUN_DEFAULT);
  uv_loop_close(sup.loop);

  // A lease that ended under the command may have made it fail before the next heartbeat told us: ask now.
  if (sup.lease_lost.empty()) {
    if (Status now = lease->CheckNow(); now.code() == StatusCode::kNotFound) ReportLost(&sup, now);
  }
  Status released = lease->Release();
  if (!released.ok()) PrintError("gp-run: warning: {}\n", released.message());
  else if (verbose && sup.lease_lost.empty()) PrintError("gp-run: lease released\n");
  if (sup.term_signal != 0) return 128 + sup.term_signal;
  if (!sup.lease_lost.empty() && sup.exit_status == 0) return kExitFailure;
  return static_cast<int>(sup.exit_status);
}

int main(int argc, char** argv) {
  return gpupool::tools::RunTool([&] { return ToolMain(argc, argv); });
}
