// The session calls' one declaration (lib/schema/session_calls.h) against what the build made of it: the generated
// schema, and the conversions both ends use.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/schema.h>

#include "schema/session_wire.h"

namespace gpupool::session {
namespace {

// `results` written into a message of Call's results and read back from it: what the client gets. (Results own
// their data; arguments may view the message's bytes, kArgsView, so their message must outlive them.)
template <typename Call>
typename Call::Results ResultsThroughTheWire(const typename Call::Results& results) {
  capnp::MallocMessageBuilder message;
  auto b = message.initRoot<typename Wire<Call>::ResultsStruct>();
  Wire<Call>::WriteResults(results, b);
  typename Call::Results back;
  Wire<Call>::ReadResults(b.asReader(), back);
  return back;
}

TEST(SessionWire, TheGeneratedSchemaHasEveryDeclaredCallAtItsOrdinal) {
  auto methods = capnp::Schema::from<wire::Session>().getMethods();
  int declared = 0;
#define GP_CHECK(Name, method, ordinal, mode, doc)                                      \
  ASSERT_LT(static_cast<unsigned>(ordinal), methods.size()) << #method;                 \
  EXPECT_EQ(std::string(methods[ordinal].getProto().getName().cStr()), #method);        \
  ++declared;
  GP_SESSION_CALLS(GP_CHECK)
#undef GP_CHECK
  EXPECT_EQ(static_cast<unsigned>(declared), methods.size()) << "a method of the schema is not declared";
}

TEST(SessionWire, EveryReplyCarriesAStatus) {
  for (auto method : capnp::Schema::from<wire::Session>().getMethods()) {
    EXPECT_TRUE(method.getResultType().findFieldByName("status") != nullptr) << method.getProto().getName().cStr();
  }
}

TEST(SessionWire, AStatusRoundTripsAndSuccessCarriesNoMessage) {
  capnp::MallocMessageBuilder message;
  auto status = message.initRoot<wire::CallStatus>();
  WriteStatus(CallStatus(cu::kIllegalAddress, "an out-of-bounds store"), status);
  CallStatus failed = ReadStatus(status.asReader());
  EXPECT_EQ(failed.code(), cu::kIllegalAddress);
  EXPECT_EQ(failed.message(), "an out-of-bounds store");

  capnp::MallocMessageBuilder ok_message;
  auto ok = ok_message.initRoot<wire::CallStatus>();
  WriteStatus(CallStatus::Ok(), ok);
  EXPECT_FALSE(ok.hasMessage());
  EXPECT_TRUE(ReadStatus(ok.asReader()).ok());
  // A peer's words beside success mean nothing: the call succeeded.
  ok.setMessage("stray words");
  EXPECT_TRUE(ReadStatus(ok.asReader()).message().empty());
}

TEST(SessionWire, ArgumentsRoundTripIncludingAnAbsentCluster) {
  const uint8_t bytes[] = {1, 2, 3, 4, 5};
  for (bool clustered : {false, true}) {
    calls::Launch::Args a;
    a.function.value = 7;
    a.grid = {3, 2, 1};
    a.block = {128, 1, 1};
    a.shared_bytes = 4096;
    a.stream.value = 9;
    a.params = {bytes, sizeof(bytes)};
    if (clustered) a.cluster = Dim3{2, 1, 1};
    capnp::MallocMessageBuilder message;
    auto b = message.initRoot<wire::Session::LaunchParams>();
    Wire<calls::Launch>::WriteArgs(a, b);
    calls::Launch::Args back;
    Wire<calls::Launch>::ReadArgs(b.asReader(), back);
    EXPECT_EQ(back.function.value, 7u);
    EXPECT_EQ(back.grid.x, 3u);
    EXPECT_EQ(back.grid.y, 2u);
    EXPECT_EQ(back.block.x, 128u);
    EXPECT_EQ(back.shared_bytes, 4096u);
    EXPECT_EQ(back.stream.value, 9u);
    ASSERT_EQ(back.params.size, sizeof(bytes));
    EXPECT_EQ(back.params.data[4], 5);
    EXPECT_EQ(back.cluster.has_value(), clustered);
    if (clustered) EXPECT_EQ(back.cluster->x, 2u);
  }
}

TEST(SessionWire, ResultsRoundTripListsAndDeviceProperties) {
  calls::ModuleGetFunction::Results f;
  f.function.value = 3;
  f.params = {{0, 8}, {8, 4}, {16, 8}};
  f.num_regs = 32;
  const calls::ModuleGetFunction::Results f2 = ResultsThroughTheWire<calls::ModuleGetFunction>(f);
  EXPECT_EQ(f2.function.value, 3u);
  ASSERT_EQ(f2.params.size(), 3u);
  EXPECT_EQ(f2.params[2].offset, 16u);
  EXPECT_EQ(f2.params[1].size, 4u);
  EXPECT_EQ(f2.num_regs, 32);

  calls::Properties::Results p;
  p.props.name = "emulated";
  p.props.total_memory = 1ull << 33;
  p.props.uuid[15] = 0xab;
  p.props.attributes = {{1, 1024}, {16, 8}};
  p.props.emulated = true;
  const calls::Properties::Results p2 = ResultsThroughTheWire<calls::Properties>(p);
  EXPECT_EQ(p2.props.name, "emulated");
  EXPECT_EQ(p2.props.total_memory, 1ull << 33);
  EXPECT_EQ(p2.props.uuid[15], 0xab);
  EXPECT_EQ(p2.props.attributes, p.props.attributes);
  EXPECT_TRUE(p2.props.emulated);
}

TEST(SessionWire, AReplyBufferIsWrittenInPlaceAndCanBeEmptiedAgain) {
  capnp::MallocMessageBuilder message;
  auto b = message.initRoot<wire::Session::CopyFromDeviceResults>();
  calls::CopyFromDevice::Results r;
  Wire<calls::CopyFromDevice>::PrepareResults(b, r);
  uint8_t* at = r.data.reserve(3);
  at[0] = 42;
  EXPECT_EQ(b.asReader().getData().size(), 3u);
  EXPECT_EQ(b.asReader().getData()[0], 42);
  r.data.reserve(0);
  EXPECT_EQ(b.asReader().getData().size(), 0u);
}

TEST(SessionWire, OnlyCallsWithDataArgumentsViewBytesTheyDoNotOwn) {
  EXPECT_TRUE(calls::CopyToDevice::kArgsView);
  EXPECT_TRUE(calls::Launch::kArgsView);
  EXPECT_TRUE(calls::ModuleLoad::kArgsView);
  EXPECT_FALSE(calls::MemAlloc::kArgsView);
  EXPECT_FALSE(calls::ModuleGetFunction::kArgsView);
}

}  // namespace
}  // namespace gpupool::session
