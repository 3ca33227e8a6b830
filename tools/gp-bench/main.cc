// gp-bench: how fast the pool is from here. Each figure is printed next to a baseline measured in the same run.
//   gp-bench [latency|bandwidth|launch|loop|load|all] [--json] [--servers LIST] [--steps N]
// Exit status: 0 when the benchmarks ran (targets met or not), 1 when they could not run (or the loop computed wrong
// values), 2 on bad usage.
#include <memory>

#include "gp-bench/bench.h"
#include "client/local_agent.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"
#include "gpupool/gpupool.h"
#include "output.h"
#include "parse_args.h"
#include "request_args.h"

using gpupool::tools::Print;
using gpupool::tools::PrintError;

namespace {

using namespace gpupool;

// One agent measured, with the figures taken through a slice of it.
struct Target {
  std::vector<std::string> servers;  // Empty: the configured pool.
  BenchOptions options;
  Slice slice;
  std::vector<BenchFigure> figures;
};

Status Measure(Target* target) {
  PoolOptions options;
  options.servers = target->servers;
  auto pool = Pool::Connect(options);
  if (!pool.ok()) return pool.status();
  Request request;
  request.fraction = 0.25;
  request.label = "gp-bench";
  auto lease = pool->Allocate(request);
  if (!lease.ok()) return lease.status();
  target->slice = lease->slices().front();
  auto figures = RunBenchmarks(lease->Token(), target->options);
  if (!figures.ok()) return figures.status();
  target->figures = std::move(figures).value();
  return Status::Ok();
}

// Three decimals for ratios and their targets, so that a ratio just under its target never prints equal to it.
std::string Number(double v) { return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.3f}", v); }

}  // namespace

