// Unit tests of the monitoring pieces above the record ring (record_ring_test.cc has the ring's): the counting of
// finished records into a communicator's aggregates, the latency histogram's percentiles, the aggregates' size
// buckets and nccl-tests factors, the straggler judgement and the gauges.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/monitor/comm_monitor.h"
#include "collectives/monitor/gauges.h"
#include "collectives/monitor/histogram.h"
#include "collectives/monitor/monitor_service.h"
#include "collectives/monitor/op_stats.h"
#include "collectives/monitor/straggler.h"
#include "common/knobs.h"
#include "zerowire/metrics.h"
#include "zerowire/store.h"

namespace zw::internal::monitor {
namespace {

// The hooks write records only; the counting into the aggregates happens off the operation's path (the monitor's
// thread, a reader) — or on it when half the ring is not yet counted. Either way every operation is counted once.
TEST(CommMonitorCounting, EveryFinishedOperationIsCountedOnceWhoeverCounts) {
  MonitorSetup setup;
  setup.size = 2;
  setup.comm = "counting";
  setup.transport = "shm";
  setup.hosts = {"h", "h"};
  setup.pids = {1, 2};
  setup.store = make_memory_store();
  auto m = CommMonitor::create(setup);
  ASSERT_NE(m, nullptr);
  const uint64_t ops = 5 * m->ring().capacity() + 7;  // more than the ring holds: the writer must count some itself
  const OpDesc desc{OpKind::kAllGather, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 256};
  std::atomic<bool> stop{false};
  std::thread reader([&] {  // a reader counting concurrently, as the exporter does
    while (!stop.load()) m->aggregate();
  });
  for (uint64_t s = 1; s <= ops; ++s) {
    m->on_enqueue(s);
    m->on_start(desc, s, static_cast<int64_t>(10 * s), static_cast<int64_t>(10 * s + 1));
    m->on_finish(s % 1000 == 0 ? Status(Code::kTimeout, "late") : Status(), static_cast<int64_t>(10 * s + 3001));
  }
  stop.store(true);
  reader.join();
  const StatCell& c = m->stats().cell(static_cast<int>(OpKind::kAllGather), size_bucket(2048));
  EXPECT_EQ(c.count.load(), ops);
  EXPECT_EQ(c.bytes.load(), ops * 2048);
  EXPECT_EQ(c.errors.load(), ops / 1000);
  EXPECT_EQ(c.time_ns.load(), ops * 3000);
  // These times overlap (each starts before the one ahead of it ends): every record but the first is served from its
  // start; the first, issued to an idle communicator, from its issue.
  EXPECT_EQ(c.service_ns.load(), ops * 3000 + 1);
  EXPECT_EQ(m->records_lost(), 0u);
  EXPECT_EQ(m->in_flight(), 0u);
  m->retire();
}

// Operations issued and not finished, from the issue word and the newest record (the writer keeps no finished count):
// queued ones count, the running one counts until its end, failed ones end like the others.
TEST(CommMonitorCounting, InFlightCountsTheIssuedOperationsNotYetFinished) {
  MonitorSetup setup;
  setup.size = 2;
  setup.comm = "in-flight";
  setup.transport = "shm";
  setup.hosts = {"h", "h"};
  setup.pids = {1, 2};
  setup.store = make_memory_store();
  auto m = CommMonitor::create(setup);
  ASSERT_NE(m, nullptr);
  const OpDesc desc{OpKind::kAllGather, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 256};
  EXPECT_EQ(m->in_flight(), 0u);
  for (uint64_t s = 1; s <= 3; ++s) m->on_enqueue(s);
  EXPECT_EQ(m->in_flight(), 3u);
  m->on_start(desc, 1, 10, 11);
  EXPECT_EQ(m->in_flight(), 3u);
  m->on_finish(Status(), 20);
  EXPECT_EQ(m->in_flight(), 2u);
  m->on_start(desc, 2, 10, 21);
  m->on_finish(Status(Code::kTimeout, "late"), 30);
  EXPECT_EQ(m->in_flight(), 1u);
  m->on_start(desc, 3, 10, 31);
  EXPECT_EQ(m->in_flight(), 1u);
  m->on_enqueue(4);
  EXPECT_EQ(m->in_flight(), 2u);
  m->on_finish(Status(), 40);
  EXPECT_EQ(m->in_flight(), 1u);
  // Past a lap of the ring, from the newest record still.
  for (uint64_t s = 4; s <= 2 * m->ring().capacity() + 4; ++s) {
    m->on_enqueue(s);
    m->on_start(desc, s, 10, 41);
    EXPECT_EQ(m->in_flight(), 1u) << "operation " << s << " running";
    m->on_finish(Status(), 50);
  }
  EXPECT_EQ(m->in_flight(), 0u);
  m->retire();
}

// The bandwidth divides service times: from an operation's issue, or from the end of the one ahead of it if that
// ended later (its wait in the queue is not its own; the hand-off is, as in nccl-tests' loop of back-to-back
// operations), to its end. The histogram keeps run times.
TEST(CommMonitorCounting, ServiceTimeRunsFromTheIssueOrTheEndOfTheOperationAhead) {
  MonitorSetup setup;
  setup.comm = "service";
  setup.transport = "shm";
  setup.hosts = {"h"};
  setup.pids = {1};
  auto m = CommMonitor::create(setup);
  ASSERT_NE(m, nullptr);
  const OpDesc desc{OpKind::kAllReduce, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 1000};
  struct Op {
    int64_t enqueue, start, end;
  };
  // issued to an idle communicator (from 100: 1,050), behind it (from 1,150: 1,250), idle again after a gap (from
  // 5,000: 1,100), behind it (from 6,100: 1,050), issued just after the previous end (from 7,200: 1,100).
  const Op ops[] = {{100, 150, 1150}, {500, 1400, 2400}, {5000, 5100, 6100}, {6000, 6150, 7150}, {7200, 7300, 8300}};
  uint64_t seq = 0;
  for (const Op& o : ops) {
    m->on_enqueue(++seq);
    m->on_start(desc, seq, o.enqueue, o.start);
    m->on_finish(Status(), o.end);
  }
  const StatCell& c = m->stats().cell(static_cast<int>(OpKind::kAllReduce), size_bucket(4000));
  EXPECT_EQ(c.count.load(), 5u);
  EXPECT_EQ(c.time_ns.load(), 5000u);
  EXPECT_EQ(c.service_ns.load(), 1050u + 1250 + 1100 + 1050 + 1100);
  uint64_t histogram = 0;
  for (uint64_t n : c.latency.copy()) histogram += n;
  EXPECT_EQ(histogram, 5u);
  const std::string json = MonitorService::instance().json();  // the bandwidth divides the service time
  EXPECT_NE(json.find("\"time_s\":5e-06,\"service_s\":5.55e-06,\"errors\":0,\"algbw_Bps\":3.6036036e+09"),
            std::string::npos)
      << json;
  m->retire();
}

TEST(LatencyHistogram, PercentilesOfKnownDistributions) {
  LatencyHistogram h;
  for (int i = 1; i <= 1000; ++i) h.add(static_cast<uint64_t>(i) * 1000);  // 1 µs .. 1 ms, uniform
  auto c = h.copy();
  uint64_t total = 0;
  for (uint64_t n : c) total += n;
  EXPECT_EQ(total, 1000u);
  // A bucket is a factor √2 wide: interpolation keeps the error well inside it.
  EXPECT_NEAR(LatencyHistogram::quantile_ns(c, 0.5), 500e3, 0.15 * 500e3);
  EXPECT_NEAR(LatencyHistogram::quantile_ns(c, 0.9), 900e3, 0.15 * 900e3);
  EXPECT_NEAR(LatencyHistogram::quantile_ns(c, 0.99), 990e3, 0.15 * 990e3);
  LatencyHistogram one;
  for (int i = 0; i < 100; ++i) one.add(20'000'000);  // all 20 ms
  auto d = one.copy();
  for (double q : {0.01, 0.5, 1.0}) {
    double v = LatencyHistogram::quantile_ns(d, q);
    EXPECT_GE(v, 20e6 / 1.4143) << q;
    EXPECT_LE(v, 20e6 * 1.4143) << q;
  }
  EXPECT_EQ(LatencyHistogram::quantile_ns(LatencyHistogram().copy(), 0.5), 0.0);
  LatencyHistogram huge;
  huge.add(uint64_t{1} << 60);  // beyond the last bound: counted, reported at the last bound
  EXPECT_EQ(huge.count(LatencyHistogram::kFinite), 1u);
  EXPECT_EQ(LatencyHistogram::quantile_ns(huge.copy(), 0.5), static_cast<double>(LatencyHistogram::upper_ns(54)));
}

// bucket_of's O(1) octave guess against the definition (the first bound >= ns), at every bound, one either side of it,
// and a spread of random durations up to past the last bound.
TEST(LatencyHistogram, BucketOfIsTheFirstBoundNotBelowTheDuration) {
  auto reference = [](uint64_t ns) {
    return static_cast<int>(std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), ns) -
                            kLatencyBounds.begin());
  };
  std::vector<uint64_t> probes = {0, 1, 999, 1000, 1001, UINT64_MAX / 2, UINT64_MAX};
  for (uint64_t b : kLatencyBounds) probes.insert(probes.end(), {b - 1, b, b + 1});
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) probes.push_back(rng() >> (rng() % 64));
  for (uint64_t ns : probes) ASSERT_EQ(LatencyHistogram::bucket_of(ns), reference(ns)) << ns << " ns";
}

