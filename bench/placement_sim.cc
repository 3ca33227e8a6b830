// placement_sim: placement quality at scale, in simulation. No agents, no RPC: a pool of simulated GPUs as the
// snapshot Place() reads, and a seeded synthetic trace of requests that arrive, hold their slices and leave.
//
// The trace follows the published GPU requests of Alibaba's 2023 GPU-sharing cluster trace (cluster-trace-gpu-
// v2023, openb_pod_list_default.csv, the trace of the ATC '23 "Beware of Fragmentation" paper): sizes drawn from
// its histogram (kTraceSizes below), Poisson arrivals, lognormal (or exponential) lifetimes of mean 1. The arrival
// rate is set so that the offered load (GPUs asked for times lifetime, per unit time) is --load times the pool's
// capacity. Each policy replays the same trace against the same empty pool: a warm-up (--warmup mean lifetimes),
// then --requests measured arrivals. A request that does not fit is refused (no queue), as Place() with wait 0.
// --lifetime none is the paper's filling experiment instead: nothing leaves, arrivals until they asked for --load
// times the capacity, and the state at the end is reported.
//
// Reported per policy and load, over the measured arrivals:
//   granted     share of requests granted (and of the GPUs they asked for); per kind in a second table, with the
//               share of multi-GPU grants that landed on one server
//   allocated   mean share of the pool's capacity allocated (sampled at arrivals: Poisson arrivals see time
//               averages)
//   frag        the paper's fragmentation measure: sum over servers of TargetWorkload::Fragmentation() against the
//               default target workload (--target trace: the mix drawn), as a share of capacity (and of free
//               capacity): free capacity a request
//               drawn from the workload could not use, in expectation
//   stranded    free capacity on GPUs that no request of the target workload could use at all (less free than
//               its smallest slice), as a share of capacity
//   place p50/p99  wall time of one Place() call over the whole pool
//
//   build-sim/bench/placement_sim                       # 10,000 GPUs, load 1.0, both policies, seed 1
//   build-sim/bench/placement_sim --load 0.9,1.0,1.1 --seed 2
//   build-sim/bench/placement_sim --models 2 --json
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "client/placement.h"
#include "core/util.h"
#include "gpupool/request.h"

