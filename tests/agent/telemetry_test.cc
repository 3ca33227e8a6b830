// The agent's telemetry arithmetic: rates and utilisation from the sessions' meters, ended sessions' totals kept
// with their lease, and the history's bound.
#include "agent/telemetry.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

backend::MeterReading Reading(uint64_t calls, double busy_s, uint64_t to_device, uint64_t memory, int64_t last_ms) {
  backend::MeterReading r;
  r.calls = calls;
  r.busy_nanos = static_cast<uint64_t>(busy_s * 1e9);
  r.bytes_to_device = to_device;
  r.memory_bytes = memory;
  r.last_call_unix_ms = last_ms;
  r.busy_measured = true;
  return r;
}

TEST(Telemetry, RatesAndUtilisationFromTheMeters) {
  Telemetry t(2);
  t.Sample(1000, 1.0, {{"a", 0, 11, Reading(100, 0.5, 1 << 20, 4096, 900)}}, {}, {});
  t.Sample(2000, 1.0, {{"a", 0, 11, Reading(300, 1.25, 3 << 20, 8192, 1900)}}, {}, {});
  const LeaseActivity* a = t.lease("a");
  ASSERT_NE(a, nullptr);
  EXPECT_DOUBLE_EQ(a->latest.calls_per_s, 200);
  EXPECT_DOUBLE_EQ(a->latest.bytes_to_device_per_s, 2 << 20);
  EXPECT_NEAR(*a->latest.utilization, 0.75, 1e-9);
  EXPECT_EQ(a->latest.memory_used, 8192u);
  EXPECT_EQ(a->sessions, 1);
  EXPECT_EQ(a->samples.size(), 2u);
  EXPECT_NEAR(*t.device(0).latest.utilization, 0.75, 1e-9);
  EXPECT_EQ(t.device(0).latest.memory_used, 8192u);
  EXPECT_DOUBLE_EQ(*t.device(1).latest.utilization, 0);
  EXPECT_EQ(t.device(0).busy_nanos, 1'250'000'000u);
  EXPECT_EQ(a->last_active_unix_ms, 2000);  // Its work ran during the interval.
  ASSERT_EQ(a->per_session.size(), 1u);
  EXPECT_EQ(a->per_session[0].pid, 11);
  EXPECT_DOUBLE_EQ(a->per_session[0].latest.calls_per_s, 200);
  EXPECT_NEAR(*a->per_session[0].latest.utilization, 0.75, 1e-9);
}

TEST(Telemetry, AnEndedSessionsTotalsStayWithItsLease) {
  Telemetry t(1);
  t.Sample(1000, 1.0, {{"a", 0, 11, Reading(100, 0, 0, 4096, 900)}, {"a", 0, 12, Reading(50, 0, 0, 100, 950)}}, {},
           {});
  EXPECT_EQ(t.lease("a")->totals.calls, 150u);
  EXPECT_EQ(t.lease("a")->sessions, 2);
  ASSERT_EQ(t.lease("a")->per_session.size(), 2u);
  EXPECT_EQ(t.lease("a")->per_session[1].latest.memory_used, 100u);
  // Session 12 ended with 80 calls: its lease keeps them, its memory is gone.
  t.Sample(2000, 1.0, {{"a", 0, 11, Reading(120, 0, 0, 4096, 1500)}}, {{"a", Reading(80, 0, 0, 0, 1200)}}, {});
  const LeaseActivity* a = t.lease("a");
  EXPECT_EQ(a->totals.calls, 200u);
  EXPECT_DOUBLE_EQ(a->latest.calls_per_s, 50);
  EXPECT_EQ(a->latest.memory_used, 4096u);
  EXPECT_EQ(a->sessions, 1);
  EXPECT_EQ(a->last_active_unix_ms, 1500);  // Its last call; nothing ran on the device.
  // Its sessions all gone and its totals forgotten: the lease leaves the telemetry.
  t.Sample(3000, 1.0, {}, {}, {});
  EXPECT_EQ(t.lease("a"), nullptr);
}

TEST(Telemetry, UnmeasuredDeviceTimeIsUnknownNotIdle) {
  Telemetry t(1);
  backend::MeterReading r = Reading(10, 0, 0, 0, 900);
  r.busy_measured = false;  // A session on a GPU shared by MPS: it takes no turns.
  t.Sample(1000, 1.0, {{"a", 0, 11, r}}, {}, {});
  EXPECT_FALSE(t.lease("a")->latest.utilization.has_value());
  EXPECT_FALSE(t.lease("a")->per_session[0].latest.utilization.has_value());
  EXPECT_FALSE(t.device(0).latest.utilization.has_value());
}

TEST(Telemetry, GpuGaugesWinForPhysicalDevicesAndHistoryIsBounded) {
  Telemetry t(1);
  GpuGauges g;
  g.utilization = 0.4;
  g.memory_used = 123;
  g.temperature_c = 61;
  for (int i = 0; i < 700; ++i) t.Sample(1000 * i, 1.0, {}, {}, {g});
  EXPECT_EQ(t.device(0).samples.size(), Telemetry::kHistorySamples);
  EXPECT_EQ(t.device(0).samples.front().unix_ms, 1000 * 100);
  EXPECT_DOUBLE_EQ(*t.device(0).latest.utilization, 0.4);
  EXPECT_EQ(t.device(0).latest.memory_used, 123u);
  EXPECT_DOUBLE_EQ(*t.device(0).latest.temperature_c, 61);
  EXPECT_FALSE(t.device(0).latest.power_w.has_value());
}

}  // namespace
}  // namespace gpupool::agent