TEST(LatencyHistogram, BucketBoundsAreHalfOctaves) {
  EXPECT_EQ(LatencyHistogram::upper_ns(0), 1000u);
  EXPECT_EQ(LatencyHistogram::upper_ns(2), 2000u);
  EXPECT_EQ(LatencyHistogram::bucket_of(0), 0);
  EXPECT_EQ(LatencyHistogram::bucket_of(1000), 0);
  EXPECT_EQ(LatencyHistogram::bucket_of(1001), 1);
  EXPECT_EQ(LatencyHistogram::bucket_of(2000), 2);
}

TEST(OpStats, SizeBucketsBytesAndBusFactorsFollowNcclTests) {
  EXPECT_EQ(size_bucket(0), 0);
  EXPECT_EQ(size_bucket(1), 0);
  EXPECT_EQ(size_bucket(4096), 12);
  EXPECT_EQ(size_bucket(4097), 13);
  EXPECT_EQ(size_bucket(uint64_t{1} << 50), kSizeBuckets - 1);
  OpDesc ag{OpKind::kAllGather, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 1024};
  EXPECT_EQ(op_bytes(ag, 4), 1024u * 4 * 4);
  OpDesc ar{OpKind::kAllReduce, Algo::kRing, DataType::kFloat16, ReduceOp::kSum, 0, 1000};
  EXPECT_EQ(op_bytes(ar, 4), 2000u);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::kBroadcast, 8), 1.0);
  OpStats s;
  s.add(OpKind::kAllReduce, Algo::kTree, 2000, 5000, 5500, false);
  s.add(OpKind::kAllReduce, Algo::kTree, 1500, 3000, 3000, true);
  const StatCell& c = s.cell(static_cast<int>(OpKind::kAllReduce), size_bucket(2000));
  EXPECT_EQ(c.count.load(), 2u);
  EXPECT_EQ(c.bytes.load(), 3500u);
  EXPECT_EQ(c.time_ns.load(), 8000u);
  EXPECT_EQ(c.service_ns.load(), 8500u);
  EXPECT_EQ(c.errors.load(), 1u);
  EXPECT_EQ(c.algo.load(), static_cast<uint8_t>(Algo::kTree));
}

