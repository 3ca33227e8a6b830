#include "backend/cuda/cuda_driver.h"

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

}  // namespace
}  // namespace gpupool::backend
