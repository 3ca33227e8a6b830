#include "core/array_format.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(ChannelBytes, EveryFormatSlicesHold) {
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_UNSIGNED_INT8), 1u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_SIGNED_INT8), 1u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_UNSIGNED_INT16), 2u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_SIGNED_INT16), 2u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_HALF), 2u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_UNSIGNED_INT32), 4u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_SIGNED_INT32), 4u);
  EXPECT_EQ(ChannelBytes(CU_AD_FORMAT_FLOAT), 4u);
}

// A tenant's format off the wire may be anything: 0, never a guess, for what names no supported format.
TEST(ChannelBytes, AnythingElseIsZero) {
  for (uint32_t format : {0u, 4u, 0x11u, 0xffffffffu, static_cast<uint32_t>(CU_AD_FORMAT_NV12),
                          static_cast<uint32_t>(CU_AD_FORMAT_BC1_UNORM)}) {
    EXPECT_EQ(ChannelBytes(format), 0u) << format;
  }
}

}  // namespace
}  // namespace gpupool
