// The device path's records (monitor/device_ops.h) with a scripted completion source in place of CUDA events: every
// operation leaves a record (also one refused at issue, and one that failed on the device), records finish in issue
// order with the device's start and end, a consumer racing the issuer loses nothing, a full ring counts the
// operation it leaves out, and the exporter shows the device path (transport cuda_ipc, path="device", the JSON's
// "device" object). The CUDA side (gpu/gpu_monitor.cc) is tested on a GPU by monitor_gpu_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/monitor/comm_monitor.h"
#include "collectives/monitor/device_ops.h"
#include "collectives/monitor/exporter.h"

namespace zw::internal::monitor {
namespace {

// Completions as a test scripts them: seq -> completion (absent: pending).
class ScriptedSource final : public DeviceOpSource {
 public:
  void complete(uint64_t seq, DeviceCompletion c) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_[seq] = c;
  }
  bool reached(size_t, uint64_t seq) override {
    queries.fetch_add(1);
    std::lock_guard<std::mutex> lock(mutex_);
    return done_.count(seq) != 0;
  }
  DeviceCompletion completion(size_t, uint64_t seq) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = done_.find(seq);
    return it == done_.end() ? DeviceCompletion{} : it->second;
  }
  void refresh() override { refreshes.fetch_add(1); }
  std::atomic<int> refreshes{0};
  std::atomic<int> queries{0};  // reached() calls

 private:
  std::mutex mutex_;
  std::map<uint64_t, DeviceCompletion> done_;
};

DeviceCompletion done_at(uint64_t start, uint64_t end) {
  return DeviceCompletion{DeviceCompletion::State::kDone, start, end, 0};
}

// An operation the engine did not time (gpu_monitor.h's sampling): seen complete at `seen`.
DeviceCompletion seen_done_at(uint64_t seen) {
  return DeviceCompletion{DeviceCompletion::State::kDone, seen, seen, 0, /*timed=*/false};
}

RingIdentity who() { return RingIdentity{1, 2, 0, "hostx", "dev-comm", "cuda_ipc"}; }

// A monitor's setup as rank 0 of a 2-rank communicator named `comm` over shm.
MonitorSetup rank0_of_two(const std::string& comm) {
  MonitorSetup setup;
  setup.rank = 0;
  setup.size = 2;
  setup.comm = comm;
  setup.transport = "shm";
  setup.hosts = {"h", "h"};
  setup.pids = {1, 2};
  return setup;
}

OpDesc all_reduce_of(uint64_t count) {
  return OpDesc{OpKind::kAllReduce, Algo::kRing, DataType::kFloat32, ReduceOp::kSum, 0, count};
}

// A monitor of rank 0 of two with a scripted device path of `capacity` records attached (d null when either failed).
struct DevicePath {
  std::shared_ptr<CommMonitor> m;
  std::shared_ptr<ScriptedSource> src;
  DeviceOps* d = nullptr;
};
DevicePath attached(const std::string& comm, size_t capacity) {
  DevicePath p{CommMonitor::create(rank0_of_two(comm)), std::make_shared<ScriptedSource>()};
  if (p.m) p.d = p.m->attach_device(p.src, "cuda_ipc", capacity);
  return p;
}

