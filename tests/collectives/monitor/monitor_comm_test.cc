// Monitoring through real communicators (ranks as threads over an in-memory store): every operation leaves a
// record, the aggregates count what ran, a wait for a late peer is counted on its link, a failed operation marks the
// records, and the Prometheus text and JSON say so. The process-level service holds every live communicator, so each test looks at its own communicator
// name only.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/monitor/comm_monitor.h"
#include "collectives/monitor/monitor_service.h"
#include "harness.h"

namespace zw {
namespace {

using internal::monitor::MonitorService;

// The value of the one sample of `family` whose labels contain every one of `has`; -1 when none, -2 when several.
double sample_value(const std::string& text, const std::string& family, const std::vector<std::string>& has) {
  double found = -1;
  size_t at = 0;
  while ((at = text.find(family + "{", at)) != std::string::npos) {
    const size_t eol = text.find('\n', at);
    const std::string line = text.substr(at, eol - at);
    at = eol;
    bool all = true;
    for (const std::string& h : has) all = all && line.find(h) != std::string::npos;
    if (!all) continue;
    if (found != -1) return -2;
    found = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return found;
}

TEST(MonitorComm, OperationsAreCountedPerOpAndSizeWithBusBandwidth) {
  CommConfig config;
  config.name = "mon-count";
  std::vector<std::string> texts(2), jsons(2);
  test::run_ranks(2, config, [&](int r, Communicator& c) {
    std::vector<float> in(1024, 1.0f), out(2048);
    for (int i = 0; i < 10; ++i) {
      auto w = all_gather(c, {MemRef::host(in.data(), 4096), MemRef::host(out.data(), 8192), 1024, DataType::kFloat32});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE(w->wait().ok());
    }
    for (int i = 0; i < 3; ++i) {
      auto w = all_reduce(c, {MemRef::host(in.data(), 400), MemRef::host(out.data(), 400), 100, DataType::kFloat32});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE(w->wait().ok());
    }
    auto b = barrier(c);
    ASSERT_TRUE(b.ok() && b->wait().ok());
    if (r == 0) {  // after the barrier both ranks finished their 13 operations
      texts[0] = MonitorService::instance().prometheus();
      jsons[0] = MonitorService::instance().json();
    }
    auto b2 = barrier(c);
    ASSERT_TRUE(b2.ok() && b2->wait().ok());
  });
  const std::string& t = texts[0];
  for (int r = 0; r < 2; ++r) {
    const std::string rank = "rank=\"" + std::to_string(r) + "\"";
    EXPECT_EQ(sample_value(t, "zerowire_operations_total",
                           {"comm=\"mon-count\"", rank, "op=\"all_gather\"", "size_le_bytes=\"8192\""}),
              10)
        << t;
    EXPECT_EQ(sample_value(t, "zerowire_operation_bytes_total",
                           {"comm=\"mon-count\"", rank, "op=\"all_gather\"", "size_le_bytes=\"8192\""}),
              81920);
    EXPECT_EQ(sample_value(t, "zerowire_operations_total",
                           {"comm=\"mon-count\"", rank, "op=\"all_reduce\"", "size_le_bytes=\"512\""}),
              3);
    EXPECT_EQ(
        sample_value(t, "zerowire_operation_duration_seconds_count", {"comm=\"mon-count\"", rank, "op=\"all_reduce\""}),
        3);
    EXPECT_EQ(sample_value(t, "zerowire_operation_errors_total", {"comm=\"mon-count\"", rank, "op=\"all_gather\""}), 0);
    const double alg =
        sample_value(t, "zerowire_algbw_bytes_per_second", {"comm=\"mon-count\"", rank, "op=\"all_gather\""});
    const double bus =
        sample_value(t, "zerowire_busbw_bytes_per_second", {"comm=\"mon-count\"", rank, "op=\"all_gather\""});
    EXPECT_GT(alg, 0);
    EXPECT_NEAR(bus, alg * 0.5, alg * 1e-6);  // all_gather over 2 ranks: (n-1)/n
    // Rank 0 took the text between the barriers: nothing of its own in flight (rank 1 may have issued the next).
    if (r == 0) {
      EXPECT_EQ(sample_value(t, "zerowire_operations_in_flight", {"comm=\"mon-count\"", rank}), 0);
    }
  }
  // Links: each rank wrote its 4 KiB block to the other 10 times (plus the small all_reduces and barriers), never to
  // itself.
  for (int r = 0; r < 2; ++r) {
    const std::string rank = "rank=\"" + std::to_string(r) + "\"", peer = "peer=\"" + std::to_string(1 - r) + "\"";
    const double sent = sample_value(t, "zerowire_peer_sent_bytes_total", {"comm=\"mon-count\"", rank, peer});
    const double got = sample_value(t, "zerowire_peer_received_bytes_total", {"comm=\"mon-count\"", rank, peer});
    EXPECT_GE(sent, 10 * 4096) << t;
    EXPECT_LT(sent, 10 * 4096 + 4096);
    EXPECT_GE(got, 10 * 4096);
    EXPECT_LT(got, 10 * 4096 + 4096);
    EXPECT_EQ(sample_value(t, "zerowire_peer_sent_bytes_total",
                           {"comm=\"mon-count\"", rank, "peer=\"" + std::to_string(r) + "\""}),
              -1);
  }
  EXPECT_NE(jsons[0].find("\"peers\":[{\"peer\":"), std::string::npos);
  EXPECT_NE(jsons[0].find("\"comm\":\"mon-count\""), std::string::npos);
  EXPECT_NE(jsons[0].find("\"op\":\"all_gather\",\"algo\""), std::string::npos);
  EXPECT_NE(jsons[0].find("\"state\":\"done\""), std::string::npos);
}

// The per-peer wait time: a rank whose peer arrives 15 ms late at each of four all-gathers counts those waits on that
// peer's link — most of the delays (the span ends at the transport's last idle look, or at a clock read: a sleep on the
// futex, which is most of such a wait over shm, must not be left out), never more than the time its calls took. The
// 30 % of slack is for the two ranks leaving the barrier at different times on a loaded machine. Over shm and tcp.
TEST(MonitorComm, AWaitForALatePeerIsCountedOnItsLink) {
  for (const char* transport : {"shm", "tcp"}) {
    CommConfig config;
    config.name = std::string("mon-wait-") + transport;
    config.transport = transport;
    constexpr int kOps = 4;
    constexpr auto kLate = std::chrono::milliseconds(15);  // under the rendezvous' longest sleep (20 ms): one sleep
    test::run_ranks(2, config, [&](int r, Communicator& c) {
      std::vector<float> in(256, 1.0f), out(512);
      auto b = barrier(c);
      ASSERT_TRUE(b.ok() && b->wait().ok());
      const auto& link = c.impl().monitor()->links().link(1 - r);
      const uint64_t before = link.wait_ns.load(), waits_before = link.waits.load();  // the barrier's own waits
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kOps; ++i) {
        if (r == 1) std::this_thread::sleep_for(kLate);
        auto w =
            all_gather(c, {MemRef::host(in.data(), 1024), MemRef::host(out.data(), 2048), 256, DataType::kFloat32});
        ASSERT_TRUE(w.ok());
        ASSERT_TRUE(w->wait().ok());
      }
      const auto spent = std::chrono::steady_clock::now() - t0;
      if (r != 0) return;
      const auto waited = std::chrono::nanoseconds(link.wait_ns.load() - before);
      EXPECT_GE(waited, kOps * kLate * 7 / 10) << transport;
      EXPECT_LE(waited, spent) << transport;
      EXPECT_GE(link.waits.load() - waits_before, static_cast<uint64_t>(kOps)) << transport;
      EXPECT_EQ(c.impl().monitor()->links().link(0).wait_ns.load(), 0u) << transport;  // never waits on itself
    });
  }
}

// CommConfig::monitor turns monitoring off for one communicator (zw_monitor_ab pairs such a one with a monitored one):
// no records, nothing in the endpoint's text, while a monitored communicator of the same process still counts.
TEST(MonitorComm, ACommunicatorConfiguredWithoutMonitoringHasNone) {
  CommConfig off, on;
  off.name = "mon-off";
  off.monitor = 0;
  on.name = "mon-on";
  on.monitor = 1;
  for (const CommConfig& config : {off, on})
    test::run_ranks(2, config, [&](int r, Communicator& c) {
      std::vector<float> in(256, 1.0f), out(512);
      auto w = all_gather(c, {MemRef::host(in.data(), 1024), MemRef::host(out.data(), 2048), 256, DataType::kFloat32});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE(w->wait().ok());
      EXPECT_EQ(c.impl().monitor() != nullptr, config.monitor == 1) << config.name << " rank " << r;
      const std::string text = MonitorService::instance().prometheus();
      EXPECT_EQ(text.find("comm=\"" + config.name + "\"") != std::string::npos, config.monitor == 1)
          << config.name << " rank " << r;
    });
}

TEST(MonitorComm, AFailedOperationIsRecordedAsFailedWithItsCode) {
  CommConfig config;
  config.name = "mon-fail";
  config.timeout_s = 5;
  std::string text, json;
  test::run_ranks(2, config, [&](int r, Communicator& c) {
    std::vector<float> in(16, 1.0f), out(32);
    // Rank 1 issues an all_reduce, rank 0 an all_gather: a desync, each names the other.
    auto w = r == 0
                 ? all_gather(c, {MemRef::host(in.data(), 64), MemRef::host(out.data(), 128), 16, DataType::kFloat32})
                 : all_reduce(c, {MemRef::host(in.data(), 64), MemRef::host(out.data(), 64), 16, DataType::kFloat32});
    ASSERT_TRUE(w.ok());
    EXPECT_FALSE(w->wait().ok());
    if (r == 0) {
      text = MonitorService::instance().prometheus();
      json = MonitorService::instance().json();
    }
  });
  EXPECT_EQ(
      sample_value(text, "zerowire_operation_errors_total", {"comm=\"mon-fail\"", "rank=\"0\"", "op=\"all_gather\""}),
      1)
      << text;
  EXPECT_NE(json.find("\"state\":\"failed\""), std::string::npos) << json;
}

}  // namespace
}  // namespace zw
