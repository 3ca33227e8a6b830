// The pool protocol's Outcome and gpupool::Status (schema/outcome.h): the one translation the agent answers with and
// the client (and the agent reading its session workers) reads back.
#include "schema/outcome.h"

#include <gtest/gtest.h>

#include <capnp/message.h>

namespace gpupool {
namespace {

// What a status becomes once written into an Outcome and read back, as a client of this version sees it.
Status ThereAndBack(const Status& status) {
  capnp::MallocMessageBuilder message;
  auto outcome = message.initRoot<wire::Outcome>();
  SetOutcome(outcome, status);
  return StatusOf(outcome.asReader());
}

TEST(Outcome, EveryStatusCodeOutcomeNamesTravelsUnchanged) {
  for (StatusCode code : {StatusCode::kInvalidArgument, StatusCode::kResourceExhausted, StatusCode::kNotFound,
                          StatusCode::kPermissionDenied, StatusCode::kUnavailable, StatusCode::kInternal}) {
    Status back = ThereAndBack(Status(code, "why"));
    EXPECT_EQ(back.code(), code) << StatusCodeName(code) << " came back as " << back.ToString();
    EXPECT_EQ(back.message(), "why") << StatusCodeName(code);
  }
  EXPECT_TRUE(ThereAndBack(Status::Ok()).ok());
}

TEST(Outcome, ACodeOutcomeHasNoNameForTravelsAsInternal) {
  for (StatusCode code : {StatusCode::kUnsatisfiable, StatusCode::kDisconnected, StatusCode::kTimeout,
                          StatusCode::kProtocolMismatch}) {
    EXPECT_EQ(OutcomeCodeOf(code), wire::Outcome::Code::INTERNAL) << StatusCodeName(code);
    EXPECT_EQ(ThereAndBack(Status(code, "why")).code(), StatusCode::kInternal) << StatusCodeName(code);
  }
}

TEST(Outcome, TheWireNamesOfTheCodesStayAsOlderPeersKnowThem) {
  EXPECT_EQ(OutcomeCodeOf(StatusCode::kOk), wire::Outcome::Code::OK);
  EXPECT_EQ(OutcomeCodeOf(StatusCode::kResourceExhausted), wire::Outcome::Code::BUSY);
  EXPECT_EQ(OutcomeCodeOf(StatusCode::kUnavailable), wire::Outcome::Code::DRAINING);
  EXPECT_EQ(OutcomeCodeOf(StatusCode::kInvalidArgument), wire::Outcome::Code::INVALID_ARGUMENT);
  EXPECT_EQ(OutcomeCodeOf(StatusCode::kNotFound), wire::Outcome::Code::NOT_FOUND);
  EXPECT_EQ(OutcomeCodeOf(StatusCode::kPermissionDenied), wire::Outcome::Code::PERMISSION_DENIED);
}

TEST(Outcome, ACodeFromANewerPeerReadsAsInternalWithItsMessage) {
  capnp::MallocMessageBuilder message;
  auto outcome = message.initRoot<wire::Outcome>();
  outcome.setCode(static_cast<wire::Outcome::Code>(42));
  outcome.setMessage("a reason this version has no code for");
  Status s = StatusOf(outcome.asReader());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "a reason this version has no code for");
}

TEST(Outcome, SetOutcomeLeavesTheRefusalsFlagsToItsCaller) {
  capnp::MallocMessageBuilder message;
  auto outcome = message.initRoot<wire::Outcome>();
  outcome.setWindowTaken(true);
  outcome.setByPolicy(true);
  SetOutcome(outcome, Status(StatusCode::kResourceExhausted, "window taken"));
  EXPECT_TRUE(outcome.getWindowTaken());
  EXPECT_TRUE(outcome.getByPolicy());
}

}  // namespace
}  // namespace gpupool