int ToolMain(int argc, char** argv) {
  log::SetProgramName("gp-bench");
  CLI::App app{
      "gp-bench: round trip, copy bandwidth, launch rate, a training-like loop and round trips under load, "
      "to a pool slice, against same-run baselines"};
  std::string which = "all";
  tools::ServersArg servers;
  bool json = false, quiet = false;
  int steps = BenchOptions().loop_steps;
  app.add_option("benchmark", which,
                 "latency, bandwidth, launch, loop, load, all (default: all of these), or migrate (the pause of a "
                 "move of the lease to another GPU; run by an administrator of an agent with two)")
      ->check(CLI::IsMember({"latency", "bandwidth", "launch", "loop", "load", "all", "migrate"}));
  app.add_flag("--json", json, "machine-readable output");
  app.add_flag("-q,--quiet", quiet, "no line saying what is measured when no pool is configured");
  servers.Add(app);
  app.add_option("--steps", steps, "measured steps of each variant of the loop (default 600)")
      ->check(CLI::Range(1, 1000000));
  std::string migrate_to, link_sink;
  app.add_option("--to", migrate_to, "migrate: move the lease to this agent and back (as clients reach it) rather "
                                     "than to another GPU of its own");
  app.add_option("--link-sink", link_sink, "migrate --to: a raw TCP sink (host:port) across the link between the two "
                                           "agents, whose bandwidth sets the goal (bench/migrate_veth.sh starts one); "
                                           "default: a Unix socket on this host");
  GP_PARSE_ARGS(app, argc, argv, 2);

  Target primary;
  if (Status s = servers.AppendTo(&primary.servers); !s.ok()) {
    PrintError("gp-bench: {}\n", s.message());
    return 2;
  }
  primary.options.loop_steps = steps;
  primary.options.migrate_to = migrate_to;
  primary.options.link_sink = link_sink;
  if (which != "all") primary.options.benchmarks = {which};
  std::vector<Target> targets;
  // Without a pool, private agents: the session's transport decides the baselines, so the round trip and the copies
  // are measured over a Unix socket (LocalAgent's, as gp-run's) and again over TCP loopback.
  std::unique_ptr<LocalAgent> local;
  std::unique_ptr<LocalAgent> local_tcp;
  if (primary.servers.empty()) {
    auto configured = ResolveServers(PoolOptions{});
    if (!configured.ok() && configured.status().code() != StatusCode::kUnavailable) {
      PrintError("gp-bench: {}\n", configured.status().message());  // Explicit but empty or broken: no fallback.
      return 2;
    }
    if (!configured.ok()) {
      auto started = LocalAgent::Start(SiblingPath("gp-agent"));
      if (!started.ok()) {
        PrintError("gp-bench: {}\n", started.status().message());
        return 1;
      }
      local = std::move(started).value();
      primary.servers = {local->address()};
      if (!quiet) {
        PrintError("gp-bench: no pool configured, so private gp-agents are measured, on {}; -q hides this line\n",
                   local->Devices());
      }
    }
  }
  targets.push_back(primary);
  if (local) {
    Target tcp;
    tcp.options = primary.options;
    tcp.options.benchmarks.clear();
    for (const char* name : {"latency", "bandwidth"}) {
      if (primary.options.benchmarks.count(name)) tcp.options.benchmarks.insert(name);
    }
    if (!tcp.options.benchmarks.empty()) {
      auto started = LocalAgent::Start(SiblingPath("gp-agent"), LocalAgent::Listen::kTcpLoopback);
      if (!started.ok()) {
        PrintError("gp-bench: {}\n", started.status().message());
        return 1;
      }
      local_tcp = std::move(started).value();
      tcp.servers = {local_tcp->address()};
      targets.push_back(tcp);
    }
  }
  for (Target& target : targets) {
    if (Status s = Measure(&target); !s.ok()) {
      PrintError("gp-bench: {}\n", s.message());
      return 1;
    }
  }

  if (json) {
    const Slice& first = targets.front().slice;
    JsonWriter w;
    w.BeginObject().Key("schema_version").Int(1).Key("server").String(first.server).Key("device").UInt(first.device);
    w.Key("targets").BeginArray();
    for (const Target& t : targets) {
      w.BeginObject().Key("server").String(t.slice.server).Key("device").UInt(t.slice.device);
      w.Key("transport").String(TransportOf(t.slice.server)).Key("model").String(t.slice.model).EndObject();
    }
    w.EndArray().Key("loop_steps").Int(steps).Key("figures").BeginArray();
    for (const Target& t : targets) {
      for (const auto& f : t.figures) {
        w.BeginObject().Key("name").String(f.name).Key("value").Double(f.value).Key("unit").String(f.unit);
        w.Key("baseline");
        f.baseline > 0 ? w.Double(f.baseline) : w.Null();
        w.Key("baseline_name").String(f.baseline_name).Key("ratio");
        f.ratio > 0 ? w.Double(f.ratio) : w.Null();
        w.Key("target");
        f.target > 0 ? w.Double(f.target) : w.Null();
        w.Key("met").Bool(f.met).Key("transport").String(f.transport).EndObject();
      }
    }
    w.EndArray().EndObject();
    Print("{}\n", w.str());
    return 0;
  }
  for (const Target& t : targets) {
    Print("gp-bench: {} GPU {} ({}) at {} ({})\n", t.slice.server_name, t.slice.device, t.slice.model,
          t.slice.server, TransportOf(t.slice.server));
  }
  // Ratios are "at least as good as the baseline" when >= 1; a target applies to the ratio, or to the value when
  // there is no baseline.
  Print("  {:<18} {:<4} {:>11} {:<10} {:>10} {:>6} {:>7} {:<6}  {}\n", "figure", "via", "value", "unit",
        "baseline", "ratio", "target", "result", "baseline is");
  for (const Target& t : targets) {
    for (const auto& f : t.figures) {
      Print("  {:<18} {:<4} {:>11.2f} {:<10} {:>10} {:>6} {:>7} {:<6}  {}\n", f.name, f.transport, f.value, f.unit,
            f.baseline > 0 ? fmt::format("{:.2f}", f.baseline) : "-", f.ratio > 0 ? Number(f.ratio) : "-",
            f.target > 0 ? Number(f.target) : "-", f.target > 0 ? (f.met ? "MET" : "MISSED") : "",
            f.baseline_name);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return gpupool::tools::RunTool([&] { return ToolMain(argc, argv); });
}