// Run times of `ranks` ranks over `ops` collectives: everyone ~base µs with jitter, rank `late` `late_us` shorter.
std::vector<std::vector<uint32_t>> runs(int ranks, size_t ops, int late, uint32_t late_us, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint32_t>> d(static_cast<size_t>(ranks), std::vector<uint32_t>(ops));
  for (size_t i = 0; i < ops; ++i)
    for (int r = 0; r < ranks; ++r) d[static_cast<size_t>(r)][i] = 20000 + rng() % 300 - (r == late ? late_us : 0);
  return d;
}

TEST(Straggler, NamesTheRankThatStartsLateAndNobodyOtherwise) {
  for (int n : {2, 3, 4, 8}) {
    StragglerVerdict v = judge_window(runs(n, 200, n - 1, 5000, 1), 0.75, 1e6);
    EXPECT_EQ(v.named, n - 1) << n;
    EXPECT_EQ(v.ops, 200u);
    EXPECT_DOUBLE_EQ(v.last_share[static_cast<size_t>(n - 1)], 1.0);
    EXPECT_NEAR(v.median_late_ns[static_cast<size_t>(n - 1)], 5e6, 0.4e6);
    StragglerVerdict none = judge_window(runs(n, 200, -1, 0, 2), 0.75, 1e6);
    EXPECT_EQ(none.named, -1) << n;
  }
  // Consistently last but by less than the minimum lateness: not named.
  EXPECT_EQ(judge_window(runs(4, 200, 2, 400, 3), 0.75, 1e6).named, -1);
  // Late in only half of the operations: below the share.
  auto half = runs(4, 200, 1, 5000, 4);
  for (size_t i = 0; i < 100; ++i) half[1][i] += 5000;
  EXPECT_EQ(judge_window(half, 0.75, 1e6).named, -1);
  EXPECT_EQ(judge_window(half, 0.4, 1e6).named, 1);
}

