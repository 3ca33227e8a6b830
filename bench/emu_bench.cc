// Emulator benchmark: how fast lib/emu executes real nvcc-built kernels (SAXPY, tiled matmul, warp-shuffle
// reduction), in dynamic PTX thread-instructions per second per core, with 1 and 2 worker threads; the speed-up
// is the ratio between the two, measured in the same run. Results are checked against a host reference.
// Then the launch rate: tiny kernels queued back to back without waiting and synchronised once, as a client that
// launches asynchronously does, which measures the device's own cost per launch rather than execution.
//
//   emu_bench [--ptx FILE] [--json] [--launches-only | --kernels-only] [--repeats N] [--launch-count N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "emu/device.h"

using gpupool::CallStatus;
using gpupool::emu::Device;
using gpupool::emu::DeviceOptions;
using gpupool::emu::Function;
using gpupool::emu::LaunchConfig;
using gpupool::emu::Module;

namespace {

struct Measurement {
  std::string kernel;
  int workers = 0;
  double seconds = 0;
  uint64_t instructions = 0;
  bool correct = false;
};

void Check(const CallStatus& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "emu_bench: %s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

class Bench {
 public:
  Bench(const std::string& ptx, int workers, bool warp_major) {
    DeviceOptions o;
    o.memory_bytes = 512ull << 20;
    o.worker_threads = workers;
    o.warp_major = warp_major;
    device_ = std::make_unique<Device>(o);
    Check(device_->LoadPtx(ptx, &module_), "load PTX");
    workers_ = workers;
  }

  uint64_t Upload(const std::vector<float>& v) {
    uint64_t d = 0;
    Check(device_->Malloc(v.size() * 4, &d), "malloc");
    Check(device_->CopyToDevice(d, v.data(), v.size() * 4), "copy to device");
    return d;
  }
  void Put(uint64_t d, const std::vector<float>& v) {
    Check(device_->CopyToDevice(d, v.data(), v.size() * 4), "copy to device");
  }
  std::vector<float> Download(uint64_t d, size_t n) {
    std::vector<float> v(n);
    Check(device_->CopyFromDevice(v.data(), d, n * 4), "copy from device");
    return v;
  }

  // Runs the kernel `repeats` times (a launch takes tens of milliseconds, within a scheduler's time slice of
  // noise) and keeps the fastest; every run's result is checked (`reset` puts the inputs back before each).
  Measurement Run(const char* kernel, LaunchConfig c, void** params, int repeats, const std::function<void()>& reset,
                  const std::function<bool()>& verify) {
    Function* fn = nullptr;
    Check(device_->GetFunction(module_, kernel, &fn), kernel);
    Measurement m;
    m.kernel = kernel;
    m.workers = workers_;
    m.correct = true;
    for (int r = 0; r < repeats; ++r) {
      reset();
      uint64_t before = device_->InstructionsExecuted();
      auto t0 = std::chrono::steady_clock::now();
      Check(device_->Launch(fn, c, params), "launch");
      Check(device_->Synchronize(), kernel);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      m.instructions = device_->InstructionsExecuted() - before;
      if (r == 0 || seconds < m.seconds) m.seconds = seconds;
      m.correct = verify() && m.correct;
    }
    return m;
  }

 private:
  std::unique_ptr<Device> device_;
  Module* module_ = nullptr;
  int workers_ = 1;
};

std::vector<Measurement> RunAll(const std::string& ptx, int workers, int repeats, bool warp_major = true) {
  std::vector<Measurement> out;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1, 1);
  Bench b(ptx, workers, warp_major);
  {
    int n = 1 << 20;
    float a = 1.5f;
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = dist(rng);
    for (auto& v : y) v = dist(rng);
    uint64_t dx = b.Upload(x), dy = b.Upload(y);
    void* p[] = {&n, &a, &dx, &dy};
    auto reset = [&] { b.Put(dy, y); };
    LaunchConfig c;
    c.grid = {256, 1, 1};
    c.block = {256, 1, 1};
    out.push_back(b.Run("saxpy", c, p, repeats, reset, [&] {
      auto r = b.Download(dy, n);
      for (int i = 0; i < n; ++i) {
        if (r[i] != std::fmaf(a, x[i], y[i]) && r[i] != a * x[i] + y[i]) return false;
      }
      return true;
    }));
  }
  {
    int n = 128;
    std::vector<float> a(n * n), bm(n * n), c0(n * n, 0);
    for (auto& v : a) v = dist(rng);
    for (auto& v : bm) v = dist(rng);
    uint64_t da = b.Upload(a), db = b.Upload(bm), dc = b.Upload(c0);
    void* p[] = {&da, &db, &dc, &n};
    LaunchConfig c;
    c.grid = {static_cast<uint32_t>(n / 16), static_cast<uint32_t>(n / 16), 1};
    c.block = {16, 16, 1};
    out.push_back(b.Run("matmul", c, p, repeats, [] {}, [&] {
      auto r = b.Download(dc, n * n);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          double want = 0;
          for (int k = 0; k < n; ++k) want += static_cast<double>(a[i * n + k]) * bm[k * n + j];
          if (std::fabs(r[i * n + j] - want) > 1e-3) return false;
        }
      }
      return true;
    }));
  }
  {
    int n = 1 << 20;
    std::vector<float> x(n), zero(1, 0);
    for (auto& v : x) v = dist(rng);
    uint64_t dx = b.Upload(x), dout = b.Upload(zero);
    void* p[] = {&dx, &dout, &n};
    auto reset = [&] { b.Put(dout, zero); };
    LaunchConfig c;
    c.grid = {128, 1, 1};
    c.block = {256, 1, 1};
    out.push_back(b.Run("reduce", c, p, repeats, reset, [&] {
      double want = 0;
      for (float v : x) want += v;
      return std::fabs(b.Download(dout, 1)[0] - want) < 1e-1;
    }));
  }
  return out;
}

