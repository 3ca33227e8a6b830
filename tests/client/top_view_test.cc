// gp-top's layout: any pool fits the screen it is given, sorted and filtered as asked.
#include "client/top_view.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace gpupool::top {
namespace {

PoolState Pool(int leases) {
  PoolState state;
  ServerInfo s;
  s.address = "10.0.0.1:7450";
  s.up = true;
  s.name = "gpu-server-with-a-long-name";
  for (uint32_t i = 0; i < 2; ++i) {
    DeviceInfo d;
    d.index = i;
    d.model = "NVIDIA A100-SXM4-80GB";
    d.memory_total = 80ull << 30;
    d.memory_allocated = 40ull << 30;
    d.activity.memory_used = 10ull << 30;
    d.activity.utilization = 0.3 * (i + 1);
    d.activity.temperature_c = 55;
    s.devices.push_back(d);
  }
  for (int i = 0; i < leases; ++i) {
    LeaseInfo l;
    l.id = fmt::format("{:016x}", 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1));  // As agents write them.
    l.user = i % 2 ? "alice" : "bob";
    l.host = "workstation-" + std::to_string(i);
    l.label = "/usr/bin/python3 train.py --epochs 100 --run " + std::to_string(i);
    l.committed = true;
    l.devices = {static_cast<uint32_t>(i % 2)};
    l.memory_bytes = 8ull << 30;
    l.activity.utilization = i / 100.0;
    l.activity.memory_used = static_cast<uint64_t>(leases - i) << 20;
    l.age_s = i;
    l.expires_in_s = 15;
    s.leases.push_back(l);
  }
  state.servers.push_back(s);
  ServerInfo down;
  down.address = "10.0.0.2:7450";
  down.error = "connect(): Connection refused";
  state.servers.push_back(down);
  return state;
}

std::vector<std::string> Text(const std::vector<Line>& lines) {
  std::vector<std::string> out;
  for (const Line& l : lines) {
    std::string t;
    for (const Span& s : l) t += s.text;
    out.push_back(t);
  }
  return out;
}

int RowOf(const std::vector<std::string>& lines, const std::string& what) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(what) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

TEST(TopView, FitsEightyByTwentyFourWhateverThePool) {
  for (int leases : {0, 3, 40}) {
    auto lines = Text(RenderTop(Pool(leases), {}, 80, 24));
    EXPECT_LE(lines.size(), 24u) << leases;
    for (const auto& l : lines) EXPECT_LE(l.size(), 80u) << l;
    EXPECT_NE(RowOf(lines, "10.0.0.2:7450 down"), -1);
    EXPECT_NE(RowOf(lines, "q quit"), -1) << "the keys stay on screen";
    if (leases == 40) EXPECT_NE(RowOf(lines, "more leases"), -1);
  }
  // Every column a lease row promises, at 80 columns: the whole lease id (what `ctl revoke` takes: gp-top cut it
  // to 8 characters, and dropped it at 80 columns), the program's name, not its directory.
  auto lines = Text(RenderTop(Pool(3), {}, 80, 24));
  for (const char* column : {"LEASE", "USER", "GPUS", "USED/LIM", "UTIL", "CALL/S", "AGE", "COMMAND"}) {
    EXPECT_NE(RowOf(lines, column), -1) << column;
  }
  const PoolState three = Pool(3);
  for (const LeaseInfo& l : three.servers[0].leases) EXPECT_NE(RowOf(lines, l.id), -1) << "the whole id " << l.id;
  EXPECT_NE(RowOf(lines, "python3 train"), -1);
  EXPECT_NE(RowOf(lines, "55C"), -1);
  // A wide screen shows the lease id and whole commands too.
  auto wide = Text(RenderTop(Pool(3), {}, 200, 0));
  EXPECT_NE(RowOf(wide, "LEASE"), -1);
  EXPECT_NE(RowOf(wide, three.servers[0].leases[2].id), -1);
  for (const char* column : {"HOST", "BYTE/S", "EXP"}) EXPECT_NE(RowOf(wide, column), -1) << column;
  EXPECT_NE(RowOf(wide, "train.py --epochs 100 --run 2"), -1);
}

TEST(TopView, SortsAndFiltersLeases) {
  ViewSettings view;
  auto lines = Text(RenderTop(Pool(4), view, 140, 0));  // By utilisation, busiest first: run 3, 2, 1, 0 (140 columns: whole commands).
  EXPECT_LT(RowOf(lines, "--run 3"), RowOf(lines, "--run 2"));
  EXPECT_LT(RowOf(lines, "--run 1"), RowOf(lines, "--run 0"));
  view.ascending = true;
  lines = Text(RenderTop(Pool(4), view, 140, 0));
  EXPECT_GT(RowOf(lines, "--run 3"), RowOf(lines, "--run 0"));
  view = {};
  view.sort = SortKey::kMemory;  // Run 0 holds the most.
  lines = Text(RenderTop(Pool(4), view, 140, 0));
  EXPECT_LT(RowOf(lines, "--run 0"), RowOf(lines, "--run 3"));
  view = {};
  view.filter = "alice";
  lines = Text(RenderTop(Pool(4), view, 140, 0));
  EXPECT_NE(RowOf(lines, "--run 1"), -1);
  EXPECT_EQ(RowOf(lines, "--run 0"), -1);
  EXPECT_NE(RowOf(lines, "filter \"alice\""), -1);
  view.filter = "nobody";
  lines = Text(RenderTop(Pool(4), view, 140, 0));
  EXPECT_NE(RowOf(lines, "no lease matches"), -1);
}

TEST(TopView, ColourOnlyWhenAsked) {
  auto lines = RenderTop(Pool(2), {}, 80, 24);
  EXPECT_EQ(ToText(lines, false).find('\x1b'), std::string::npos);
  EXPECT_NE(ToText(lines, true).find("\x1b["), std::string::npos);
}

}  // namespace
}  // namespace gpupool::top
