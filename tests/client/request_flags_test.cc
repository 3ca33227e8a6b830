#include "client/request_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpupool {
namespace {

// Parses and builds `text` as the interposer reads GPUPOOL_REQUEST.
Status Read(const std::string& text, Request* request, PoolOptions* options) {
  RequestFlags flags;
  Status s = ParseRequestFlags(text, &flags);
  return s.ok() ? BuildRequest(flags, request, options) : s;
}

TEST(RequestFlags, ReadsEveryOptionSpelledEitherWay) {
  Request r;
  PoolOptions o;
  ASSERT_TRUE(Read("  -n 3\t--fraction=1/4 --class t4 --wait 30s --same-server --servers a:1,,b:2 ", &r, &o).ok());
  EXPECT_EQ(DescribeRequest(r), "3 x 25% of a GPU of class 't4' on one server");
  EXPECT_EQ(r.wait, std::chrono::seconds(30));
  EXPECT_EQ(o.servers, (std::vector<std::string>{"a:1", "b:2"}));

  r = Request();
  ASSERT_TRUE(Read("--count=2 -m 6GiB --spread", &r, &o).ok());
  EXPECT_EQ(DescribeRequest(r), "2 x 6 GiB slices spread across servers");
}

TEST(RequestFlags, NothingGivenIsGpRunsDefault) {
  Request r;
  PoolOptions o;
  ASSERT_TRUE(Read(" ", &r, &o).ok());
  EXPECT_EQ(DescribeRequest(r), "1 x GPU");
  EXPECT_EQ(r.wait.count(), 0);
  EXPECT_TRUE(o.servers.empty());
}

TEST(RequestFlags, ALaterOptionOverridesAnEarlierOne) {
  Request r;
  PoolOptions o;
  ASSERT_TRUE(Read("-n 1 --same-server -n 4 --spread", &r, &o).ok());
  EXPECT_EQ(DescribeRequest(r), "4 x GPUs spread across servers");
}

TEST(RequestFlags, ErrorsNameTheOption) {
  const std::pair<const char*, const char*> cases[] = {
      {"-n two", "-n: 'two' is not a count"},
      {"-n 2x", "-n: '2x' is not a count"},
      {"-p", "-p needs a value"},
      {"--wait", "--wait needs a value"},
      {"--bogus 1", "unknown option '--bogus'"},
      {"stray 1", "unknown option 'stray'"},
      {"-p lots", "-p: "},
      {"-m 6 parsecs 1", "unknown option 'parsecs'"},
      {"-m lots", "-m: "},
      {"--wait=soon", "--wait: "},
      {"--servers=,", "--servers names no servers"},
  };
  for (const auto& [text, expected] : cases) {
    Request r;
    PoolOptions o;
    Status s = Read(text, &r, &o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.message().rfind(expected, 0), 0u) << text << ": " << s.message();
  }
}

TEST(SplitServers, SkipsEmptyEntriesAndRefusesAnEmptyListGiven) {
  std::vector<std::string> servers;
  EXPECT_TRUE(SplitServers("h:1,unix:/tmp/a.sock,", true, &servers).ok());
  EXPECT_EQ(servers, (std::vector<std::string>{"h:1", "unix:/tmp/a.sock"}));
  std::vector<std::string> none;
  EXPECT_TRUE(SplitServers("", false, &none).ok());
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(SplitServers(",,", true, &none).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool
