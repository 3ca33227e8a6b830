// synchronize: cudaDeviceSynchronize right after a copy back (when the worker said the session was quiet, the client
// answers it without a round trip) still waits for and reports everything sent since: a slow kernel has finished
// (its stream and event say so), a kernel's printf is out before the call returns, and a failed posted call's
// error comes back. With the argument "stacked" (the cuda backend on gpupool's own libcuda.so.1) two checks are
// left out, for known reasons: device printf on a GPU does not reach the client yet, and the backend's wait is a
// host function on the stream, which that libcuda counts as stream work until it has returned, so cudaStreamQuery
// may still see it for a moment after the wait. Prints "synchronize: 0 failure(s): PASSED" when all held.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#define PROGRAM_NAME "synchronize"
#include "program_checks.h"

__global__ void Slow(unsigned* out, int spins) {
  unsigned x = threadIdx.x;
  for (int i = 0; i < spins; ++i) x = x * 1664525u + 1013904223u;
  out[threadIdx.x] = x | 1u;
}

__global__ void Say(int value) {
  if (threadIdx.x == 0) printf("device says %d\n", value);
}

// A copy back: after its reply the session is quiet (nothing queued), the state the shortcut starts from.
void CopyBack(const unsigned* dev) {
  unsigned word = 0;
  CHECK(cudaMemcpy(&word, dev, sizeof(word), cudaMemcpyDeviceToHost));
}

int main(int argc, char** argv) {
  const bool stacked = argc > 1 && std::strcmp(argv[1], "stacked") == 0;
  const bool printf_reaches_client = !stacked;
  unsigned* dev = nullptr;
  CHECK(cudaMalloc(&dev, 4096));
  CHECK(cudaMemset(dev, 0, 4096));

  // 1. Work sent after a quiet reply is waited for.
  for (int round = 0; round < 3; ++round) {
    CopyBack(dev);
    CHECK(cudaDeviceSynchronize());  // Nothing sent since the copy: may be answered locally, must succeed.
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    Slow<<<1, 64>>>(dev, 200000);
    CHECK(cudaEventRecord(done, 0));
    // A call with a reply while the kernel runs: that reply must not say quiet.
    cudaEvent_t other;
    CHECK(cudaEventCreate(&other));
    CHECK(cudaDeviceSynchronize());
    if (!stacked) EXPECT(cudaStreamQuery(0) == cudaSuccess, "the default stream idle after cudaDeviceSynchronize");
    EXPECT(cudaEventQuery(done) == cudaSuccess, "the event reached after cudaDeviceSynchronize");
    CHECK(cudaEventDestroy(done));
    CHECK(cudaEventDestroy(other));
  }

  // 2. A kernel's output is out when cudaDeviceSynchronize returns: stdout goes to a file, read back at once.
  char path[] = "/tmp/gpupool-synchronize-XXXXXX";
  int file = printf_reaches_client ? mkstemp(path) : 0;
  EXPECT(file >= 0, "a temporary file");
  if (file >= 0 && printf_reaches_client) {
    std::fflush(stdout);
    int saved = dup(1);
    dup2(file, 1);
    CopyBack(dev);
    Say<<<1, 32>>>(42);
    CHECK(cudaDeviceSynchronize());
    std::fflush(stdout);
    char text[256] = {};
    ssize_t n = pread(file, text, sizeof(text) - 1, 0);
    dup2(saved, 1);
    close(saved);
    close(file);
    unlink(path);
    EXPECT(n > 0 && std::strstr(text, "device says 42") != nullptr, "the kernel's printf out before the sync returns");
  }

  // 3. A posted call that fails after a quiet reply: its error is the synchronisation's.
  unsigned* gone = nullptr;
  CHECK(cudaMalloc(&gone, 4096));
  CHECK(cudaFree(gone));
  CopyBack(dev);
  cudaError_t posted = cudaMemsetAsync(gone, 0, 4096, 0);
  cudaError_t synced = cudaDeviceSynchronize();
  EXPECT(posted != cudaSuccess || synced != cudaSuccess, "a memset of freed memory reported by the sync at the latest");
  cudaGetLastError();
  // And once reported, the session goes on.
  CopyBack(dev);
  CHECK(cudaDeviceSynchronize());

  // 4. A large copy to freed memory (through the shared memory when the agent is on this host, which returns once
  // the bytes are there): its error comes back by the next synchronisation at the latest, and only once.
  std::vector<unsigned char> big(1 << 20, 1);
  unsigned char* freed = nullptr;
  CHECK(cudaMalloc(&freed, big.size()));
  CHECK(cudaFree(freed));
  cudaError_t copied = cudaMemcpy(freed, big.data(), big.size(), cudaMemcpyHostToDevice);
  cudaError_t after = cudaDeviceSynchronize();
  EXPECT(copied != cudaSuccess || after != cudaSuccess, "a copy to freed memory reported by the sync at the latest");
  cudaGetLastError();
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaFree(dev));
  std::printf("synchronize: %d failure(s): %s\n", failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