// Launch-rate kernels, written in PTX so that they are exactly as small as intended: `empty` does nothing, `small`
// does a few integer adds per thread and stores the result (out[tid] = 2 * tid + 8), so that a launch that ran is
// visible and its parameter reached the threads.
constexpr char kLaunchPtx[] = R"(
.version 7.0
.target sm_75
.address_size 64
.visible .entry empty()
{
  ret;
}
.visible .entry small(.param .u64 out)
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %tid.x;
  add.s32 %r2, %r1, 1;
  add.s32 %r3, %r2, %r1;
  add.s32 %r4, %r3, 7;
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
  ret;
}
)";

struct LaunchRate {
  std::string name;  // Kernel and shape.
  uint64_t launches = 0;
  double seconds = 0;
  bool correct = false;
};

// Queues `count` launches of `kernel` on one stream without waiting, then synchronises once; the time covers both,
// so a device that only queues quickly but runs each launch slowly does not look fast.
LaunchRate MeasureLaunches(Device& device, Module* module, const char* kernel, LaunchConfig c, void** params,
                           uint64_t count, const std::function<bool()>& verify) {
  Function* fn = nullptr;
  Check(device.GetFunction(module, kernel, &fn), kernel);
  gpupool::emu::Stream* stream = nullptr;
  Check(device.CreateStream(&stream), "create stream");
  c.stream = stream;
  // Warm-up: first-use costs (page faults, pools growing to their size) are not what a steady client pays.
  for (int i = 0; i < 1000; ++i) Check(device.Launch(fn, c, params), "launch");
  Check(device.StreamSynchronize(stream), kernel);
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) Check(device.Launch(fn, c, params), "launch");
  Check(device.StreamSynchronize(stream), kernel);
  LaunchRate r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.name = std::string(kernel) + " " + std::to_string(c.grid.x) + "x" + std::to_string(c.block.x);
  r.launches = count;
  r.correct = verify();
  Check(device.DestroyStream(stream), "destroy stream");
  return r;
}