TEST(Straggler, DurationsRoundTripThroughTheStoreEncoding) {
  std::vector<uint32_t> d = {0, 1, 255, 256, 70000, UINT32_MAX};
  std::vector<uint32_t> back;
  ASSERT_TRUE(decode_durations(encode_durations(d.data(), d.size()), d.size(), &back));
  EXPECT_EQ(back, d);
  EXPECT_FALSE(decode_durations("abc", 1, &back));
}

namespace {

MonitorSetup setup_of(int rank, int size, const std::string& comm, std::shared_ptr<Store> store) {
  MonitorSetup s;
  s.rank = rank;
  s.size = size;
  s.comm = comm;
  s.transport = "shm";
  s.hosts.assign(static_cast<size_t>(size), "h");
  for (int r = 0; r < size; ++r) s.pids.push_back(100 + r);
  s.store = std::move(store);
  return s;
}

// A store whose every call waits until it is opened (a store server that stopped answering).
class GatedStore final : public Store {
 public:
  explicit GatedStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  int waiting() const { return waiting_.load(); }
  Status set(const std::string& k, const std::string& v) override { return pass(), base_->set(k, v); }
  Result<std::string> get(const std::string& k, Timeout t) override { return pass(), base_->get(k, t); }
  Status wait(const std::vector<std::string>& k, Timeout t) override { return pass(), base_->wait(k, t); }
  Result<int64_t> add(const std::string& k, int64_t d) override { return pass(), base_->add(k, d); }
  Result<bool> del(const std::string& k) override { return pass(), base_->del(k); }

 private:
  void pass() {
    ++waiting_;
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
    --waiting_;
  }
  std::shared_ptr<Store> base_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
  std::atomic<int> waiting_{0};
};

}  // namespace