TEST(DeviceOps, RecordsFinishInIssueOrderWithTheDevicesTimes) {
  auto made = DeviceOps::create(16, who(), "");
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  DeviceOps& d = *made.value();
  ScriptedSource src;
  for (uint64_t s = 1; s <= 3; ++s) {
    const size_t slot = d.begin(all_reduce_of(256 * s), DeviceAlgo::kDirect, s, 2, static_cast<int64_t>(1000 * s));
    ASSERT_NE(slot, DeviceOps::kNoSlot);
    d.commit(slot, Status(), 0);
  }
  EXPECT_EQ(d.issued(), 3u);
  EXPECT_EQ(d.in_flight(), 3u);
  OpFields cur;
  ASSERT_TRUE(d.ring().running(&cur));  // the last one issued shows as running
  EXPECT_EQ(cur.seq, 3u);
  EXPECT_EQ(cur.path, static_cast<uint8_t>(PathKind::kDevice));
  // A source that reports the second done before the first breaks the engine's order; nothing finishes out of
  // order all the same.
  src.complete(2, done_at(2500, 2700));
  EXPECT_EQ(d.consume(src), 0u);
  EXPECT_EQ(d.in_flight(), 3u);
  src.complete(1, done_at(1200, 1900));
  EXPECT_EQ(d.consume(src), 2u);
  EXPECT_EQ(d.in_flight(), 1u);
  // A start the anchor put before the enqueue is moved to it, keeping the run time.
  src.complete(3, done_at(2900, 3400));
  EXPECT_EQ(d.consume(src), 1u);
  EXPECT_EQ(d.in_flight(), 0u);
  auto recs = d.ring().snapshot();
  ASSERT_EQ(recs.size(), 3u);
  const uint64_t starts[] = {1200, 2500, 3000}, ends[] = {1900, 2700, 3500};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(recs[i].seq, i + 1);
    EXPECT_EQ(recs[i].coll_index, i);
    EXPECT_EQ(recs[i].state, static_cast<uint8_t>(OpState::kDone));
    EXPECT_EQ(recs[i].kind, static_cast<uint8_t>(OpKind::kAllReduce));
    EXPECT_EQ(recs[i].bytes, 1024 * (i + 1));
    EXPECT_EQ(recs[i].enqueue_ns, 1000 * (i + 1));
    EXPECT_EQ(recs[i].start_ns, starts[i]) << i;
    EXPECT_EQ(recs[i].end_ns, ends[i]) << i;
    EXPECT_EQ(recs[i].path, static_cast<uint8_t>(PathKind::kDevice));
  }
  const StatCell& c = d.stats().cell(static_cast<int>(OpKind::kAllReduce), size_bucket(1024));
  EXPECT_EQ(c.count.load(), 1u);
  EXPECT_EQ(c.time_ns.load(), 700u);
  EXPECT_EQ(d.stats().cell(static_cast<int>(OpKind::kAllReduce), size_bucket(3072)).time_ns.load(), 500u);
  EXPECT_GE(src.refreshes.load(), 1);
}

// An operation without a run time counts in the operations and bytes, not in the time, the bandwidth or the latency
// histogram, and its record says it was not timed.
TEST(DeviceOps, AnUntimedOperationIsCountedWithoutARunTime) {
  auto [m, src, d] = attached("dev-untimed", 16);
  ASSERT_NE(d, nullptr);
  for (uint64_t s = 1; s <= 2; ++s)
    d->commit(d->begin(all_reduce_of(2048), DeviceAlgo::kDirect, s, 2, static_cast<int64_t>(100 * s)), Status(), 0);
  src->complete(1, done_at(150, 4150));  // 8 KiB in 4 µs: 2.048 GB/s
  src->complete(2, seen_done_at(5000));
  m->consume_device();
  auto recs = d->ring().snapshot();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].flags, 0u);
  EXPECT_EQ(recs[1].flags, kRecordUntimed);
  EXPECT_EQ(recs[1].state, static_cast<uint8_t>(OpState::kDone));
  EXPECT_EQ(recs[1].start_ns, 5000u);
  EXPECT_EQ(recs[1].end_ns, 5000u);
  const StatCell& c = d->stats().cell(static_cast<int>(OpKind::kAllReduce), size_bucket(8192));
  EXPECT_EQ(c.count.load(), 2u);
  EXPECT_EQ(c.bytes.load(), 2u * 8192);
  EXPECT_EQ(c.timed_bytes.load(), 8192u);
  EXPECT_EQ(c.time_ns.load(), 4000u);
  uint64_t observed = 0;
  for (uint64_t n : c.latency.copy()) observed += n;
  EXPECT_EQ(observed, 1u);
  const std::string text = render_prometheus({m});
  const std::string labels =
      "{comm=\"dev-untimed\",rank=\"0\",op=\"all_reduce\",transport=\"cuda_ipc\",algo=\"direct\","
      "size_le_bytes=\"8192\"}";
  EXPECT_NE(text.find("zerowire_operations_total" + labels + " 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("zerowire_algbw_bytes_per_second" + labels + " 2.048e+09\n"), std::string::npos) << text;
  EXPECT_NE(text.find("zerowire_operation_duration_seconds_count" + labels + " 1\n"), std::string::npos) << text;
  const std::string json = render_comm_json(*m);
  EXPECT_NE(json.find("\"bytes\":16384,\"timed_bytes\":8192,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"start_ns\":5000,\"end_ns\":5000,\"timed\":false}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"end_ns\":4150,\"timed\":true}"), std::string::npos) << json;
  m->detach_device();
  m->retire();
}

TEST(DeviceOps, AnOperationRefusedAtIssueOrFailedOnTheDeviceIsRecordedFailed) {
  auto made = DeviceOps::create(16, who(), "");
  ASSERT_TRUE(made.ok());
  DeviceOps& d = *made.value();
  ScriptedSource src;
  size_t slot = d.begin(all_reduce_of(64), DeviceAlgo::kRing, 1, 2, 100);
  d.commit(slot, Status(Code::kDesync, "rank 1 issued all_gather"), 150);
  slot = d.begin(all_reduce_of(64), DeviceAlgo::kRing, 2, 2, 200);
  d.commit(slot, Status(), 0);
  src.complete(2, DeviceCompletion{DeviceCompletion::State::kFailed, 210, 5000, static_cast<uint16_t>(Code::kTimeout)});
  EXPECT_EQ(d.consume(src), 2u);
  auto recs = d.ring().snapshot();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].state, static_cast<uint8_t>(OpState::kFailed));
  EXPECT_EQ(recs[0].status, static_cast<uint16_t>(Code::kDesync));
  EXPECT_EQ(recs[0].end_ns, 150u);
  EXPECT_EQ(recs[1].state, static_cast<uint8_t>(OpState::kFailed));
  EXPECT_EQ(recs[1].status, static_cast<uint16_t>(Code::kTimeout));
  EXPECT_EQ(d.ring().header().failed.load(), 1u);
  EXPECT_NE(std::string(d.ring().header().reason).find("rank 1 issued all_gather"), std::string::npos);
  EXPECT_EQ(d.stats().cell(static_cast<int>(OpKind::kAllReduce), size_bucket(256)).errors.load(), 2u);
}