std::vector<LaunchRate> RunLaunchRates(uint64_t count) {
  DeviceOptions o;
  o.memory_bytes = 64ull << 20;
  o.worker_threads = 2;  // Fixed, so that runs on different hosts launch the same way.
  Device device(o);
  Module* module = nullptr;
  Check(device.LoadPtx(kLaunchPtx, &module), "load launch-rate PTX");
  std::vector<LaunchRate> out;
  out.push_back(MeasureLaunches(device, module, "empty", LaunchConfig{{1}, {32}}, nullptr, count, [] { return true; }));
  uint64_t buffer = 0;
  const uint32_t threads = 128, blocks = 4;
  Check(device.Malloc(threads * sizeof(uint32_t), &buffer), "malloc");
  void* params[] = {&buffer};
  auto verify = [&] {
    std::vector<uint32_t> got(threads);
    Check(device.CopyFromDevice(got.data(), buffer, threads * sizeof(uint32_t)), "copy from device");
    for (uint32_t i = 0; i < threads; ++i) {
      if (got[i] != 2 * i + 8) return false;
    }
    return true;
  };
  out.push_back(MeasureLaunches(device, module, "small", LaunchConfig{{1}, {threads}}, params, count, verify));
  // Several blocks: the launch is shared out to both workers (every block writes the same values).
  Check(device.Memset(buffer, 0, 4, threads), "memset");
  out.push_back(MeasureLaunches(device, module, "small", LaunchConfig{{blocks}, {threads}}, params, count / 4, verify));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ptx_path = GPUPOOL_EMU_BENCH_PTX;
  bool json = false, launches_only = false, kernels_only = false;
  int64_t launch_count = 200000;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--ptx") && i + 1 < argc) ptx_path = argv[++i];
    else if (!std::strcmp(argv[i], "--launches-only")) launches_only = true;
    else if (!std::strcmp(argv[i], "--kernels-only")) kernels_only = true;
    else if (!std::strcmp(argv[i], "--launch-count") && i + 1 < argc) launch_count = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: emu_bench [--ptx FILE] [--json] [--launches-only | --kernels-only] "
                           "[--repeats N] [--launch-count N]\n");
      return 2;
    }
  }
  if (launch_count < 4) launch_count = 4;
  std::vector<Measurement> one, two, thread_major;
  if (!launches_only) {
    std::ifstream f(ptx_path);
    if (!f) {
      std::fprintf(stderr, "emu_bench: cannot read %s\n", ptx_path.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    // The baseline of issue 13's speed target, in the same run: one thread at a time, as before warp-major execution.
    thread_major = RunAll(ss.str(), 1, repeats, false);
    one = RunAll(ss.str(), 1, repeats);
    two = RunAll(ss.str(), 2, repeats);
  }
  std::vector<LaunchRate> rates;
  if (!kernels_only) rates = RunLaunchRates(static_cast<uint64_t>(launch_count));
  unsigned cores = std::thread::hardware_concurrency();
  if (json) std::printf("{\"host_cores\":%u,\"kernels\":[", cores);
  else std::printf("emulator benchmark (%u host cores; rates are dynamic PTX thread-instructions)\n", cores);
  bool all_correct = true;
  double worst_rate = 1e300;
  for (size_t i = 0; i < one.size(); ++i) {
    const auto& a = one[i];
    const auto& b = two[i];
    double rate1 = a.instructions / a.seconds / 1e6;
    double rate2_per_core = b.instructions / b.seconds / 1e6 / 2;
    double speedup = a.seconds / b.seconds;
    all_correct = all_correct && a.correct && b.correct;
    worst_rate = std::min(worst_rate, rate1);
    if (json) {
      std::printf("%s{\"kernel\":\"%s\",\"instructions\":%llu,\"seconds_1\":%.6f,\"seconds_2\":%.6f,"
                  "\"minstr_per_s_per_core_1\":%.2f,\"minstr_per_s_per_core_2\":%.2f,\"speedup_1_to_2\":%.3f,"
                  "\"correct\":%s}",
                  i ? "," : "", a.kernel.c_str(), static_cast<unsigned long long>(a.instructions), a.seconds,
                  b.seconds, rate1, rate2_per_core, speedup, a.correct && b.correct ? "true" : "false");
    } else {
      std::printf("  %-7s %12llu instr  1 worker %7.3f s = %6.1f M/s   2 workers %7.3f s = %6.1f M/s per core  "
                  "speed-up %.2fx  %s\n",
                  a.kernel.c_str(), static_cast<unsigned long long>(a.instructions), a.seconds, rate1, b.seconds,
                  rate2_per_core, speedup, a.correct && b.correct ? "correct" : "WRONG RESULT");
    }
  }
  if (json) std::printf("],\"warp_major_vs_thread_major\":[");
  else std::printf("warp-major against thread-at-a-time execution (1 worker; target 3x)\n");
  for (size_t i = 0; i < thread_major.size() && i < one.size(); ++i) {
    const double before = thread_major[i].instructions / thread_major[i].seconds / 1e6;
    const double after = one[i].instructions / one[i].seconds / 1e6;
    all_correct = all_correct && thread_major[i].correct;
    if (json) {
      std::printf("%s{\"kernel\":\"%s\",\"thread_major_minstr_per_s\":%.2f,\"warp_major_minstr_per_s\":%.2f,"
                  "\"ratio\":%.3f,\"target\":3.0}",
                  i ? "," : "", one[i].kernel.c_str(), before, after, after / before);
    } else {
      std::printf("  %-7s thread-major %6.1f M/s  warp-major %6.1f M/s  ratio %.2fx (target 3x: %s)\n",
                  one[i].kernel.c_str(), before, after, after / before, after / before >= 3.0 ? "MET" : "MISSED");
    }
  }
  if (json) std::printf("],\"launch_rates\":[");
  else std::printf("launch rate (asynchronous launches on one stream, then one synchronisation; 2 workers)\n");
  // The target is the empty kernel's rate: what the device itself spends per launch. The others add the time their
  // threads take to interpret.
  double empty_rate = 0;
  for (size_t i = 0; i < rates.size(); ++i) {
    const LaunchRate& r = rates[i];
    double per_second = r.launches / r.seconds;
    all_correct = all_correct && r.correct;
    if (i == 0) empty_rate = per_second;
    if (json) {
      std::printf("%s{\"kernel\":\"%s\",\"launches\":%llu,\"seconds\":%.6f,\"launches_per_s\":%.0f,"
                  "\"us_per_launch\":%.3f,\"correct\":%s}",
                  i ? "," : "", r.name.c_str(), static_cast<unsigned long long>(r.launches), r.seconds, per_second,
                  1e6 * r.seconds / r.launches, r.correct ? "true" : "false");
    } else {
      std::printf("  %-11s %8llu launches %7.3f s = %9.0f launches/s = %7.3f us each  %s\n", r.name.c_str(),
                  static_cast<unsigned long long>(r.launches), r.seconds, per_second, 1e6 * r.seconds / r.launches,
                  r.correct ? "correct" : "WRONG RESULT");
    }
  }
  if (json) {
    std::printf("]}\n");
  } else {
    if (!one.empty()) {
      std::printf("target: >= 100 M thread-instructions/s per core: %s (slowest kernel %.1f M/s)\n",
                  worst_rate >= 100 ? "MET" : "MISSED", worst_rate);
      std::printf("target: near-linear scaling 1 -> 2 workers: see speed-up (2.00x is linear; needs 2 idle cores)\n");
    }
    if (!rates.empty()) {
      std::printf("target: > 200000 launches/s of an empty kernel: %s (%.0f/s)\n",
                  empty_rate > 200000 ? "MET" : "MISSED", empty_rate);
    }
  }
  return all_correct ? 0 : 1;
}
