// fork_after_init: a process that forks after CUDA is initialised (as PyTorch's DataLoader workers and many
// servers do). The child must neither hang nor touch the parent's sessions: its CUDA calls fail at once, its
// exit (atexit handlers included) sends nothing on the parent's connections. The parent keeps working.
#define PROGRAM_NAME "fork_after_init"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "program_checks.h"

__global__ void AddOne(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += 1;
}

constexpr int kN = 4096;

// Forks a child that runs `body` and exits with its status through exit() (so atexit handlers run); returns the
// child's wait status.
template <typename Body>
int InChild(Body body) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);  // A hang becomes SIGALRM, which the parent reports.
    std::exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool ExitedWith(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

int main() {
  int host[kN];
  for (int i = 0; i < kN; ++i) host[i] = i;
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof(host)));
  CHECK(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
  AddOne<<<kN / 256, 256>>>(dev, kN);
  CHECK(cudaDeviceSynchronize());

  // A child that only computes on the host and exits, as a DataLoader worker does.
  int status = InChild([] { return 0; });
  EXPECT(ExitedWith(status, 0), "a child that does no CUDA work exits cleanly");

  // A child that tries CUDA: every call fails at once, clearly, and nothing hangs.
  status = InChild([dev] {
    void* p = nullptr;
    cudaError_t alloc = cudaMalloc(&p, 1024);
    int value = 0;
    cudaError_t copy = cudaMemcpy(&value, dev, sizeof(value), cudaMemcpyDeviceToHost);
    cudaError_t sync = cudaDeviceSynchronize();
    std::printf("fork_after_init: child: cudaMalloc %s, cudaMemcpy %s, cudaDeviceSynchronize %s\n",
                cudaGetErrorName(alloc), cudaGetErrorName(copy), cudaGetErrorName(sync));
    return alloc != cudaSuccess && copy != cudaSuccess && sync != cudaSuccess ? 0 : 1;
  });
  if (WIFSIGNALED(status)) std::printf("fork_after_init: the child died of signal %d\n", WTERMSIG(status));
  EXPECT(ExitedWith(status, 0), "the child's CUDA calls fail without hanging");

  // The parent's session, memory and kernels are as they were.
  AddOne<<<kN / 256, 256>>>(dev, kN);
  CHECK(cudaGetLastError());
  int back[kN] = {};
  CHECK(cudaMemcpy(back, dev, sizeof(back), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) wrong += back[i] != i + 2;
  EXPECT(wrong == 0, "the parent's data after the children");
  void* more = nullptr;
  CHECK(cudaMalloc(&more, 1 << 20));
  CHECK(cudaFree(more));
  CHECK(cudaFree(dev));
  std::printf("fork_after_init: %d wrong, %d failure(s): %s\n", wrong, failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
