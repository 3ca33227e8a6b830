#include <gtest/gtest.h>

#include "client/lease_core.h"

namespace gpupool::internal {
namespace {

TEST(Token, RoundTripsOddAddresses) {
  TokenFields f{"0123abcd", "deadbeef00", {"10.0.0.1:7450", "unix:/tmp/my dir,x/agent.sock", "[::1]:7450"}};
  auto back = DecodeToken(EncodeToken(f));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, f.id);
  EXPECT_EQ(back->secret, f.secret);
  EXPECT_EQ(back->servers, f.servers);
}

TEST(Token, RejectsGarbage) {
  for (const char* bad : {"", "gpl1:", "gpl2:aa:bb:h%3A1", "gpl1:zz:bb:h%3A1", "gpl1:aa:bb:", "gpl1:aa:bb:h%3"}) {
    auto r = DecodeToken(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace gpupool::internal