// The device runs the operations in order, so a pass asks about the newest record and then bisects: a handful of
// queries for a thousand pending records, whichever of them the device has reached; records refused at issue (no
// device side) neither stop the pass nor get asked about.
TEST(DeviceOps, APassAsksTheDeviceAboutAFewRecordsNotEveryOne) {
  auto made = DeviceOps::create(1024, who(), "");
  ASSERT_TRUE(made.ok());
  DeviceOps& d = *made.value();
  ScriptedSource src;
  constexpr uint64_t kOps = 1000;
  for (uint64_t s = 1; s <= kOps; ++s) {
    const size_t slot = d.begin(all_reduce_of(64), DeviceAlgo::kDirect, s, 2, static_cast<int64_t>(10 * s));
    d.commit(slot, s % 97 == 0 ? Status(Code::kDesync, "refused") : Status(), static_cast<int64_t>(10 * s + 1));
  }
  for (uint64_t s = 1; s <= 700; ++s) src.complete(s, done_at(10 * s + 2, 10 * s + 3));
  EXPECT_EQ(d.consume(src), 700u);
  EXPECT_LE(src.queries.load(), 14) << "queries for " << kOps << " pending records";
  EXPECT_EQ(d.in_flight(), kOps - 700);
  // The device catches up: the newest record alone settles the pass.
  for (uint64_t s = 701; s <= kOps; ++s) src.complete(s, done_at(10 * s + 2, 10 * s + 3));
  src.queries = 0;
  EXPECT_EQ(d.consume(src), kOps - 700);
  EXPECT_EQ(src.queries.load(), 1);
  EXPECT_EQ(d.in_flight(), 0u);
  auto recs = d.ring().snapshot();
  ASSERT_EQ(recs.size(), kOps);
  for (size_t i = 0; i < recs.size(); ++i) {
    const uint64_t s = i + 1;
    EXPECT_EQ(recs[i].state, static_cast<uint8_t>(s % 97 == 0 ? OpState::kFailed : OpState::kDone)) << s;
    if (s % 97 != 0) {
      EXPECT_EQ(recs[i].end_ns, 10 * s + 3) << s;
    }
  }
  // Nothing reached: one query per bisection step, nothing finished.
  for (uint64_t s = kOps + 1; s <= kOps + 100; ++s)
    d.commit(d.begin(all_reduce_of(64), DeviceAlgo::kDirect, s, 2, 0), Status(), 0);
  src.queries = 0;
  EXPECT_EQ(d.consume(src), 0u);
  EXPECT_LE(src.queries.load(), 9);
}

// The newest records refused at issue: they finish (failed) as soon as the operations before them are reached.
TEST(DeviceOps, RecordsRefusedAtIssueAfterTheLastReachedOneFinishWithIt) {
  auto made = DeviceOps::create(16, who(), "");
  ASSERT_TRUE(made.ok());
  DeviceOps& d = *made.value();
  ScriptedSource src;
  d.commit(d.begin(all_reduce_of(64), DeviceAlgo::kDirect, 1, 2, 10), Status(), 0);
  d.commit(d.begin(all_reduce_of(64), DeviceAlgo::kDirect, 2, 2, 20), Status(Code::kAborted, "gone"), 25);
  d.commit(d.begin(all_reduce_of(64), DeviceAlgo::kDirect, 3, 2, 30), Status(Code::kAborted, "gone"), 35);
  EXPECT_EQ(d.consume(src), 0u);  // the first is still running
  src.complete(1, done_at(12, 15));
  EXPECT_EQ(d.consume(src), 3u);
  auto recs = d.ring().snapshot();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].state, static_cast<uint8_t>(OpState::kDone));
  EXPECT_EQ(recs[2].state, static_cast<uint8_t>(OpState::kFailed));
  EXPECT_EQ(recs[2].end_ns, 35u);
}

