// lease_processes: several processes of one lease (torchrun's ranks, torch.multiprocessing children) each attach
// to the lease's slice, and share its memory quota: together they hold at most the slice. A child's memory comes
// back to the others when it exits, and when it is killed. Each process reckons by what cudaMemGetInfo shows it
// free, not by the slice's total: on a GPU each process's context costs memory of the slice too (its heap, printf
// buffer and stacks), and so do the variables of the modules each process loads (here 24 MiB of them).
//
// usage: lease_processes                (the parent; starts its children with exec, as the 'spawn' start method)
//        lease_processes crowded BYTES  (a child: BYTES of the slice are held by the parent)
//        lease_processes holder         (a child: takes all it finds free, says so on stdout, waits to be killed)
#define PROGRAM_NAME "lease_processes"
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "program_checks.h"

extern char** environ;

constexpr size_t kPiece = 1 << 21;  // The device's allocation granularity: sizes in whole pieces fit exactly.

// Module memory: the slice's like an allocation, whichever process of the lease loaded the module.
constexpr size_t kModuleBytes = 24u << 20;
__device__ unsigned char module_bytes[kModuleBytes];
__global__ void TouchModuleBytes() { module_bytes[threadIdx.x * (kModuleBytes / 32)] = 1; }

size_t WholePieces(size_t bytes) { return bytes / kPiece * kPiece; }

// Allocation attempts for up to `seconds`: a process that just exited leaves its session (and its bytes) a moment
// later, once its worker has seen it go.
bool AllocWithin(void** p, size_t bytes, int seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    cudaError_t err = cudaMalloc(p, bytes);
    if (err == cudaSuccess) return true;
    cudaGetLastError();
    if (err != cudaErrorMemoryAllocation || std::chrono::steady_clock::now() > end) {
      std::printf("lease_processes: cudaMalloc(%zu): %s\n", bytes, cudaGetErrorName(err));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int Crowded(size_t held) {
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  std::printf("lease_processes: child: %zu bytes free, the parent holds %zu\n", free_bytes, held);
  EXPECT(free_bytes <= total - held, "the child sees the parent's memory (its allocation and its module) as used");
  void* p = nullptr;
  // A piece more than the lease has left does not fit beside the parent's memory.
  cudaError_t err = cudaMalloc(&p, WholePieces(free_bytes) + kPiece);
  cudaGetLastError();
  std::printf("lease_processes: child: allocating past what the lease has left: %s\n", cudaGetErrorName(err));
  EXPECT(err == cudaErrorMemoryAllocation, "the lease's quota holds across its processes");
  // What is left works, and is really usable memory.
  size_t left = WholePieces(free_bytes) - kPiece;
  CHECK(cudaMalloc(&p, left));
  CHECK(cudaMemset(p, 0x5a, left));
  unsigned char last = 0;
  CHECK(cudaMemcpy(&last, static_cast<char*>(p) + left - 1, 1, cudaMemcpyDeviceToHost));
  EXPECT(last == 0x5a, "the child's memory holds what it wrote");
  return failures ? 1 : 0;
}

int Holder() {
  size_t free_bytes = 0, total = 0;
  void* p = nullptr;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess || cudaMalloc(&p, WholePieces(free_bytes)) != cudaSuccess) {
    return 1;
  }
  std::printf("holding\n");
  std::fflush(stdout);
  pause();
  return 0;
}

// Starts this program again as `mode bytes`, with stdout to `out_fd` (or inherited when -1).
pid_t Spawn(const char* mode, size_t bytes, int out_fd) {
  std::string arg = std::to_string(bytes);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return -1;
  self[n] = 0;
  char* argv[] = {self, const_cast<char*>(mode), arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  pid_t pid = -1;
  std::fflush(stdout);
  if (posix_spawn(&pid, self, &actions, nullptr, argv, environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "crowded") == 0) return Crowded(std::strtoull(argv[2], nullptr, 10));
  if (argc == 3 && std::strcmp(argv[1], "holder") == 0) return Holder();

  // The module is loaded (and its variable placed) by its first kernel.
  TouchModuleBytes<<<1, 32>>>();
  CHECK(cudaDeviceSynchronize());
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  std::printf("lease_processes: slice of %zu bytes, %zu free\n", total, free_bytes);
  const size_t held = WholePieces(free_bytes / 2);
  void* mine = nullptr;
  CHECK(cudaMalloc(&mine, held));
  CHECK(cudaMemset(mine, 0x11, held));
  size_t others = 0;  // What the parent leaves to the lease's other processes.
  CHECK(cudaMemGetInfo(&others, &total));

  // 1. A second process of the lease finds the parent's half taken, and the parent's module memory with it.
  pid_t child = Spawn("crowded", total - others, -1);
  int status = 0;
  EXPECT(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "the crowded child passes");
  // Its memory came back when it exited.
  void* rest = nullptr;
  EXPECT(AllocWithin(&rest, WholePieces(others), 10), "the parent gets the rest of the slice after the child exited");
  CHECK(cudaFree(rest));

  // 2. A child killed while it holds memory: the memory comes back all the same.
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return 2;
  child = Spawn("holder", 0, pipe_fds[1]);
  close(pipe_fds[1]);
  char line[16] = {};
  ssize_t got = read(pipe_fds[0], line, sizeof(line) - 1);
  close(pipe_fds[0]);
  EXPECT(got > 0 && std::strncmp(line, "holding", 7) == 0, "the holder took the rest of the slice");
  void* none = nullptr;
  cudaError_t err = cudaMalloc(&none, kPiece);
  cudaGetLastError();
  EXPECT(err == cudaErrorMemoryAllocation, "nothing is left while the holder lives");
  if (child > 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  EXPECT(AllocWithin(&rest, WholePieces(others), 10), "the killed child's memory comes back");
  CHECK(cudaFree(rest));

  // The parent's own memory was never touched.
  unsigned char first = 0;
  CHECK(cudaMemcpy(&first, mine, 1, cudaMemcpyDeviceToHost));
  EXPECT(first == 0x11, "the parent's memory");
  CHECK(cudaFree(mine));
  std::printf("lease_processes: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
