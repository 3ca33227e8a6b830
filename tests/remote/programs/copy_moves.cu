// copy_moves: copies that a move may catch in flight (issue 43). Each round fills a 4 MiB host buffer with that
// round's pattern, copies it to the device (a program on the agent's host copies through memory shared with its
// worker, 64 KiB and more), adds the round number to every byte there, copies it back and checks every byte; a second
// stream copies asynchronously from pinned memory meanwhile. Prints "ready" after the first round and "ok ROUNDS"
// at its end (or what failed, and exits 1).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROGRAM_NAME "copy_moves"
#include "program_checks.h"

__global__ void AddRound(unsigned char* p, size_t n, unsigned char round) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<unsigned char>(p[i] + round);
  }
}

static unsigned char Pattern(size_t i, int round) {
  return static_cast<unsigned char>((i * 2654435761u >> 11) ^ static_cast<unsigned>(round * 131));
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 100;
  const size_t bytes = 4u << 20;
  std::vector<unsigned char> host(bytes), back(bytes);
  unsigned char *dev = nullptr, *other = nullptr, *pinned = nullptr;
  cudaStream_t side;
  CHECK(cudaMalloc(&dev, bytes));
  CHECK(cudaMalloc(&other, bytes));
  CHECK(cudaMallocHost(&pinned, bytes));
  CHECK(cudaStreamCreate(&side));
  if (failures) return 1;
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < bytes; ++i) host[i] = Pattern(i, round);
    for (size_t i = 0; i < bytes; ++i) pinned[i] = static_cast<unsigned char>(Pattern(i, round) + 1);
    CHECK(cudaMemcpyAsync(other, pinned, bytes, cudaMemcpyHostToDevice, side));
    CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
    AddRound<<<64, 256>>>(dev, bytes, static_cast<unsigned char>(round));
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaStreamSynchronize(side));
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; ++i) wrong += back[i] != static_cast<unsigned char>(Pattern(i, round) + round);
    EXPECTF(wrong == 0, "round %d: %zu bytes wrong after the copies\n", round, wrong);
    CHECK(cudaMemcpy(back.data(), other, bytes, cudaMemcpyDeviceToHost));
    wrong = 0;
    for (size_t i = 0; i < bytes; ++i) wrong += back[i] != static_cast<unsigned char>(Pattern(i, round) + 1);
    EXPECTF(wrong == 0, "round %d: %zu bytes wrong in the side stream's copy\n", round, wrong);
    if (failures) return 1;
    if (round == 0) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
  }
  std::printf("ok %d\n", rounds);
  return 0;
}