TEST(DeviceOps, AFullRingCountsTheOperationItLeavesOutAndFreesAsTheDeviceCatchesUp) {
  auto made = DeviceOps::create(16, who(), "");
  ASSERT_TRUE(made.ok());
  DeviceOps& d = *made.value();
  ScriptedSource src;
  for (uint64_t s = 1; s <= 16; ++s) d.commit(d.begin(all_reduce_of(4), DeviceAlgo::kDirect, s, 2, 10), Status(), 0);
  EXPECT_EQ(d.begin(all_reduce_of(4), DeviceAlgo::kDirect, 17, 2, 10), DeviceOps::kNoSlot);
  EXPECT_EQ(d.untracked(), 1u);
  src.complete(1, done_at(20, 30));
  EXPECT_EQ(d.consume(src), 1u);
  const size_t slot = d.begin(all_reduce_of(4), DeviceAlgo::kDirect, 18, 2, 40);
  ASSERT_NE(slot, DeviceOps::kNoSlot);
  d.commit(slot, Status(), 0);
  auto recs = d.ring().snapshot();
  ASSERT_EQ(recs.size(), 16u);
  EXPECT_EQ(recs.front().seq, 2u);
  EXPECT_EQ(recs.back().seq, 18u);
}

// The issuer and a consumer thread at once (the service thread's role): every operation finishes exactly once, in
// order, with its own times.
TEST(DeviceOps, AConsumerRacingTheIssuerFinishesEveryOperationOnce) {
  auto made = DeviceOps::create(64, who(), "");
  ASSERT_TRUE(made.ok());
  DeviceOps& d = *made.value();
  ScriptedSource src;
  constexpr uint64_t kOps = 20000;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> consumed{0};
  std::thread consumer([&] {
    while (!stop.load() || consumed.load() < kOps) consumed.fetch_add(d.consume(src));
  });
  uint64_t left_out = 0;
  for (uint64_t s = 1; s <= kOps; ++s) {
    size_t slot = d.begin(all_reduce_of(s % 100), DeviceAlgo::kDirect, s, 2, static_cast<int64_t>(10 * s));
    while (slot == DeviceOps::kNoSlot) {  // full: the device (here: this thread) completes, the consumer frees
      ++left_out;
      slot = d.begin(all_reduce_of(s % 100), DeviceAlgo::kDirect, s, 2, static_cast<int64_t>(10 * s));
    }
    d.commit(slot, Status(), 0);
    src.complete(s, done_at(10 * s + 1, 10 * s + 5));
  }
  stop = true;
  consumer.join();
  EXPECT_EQ(consumed.load(), kOps);
  EXPECT_EQ(d.in_flight(), 0u);
  EXPECT_EQ(d.untracked(), left_out);
  auto recs = d.ring().snapshot();
  ASSERT_EQ(recs.size(), 64u);
  for (size_t i = 0; i < recs.size(); ++i) {
    const uint64_t s = kOps - 63 + i;
    EXPECT_EQ(recs[i].seq, s);
    EXPECT_EQ(recs[i].start_ns, 10 * s + 1);
    EXPECT_EQ(recs[i].end_ns, 10 * s + 5);
  }
  uint64_t counted = 0;
  for (int b = 0; b < kSizeBuckets; ++b)
    counted += d.stats().cell(static_cast<int>(OpKind::kAllReduce), b).count.load();
  EXPECT_EQ(counted, kOps);
}

