// big_copies: large copies every way the data path carries them (through shared memory on the agent's host, in
// framed messages, or through the agent, depending on the environment): sizes that are not whole chunks or words,
// host buffers at odd addresses, a copy queued behind a running kernel whose host buffer is reused at once, and two
// threads each allocating, copying and freeing at the same time. Prints "big_copies: 0 failure(s): PASSED" when every byte came back.
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#define PROGRAM_NAME "big_copies"
#include "program_checks.h"

namespace {

uint8_t Pattern(size_t i, unsigned seed) { return static_cast<uint8_t>((i * 2654435761u + seed) >> 7); }

void Fill(uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = Pattern(i, seed);
}

size_t FirstWrong(const uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != Pattern(i, seed)) return i;
  }
  return n;
}

// Keeps its stream busy for a while (each thread loops), then writes `value` over `out`.
__global__ void SlowThenFill(uint8_t* out, size_t n, int spins, uint8_t value) {
  volatile int sink = 0;
  for (int i = 0; i < spins; ++i) sink = sink + i;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = value;
}

// A round trip of `bytes` from host offset `offset` (odd addresses included).
void RoundTrip(size_t bytes, size_t offset, unsigned seed) {
  std::vector<uint8_t> host(bytes + offset + 8), back(bytes + offset + 8, 0);
  Fill(host.data() + offset, bytes, seed);
  uint8_t* dev = nullptr;
  CHECK(cudaMalloc(&dev, bytes));
  CHECK(cudaMemcpy(dev, host.data() + offset, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(back.data() + offset, dev, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = FirstWrong(back.data() + offset, bytes, seed);
  if (wrong != bytes) {
    std::printf("big_copies: %zu bytes at host offset %zu: byte %zu came back wrong\n", bytes, offset, wrong);
    ++failures;
  }
  EXPECT(back[offset + bytes] == 0, "no byte written past the end");
  CHECK(cudaFree(dev));
}

}  // namespace

int main() {
  for (size_t bytes : {size_t{64} << 10, (size_t{1} << 20) + 3, (size_t{9} << 20) + 4095, size_t{24} << 20}) {
    for (size_t offset : {size_t{0}, size_t{3}}) RoundTrip(bytes, offset, static_cast<unsigned>(bytes + offset));
  }

  // A copy queued behind a running kernel, on the same stream: it must land after the kernel (the kernel's fill is
  // overwritten) and read the host bytes as they were at the call (the buffer is reused at once, as pageable memory
  // may be).
  const size_t n = (size_t{6} << 20) + 5;
  std::vector<uint8_t> host(n), back(n);
  Fill(host.data(), n, 11);
  uint8_t* dev = nullptr;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMalloc(&dev, n));
  SlowThenFill<<<8, 128, 0, stream>>>(dev, n, 20000, 0xee);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(dev, host.data(), n, cudaMemcpyHostToDevice, stream));
  std::memset(host.data(), 0x55, n);
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
  size_t wrong = FirstWrong(back.data(), n, 11);
  if (wrong != n) {
    std::printf("big_copies: copy behind a kernel: byte %zu is 0x%02x, not 0x%02x\n", wrong, back[wrong],
                Pattern(wrong, 11));
    ++failures;
  }
  // And a copy back queued behind a kernel: it sees the kernel's writes.
  SlowThenFill<<<8, 128, 0, stream>>>(dev, n, 20000, 0x3c);
  CHECK(cudaMemcpyAsync(back.data(), dev, n, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(back[0] == 0x3c && back[n / 2] == 0x3c && back[n - 1] == 0x3c, "copy back after the kernel");
  CHECK(cudaFree(dev));
  CHECK(cudaStreamDestroy(stream));

  // Two threads allocating, copying and freeing at once, each its own buffer. (Freeing one allocation once zeroed
  // the first page of the next one, which another thread was copying into.)
  std::thread other([] {
    for (int i = 0; i < 3; ++i) RoundTrip((size_t{5} << 20) + 1, 1, 100 + i);
  });
  for (int i = 0; i < 3; ++i) RoundTrip((size_t{7} << 20) + 7, 0, 200 + i);
  other.join();

  std::printf("big_copies: %d failure(s): %s\n", failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
