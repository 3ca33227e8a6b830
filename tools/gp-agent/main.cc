// gp-agent: the daemon on each GPU server. Owns its devices and their leases; serves the pool service.
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "output.h"
#include "parse_args.h"

#include "agent/agent_config.h"
#include "agent/agent_service.h"
#include "agent/inventory.h"
#include "agent/session_worker.h"
#include "client/admin.h"
#include "client/state_json.h"
#include "core/json.h"
#include "core/log.h"
#include "gpupool/gpupool.h"
#include "gpupool/units.h"

using gpupool::tools::Print;
using gpupool::tools::PrintError;

namespace {

template <typename T>
bool Report(const gpupool::Result<T>& r, const char* flag) {
  if (r.ok()) return true;
  PrintError("gp-agent: {}: {}\n", flag, r.status().message());
  return false;
}

// `gp-agent ctl`: an administrator's verbs on a running agent. Exit status: 0 done, 1 refused or failed (the
// reason on stderr), 2 bad usage.
int Ctl(int argc, char** argv) {
  using namespace gpupool;
  CLI::App app{"gp-agent ctl: administer a running agent (its administrators only: [auth] admins, root, its user)"};
  std::string server;
  app.add_option("--server", server, "the agent's address (unix:/path or host:port)")->required();
  app.require_subcommand(1);
  int gpu = -1;
  std::string lease, wait = "0s";
  auto* cordon = app.add_subcommand("cordon", "no new leases on a GPU (or on every GPU of the server)");
  cordon->add_option("gpu", gpu, "device index; default: every device");
  auto* uncordon = app.add_subcommand("uncordon", "new leases again on a GPU (or on every GPU)");
  uncordon->add_option("gpu", gpu, "device index; default: every device");
  auto* drain = app.add_subcommand("drain", "cordon every GPU, then wait for the leases held to end (or move them)");
  drain->add_option("--wait", wait, "how long to wait for the leases to end (default 0s: do not wait)");
  bool drain_migrate = false;
  std::string to;
  drain->add_flag("--migrate", drain_migrate,
                  "move every running lease to another agent first (--to, or the pool's other agents)");
  drain->add_option("--to", to, "with --migrate: the agents to move leases to, comma-separated, in order of preference "
                                "(default: the other agents of this client's pool, GPUPOOL_SERVERS or the pool file)");
  auto* revoke = app.add_subcommand("revoke", "end a lease now: its programs' next CUDA call fails, saying so");
  revoke->add_option("lease", lease, "the lease id (gp-ls --leases)")->required();
  auto* migrate = app.add_subcommand("migrate", "move a running lease to another GPU or agent; its programs go on");
  migrate->add_option("lease", lease, "the lease id (gp-ls --leases)")->required();
  auto* to_gpu = migrate->add_option("--to-gpu", gpu, "the GPU of this agent to move to");
  migrate->add_option("--to", to, "the agent to move to (host:port or unix:PATH, as clients reach it); it places the "
                                  "lease as a new one. Default: another GPU of this agent that fits, else the other "
                                  "agents of this client's pool")
      ->excludes(to_gpu);
  bool json = false;
  migrate->add_flag("--json", json, "print what the move did as one JSON object");
  auto* suspend = app.add_subcommand("suspend", "keep a running lease's sessions in the agent's memory and give its "
                                                "GPUs back; its programs' next CUDA call resumes it");
  suspend->add_option("lease", lease, "the lease id (gp-ls --leases)")->required();
  auto* resume = app.add_subcommand("resume", "resume a suspended lease now");
  resume->add_option("lease", lease, "the lease id (gp-ls --leases)")->required();
  auto* list = app.add_subcommand("list", "devices (cordoned or not), leases and their users");
  // CLI11 would answer a mistyped verb with "A subcommand is required": name it, and the verbs there are.
  for (int i = 1; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word == "--server") {
      ++i;
      continue;
    }
    if (word.empty() || word[0] == '-') continue;
    if (word != "cordon" && word != "uncordon" && word != "drain" && word != "revoke" && word != "migrate" &&
        word != "suspend" && word != "resume" && word != "list") {
      PrintError("gp-agent ctl: unknown command '{}'; the commands are cordon, uncordon, drain, revoke, migrate, "
                 "suspend, resume and list (gp-agent ctl --help)\n", word);
      return 2;
    }
    break;
  }
  GP_PARSE_ARGS(app, argc, argv, 2);

