// What the tests of hostile session clients share, whether their sessions live in a gp-agent's workers
// (session_guard_test.cc) or in the test's own process (session_protocol_test.cc): the CUresult values, the guard
// kernels (programs/guard_kernels.cu, a PTX-only fatbin), and the checks that a session still computes.
#ifndef GPUPOOL_TESTS_REMOTE_SESSION_CHECKS_H_
#define GPUPOOL_TESTS_REMOTE_SESSION_CHECKS_H_

#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <vector>

#include "client/session_client.h"

namespace gpupool::testing {

using internal::RemoteFunctionInfo;
using internal::RemoteSession;
using internal::SessionChannel;

inline constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
// The CUresult values as the int the client returns.
inline constexpr int kOk = CUDA_SUCCESS;
inline constexpr int kInvalidValue = CUDA_ERROR_INVALID_VALUE;
inline constexpr int kInvalidHandle = CUDA_ERROR_INVALID_HANDLE;
inline constexpr int kOutOfMemory = CUDA_ERROR_OUT_OF_MEMORY;
inline constexpr int kOutOfResources = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;

inline std::vector<uint8_t> KernelImage() {
  std::ifstream in(GPUPOOL_GUARD_FATBIN, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// add_one(int* data, unsigned n)'s parameter buffer, packed at the offsets the agent reported.
inline std::vector<uint8_t> AddOneParams(const RemoteFunctionInfo& f, uint64_t data, uint32_t n) {
  size_t total = 0;
  for (const auto& p : f.params) total = std::max<size_t>(total, p.offset + p.size);
  std::vector<uint8_t> buffer(total, 0);
  std::memcpy(buffer.data() + f.params.at(0).offset, &data, sizeof(data));
  std::memcpy(buffer.data() + f.params.at(1).offset, &n, sizeof(n));
  return buffer;
}

// The guard kernels, loaded on one session.
struct GuardKernels {
  uint64_t module = 0;
  RemoteFunctionInfo add_one, with_shared;
};

inline void LoadGuardKernels(RemoteSession& s, GuardKernels* k) {
  std::vector<uint8_t> image = KernelImage();
  EXPECT_FALSE(image.empty()) << "cannot read " << GPUPOOL_GUARD_FATBIN;
  EXPECT_EQ(s.ModuleLoad(image.data(), image.size(), &k->module), kOk) << s.last_error();
  EXPECT_EQ(s.GetFunction(k->module, "add_one", &k->add_one), kOk) << s.last_error();
  EXPECT_EQ(s.GetFunction(k->module, "with_shared", &k->with_shared), kOk) << s.last_error();
}

// A float texture of one channel over `address`: `width` texels, in rows of `pitch` bytes when `height` > 1 (2D),
// of resource kind `resource` (0 array, 1 linear, 2 pitch2D).
inline session::calls::TexObjectCreate::Args FloatTexture(uint64_t address, uint32_t width, uint32_t height,
                                                          uint64_t pitch, uint32_t resource) {
  session::calls::TexObjectCreate::Args t;
  t.dims = height > 1 ? 2 : 1;
  t.format = CU_AD_FORMAT_FLOAT;
  t.channels = 1;
  t.address = address;
  t.pitch = pitch;
  t.width = width;
  t.height = height;
  t.depth = 1;
  t.resource = resource;
  return t;
}

// A 2D float texture of 16 x 16 texels with a 256-byte pitch over `address`: its last row ends 15 * 256 + 64 bytes
// in, inside one 4096-byte allocation.
inline session::calls::TexObjectCreate::Args FloatTexture16x16(uint64_t address) {
  return FloatTexture(address, 16, 16, 256, 2);
}

// The first error of the calls sent without waiting before this one (0 if none). A waited call's reply comes
// after the replies to every call sent before it on the session, so its round trip is the deterministic wait.
inline int AsyncError(RemoteSession& s) {
  uint64_t free_bytes = 0, total = 0;
  s.MemGetInfo(&free_bytes, &total);
  return s.TakeAsyncError();
}

// Allocates, copies in, runs add_one on `function`, reads back: true when every element came back plus one.
inline ::testing::AssertionResult Computes(RemoteSession& s, const RemoteFunctionInfo& function, uint64_t stream = 0) {
  constexpr uint32_t n = 4096;
  uint64_t buffer = 0;
  if (int c = s.MemAlloc(n * sizeof(int), &buffer); c != kOk) {
    return ::testing::AssertionFailure() << "memAlloc: " << c << " " << s.last_error();
  }
  std::vector<int> host(n), back(n, 0);
  for (uint32_t i = 0; i < n; ++i) host[i] = static_cast<int>(i * 3);
  s.CopyToDevice(buffer, host.data(), n * sizeof(int), stream);
  std::vector<uint8_t> params = AddOneParams(function, buffer, n);
  const uint32_t grid[3] = {n / 256, 1, 1}, block[3] = {256, 1, 1};
  s.Launch(function.handle, grid, block, 0, stream, params.data(), params.size());
  if (int c = s.CopyFromDevice(back.data(), buffer, n * sizeof(int), stream); c != kOk) {
    return ::testing::AssertionFailure() << "copy, launch or copy back: " << c << " " << s.last_error();
  }
  s.MemFree(buffer);
  if (int c = s.Synchronize(); c != kOk) {
    return ::testing::AssertionFailure() << "memFree or synchronize: " << c << " " << s.last_error();
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (back[i] != host[i] + 1) {
      return ::testing::AssertionFailure() << "element " << i << " is " << back[i] << ", not " << host[i] + 1;
    }
  }
  return ::testing::AssertionSuccess();
}

// Where `bytes` first differs from `value` everywhere (bytes.size() if nowhere).
inline size_t FirstNot(const std::vector<uint8_t>& bytes, uint8_t value) {
  size_t i = 0;
  while (i < bytes.size() && bytes[i] == value) ++i;
  return i;
}

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_REMOTE_SESSION_CHECKS_H_