TEST(DeviceOps, TheExporterShowsTheDevicePathBesideTheHostPath) {
  auto [m, src, d] = attached("dev-export", 16);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(m->attach_device(src, "cuda_ipc", 16), nullptr);  // one device path per communicator
  const OpDesc ag{OpKind::kAllGather, Algo::kRing, DataType::kBFloat16, ReduceOp::kSum, 0, 2048};
  d->commit(d->begin(ag, DeviceAlgo::kCopyEngine, 1, 2, 100), Status(), 0);
  d->commit(d->begin(ag, DeviceAlgo::kCopyEngine, 2, 2, 200), Status(), 0);
  src->complete(1, done_at(150, 4150));
  m->consume_device();
  const std::string text = render_prometheus({m});
  EXPECT_NE(
      text.find("zerowire_operations_total{comm=\"dev-export\",rank=\"0\",op=\"all_gather\",transport=\"cuda_ipc\","
                "algo=\"copy_engine\",size_le_bytes=\"8192\"} 1\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("zerowire_operations_in_flight{comm=\"dev-export\",rank=\"0\",path=\"device\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("zerowire_operations_issued_total{comm=\"dev-export\",rank=\"0\",path=\"device\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("zerowire_current_operation_running_seconds{comm=\"dev-export\",rank=\"0\",path=\"device\","
                      "op=\"all_gather\",seq=\"2\"}"),
            std::string::npos);
  const std::string json = render_comm_json(*m);
  const size_t dev = json.find("\"device\":{\"transport\":\"cuda_ipc\",\"issued\":2,\"in_flight\":1");
  ASSERT_NE(dev, std::string::npos) << json;
  EXPECT_NE(json.find("\"algo\":\"copy_engine\",\"dtype\":\"bfloat16\"", dev), std::string::npos) << json;
  EXPECT_NE(json.find("\"path\":\"device\",\"state\":\"done\",\"status\":\"OK\",\"enqueue_ns\":100,\"start_ns\":150,"
                      "\"end_ns\":4150",
                      dev),
            std::string::npos)
      << json;
  // The engine goes: what completed finishes, the rest stays running (the flight recorder's answer).
  src->complete(2, done_at(4200, 4300));
  m->detach_device();
  EXPECT_EQ(m->device()->in_flight(), 0u);
  src->complete(3, done_at(0, 0));
  m->consume_device();  // detached: nothing left to consume, and no source to call
  m->retire();
}

// Device operations issued faster than a 50 ms tick could finish them (one every 20 µs: 2,500 per 50 ms into a ring
// of 1,024): the monitor's thread passes over a communicator's device records every 5 ms while it has a device path,
// so (almost) none is left out; with the 50 ms tick more than half were.
TEST(DeviceOps, TheMonitorsThreadKeepsUpWithDeviceOperationsIssuedFast) {
  auto [m, src, d] = attached("dev-fast", 1024);
  ASSERT_NE(d, nullptr);
  constexpr uint64_t kOps = 8000;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t s = 1; s <= kOps; ++s) {
    d->commit(d->begin(all_reduce_of(64), DeviceAlgo::kDirect, s, 2, static_cast<int64_t>(10 * s)), Status(), 0);
    src->complete(s, done_at(10 * s + 1, 10 * s + 2));  // the device is done at once
    while (std::chrono::steady_clock::now() < t0 + std::chrono::microseconds(20 * s)) {
    }
  }
  for (int i = 0; i < 400 && d->in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(d->in_flight(), 0u);
  EXPECT_LT(d->untracked(), kOps / 20) << "of " << kOps << " device operations";
  EXPECT_EQ(d->stats().cell(static_cast<int>(OpKind::kAllReduce), size_bucket(256)).count.load() + d->untracked(),
            kOps);
  m->detach_device();
  m->retire();
}

// The device ring as a flight-recorder file, read back by tools/zw_flight: its own communicator entry (path device),
// the device algorithm's name, a finished record (not timed) and a running one.
TEST(DeviceOps, ZwFlightReadsTheDeviceRingsFile) {
  char dir[] = "/tmp/zw_dev_flight_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/zw-flight-hostx-1-dev-comm-r1-dev.bin";
  {
    auto made = DeviceOps::create(16, who(), file);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    DeviceOps& d = *made.value();
    ScriptedSource src;
    const OpDesc ag{OpKind::kAllGather, Algo::kRing, DataType::kBFloat16, ReduceOp::kSum, 0, 2048};
    d.commit(d.begin(ag, DeviceAlgo::kCopyEngine, 1, 2, 100), Status(), 0);
    d.commit(d.begin(all_reduce_of(64), DeviceAlgo::kRing, 2, 2, 200), Status(), 0);
    src.complete(1, seen_done_at(900));
    d.consume(src);
  }
  const std::string cmd = std::string("python3 ") + ZW_FLIGHT_TOOL + " --json " + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("\"path\": \"device\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"algo\": \"copy_engine\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"state\": \"done\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"state\": \"running\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"timed\": false"), std::string::npos) << out;  // the finished one was not timed
  std::remove(file.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace zw::internal::monitor