namespace {

using gpupool::Request;
using gpupool::internal::Assignment;
using gpupool::internal::DeviceView;
using gpupool::internal::PlacementOptions;
using gpupool::internal::PlacementPolicy;
using gpupool::internal::ServerView;
using gpupool::internal::TargetWorkload;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kGiB = 1ull << 30;

// The GPU requests of openb_pod_list_default.csv (7,064 tasks that ask for GPUs), as counted from the published
// CSV: {GPUs per slice as a fraction, slices, tasks}. Fractional requests are one slice of gpu_milli / 1000.
struct TraceSize {
  double fraction;
  int count;
  int tasks;
};
// clang-format off
constexpr TraceSize kTraceSizes[] = {
    // 3,078 fractional (43.6%).
    {0.05, 1, 7},    {0.11, 1, 24},   {0.14, 1, 1},    {0.16, 1, 74},   {0.22, 1, 62},  {0.23, 1, 140},
    {0.27, 1, 4},    {0.29, 1, 1},    {0.32, 1, 328},  {0.33, 1, 7},    {0.35, 1, 6},   {0.37, 1, 47},
    {0.44, 1, 2},    {0.46, 1, 128},  {0.47, 1, 750},  {0.48, 1, 19},   {0.55, 1, 72},  {0.59, 1, 75},
    {0.65, 1, 253},  {0.81, 1, 1078},
    // 3,986 whole GPUs: 1 (55.4%), 2, 4, 8 (1.1% together).
    {1.0, 1, 3911},  {1.0, 2, 16},    {1.0, 4, 15},    {1.0, 8, 44},
};
// clang-format on

enum class Kind { kFraction, kOne, kMulti };
constexpr const char* kKindNames[] = {"fraction", "1 GPU", "multi-GPU"};

Kind KindOf(const TraceSize& s) {
  if (s.fraction < 1.0) return Kind::kFraction;
  return s.count == 1 ? Kind::kOne : Kind::kMulti;
}

struct Options {
  int gpus = 10000;
  int per_server = 8;
  uint64_t seed = 1;
  int requests = 100000;
  double warmup = 4.0;
  std::vector<double> loads = {1.0};
  std::string policy = "both";
  int models = 1;
  double constrained = 1.0 / 3;
  double frac_share = -1;  // < 0: the trace's.
  std::string target = "default";
  std::string lifetime = "lognormal";
  double sigma = 1.0;
  bool json = false;
};

struct Arrival {
  double time;
  double life;
  size_t size;  // Index into kTraceSizes.
  int model;    // -1: any; else the class it asks for.
};

// The trace: the same for every policy. Sizes by the published histogram; with --frac-share the fractional and
// whole kinds are reweighted to that share of requests, keeping the histogram within each.
struct Trace {
  std::vector<Arrival> arrivals;
  size_t warmup = 0;                                     // Arrivals before measuring.
  double mean_gpus = 0;                                  // Mean GPUs one request asks for.
  double rate = 0;                                       // Arrivals per unit time.
  std::vector<gpupool::internal::WorkloadShape> shapes;  // The sizes as drawn, as a target workload.
};

Trace MakeTrace(const Options& o, double load) {
  std::vector<double> weights;
  double frac_tasks = 0, whole_tasks = 0;
  for (const TraceSize& s : kTraceSizes) (s.fraction < 1.0 ? frac_tasks : whole_tasks) += s.tasks;
  const double frac_share = o.frac_share >= 0 ? o.frac_share : frac_tasks / (frac_tasks + whole_tasks);
  Trace t;
  double weight_sum = 0, gpus = 0;
  for (const TraceSize& s : kTraceSizes) {
    double w = s.fraction < 1.0 ? frac_share * s.tasks / frac_tasks : (1 - frac_share) * s.tasks / whole_tasks;
    weights.push_back(w);
    t.shapes.push_back({s.count, s.fraction, w});
    weight_sum += w;
    gpus += w * s.fraction * s.count;
  }
  t.mean_gpus = gpus / weight_sum;
  const double mean_life = 1.0;
  const bool fill = o.lifetime == "none";
  t.rate = load * o.gpus / (t.mean_gpus * mean_life);
  t.warmup = fill ? 0 : static_cast<size_t>(std::llround(t.rate * o.warmup * mean_life));
  std::mt19937_64 gen(o.seed);
  std::discrete_distribution<size_t> size(weights.begin(), weights.end());
  std::exponential_distribution<double> gap(t.rate);
  // Mean 1: exp(mu + sigma^2 / 2) = 1.
  std::lognormal_distribution<double> lognormal(-o.sigma * o.sigma / 2, o.sigma);
  std::exponential_distribution<double> exponential(1.0 / mean_life);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Filling (no departures): arrivals until they have asked for `load` times the pool's capacity.
  const size_t n = fill ? SIZE_MAX : t.warmup + static_cast<size_t>(o.requests);
  double now = 0, asked = 0;
  for (size_t i = 0; i < n && !(fill && asked >= load * o.gpus); ++i) {
    now += gap(gen);
    Arrival a{now, 0, size(gen), -1};
    a.life = fill ? INFINITY : o.lifetime == "exp" ? exponential(gen) : lognormal(gen);
    if (o.models > 1 && unit(gen) < o.constrained) a.model = static_cast<int>(unit(gen) * o.models);
    asked += kTraceSizes[a.size].fraction * kTraceSizes[a.size].count;
    t.arrivals.push_back(a);
  }
  return t;
}

// The pool: servers of per_server GPUs; with --models 2, alternate servers hold a second model (a 32 GiB card
// beside the 80 GiB one), and the constrained requests ask for one class.
std::vector<ServerView> MakePool(const Options& o) {
  std::vector<ServerView> pool;
  const int servers = (o.gpus + o.per_server - 1) / o.per_server;
  for (int s = 0; s < servers; ++s) {
    ServerView v;
    v.server = static_cast<size_t>(s);
    const int model = s % o.models;
    const uint64_t memory = model == 0 ? 80 * kGiB : 32 * kGiB;
    for (int d = 0; d < o.per_server && s * o.per_server + d < o.gpus; ++d) {
      v.devices.push_back({static_cast<uint32_t>(d), fmt::format("sim-gpu-{}", model), fmt::format("class{}", model),
                           memory, memory, gpupool::kShareWhole, true});
    }
    pool.push_back(std::move(v));
  }
  return pool;
}

struct Result {
  std::string policy;
  double load = 0;
  size_t measured = 0, granted = 0;
  double asked_gpus = 0, granted_gpus = 0;
  size_t kind_arrived[3] = {}, kind_granted[3] = {};
  size_t multi_one_server = 0;                             // Granted multi-GPU requests that landed on one server.
  double allocated = 0, frag = 0, stranded = 0, free = 0;  // Means over samples, in GPUs.
  size_t samples = 0;
  std::vector<double> place_us;
  double p50 = 0, p99 = 0, mean_us = 0;
  double seconds = 0;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

Result Simulate(const Options& o, const Trace& trace, PlacementPolicy policy, double load) {
  const auto started = Clock::now();
  Result res;
  res.policy = policy == PlacementPolicy::kBestFit ? "best fit" : "fragmentation-aware";
  res.load = load;
  std::vector<ServerView> pool = MakePool(o);
  // Fragmentation is measured, and kFragmentationAware places, against the same target workload.
  const TargetWorkload own(trace.shapes);
  const TargetWorkload& target = o.target == "trace" ? own : TargetWorkload::Default();
  // The fragmentation and stranded capacity of each server, kept as servers change.
  std::vector<double> frag(pool.size()), stranded(pool.size());
  double frag_sum = 0, stranded_sum = 0, allocated = 0;
  for (size_t s = 0; s < pool.size(); ++s) {
    frag[s] = target.Fragmentation(pool[s]);
    stranded[s] = target.Stranded(pool[s]);
    frag_sum += frag[s];
    stranded_sum += stranded[s];
  }
  const auto remeasure = [&](size_t s) {
    frag_sum -= frag[s];
    stranded_sum -= stranded[s];
    frag[s] = target.Fragmentation(pool[s]);
    stranded[s] = target.Stranded(pool[s]);
    frag_sum += frag[s];
    stranded_sum += stranded[s];
  };
  struct Departure {
    double time;
    std::vector<Assignment> slices;
    bool operator>(const Departure& other) const { return time > other.time; }
  };
  std::priority_queue<Departure, std::vector<Departure>, std::greater<Departure>> departures;
  std::mt19937_64 random(o.seed ^ 0x9e3779b97f4a7c15ull);
  PlacementOptions options;
  options.policy = policy;
  options.random = &random;
  options.target = &target;
  res.place_us.reserve(trace.arrivals.size());
  const bool fill = o.lifetime == "none";

  for (size_t i = 0; i < trace.arrivals.size(); ++i) {
    const Arrival& a = trace.arrivals[i];
    while (!departures.empty() && departures.top().time <= a.time) {
      for (const Assignment& s : departures.top().slices) {
        DeviceView& d = pool[s.server].devices[s.device];
        d.memory_free += s.memory_bytes;
        d.share_free += s.share;
        d.whole_free = d.memory_free == d.memory_total && d.share_free == gpupool::kShareWhole;
        allocated -= gpupool::FractionFromShare(s.share);
      }
      for (const Assignment& s : departures.top().slices) remeasure(s.server);
      departures.pop();
    }
    const TraceSize& size = kTraceSizes[a.size];
    const bool measured = i >= trace.warmup;
    if (measured && !fill) {
      // Sampled before this arrival is placed: the state an arrival sees.
      res.allocated += allocated;
      res.frag += frag_sum;
      res.stranded += stranded_sum;
      ++res.samples;
    }
    Request r;
    r.count = size.count;
    r.fraction = size.fraction;
    if (a.model >= 0) r.device_class = fmt::format("class{}", a.model);
    const auto t0 = Clock::now();
    auto plan = gpupool::internal::Place(r, pool, options);
    const auto t1 = Clock::now();
    const Kind kind = KindOf(size);
    if (measured) {
      ++res.measured;
      ++res.kind_arrived[static_cast<int>(kind)];
      res.asked_gpus += size.fraction * size.count;
      res.place_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (!plan.ok()) continue;
    for (const Assignment& s : *plan) {
      DeviceView& d = pool[s.server].devices[s.device];
      d.memory_free -= s.memory_bytes;
      d.share_free -= s.share;
      d.whole_free = false;
      allocated += gpupool::FractionFromShare(s.share);
    }
    for (const Assignment& s : *plan) remeasure(s.server);
    if (measured) {
      ++res.granted;
      ++res.kind_granted[static_cast<int>(kind)];
      res.granted_gpus += size.fraction * size.count;
      bool one_server = true;
      for (const Assignment& s : *plan) one_server = one_server && s.server == (*plan)[0].server;
      if (kind == Kind::kMulti && one_server) ++res.multi_one_server;
    }
    if (!fill) departures.push({a.time + a.life, std::move(*plan)});
  }
  if (fill) {
    // Filling: the state the last arrival left.
    res.allocated = allocated;
    res.frag = frag_sum;
    res.stranded = stranded_sum;
    res.samples = 1;
  }
  if (res.samples > 0) {
    res.allocated /= static_cast<double>(res.samples);
    res.frag /= static_cast<double>(res.samples);
    res.stranded /= static_cast<double>(res.samples);
    res.free = o.gpus - res.allocated;
  }
  double sum = 0;
  for (double us : res.place_us) sum += us;
  res.mean_us = res.place_us.empty() ? 0 : sum / static_cast<double>(res.place_us.size());
  res.p50 = Percentile(res.place_us, 0.50);
  res.p99 = Percentile(res.place_us, 0.99);
  res.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return res;
}

double Pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

std::string Ratio(double a, double b) { return b > 0 ? fmt::format("{:.3f}", a / b) : "-"; }

void PrintTable(const Options& o, const std::vector<Result>& results) {
  fmt::print(
      "| load | policy | granted (req) | granted (GPUs) | allocated | frag | frag / free | stranded | "
      "place p50 | place p99 |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    fmt::print("| {:.2f} | {} | {:.2f}% | {:.2f}% | {:.2f}% | {:.2f}% | {:.1f}% | {:.3f}% | {:.0f} us | {:.0f} us |\n",
               r.load, r.policy, Pct(r.granted, r.measured), Pct(r.granted_gpus, r.asked_gpus),
               Pct(r.allocated, o.gpus), Pct(r.frag, o.gpus), Pct(r.frag, r.free), Pct(r.stranded, o.gpus), r.p50,
               r.p99);
  }
  // Ratios, fragmentation-aware over best fit, for each load both ran at.
  bool header = false;
  for (const Result& b : results) {
    if (b.policy != "best fit") continue;
    for (const Result& f : results) {
      if (f.policy == "best fit" || f.load != b.load) continue;
      if (!header) {
        fmt::print("\nFragmentation-aware / best fit, same trace:\n\n");
        fmt::print(
            "| load | granted (req) | granted (GPUs) | refused (req) | allocated | frag | stranded | "
            "place p50 | place p99 |\n");
        fmt::print("|---|---|---|---|---|---|---|---|---|\n");
        header = true;
      }
      fmt::print("| {:.2f} | {} | {} | {} | {} | {} | {} | {} | {} |\n", b.load,
                 Ratio(Pct(f.granted, f.measured), Pct(b.granted, b.measured)),
                 Ratio(Pct(f.granted_gpus, f.asked_gpus), Pct(b.granted_gpus, b.asked_gpus)),
                 Ratio(static_cast<double>(f.measured - f.granted), static_cast<double>(b.measured - b.granted)),
                 Ratio(f.allocated, b.allocated), Ratio(f.frag, b.frag), Ratio(f.stranded, b.stranded),
                 Ratio(f.p50, b.p50), Ratio(f.p99, b.p99));
    }
  }
  fmt::print("\nGranted by kind (share of that kind's requests):\n\n");
  fmt::print("| load | policy | {} | {} | {} | multi-GPU granted on one server |\n|---|---|---|---|---|---|\n",
             kKindNames[0], kKindNames[1], kKindNames[2]);
  for (const Result& r : results) {
    fmt::print("| {:.2f} | {} | {:.2f}% | {:.2f}% | {:.2f}% | {:.1f}% |\n", r.load, r.policy,
               Pct(r.kind_granted[0], r.kind_arrived[0]), Pct(r.kind_granted[1], r.kind_arrived[1]),
               Pct(r.kind_granted[2], r.kind_arrived[2]), Pct(r.multi_one_server, r.kind_granted[2]));
  }
}

void PrintJson(const Options& o, const std::vector<Result>& results) {
  fmt::print(
      "{{\"gpus\": {}, \"per_server\": {}, \"seed\": {}, \"requests\": {}, \"warmup\": {}, \"models\": {}, "
      "\"lifetime\": \"{}\", \"target\": \"{}\", \"frac_share\": {}, \"results\": [",
      o.gpus, o.per_server, o.seed, o.requests, o.warmup, o.models, o.lifetime, o.target, o.frac_share);
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    fmt::print(
        "{}{{\"policy\": \"{}\", \"load\": {}, \"measured\": {}, \"granted\": {}, \"granted_share\": {:.6f}, "
        "\"granted_gpu_share\": {:.6f}, \"allocated_share\": {:.6f}, \"frag_share\": {:.6f}, "
        "\"frag_of_free\": {:.6f}, \"stranded_share\": {:.6f}, \"place_us_p50\": {:.2f}, "
        "\"place_us_p99\": {:.2f}, \"place_us_mean\": {:.2f}, \"granted_by_kind\": {{",
        i ? ", " : "", r.policy, r.load, r.measured, r.granted, Pct(r.granted, r.measured) / 100,
        Pct(r.granted_gpus, r.asked_gpus) / 100, r.allocated / o.gpus, r.frag / o.gpus,
        r.free > 0 ? r.frag / r.free : 0.0, r.stranded / o.gpus, r.p50, r.p99, r.mean_us);
    for (int k = 0; k < 3; ++k) {
      fmt::print("{}\"{}\": {:.6f}", k ? ", " : "", kKindNames[k], Pct(r.kind_granted[k], r.kind_arrived[k]) / 100);
    }
    fmt::print("}}, \"multi_gpu_on_one_server\": {:.6f}, \"seconds\": {:.2f}}}",
               Pct(r.multi_one_server, r.kind_granted[2]) / 100, r.seconds);
  }
  fmt::print("]}}\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Placement quality at scale: a synthetic trace after Alibaba's 2023 GPU-sharing trace, replayed "
      "against a simulated pool through Place(), best fit against fragmentation-aware."};
  app.add_option("--gpus", o.gpus, "simulated GPUs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--per-server", o.per_server, "GPUs per server")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--seed", o.seed, "seed of the trace and of placement's tie-breaks")->capture_default_str();
  app.add_option("--requests", o.requests, "measured arrivals (after the warm-up)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "warm-up, in mean lifetimes")->capture_default_str();
  app.add_option("--load", o.loads, "offered load(s), as shares of capacity, e.g. 0.9,1.0,1.1")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--policy", o.policy, "bestfit, fgd or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"bestfit", "fgd", "both"}));
  app.add_option("--models", o.models, "GPU models (classes) in the pool, alternating by server")
      ->capture_default_str()
      ->check(CLI::Range(1, 2));
  app.add_option("--constrained", o.constrained, "with --models 2: share of requests that ask for one class")
      ->capture_default_str();
  app.add_option("--frac-share", o.frac_share,
                 "share of requests for a fraction of a GPU (default: the trace's, 43.6%), the histogram kept within "
                 "fractions and within whole GPUs");
  app.add_option("--target", o.target,
                 "the target workload of the fragmentation measure and of fgd: default (placement's built-in "
                 "mix) or trace (exactly the sizes this run draws)")
      ->capture_default_str()
      ->check(CLI::IsMember({"default", "trace"}));
  app.add_option("--lifetime", o.lifetime,
                 "lognormal or exp (mean 1 either way), or none: the paper's filling experiment, no departures, "
                 "arrivals until they asked for --load times the capacity, measured all, state at the end")
      ->capture_default_str()
      ->check(CLI::IsMember({"lognormal", "exp", "none"}));
  app.add_option("--sigma", o.sigma, "sigma of the lognormal lifetime")->capture_default_str();
  app.add_flag("--json", o.json, "results as JSON on stdout (progress stays on stderr)");
  CLI11_PARSE(app, argc, argv);

  std::vector<PlacementPolicy> policies;
  if (o.policy != "fgd") policies.push_back(PlacementPolicy::kBestFit);
  if (o.policy != "bestfit") policies.push_back(PlacementPolicy::kFragmentationAware);
  std::vector<Result> results;
  for (double load : o.loads) {
    const Trace trace = MakeTrace(o, load);
    fmt::print(stderr,
               "load {:.2f}: {} GPUs on {} servers, {:.0f} arrivals per mean lifetime, {:.3f} GPUs per request, "
               "{} warm-up + {} measured arrivals\n",
               load, o.gpus, (o.gpus + o.per_server - 1) / o.per_server, trace.rate, trace.mean_gpus, trace.warmup,
               trace.arrivals.size() - trace.warmup);
    for (PlacementPolicy policy : policies) {
      results.push_back(Simulate(o, trace, policy, load));
      const Result& r = results.back();
      fmt::print(stderr, "  {}: {:.2f}% granted, {:.1f} s\n", r.policy, Pct(r.granted, r.measured), r.seconds);
    }
  }
  if (o.json) {
    PrintJson(o, results);
  } else {
    fmt::print(
        "placement_sim: {} GPUs ({} per server, {} model(s)), seed {}, {} measured requests, {} lifetimes, "
        "{} target\n\n",
        o.gpus, o.per_server, o.models, o.seed, o.lifetime == "none" ? "all" : std::to_string(o.requests), o.lifetime,
        o.target);
    PrintTable(o, results);
  }
  return 0;
}
