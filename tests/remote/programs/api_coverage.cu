// api_coverage: the runtime calls whose driver entry points no example uses: pitched allocations and 2D copies,
// 2D memset, 3D copies, peer copies between two slices (staged through the client), pointer attributes,
// occupancy, function attributes, cudaLaunchKernelEx, host functions on a stream. Needs 2 devices.
#include <cstdio>
#include <cstring>
#include <vector>

#define PROGRAM_NAME "api_coverage"
#include "program_checks.h"

__global__ void AddOne(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static void CUDART_CB HostCallback(void* data) { *static_cast<int*>(data) = 42; }
// cudaStreamAddCallback's kind: it also learns the stream's status.
static void CUDART_CB StreamCallback(cudaStream_t, cudaError_t status, void* data) {
  *static_cast<int*>(data) = status == cudaSuccess ? 7 : -1;
}

int main() {
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("api_coverage: needs 2 devices, got %d\n", devices);
    return 1;
  }
  // Pitched memory and 2D copies / memset.
  const int w = 100, h = 37;  // Bytes per row, rows: not multiples of anything on purpose.
  std::vector<unsigned char> host(w * h), back(w * h, 0);
  for (int i = 0; i < w * h; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  CHECK(cudaSetDevice(0));
  void* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&pitched, &pitch, w, h));
  EXPECT(pitch >= static_cast<size_t>(w), "pitch");
  CHECK(cudaMemcpy2D(pitched, pitch, host.data(), w, w, h, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(back.data(), w, pitched, pitch, w, h, cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(host.data(), back.data(), w * h) == 0, "2D round trip");
  CHECK(cudaMemset2D(pitched, pitch, 0xAB, w / 2, h));
  CHECK(cudaMemcpy2D(back.data(), w, pitched, pitch, w, h, cudaMemcpyDeviceToHost));
  bool memset_ok = true;
  for (int r = 0; r < h; ++r)
    for (int c = 0; c < w; ++c)
      memset_ok = memset_ok && back[r * w + c] == (c < w / 2 ? 0xAB : host[r * w + c]);
  EXPECT(memset_ok, "2D memset covers exactly its columns");
  // 3D copy: host -> device volume -> host.
  cudaExtent extent = make_cudaExtent(16 * sizeof(int), 8, 4);
  cudaPitchedPtr volume;
  CHECK(cudaMalloc3D(&volume, extent));
  std::vector<int> cube(16 * 8 * 4), cube_back(16 * 8 * 4, -1);
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = static_cast<int>(i);
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(cube.data(), 16 * sizeof(int), 16, 8);
  up.dstPtr = volume;
  up.extent = extent;
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  cudaMemcpy3DParms down = {};
  down.srcPtr = volume;
  down.dstPtr = make_cudaPitchedPtr(cube_back.data(), 16 * sizeof(int), 16, 8);
  down.extent = extent;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  EXPECT(cube == cube_back, "3D round trip");
  // Pointer attributes.
  cudaPointerAttributes attrs;
  CHECK(cudaPointerGetAttributes(&attrs, pitched));
  EXPECT(attrs.type == cudaMemoryTypeDevice && attrs.device == 0, "device pointer attributes");
  // Peer copy from device 0 to device 1, then a kernel on device 1, then back.
  const int n = 5000;
  std::vector<int> ints(n), ints_back(n);
  for (int i = 0; i < n; ++i) ints[i] = i * 3;
  int* on0 = nullptr;
  int* on1 = nullptr;
  CHECK(cudaMalloc(&on0, n * sizeof(int)));
  CHECK(cudaMemcpy(on0, ints.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaSetDevice(1));
  CHECK(cudaMalloc(&on1, n * sizeof(int)));
  int can = -1;
  CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
  EXPECT(can == 0, "slices on different servers are not peers");
  CHECK(cudaMemcpyPeer(on1, 1, on0, 0, n * sizeof(int)));
  AddOne<<<(n + 127) / 128, 128>>>(on1, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(ints_back.data(), on1, n * sizeof(int), cudaMemcpyDeviceToHost));
  bool peer_ok = true;
  for (int i = 0; i < n; ++i) peer_ok = peer_ok && ints_back[i] == i * 3 + 1;
  EXPECT(peer_ok, "peer copy then kernel on the other slice");
  CHECK(cudaPointerGetAttributes(&attrs, on1));
  EXPECT(attrs.device == 1, "pointer of slice 1 belongs to device 1");
  // Occupancy and function attributes.
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, AddOne, 128, 0));
  EXPECT(blocks > 0, "occupancy");
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, AddOne));
  EXPECT(fa.maxThreadsPerBlock >= 128, "function attributes");
  // cudaLaunchKernelEx and a host function on a stream.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((n + 127) / 128);
  config.blockDim = dim3(128);
  config.stream = s;
  CHECK(cudaLaunchKernelEx(&config, AddOne, on1, n));
  int flag = 0;
  CHECK(cudaLaunchHostFunc(s, HostCallback, &flag));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(flag == 42, "host function ran after the stream's work");
  int callback_flag = 0;
  CHECK(cudaStreamAddCallback(s, StreamCallback, &callback_flag, 0));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(callback_flag == 7, "stream callback ran with cudaSuccess after the stream's work");
  // Work queued after a host function waits for it: the copy reads the buffer the function fills (behind a
  // kernel on the stream), and the default stream's copy after it waits too.
  int staged = 0, staged_back = 0;
  int* slot = nullptr;
  CHECK(cudaMalloc(&slot, sizeof(int)));
  CHECK(cudaLaunchKernelEx(&config, AddOne, slot, 1));
  CHECK(cudaLaunchHostFunc(s, HostCallback, &staged));
  CHECK(cudaMemcpyAsync(slot, &staged, sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpy(&staged_back, slot, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(staged_back == 42, "work queued after a host function saw what it did");
  CHECK(cudaFree(slot));
  EXPECT(cudaStreamAddCallback(s, StreamCallback, &callback_flag, 1) == cudaErrorInvalidValue,
         "stream callback flags other than 0 are refused");
  CHECK(cudaMemcpy(ints_back.data(), on1, n * sizeof(int), cudaMemcpyDeviceToHost));
  peer_ok = true;
  for (int i = 0; i < n; ++i) peer_ok = peer_ok && ints_back[i] == i * 3 + 2;
  EXPECT(peer_ok, "cudaLaunchKernelEx ran");
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(on1));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(on0));
  CHECK(cudaFree(pitched));
  CHECK(cudaFree(volume.ptr));
  std::printf("api_coverage: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
