#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_backend.h"
#include "agent/inventory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace gpupool::backend {
namespace {

TEST(CudaDriver, ToolkitStubIsRecognisedAsNotADriver) {
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  auto driver = CudaDriver::Load(stub);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(driver.status().message().find("stub library"), std::string::npos) << driver.status().message();
}

TEST(CudaDriver, MissingLibraryIsAClearError) {
  auto driver = CudaDriver::Load("libcuda-that-does-not-exist.so.1");
  ASSERT_FALSE(driver.ok());
  EXPECT_NE(driver.status().message().find("no CUDA driver"), std::string::npos) << driver.status().message();
}

// The driver's total, not NVML's, for the GPUs the driver lists (gpupool's own libcuda.so.1 with a fake device
// stands in for NVIDIA's driver: its device's UUID and 8 GiB).
TEST(CudaDriver, GpusTakeTheDriversMemoryTotal) {
  setenv("GPUPOOL_FAKE_DEVICES", "1:8GiB", 1);
  auto driver = CudaDriver::Load(GPUPOOL_INTERPOSER_LIB);
  ASSERT_TRUE(driver.ok()) << driver.status().message();
  auto listed = (*driver)->Devices();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 1u);
  const std::string uuid = listed->front().uuid;
  std::vector<agent::DeviceRecord> devices(4);
  devices[0].uuid = uuid;  // NVML says more than the driver: the driver's figure.
  devices[0].memory_bytes = 9ull << 30;
  devices[1].uuid = "GPU-00000000-0000-0000-0000-000000000001";  // Not the driver's: NVML's stays.
  devices[1].memory_bytes = 9ull << 30;
  devices[2].uuid = uuid;  // NVML says less: it stays.
  devices[2].memory_bytes = 7ull << 30;
  devices[3].uuid = uuid;  // Emulated devices are never the driver's.
  devices[3].emulated = true;
  devices[3].memory_bytes = 9ull << 30;
  agent::UseDriverMemoryTotals(GPUPOOL_INTERPOSER_LIB, &devices);
  EXPECT_EQ(devices[0].memory_bytes, 8ull << 30);
  EXPECT_EQ(devices[1].memory_bytes, 9ull << 30);
  EXPECT_EQ(devices[2].memory_bytes, 7ull << 30);
  EXPECT_EQ(devices[3].memory_bytes, 9ull << 30);
  agent::UseDriverMemoryTotals("libcuda-that-does-not-exist.so.1", &devices);  // Changes nothing.
  EXPECT_EQ(devices[1].memory_bytes, 9ull << 30);
  unsetenv("GPUPOOL_FAKE_DEVICES");
}

TEST(CudaBackend, WithoutADriverItIsRefusedClearly) {
  CudaBackendConfig config;
  config.nvml_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  config.memory_bytes = 1ull << 30;
  config.window_base = 32ull << 40;
  config.window_bytes = 2ull << 30;
  auto session = NewCudaBackend(nullptr, config);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(session.status().message().find("no CUDA driver"), std::string::npos) << session.status().message();
}

}  // namespace
}  // namespace gpupool::backend
