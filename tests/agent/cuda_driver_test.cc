#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <filesystem>

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
