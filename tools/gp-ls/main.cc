// gp-ls: the pool at a glance: servers, GPUs, what is allocated, who holds what.
// Exit status: 0 when at least one server answered, 1 when none did, 2 on bad usage or configuration.
#include "output.h"
#include "parse_args.h"
#include "request_args.h"

#include "core/json.h"
#include "core/log.h"
#include "client/state_json.h"
#include "core/util.h"
#include "gpupool/gpupool.h"

using gpupool::tools::Print;
using gpupool::tools::PrintError;

namespace {

using namespace gpupool;

std::string Percent(double v) { return fmt::format("{:.0f}%", v * 100); }
std::string Percent(const std::optional<double>& v) { return v ? Percent(*v) : "-"; }

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 == row.size() ? row[i] : fmt::format("{:<{}}  ", row[i], width[i]);
    }
    Print("{}\n", line);
  }
}

void PrintText(const PoolState& state, bool leases) {
  std::vector<std::vector<std::string>> rows = {
      {"SERVER", "GPU", "MODEL", "MEMORY", "USED", "COMPUTE", "UTIL", "STATE", "LEASES"}};
  for (const ServerInfo& s : state.servers) {
    std::string server = s.up ? fmt::format("{} ({})", s.name, s.address) : s.address;
    if (!s.up) {
      rows.push_back({server, "-", "-", "-", "-", "-", "-", "down: " + s.error, "-"});
      continue;
    }
    if (s.devices.empty()) {
      rows.push_back({server, "-", "-", "-", "-", "-", "-", s.draining ? "draining" : "no devices", "-"});
    }
    for (const DeviceInfo& d : s.devices) {
      std::string state_text = s.draining ? "draining" : d.cordoned ? "cordoned" : d.whole_free() ? "free" : d.compute_allocated >= 0.9999 ||
                                                                                   d.memory_allocated >= d.memory_total
                                                                               ? "full"
                                                                               : "shared";
      std::string model = d.model + (d.device_class.empty() ? "" : " [" + d.device_class + "]");
      if (s.summary) {  // The directory's word: no activity, no holders (gp-ls --detail asks the agent).
        rows.push_back({server, std::to_string(d.index), model,
                        fmt::format("{} / {}", FormatMemorySize(d.memory_allocated), FormatMemorySize(d.memory_total)),
                        "-", Percent(d.compute_allocated), "-", state_text,
                        d.index == 0 ? fmt::format("{} on the agent", s.lease_count) : ""});
        continue;
      }
      // Who holds this device, and how much: "alice 8 GiB, bob 4 GiB".
      std::string holders;
      for (const SliceInfo& slice : d.slices) {
        std::string user = "?";
        for (const LeaseInfo& l : s.leases) {
          if (l.id == slice.lease_id) user = ShownUser(l);
        }
        holders += fmt::format("{}{} {}{}", holders.empty() ? "" : ", ", user, FormatMemorySize(slice.memory_bytes),
                               slice.committed ? "" : " (reserving)");
      }
      rows.push_back({server, std::to_string(d.index), model,
                      fmt::format("{} / {}", FormatMemorySize(d.memory_allocated), FormatMemorySize(d.memory_total)),
                      FormatMemorySize(d.activity.memory_used), Percent(d.compute_allocated),
                      Percent(d.activity.utilization), state_text, holders.empty() ? "-" : holders});
    }
  }
  PrintTable(rows);
  for (const ServerInfo& s : state.servers) {
    if (s.up && (!s.personality.empty() || !s.policy.empty())) {
      Print("{}: personality {}{}\n", s.name, s.personality.empty() ? "none (nothing restricted)" : s.personality,
            s.personality_next.empty() ? "" : "; " + s.personality_next);
    }
  }
  if (!leases) return;
  Print("\n");
  std::vector<std::vector<std::string>> lrows = {
      {"LEASE", "SERVER", "USER", "HOST", "PID", "GPUS", "MEMORY", "USED", "UTIL", "CALLS/S", "STATE", "EXPIRES",
       "COMMAND"}};
  for (const ServerInfo& s : state.servers) {
    for (const LeaseInfo& l : s.leases) {
      std::string devices;
      for (uint32_t d : l.devices) devices += (devices.empty() ? "" : ",") + std::to_string(d);
      std::string state_text = !l.committed ? "reserved"
                               : l.suspended ? "suspended"
                               : l.idle     ? "idle " + FormatDuration(std::chrono::milliseconds(static_cast<int64_t>(l.idle_s * 1000)))
                                            : "active";
      lrows.push_back({l.id, s.name, ShownUser(l), l.host, std::to_string(l.pid), devices, FormatMemorySize(l.memory_bytes),
                       FormatMemorySize(l.activity.memory_used), Percent(l.activity.utilization),
                       fmt::format("{:.0f}", l.activity.calls_per_s), state_text,
                       fmt::format("{:.1f}s", l.expires_in_s), l.label});
    }
  }
  PrintTable(lrows);
}

}  // namespace

int ToolMain(int argc, char** argv) {
  log::SetProgramName("gp-ls");
  CLI::App app{"gp-ls: servers, GPUs and leases of the pool"};
  bool json = false, leases = false, detail = false;
  std::vector<std::string> only;
  tools::ServersArg servers;
  app.add_flag("--json", json, "machine-readable output (schema_version, base units, null for unknown)");
  app.add_flag("--leases", leases, "also list leases: who holds what (with a directory: implies --detail)");
  app.add_flag("--detail", detail,
               "with a directory: ask each agent shown for its slices, leases and activity (else only what the "
               "directory holds)");
  app.add_option("--agent", only, "show only this agent (its name or address; repeatable)");
  servers.Add(app);
  GP_PARSE_ARGS(app, argc, argv, 2);

  auto pool = servers.ConnectOrSay("gp-ls");
  if (!pool.ok()) return 2;
  // With a directory, one read of it shows the pool however large; --detail then asks only the agents shown.
  PoolState state = ShownPool(*pool, detail || leases, only);
  if (!state.directory_error.empty()) PrintError("gp-ls: warning: {}\n", state.directory_error);
  if (json) Print("{}\n", PoolStateJson(state, {leases, false}));
  else PrintText(state, leases);
  if (state.servers_up() == 0) {
    if (json) PrintError("gp-ls: no server answered\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return gpupool::tools::RunTool([&] { return ToolMain(argc, argv); });
}
