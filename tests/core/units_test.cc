#include <gtest/gtest.h>

#include "gpupool/request.h"
#include "gpupool/units.h"

namespace gpupool {
namespace {

TEST(Units, ParsesMemorySizes) {
  EXPECT_EQ(*ParseMemorySize("16GiB"), 16ull << 30);
  EXPECT_EQ(*ParseMemorySize("512 MiB"), 512ull << 20);
  EXPECT_EQ(*ParseMemorySize("1.5GB"), 1500000000ull);
  EXPECT_EQ(*ParseMemorySize("4096"), 4096ull);
  EXPECT_EQ(*ParseMemorySize("2g"), 2ull << 30);
  EXPECT_FALSE(ParseMemorySize("").ok());
  EXPECT_FALSE(ParseMemorySize("GiB").ok());
  EXPECT_FALSE(ParseMemorySize("12 parsecs").ok());
  EXPECT_FALSE(ParseMemorySize("-5GiB").ok());
  EXPECT_NE(ParseMemorySize("3 bananas").status().message().find("unknown size unit"), std::string::npos);
}

TEST(Units, ParsesFractions) {
  EXPECT_DOUBLE_EQ(*ParseFraction("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseFraction("25%"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseFraction("1/4"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseFraction("1"), 1.0);
  EXPECT_FALSE(ParseFraction("0").ok());
  EXPECT_FALSE(ParseFraction("1.5").ok());
  EXPECT_FALSE(ParseFraction("150%").ok());
  EXPECT_FALSE(ParseFraction("1/0").ok());
  EXPECT_FALSE(ParseFraction("half").ok());
  EXPECT_EQ(ParseFraction("2").status().code(), StatusCode::kInvalidArgument);
}

TEST(Units, ParsesDurations) {
  EXPECT_EQ(ParseDuration("500ms")->count(), 500);
  EXPECT_EQ(ParseDuration("5s")->count(), 5000);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3600000);
  EXPECT_EQ(ParseDuration("1.5")->count(), 1500);
  EXPECT_FALSE(ParseDuration("soon").ok());
  EXPECT_FALSE(ParseDuration("5 fortnights").ok());
}

TEST(Units, FormatsForHumans) {
  EXPECT_EQ(FormatMemorySize(16ull << 30), "16 GiB");
  EXPECT_EQ(FormatMemorySize(1536ull << 20), "1.5 GiB");
  EXPECT_EQ(FormatMemorySize(100), "100 B");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(500)), "500ms");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(150000)), "2m30s");
}

TEST(Request, ValidationNamesTheBadField) {
  Request r;
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.count = 0;
  EXPECT_NE(ValidateRequest(r).message().find("count"), std::string::npos);
  r.count = -3;
  EXPECT_EQ(ValidateRequest(r).code(), StatusCode::kInvalidArgument);
  r.count = 1;
  r.fraction = 0.01;
  EXPECT_NE(ValidateRequest(r).message().find("fraction"), std::string::npos);
  r.fraction = 1.2;
  EXPECT_FALSE(ValidateRequest(r).ok());
  r.fraction = 0.05;
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.memory_bytes = 0;
  EXPECT_FALSE(ValidateRequest(r).ok());
  r.memory_bytes = 1 << 30;
  r.compute_share = 0.0;
  EXPECT_FALSE(ValidateRequest(r).ok());
}

}  // namespace
}  // namespace gpupool
