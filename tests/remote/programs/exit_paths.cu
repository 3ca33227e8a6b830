// exit_paths: the ways a program ends while it holds a slice, for the tests of the lease that libcuda allocates
// from GPUPOOL_REQUEST: the lease must be released as the program exits normally, after cudart's own teardown and
// the program's exit handlers, without hanging, and only by the process that allocated it.
//
// usage: exit_paths return        works on the device, then returns from main
//        exit_paths exit          the same, then calls exit(0) from a function
//        exit_paths atexit        registers an exit handler before its first CUDA call; at exit, the handler reads
//                                 back device memory (the slice must still be there then)
//        exit_paths thread_exit   a second thread calls exit(0) while the main thread keeps the device busy
//        exit_paths busy_threads  main returns while three other threads keep launching kernels
//                                 (those busy threads launch through the driver API: see KeepBusy)
//        exit_paths fork          a child forked after CUDA's init calls exit(0); the parent computes on afterwards
//        exit_paths hold          says "exit_paths: holding", then waits to be killed
// Each mode says "exit_paths: MODE: ok" on stdout just before it ends (a thread's exit and atexit: see there).
#define PROGRAM_NAME "exit_paths"
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "program_checks.h"

constexpr int kCount = 1 << 16;

__global__ void Fill(int* out, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = base + i;
}

// Fills `count` ints of device memory with base + i and checks them on the host; the buffer stays allocated.
int* Compute(int base) {
  int* device = nullptr;
  CHECK(cudaMalloc(&device, kCount * sizeof(int)));
  Fill<<<(kCount + 255) / 256, 256>>>(device, kCount, base);
  std::vector<int> host(kCount, -1);
  CHECK(cudaMemcpy(host.data(), device, kCount * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kCount; ++i) {
    if (host[i] != base + i) {
      std::printf(PROGRAM_NAME ": element %d is %d, expected %d\n", i, host[i], base + i);
      ++failures;
      break;
    }
  }
  return device;
}

// Threads that compute while the process exits do so through the driver API alone: cudart tears its own state down
// at exit under any thread still inside cudart (a crash in cudart whatever the driver), never under one calling the
// driver. The entry points come from the libcuda.so.1 cudart loaded.
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
using StreamSynchronizeFn = CUresult (*)(CUstream);
std::atomic<int> busy_threads{0};

// Gets ready through cudart (a device buffer, the kernel, the thread's context), says so in busy_threads, then
// launches kernels on the default stream until an error (the lease ended under it at exit), then sleeps: the thread
// that exits ends the process.
void KeepBusy(int base) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto launch = driver ? reinterpret_cast<LaunchKernelFn>(dlsym(driver, "cuLaunchKernel")) : nullptr;
  auto sync = driver ? reinterpret_cast<StreamSynchronizeFn>(dlsym(driver, "cuStreamSynchronize")) : nullptr;
  int* device = nullptr;
  cudaFunction_t fill = nullptr;
  bool ready = launch != nullptr && sync != nullptr;
  ready = ready && cudaSetDevice(0) == cudaSuccess && cudaMalloc(&device, kCount * sizeof(int)) == cudaSuccess;
  ready = ready && cudaGetFuncBySymbol(&fill, reinterpret_cast<const void*>(Fill)) == cudaSuccess;
  if (!ready) {
    std::printf(PROGRAM_NAME ": a busy thread could not get ready\n");
    ++failures;
  }
  int count = kCount;
  void* params[] = {&device, &count, &base};
  ++busy_threads;
  while (ready) {
    if (launch(reinterpret_cast<CUfunction>(fill), (kCount + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params,
               nullptr) != CUDA_SUCCESS ||
        sync(nullptr) != CUDA_SUCCESS) {
      break;
    }
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int* exit_buffer = nullptr;

void ReadBackAtExit() {
  std::vector<int> host(kCount, -1);
  cudaError_t err = cudaMemcpy(host.data(), exit_buffer, kCount * sizeof(int), cudaMemcpyDeviceToHost);
  bool same = err == cudaSuccess;
  for (int i = 0; same && i < kCount; ++i) same = host[i] == 7 + i;
  std::printf(PROGRAM_NAME ": atexit: %s\n", same ? "ok" : err != cudaSuccess ? cudaGetErrorString(err) : "wrong data");
  std::fflush(stdout);
}

[[noreturn]] void Finish(const char* mode) {
  std::printf(PROGRAM_NAME ": %s: %s\n", mode, failures == 0 ? "ok" : "FAILED");
  std::fflush(stdout);
  std::exit(failures == 0 ? 0 : 1);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "return";
  if (std::strcmp(mode, "atexit") == 0) {
    // Registered before cudart's first call, so it runs after every handler registered from then on (and before
    // cudart's teardown, which cudart registered while the program's static constructors ran).
    std::atexit(ReadBackAtExit);
    exit_buffer = Compute(7);
    std::printf(PROGRAM_NAME ": atexit: main returns\n");
    return failures == 0 ? 0 : 1;
  }
  Compute(1);
  if (std::strcmp(mode, "return") == 0) {
    std::printf(PROGRAM_NAME ": return: %s\n", failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
  }
  if (std::strcmp(mode, "exit") == 0) Finish(mode);
  if (std::strcmp(mode, "thread_exit") == 0) {
    std::thread([] {
      while (busy_threads.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      Finish("thread_exit");
    }).detach();
    KeepBusy(2);
  }
  if (std::strcmp(mode, "busy_threads") == 0) {
    for (int t = 0; t < 3; ++t) std::thread(KeepBusy, 10 * t).detach();
    while (busy_threads.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::printf(PROGRAM_NAME ": busy_threads: %s\n", failures == 0 ? "ok" : "FAILED");
    std::fflush(stdout);
    return failures == 0 ? 0 : 1;
  }
  if (std::strcmp(mode, "fork") == 0) {
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) std::exit(0);  // Runs the exit handlers and libcuda's destructor in the child.
    // A child that hangs in its exit (waiting for its parent's threads, which it does not have) is killed after
    // 20 s, and said so.
    int status = 0;
    pid_t reaped = 0;
    for (int i = 0; i < 2000 && child > 0 && (reaped = waitpid(child, &status, WNOHANG)) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (child > 0 && reaped == 0) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      std::printf(PROGRAM_NAME ": fork: the child hung in exit()\n");
      ++failures;
    } else if (child < 0 || reaped != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf(PROGRAM_NAME ": fork: the child did not exit cleanly (status 0x%x)\n", status);
      ++failures;
    }
    Compute(3);  // The slice is still the parent's.
    Finish(mode);
  }
  if (std::strcmp(mode, "hold") == 0) {
    std::printf(PROGRAM_NAME ": holding\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  std::printf(PROGRAM_NAME ": unknown mode '%s'\n", mode);
  return 2;
}