// The straggler exchange talks to the store from the service thread; the counting has a thread of its own, so that
// a store that stops answering does not leave the writer to count its records on the operation's path.
TEST(CommMonitorCounting, TheCountingGoesOnWhileTheStoreHangs) {
  auto gate = std::make_shared<GatedStore>(make_memory_store());
  auto m = CommMonitor::create(setup_of(1, 2, "hung-store", gate));
  ASSERT_NE(m, nullptr);
  const OpDesc desc{OpKind::kAllGather, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 256};
  const uint64_t ops = m->ring().capacity();  // more than half the ring: the writer would count once
  for (uint64_t s = 1; s <= ops; ++s) {
    m->on_enqueue(s);
    m->on_start(desc, s, static_cast<int64_t>(10 * s), static_cast<int64_t>(10 * s + 1));
    m->on_finish(Status(), static_cast<int64_t>(10 * s + 3001));
    if (s == ops / 4) {  // by now the service thread asked the store (one tick) and hangs in it
      for (int i = 0; i < 400 && gate->waiting() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ASSERT_EQ(gate->waiting(), 1) << "the service thread never called the store";
    }
    if (s % 256 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // ~256 operations per ms
  }
  for (int i = 0; i < 400 && m->records_counted() < ops; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(m->records_counted(), ops);
  EXPECT_EQ(gate->waiting(), 1);
  EXPECT_EQ(m->writer_counts(), 0u);
  gate->open();
  m->retire();
}

// Three ranks' monitors on one store, their collectives in step (as collectives are) and a thousand times faster
// than the exchange's tick: every rank captures the window rank 0 asked for, and rank 0 judges it and names the rank
// whose run times are 5 ms shorter (it arrived last).
TEST(StragglerExchange, RanksPublishTheWindowRankZeroAsksForAtAnyRate) {
  const int n = 3, late = 2;
  auto store = make_memory_store();
  std::vector<std::shared_ptr<CommMonitor>> ms;
  for (int r = 0; r < n; ++r) ms.push_back(CommMonitor::create(setup_of(r, n, "exchange", store)));
  for (const auto& m : ms) ASSERT_NE(m, nullptr);
  const OpDesc desc{OpKind::kAllGather, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, 256};
  std::atomic<bool> stop{false};
  bool stopping = false;  // the stop as of the last phase: every writer sees the same
  auto phase_done = [&]() noexcept { stopping = stop.load(); };
  std::barrier step(n, phase_done);
  std::vector<std::thread> writers;
  for (int r = 0; r < n; ++r)
    writers.emplace_back([&, r] {
      CommMonitor& m = *ms[static_cast<size_t>(r)];
      for (uint64_t s = 1;; ++s) {
        const int64_t start = static_cast<int64_t>(s) * 10'000'000;
        m.on_start(desc, s, start, start + (r == late ? 5'000'000 : 0));
        m.on_finish(Status(), start + 5'010'000);
        step.arrive_and_wait();
        if (stopping) return;
      }
    });
  // ~4 s on an idle 2-core VM; a loaded one (ctest -j2 beside a build) ran 1 window in 10 s: the deadline is generous.
  for (int i = 0; i < 12000 && ms[0]->windows_judged() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop.store(true);
  for (auto& w : writers) w.join();
  EXPECT_GE(ms[0]->windows_judged(), 3u) << "missed " << ms[0]->windows_missed();
  const StragglerVerdict v = ms[0]->verdict();
  EXPECT_EQ(v.named, late);
  EXPECT_EQ(v.ops, static_cast<uint64_t>(knobs().straggler_window));
  EXPECT_NEAR(v.median_late_ns[late], 5e6, 0.1e6);
  for (const auto& m : ms) EXPECT_EQ(m->records_lost(), 0u);
  for (const auto& m : ms) m->retire();
}

// zerowire/metrics.h: a gauge is set, updated in place for the same labels, added for new ones, refused for a bad
// name, and rendered as one Prometheus family (HELP and TYPE once, samples in order) and as JSON objects.
TEST(Gauges, SetUpdateRefuseAndRender) {
  using metrics::set_gauge;
  EXPECT_TRUE(set_gauge("zerowire_test_step_seconds", "a test gauge", {{"rank", "0"}}, 1.5));
  EXPECT_TRUE(set_gauge("zerowire_test_step_seconds", "ignored: the first help stays", {{"rank", "1"}}, 2));
  EXPECT_TRUE(set_gauge("zerowire_test_step_seconds", "", {{"rank", "0"}}, 0.25));  // rank 0 updated in place
  EXPECT_TRUE(set_gauge("zerowire_test_plain", "no labels", {}, 7));
  EXPECT_TRUE(set_gauge("zerowire_test_quoted", "escaped value", {{"kind", "a\"b\\c"}}, 1));
  EXPECT_FALSE(set_gauge("2bad", "a name must not start with a digit", {}, 1));
  EXPECT_FALSE(set_gauge("zerowire_test_bad_label", "", {{"bad-label", "x"}}, 1));
  const std::string text = render_gauges_prometheus();
  EXPECT_NE(text.find("# HELP zerowire_test_step_seconds a test gauge\n# TYPE zerowire_test_step_seconds gauge\n"
                      "zerowire_test_step_seconds{rank=\"0\"} 0.25\nzerowire_test_step_seconds{rank=\"1\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("zerowire_test_plain 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("zerowire_test_quoted{kind=\"a\\\"b\\\\c\"} 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("2bad"), std::string::npos) << text;
  EXPECT_EQ(text.find("bad_label"), std::string::npos) << text;
  EXPECT_EQ(text.find("ignored"), std::string::npos) << text;
  const std::string json = render_gauges_json();
  EXPECT_NE(json.find("{\"name\":\"zerowire_test_step_seconds\",\"labels\":{\"rank\":\"1\"},\"value\":2}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"name\":\"zerowire_test_plain\",\"labels\":{},\"value\":7}"), std::string::npos) << json;
}

}  // namespace
}  // namespace zw::internal::monitor
