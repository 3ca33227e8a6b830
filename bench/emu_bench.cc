// Emulator benchmark: how fast lib/emu executes real nvcc-built kernels (SAXPY, tiled matmul, warp-shuffle
// reduction), in dynamic PTX thread-instructions per second per core, with 1 and 2 worker threads; the speed-up
// is the ratio between the two, measured in the same run. Results are checked against a host reference.
//
//   emu_bench [--ptx FILE] [--json]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "emu/device.h"

using gpupool::emu::Device;
using gpupool::emu::DeviceOptions;
using gpupool::emu::EmuStatus;
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

void Check(const EmuStatus& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "emu_bench: %s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

class Bench {
 public:
  Bench(const std::string& ptx, int workers) {
    DeviceOptions o;
    o.memory_bytes = 512ull << 20;
    o.worker_threads = workers;
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
  std::vector<float> Download(uint64_t d, size_t n) {
    std::vector<float> v(n);
    Check(device_->CopyFromDevice(v.data(), d, n * 4), "copy from device");
    return v;
  }

  Measurement Run(const char* kernel, LaunchConfig c, void** params, const std::function<bool()>& verify) {
    Function* fn = nullptr;
    Check(device_->GetFunction(module_, kernel, &fn), kernel);
    uint64_t before = device_->InstructionsExecuted();
    auto t0 = std::chrono::steady_clock::now();
    Check(device_->Launch(fn, c, params), "launch");
    Check(device_->Synchronize(), kernel);
    Measurement m;
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.instructions = device_->InstructionsExecuted() - before;
    m.kernel = kernel;
    m.workers = workers_;
    m.correct = verify();
    return m;
  }

 private:
  std::unique_ptr<Device> device_;
  Module* module_ = nullptr;
  int workers_ = 1;
};

std::vector<Measurement> RunAll(const std::string& ptx, int workers) {
  std::vector<Measurement> out;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1, 1);
  Bench b(ptx, workers);
  {
    int n = 1 << 20;
    float a = 1.5f;
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = dist(rng);
    for (auto& v : y) v = dist(rng);
    uint64_t dx = b.Upload(x), dy = b.Upload(y);
    void* p[] = {&n, &a, &dx, &dy};
    LaunchConfig c;
    c.grid = {256, 1, 1};
    c.block = {256, 1, 1};
    out.push_back(b.Run("saxpy", c, p, [&] {
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
    out.push_back(b.Run("matmul", c, p, [&] {
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
    LaunchConfig c;
    c.grid = {128, 1, 1};
    c.block = {256, 1, 1};
    out.push_back(b.Run("reduce", c, p, [&] {
      double want = 0;
      for (float v : x) want += v;
      return std::fabs(b.Download(dout, 1)[0] - want) < 1e-1;
    }));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ptx_path = GPUPOOL_EMU_BENCH_PTX;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--ptx") && i + 1 < argc) ptx_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: emu_bench [--ptx FILE] [--json]\n");
      return 2;
    }
  }
  std::ifstream f(ptx_path);
  if (!f) {
    std::fprintf(stderr, "emu_bench: cannot read %s\n", ptx_path.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  auto one = RunAll(ss.str(), 1);
  auto two = RunAll(ss.str(), 2);
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
  if (json) {
    std::printf("]}\n");
  } else {
    std::printf("target: >= 100 M thread-instructions/s per core: %s (slowest kernel %.1f M/s)\n",
                worst_rate >= 100 ? "MET" : "MISSED", worst_rate);
    std::printf("target: near-linear scaling 1 -> 2 workers: see speed-up (2.00x is linear; needs 2 idle cores)\n");
  }
  return all_correct ? 0 : 1;
}
