// gp-bench: how fast the pool is from here. Each figure is printed next to a baseline measured in the same run.
//   gp-bench [latency|bandwidth|launch|all] [--json] [--servers LIST]
// Exit status: 0 when the benchmarks ran (targets met or not), 1 when they could not run, 2 on bad usage.
#include <memory>

#include "client/bench.h"
#include "client/local_agent.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"
#include "gpupool/gpupool.h"
#include "parse_args.h"

int main(int argc, char** argv) {
  using namespace gpupool;
  log::SetProgramName("gp-bench");
  CLI::App app{"gp-bench: round trip, copy bandwidth and launch rate to a pool slice, against same-run baselines"};
  std::string which = "all", servers;
  bool json = false;
  app.add_option("benchmark", which, "latency, bandwidth, launch or all (default)")
      ->check(CLI::IsMember({"latency", "bandwidth", "launch", "all"}));
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--servers", servers, "comma-separated agent addresses (default: $GPUPOOL_SERVERS or pool file)");
  GP_PARSE_ARGS(app, argc, argv, 2);

  PoolOptions options;
  options.servers = SplitList(servers, ',');
  std::unique_ptr<LocalAgent> local;
  if (options.servers.empty() && ResolveServers(options).status().code() == StatusCode::kUnavailable) {
    auto started = LocalAgent::Start(SiblingPath("gp-agent"));
    if (!started.ok()) {
      fmt::print(stderr, "gp-bench: {}\n", started.status().message());
      return 1;
    }
    local = std::move(started).value();
    options.servers = {local->address()};
  }
  auto pool = Pool::Connect(options);
  if (!pool.ok()) {
    fmt::print(stderr, "gp-bench: {}\n", pool.status().message());
    return 1;
  }
  Request request;
  request.fraction = 0.25;
  request.label = "gp-bench";
  auto lease = pool->Allocate(request);
  if (!lease.ok()) {
    fmt::print(stderr, "gp-bench: {}\n", lease.status().message());
    return 1;
  }
  const Slice& slice = lease->slices().front();
  auto figures = RunBenchmarks(lease->Token(), which);
  if (!figures.ok()) {
    fmt::print(stderr, "gp-bench: {}\n", figures.status().message());
    return 1;
  }
  if (json) {
    JsonWriter w;
    w.BeginObject().Key("schema_version").Int(1).Key("server").String(slice.server).Key("device").UInt(slice.device);
    w.Key("figures").BeginArray();
    for (const auto& f : *figures) {
      w.BeginObject().Key("name").String(f.name).Key("value").Double(f.value).Key("unit").String(f.unit);
      w.Key("baseline");
      f.baseline > 0 ? w.Double(f.baseline) : w.Null();
      w.Key("baseline_name").String(f.baseline_name).Key("ratio");
      f.ratio > 0 ? w.Double(f.ratio) : w.Null();
      w.Key("target");
      f.target > 0 ? w.Double(f.target) : w.Null();
      w.Key("met").Bool(f.met).EndObject();
    }
    w.EndArray().EndObject();
    fmt::print("{}\n", w.str());
    return 0;
  }
  fmt::print("gp-bench: {} GPU {} ({}) at {}\n", slice.server_name, slice.device, slice.model, slice.server);
  for (const auto& f : *figures) {
    std::string baseline = f.baseline > 0 ? fmt::format("  baseline {:.2f} {} ({})  ratio {:.2f}", f.baseline, f.unit,
                                                        f.baseline_name, f.ratio)
                                          : "";
    std::string target = f.target > 0 ? fmt::format("  target {} {}", f.target, f.met ? "MET" : "MISSED") : "";
    fmt::print("  {:<16} {:>12.2f} {:<11}{}{}\n", f.name, f.value, f.unit, baseline, target);
  }
  return 0;
}
