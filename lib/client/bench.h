// gp-bench's measurements, over one attached slice: synchronous round trip, copy bandwidth and launch rate, each
// next to a baseline measured in the same run (raw TCP on loopback). Internal to gpupool.
#ifndef GPUPOOL_CLIENT_BENCH_H_
#define GPUPOOL_CLIENT_BENCH_H_

#include <string>
#include <vector>

#include "gpupool/status.h"

namespace gpupool {

struct BenchFigure {
  std::string name;      // "sync_rtt_p50_us", "h2d_gib_per_s", ...
  double value = 0;
  std::string unit;      // "us", "GiB/s", "launches/s"
  double baseline = 0;   // 0 when there is none.
  std::string baseline_name;
  // value / baseline for rates, baseline / value for latencies: >= 1 means at least as good as the baseline.
  double ratio = 0;
  double target = 0;     // The target for the ratio (or absolute value), 0 if none.
  bool met = false;
};

// Runs the named benchmarks ("latency", "bandwidth", "launch", "all") against a slice of `token`'s lease.
Result<std::vector<BenchFigure>> RunBenchmarks(const std::string& token, const std::string& which);

}  // namespace gpupool

#endif  // GPUPOOL_CLIENT_BENCH_H_