  std::string verb = app.get_subcommands().empty() ? "" : app.get_subcommands().front()->get_name();
  auto fail = [&verb](const Status& s) {
    PrintError("gp-agent ctl {}: {}\n", verb, s.message());
    return 1;
  };
  std::optional<int> device = gpu >= 0 ? std::optional<int>(gpu) : std::nullopt;
  if (cordon->parsed() || uncordon->parsed()) {
    Status s = admin::Cordon(server, device, cordon->parsed());
    if (!s.ok()) return fail(s);
    Print("{} {}\n", cordon->parsed() ? "cordoned" : "uncordoned",
          device ? fmt::format("GPU {} of {}", *device, server) : "every GPU of " + server);
    return 0;
  }
  if (revoke->parsed()) {
    Status s = admin::Revoke(server, lease);
    if (!s.ok()) return fail(s);
    Print("revoked lease {} on {}\n", lease, server);
    return 0;
  }
  if (migrate->parsed()) {
    std::string where = server;  // The agent the lease is on now.
    Result<admin::Migrated> moved = Status(StatusCode::kInternal, "not moved");
    if (!to.empty()) {
      moved = admin::MigrateTo(server, lease, to);
      where = to;
    } else {
      moved = admin::Migrate(server, lease, device);
      // No other GPU here takes it: another agent of the pool may.
      if (!moved.ok() && !device && moved.status().code() == StatusCode::kResourceExhausted) {
        if (std::vector<std::string> others = admin::OtherAgents(server); !others.empty()) {
          const std::string here = moved.status().message();
          moved = admin::MigrateToFirst(server, lease, others, &where);
          if (!moved.ok()) moved = Status(moved.status().code(), here + "; " + moved.status().message());
        }
      }
    }
    if (!moved.ok()) return fail(moved.status());
    if (json) {
      Print("{{\"lease\": \"{}\", \"server\": \"{}\", \"sessions\": {}, \"bytes\": {}, \"pause_ms\": {}, "
            "\"gpus\": [{}]}}\n",
            JsonEscape(lease), JsonEscape(where), moved->sessions, moved->bytes, moved->pause_ms,
            fmt::join(moved->devices, ", "));
    } else {
      Print("moved lease {} to GPU {} of {}: {} session(s), {} of memory, paused {} ms\n", lease,
            fmt::join(moved->devices, ","), where, moved->sessions, FormatMemorySize(moved->bytes), moved->pause_ms);
    }
    return 0;
  }
  if (suspend->parsed()) {
    auto kept = admin::Suspend(server, lease);
    if (!kept.ok()) return fail(kept.status());
    Print("suspended lease {} on {}: {} session(s), {} kept in the agent's memory\n", lease, server, kept->sessions,
          FormatMemorySize(kept->bytes));
    return 0;
  }
  if (resume->parsed()) {
    Status s = admin::Resume(server, lease);
    if (!s.ok()) return fail(s);
    Print("resumed lease {} on {}\n", lease, server);
    return 0;
  }
  PoolOptions options;
  options.servers = {server};
  auto pool = Pool::Connect(options);
  if (!pool.ok()) return fail(pool.status());
  if (drain->parsed()) {
    auto limit = ParseDuration(wait);
    if (!limit.ok()) {
      PrintError("gp-agent ctl: --wait: {}\n", limit.status().message());
      return 2;
    }
    Status s = admin::Cordon(server, std::nullopt, true);
    if (!s.ok()) return fail(s);
    auto deadline = std::chrono::steady_clock::now() + *limit;
    if (drain_migrate) {
      ServerInfo info = pool->State().servers.at(0);
      if (!info.up) return fail(Status(StatusCode::kUnavailable, info.error));
      std::vector<std::string> targets;
      std::istringstream listed(to);
      for (std::string one; std::getline(listed, one, ',');) {
        if (!one.empty()) targets.push_back(one);
      }
      if (to.empty()) targets = admin::OtherAgents(server);
      if (targets.empty() && !info.leases.empty()) {
        return fail(Status(StatusCode::kUnavailable, "no other agent to move leases to: name some with --to, or "
                                                     "list the pool's agents (GPUPOOL_SERVERS or the pool file)"));
      }
      for (const LeaseInfo& l : info.leases) {
        if (l.suspended) {
          Print("lease {} is suspended (its images are kept here): it is not moved\n", l.id);
          continue;
        }
        std::string target;
        auto moved = admin::MigrateToFirst(server, l.id, targets, &target);
        if (moved.ok()) {
          Print("moved lease {} to {}: {} session(s), {} of memory, paused {} ms\n", l.id, target, moved->sessions,
                FormatMemorySize(moved->bytes), moved->pause_ms);
        } else {
          Print("lease {} could not move: {}\n", l.id, moved.status().message());
        }
      }
    }
    for (;;) {
      ServerInfo info = pool->State().servers.at(0);
      if (!info.up) return fail(Status(StatusCode::kUnavailable, info.error));
      // After moves, until the moved leases' holders have been told where they went (their next renewal).
      if (info.leases.empty() && info.moves_untold == 0) {
        Print("drained: every GPU of {} is cordoned and no lease is left\n", server);
        return 0;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        if (info.leases.empty()) {
          Print("every GPU of {} is cordoned and no lease is left, but the holders of {} moved lease(s) may not know "
                "yet where they went: keep the agent running until they renew\n", server, info.moves_untold);
        } else {
          Print("every GPU of {} is cordoned; {} lease(s) still held\n", server, info.leases.size());
        }
        return limit->count() > 0 || drain_migrate ? 1 : 0;  // --migrate promised none would be left.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  if (list->parsed()) {
    ServerInfo info = pool->State().servers.at(0);
    if (!info.up) return fail(Status(StatusCode::kUnavailable, info.error));
    Print("agent {} ({}){}\n", info.name, server, info.draining ? ", draining" : "");
    if (info.policy.empty()) {
      Print("  policy: none (every user may use every GPU, any share, for any time)\n");
    } else {
      Print("  personality in force: {}{}\n", info.personality.empty() ? "none" : info.personality,
            info.personality_next.empty() ? "" : " (" + info.personality_next + ")");
      std::istringstream lines(info.policy);
      for (std::string line; std::getline(lines, line);) Print("  policy {}\n", line);
    }
    for (const DeviceInfo& d : info.devices) {
      Print("  GPU {}  {}  {}\n", d.index, d.model, d.cordoned ? "cordoned" : "open");
    }
    for (const LeaseInfo& l : info.leases) {
      Print("  lease {}  {}  GPUs {}{}  {}\n", l.id, ShownUser(l), fmt::join(l.devices, ","),
            l.suspended ? " (suspended)" : "", l.label);
    }
    return 0;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpupool;
  log::SetProgramName("gp-agent");
  log::SetDefaultLevel(log::Level::kInfo);
  // A session worker started by an agent (agent/session_worker.h), not a command a user types.
  if ((argc == 3 || argc == 4) && std::string_view(argv[1]) == agent::kSessionWorkerFlag) {
    return agent::RunSessionWorker(std::atoi(argv[2]), argc == 4 ? argv[3] : "");
  }

  if (argc >= 2 && std::string_view(argv[1]) == "ctl") {
    return tools::RunTool([&] { return Ctl(argc - 1, argv + 1); });
  }

  // Before the CUDA driver that device discovery may load starts threads of its own.
  agent::CaptureAgentSignals();

  CLI::App app{"gp-agent: serves this host's GPUs (real or emulated) to a gpupool pool"};
  std::string config_path, listen, name, device_class, emu_memory, emu_cc, lease_ttl, renew_interval, cuda_driver, metrics,
      idle_after, suspend_idle_after, suspend_memory, suspend_spill_dir, tokens, tls_cert, tls_key, tls_ca, directory,
      advertise;
  bool require_auth = false;
  int emu = -1, emu_fallback = -1;
  bool no_nvml = false, exit_with_parent = false, remove_socket_dir = false;
  app.add_option("--config", config_path, "agent.toml; flags override its values");
  app.add_option("--listen", listen, "host:port or unix:/path (default *:7450; port 0 picks a free one)");
  app.add_option("--name", name, "name shown in the pool (default: host name)");
  app.add_option("--emu", emu, "number of emulated devices to declare")->check(CLI::Range(0, 1024));
  app.add_option("--emu-fallback", emu_fallback, "declare this many emulated devices only if no physical GPU is found")
      ->check(CLI::Range(0, 1024));
  app.add_option("--emu-memory", emu_memory, "memory of each emulated device, e.g. 16GiB");
  app.add_option("--emu-cc", emu_cc,
                 "compute capability the emulated devices report and pick PTX by, e.g. 8.0 (default $GPUPOOL_EMU_CC, "
                 "else 12.1)");
  app.add_option("--cuda-driver", cuda_driver, "CUDA driver library for sessions on physical GPUs (default libcuda.so.1)");
  app.add_option("--class", device_class, "class tag of this agent's devices (clients select with --class)");
  app.add_option("--lease-ttl", lease_ttl, "free leases not renewed for this long (default 20s)");
  app.add_option("--renew-interval", renew_interval, "renewal period advised to clients (default 5s)");
  app.add_option("--metrics", metrics, "serve Prometheus metrics at http://ADDR/metrics (host:port; port 0 picks one)");
  app.add_option("--idle-after", idle_after, "flag leases whose sessions made no call for this long (default 10m)");
  app.add_option("--suspend-idle-after", suspend_idle_after,
                 "suspend leases idle this long: their GPUs go back to the pool, their next call resumes them "
                 "(default: never)");
  app.add_option("--suspend-memory", suspend_memory,
                 "suspended leases' images kept in the agent's memory, at most (default 4GiB)");
  app.add_option("--suspend-spill-dir", suspend_spill_dir,
                 "where suspended images beyond --suspend-memory go (default: nowhere; such a suspension is refused)");
  app.add_flag("--require-auth", require_auth,
               "refuse clients the agent cannot authenticate (Unix socket: the peer's uid; TCP: a token)");
  app.add_option("--tokens", tokens, "TCP clients' per-user tokens: a TOML file [tokens] user = \"token\", mode 0600");
  app.add_option("--tls-cert", tls_cert, "serve TCP over TLS with this certificate (PEM; with --tls-key)");
  app.add_option("--tls-key", tls_key, "the private key of --tls-cert (PEM)");
  app.add_option("--tls-ca", tls_ca, "require client certificates signed by this CA; their common name is the user");
  app.add_option("--directory", directory,
                 "register in the pool's directory: etcd:http://HOST:2379[,...] (its settings: the config's [etcd], "
                 "else $GPUPOOL_ETCD_PREFIX, _USER, _PASSWORD_FILE, _CA, _CERT, _KEY)");
  app.add_option("--advertise", advertise, "where clients reach this agent, as the directory tells them (host:port)");
  app.add_flag("--no-nvml", no_nvml, "do not look for physical GPUs through NVML (nor the CUDA driver unless --cuda-driver names one)");
  app.add_flag("--exit-with-parent", exit_with_parent,
               "a private agent: once the process that started it is gone, a signal ends it at once, without draining");
  app.add_flag("--remove-socket-dir", remove_socket_dir,
               "a private agent: on exit, also remove the directory of its unix: socket once it is empty");
  GP_PARSE_ARGS(app, argc, argv, 2);

  agent::AgentConfig config;
  if (!config_path.empty()) {
    if (Status s = agent::LoadAgentConfig(config_path, &config); !s.ok()) {
      PrintError("gp-agent: {}\n", s.message());
      return 2;
    }
  }
  if (!listen.empty()) config.listen = listen;
  if (!name.empty()) config.name = name;
  if (!device_class.empty()) config.device_class = device_class;
  if (!cuda_driver.empty()) config.cuda_driver = cuda_driver;
  if (emu >= 0) config.emulated_count = emu;
  if (no_nvml) config.nvml = false;
  if (exit_with_parent) config.exit_with_parent = true;
  if (remove_socket_dir) config.remove_socket_dir = true;
  if (!emu_memory.empty()) {
    auto m = ParseMemorySize(emu_memory);
    if (!Report(m, "--emu-memory")) return 2;
    config.emulated_memory = *m;
  }
  // The environment's choice reaches gp-run's private agent; the flag and the file win over it.
  const char* emu_cc_source = "--emu-cc";
  if (const char* env = std::getenv("GPUPOOL_EMU_CC"); emu_cc.empty() && config_path.empty() && env && *env) {
    emu_cc = env;
    emu_cc_source = "GPUPOOL_EMU_CC";
  }
  if (!emu_cc.empty()) {
    auto cc = agent::ParseComputeCapability(emu_cc);
    if (!Report(cc, emu_cc_source)) return 2;
    config.emulated_compute_capability = *cc;
  }
  if (!lease_ttl.empty()) {
    auto d = ParseDuration(lease_ttl);
    if (!Report(d, "--lease-ttl")) return 2;
    config.timing.lease_ttl = *d;
    // Keep the advised renewal at a quarter of the TTL unless set explicitly.
    if (renew_interval.empty()) config.timing.renew_interval = *d / 4;
  }
  if (!metrics.empty()) config.metrics_listen = metrics;
  if (!directory.empty()) {
    // The endpoints from the flag; the settings from the config's [etcd] if it has one, else the environment's.
    const bool from_file = config.directory || config.etcd_settings;
    internal::EtcdConfig etcd = config.directory.value_or(config.etcd_settings.value_or(internal::EtcdConfig{}));
    Status s = internal::ParseDirectorySpec(directory, &etcd);
    if (s.ok() && !from_file) s = internal::ReadEtcdSettings(nullptr, &etcd);
    if (!s.ok()) {
      PrintError("gp-agent: --directory: {}\n", s.message());
      return 2;
    }
    config.directory = std::move(etcd);
  }
  if (!advertise.empty()) config.directory_advertise = advertise;
  if (require_auth) config.require_auth = true;
  if (!tokens.empty()) config.tokens_file = tokens;
  if (!tls_cert.empty()) config.tls_cert = tls_cert;
  if (!tls_key.empty()) config.tls_key = tls_key;
  if (!tls_ca.empty()) config.tls_ca = tls_ca;
  if (!suspend_memory.empty()) {
    auto bytes = ParseMemorySize(suspend_memory);
    if (!Report(bytes, "--suspend-memory")) return 2;
    config.suspend_memory = *bytes;
  }
  if (!suspend_spill_dir.empty()) config.suspend_spill_dir = suspend_spill_dir;
  if (!suspend_idle_after.empty()) {
    auto d = ParseDuration(suspend_idle_after);
    if (!Report(d, "--suspend-idle-after")) return 2;
    config.suspend_idle_after = *d;
  }
  if (!idle_after.empty()) {
    auto d = ParseDuration(idle_after);
    if (!Report(d, "--idle-after")) return 2;
    config.idle_after = *d;
  }
  if (!renew_interval.empty()) {
    auto d = ParseDuration(renew_interval);
    if (!Report(d, "--renew-interval")) return 2;
    config.timing.renew_interval = *d;
  }
  if (config.name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    config.name = host;
  }
  if (Status s = config.Validate(); !s.ok()) {
    PrintError("gp-agent: {}\n", s.message());
    return 2;
  }

  std::vector<agent::DeviceRecord> devices;
  // NVML first; where it finds nothing, the CUDA driver's own device queries. With nvml off, only a driver named
  // in the configuration is asked (so `--no-nvml --emu N` stays emulated devices alone on a GPU server).
  if (config.nvml) devices = agent::DiscoverNvmlDevices(config.device_class);
  if (!devices.empty()) {
    agent::UseDriverMemoryTotals(config.cuda_driver, &devices);
  } else if (config.nvml || !config.cuda_driver.empty()) {
    devices = agent::DiscoverDriverDevices(config.cuda_driver, config.device_class);
  }
  if (devices.empty() && emu_fallback > 0 && config.emulated_count == 0) config.emulated_count = emu_fallback;
  auto emulated = agent::MakeEmulatedDevices(config.emulated_count, config.emulated_memory, config.name,
                                             config.device_class, config.emulated_compute_capability);
  devices.insert(devices.end(), emulated.begin(), emulated.end());
  if (devices.empty()) GP_WARN("agent", "no devices: no NVIDIA GPU found and no emulated devices declared (--emu N)");
  return agent::RunAgent(config, std::move(devices));
}
