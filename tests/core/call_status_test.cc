// The internal status (core/call_status.h) and its one way to the public Status.
#include "core/call_status.h"

#include <gtest/gtest.h>

#include "gpupool/status.h"

namespace gpupool {
namespace {

TEST(CallStatus, DefaultIsSuccessWithoutAMessage) {
  CallStatus s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), cu::kSuccess);
  EXPECT_TRUE(s.message().empty());
  EXPECT_FALSE(CallStatus(cu::kInvalidValue, "bad").ok());
}

TEST(CallResult, HoldsAValueOrTheFailure) {
  CallResult<int> value(7);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  CallResult<int> failed(CallStatus(cu::kNotFound, "no such kernel"));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), cu::kNotFound);
  EXPECT_EQ(failed.status().message(), "no such kernel");
}

TEST(CallStatus, ToStatusNamesEachKnownCuresultAndKeepsTheMessage) {
  struct Case {
    int code;
    StatusCode expected;
  };
  const Case cases[] = {
      {cu::kOutOfMemory, StatusCode::kResourceExhausted}, {cu::kInvalidValue, StatusCode::kInvalidArgument},
      {cu::kNotFound, StatusCode::kNotFound},             {cu::kNotSupported, StatusCode::kUnsatisfiable},
      {cu::kDeviceUnavailable, StatusCode::kUnavailable}, {cu::kIllegalAddress, StatusCode::kInternal},
      {cu::kUnknown, StatusCode::kInternal},              {12345, StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    Status s = ToStatus(CallStatus(c.code, "what went wrong"));
    EXPECT_EQ(s.code(), c.expected) << "CUresult " << c.code << " became " << s.ToString();
    EXPECT_EQ(s.message(), "what went wrong") << "CUresult " << c.code;
  }
  EXPECT_TRUE(ToStatus(CallStatus::Ok()).ok());
}

}  // namespace
}  // namespace gpupool
