// The device path's monitoring records from real CUDA events (gpu/gpu_monitor.h): two ranks as threads on GPU 0,
// each on its own non-blocking stream, run device-memory collectives on the node-local path; every one must leave a
// record in the communicator's device records — op, bytes, path "device", state done, enqueue <= start <= end within
// the time the host saw the calls take, a run time that fits inside that span — whether its Work was waited on or
// dropped (the stream synchronized instead), and be counted in the aggregates under transport "cuda_ipc". Operations
// under 1 MiB (any size at world size 1) are timed one in ZW_MONITOR_DEVICE_SAMPLE: the others' records say so and hold
// the time their completion was seen; one that leaves the device nothing to do (in place at world size 1) is never
// timed. Operations two ranks issue differently are recorded as failed with the desync code. Skips with "no CUDA
// device" without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/monitor/comm_monitor.h"
#include "collectives/monitor/exporter.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw {
namespace {

using internal::OpKind;
using internal::monitor::CommMonitor;
using internal::monitor::DeviceOps;
using internal::monitor::OpFields;
using internal::monitor::OpState;
using internal::monitor::PathKind;

constexpr int kRanks = 2;
constexpr size_t kMaxBytes = 64 << 20;  // per buffer

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Rank {
  cudaStream_t stream = nullptr;
  std::byte* in = nullptr;
  std::byte* out = nullptr;
};

// One device collective as the test issues it.
struct Op {
  OpKind kind;
  size_t count;  // floats, NCCL's meaning
  bool wait;     // wait on its Work (else the Work is dropped and the stream synchronized later)
  bool in_place = false;  // all_reduce and all_gather only: the input is (this rank's block of) the output
};

Result<Work> issue(Communicator& c, const Rank& m, const Op& op) {
  CollectiveOptions o;
  const size_t n = static_cast<size_t>(c.size()), bytes = op.count * 4;
  const size_t in_bytes = op.kind == OpKind::kReduceScatter ? bytes * n : bytes;
  const size_t out_bytes = op.kind == OpKind::kAllGather ? bytes * n : bytes;
  std::byte* in =
      op.in_place ? m.out + (op.kind == OpKind::kAllGather ? bytes * static_cast<size_t>(c.rank()) : 0) : m.in;
  o.input = MemRef{in, in_bytes, MemKind::kCudaDevice, 0};
  o.output = MemRef{m.out, out_bytes, MemKind::kCudaDevice, 0};
  o.count = op.count;
  o.dtype = DataType::kFloat32;
  o.stream = m.stream;
  switch (op.kind) {
    case OpKind::kAllGather:
      return all_gather(c, o);
    case OpKind::kReduceScatter:
      return reduce_scatter(c, o);
    case OpKind::kBroadcast:
      return broadcast(c, o);
    default:
      return all_reduce(c, o);
  }
}

// Runs body(rank, comm, memory) on `ranks` threads on GPU 0; returns each rank's failure text ("" when none).
std::vector<std::string> run_on_gpu(const std::string& name,
                                    const std::function<std::string(int, Communicator&, Rank&)>& body,
                                    int ranks = kRanks) {
  auto store = make_memory_store();
  std::vector<std::string> failures(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Rank m;
      if (cudaSetDevice(0) != cudaSuccess ||
          cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking) != cudaSuccess ||
          cudaMalloc(&m.in, kMaxBytes) != cudaSuccess || cudaMalloc(&m.out, kMaxBytes) != cudaSuccess ||
          cudaMemset(m.in, 0, kMaxBytes) != cudaSuccess) {
        failures[r] = "setting up the stream and buffers failed";
        return;
      }
      CommConfig config;
      config.name = name;
      config.timeout_s = 20;
      auto comm = Communicator::create(store, r, ranks, config);
      failures[r] = comm.ok() ? body(r, *comm.value(), m) : comm.status().to_string();
      if (comm.ok()) comm.value().reset();  // the engine (and its device records' source) goes before the buffers
      cudaFree(m.in);
      cudaFree(m.out);
      cudaStreamDestroy(m.stream);
    });
  for (auto& t : threads) t.join();
  return failures;
}

// Waits until the monitor's consumer finished every device record (it runs every 50 ms); false after 5 s.
bool all_finished(const CommMonitor& m) {
  const Deadline deadline = Deadline::after_seconds(5);
  while (!deadline.expired()) {
    const DeviceOps* d = m.device();
    if (d != nullptr && d->in_flight() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Whether the engine times each of `ops` (gpu_monitor.h): between ranks from 1 MiB always, below (and at world size 1,
// every size) the first of every sample; never an operation in place at world size 1 (nor does it count for the
// sample).
std::vector<bool> timed_ops(const std::vector<Op>& ops, int ranks = kRanks) {
  const uint64_t sample = static_cast<uint64_t>(std::max<int64_t>(knobs().monitor_device_sample, 1));
  std::vector<bool> timed;
  uint64_t small = 0;
  for (const Op& op : ops) {
    const uint64_t per_rank = op.count * 4;
    const uint64_t bytes =
        op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter ? per_rank * ranks : per_rank;
    if (ranks == 1 && op.in_place) {
      timed.push_back(false);
      continue;
    }
    timed.push_back((ranks > 1 && bytes >= (1u << 20)) || small++ % sample == 0);
  }
  return timed;
}

std::string check_records(const CommMonitor& m, const std::vector<Op>& ops, uint64_t t_begin, uint64_t t_end,
                          int ranks = kRanks) {
  const DeviceOps* d = m.device();
  if (d == nullptr) return "no device records";
  std::vector<OpFields> recs = d->ring().snapshot();
  if (recs.size() != ops.size())
    return std::to_string(recs.size()) + " device records for " + std::to_string(ops.size()) + " operations";
  const std::vector<bool> timed = timed_ops(ops, ranks);
  const uint64_t checked = now_ns();
  uint64_t run_total = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    const OpFields& f = recs[i];
    const std::string at = "record " + std::to_string(i) + " (" + internal::monitor::record_json(f) + "): ";
    const size_t per_rank = ops[i].count * 4;
    const uint64_t want_bytes =
        ops[i].kind == OpKind::kAllGather || ops[i].kind == OpKind::kReduceScatter ? per_rank * ranks : per_rank;
    if (f.seq != i + 1 || f.kind != static_cast<uint8_t>(ops[i].kind) || f.bytes != want_bytes ||
        f.count != ops[i].count)
      return at + "not the operation issued";
    if (f.path != static_cast<uint8_t>(PathKind::kDevice)) return at + "path is not device";
    if (f.state != static_cast<uint8_t>(OpState::kDone) || f.status != 0) return at + "not done ok";
    if (((f.flags & internal::monitor::kRecordUntimed) == 0) != timed[i])
      return at + (timed[i] ? "not timed, but it should be" : "timed, but it should be one of the untimed sample");
    if (!timed[i]) {  // seen complete by the consumer after the host issued it, before this check
      if (!(t_begin <= f.enqueue_ns && f.enqueue_ns <= f.start_ns && f.start_ns == f.end_ns && f.end_ns <= checked))
        return at + "an untimed record's times are out of order";
      continue;
    }
    // 200 µs of slack at the end: the clock anchor's error bound is 50 µs.
    if (!(t_begin <= f.enqueue_ns && f.enqueue_ns <= f.start_ns && f.start_ns <= f.end_ns &&
          f.end_ns <= t_end + 200000))
      return at + "times out of order or outside the host's span [" + std::to_string(t_begin) + ", " +
             std::to_string(t_end) + "]";
    run_total += f.end_ns - f.start_ns;
  }
  if (run_total == 0) return "every device run time is 0";
  return "";
}

TEST(MonitorGpu, EveryDeviceOperationLeavesARecordWithItsDeviceTimes) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Op> ops = {
      {OpKind::kAllGather, 1024, true},         {OpKind::kAllReduce, 1 << 20, true},
      {OpKind::kReduceScatter, 1 << 18, false}, {OpKind::kBroadcast, 1 << 16, false},
      {OpKind::kAllReduce, 16 << 20, false},    {OpKind::kAllGather, 4 << 20, true},
      {OpKind::kAllReduce, 256, false},         {OpKind::kAllGather, 64, true},
      {OpKind::kAllReduce, 4096, false},
  };
  auto failures = run_on_gpu("mon-gpu", [&](int, Communicator& c, Rank& m) -> std::string {
    std::vector<Work> kept;
    const uint64_t t0 = now_ns();
    for (const Op& op : ops) {
      auto w = issue(c, m, op);
      if (!w.ok()) return "issue: " + w.status().to_string();
      if (op.wait) kept.push_back(std::move(w.value()));  // the others' handles are dropped here
    }
    if (cudaStreamSynchronize(m.stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    for (Work& w : kept)
      if (Status s = w.wait(std::chrono::seconds(20)); !s.ok()) return "wait: " + s.to_string();
    const uint64_t t1 = now_ns();
    const auto& mon = c.impl().monitor();
    if (!mon) return "monitoring is off (ZW_MONITOR=0?)";
    if (!all_finished(*mon)) return "device records still in flight after 5 s";
    std::string err = check_records(*mon, ops, t0, t1);
    if (!err.empty()) return err;
    const std::string text = internal::monitor::render_prometheus({mon});
    const std::string want = "zerowire_operations_total{comm=\"mon-gpu\",rank=\"" + std::to_string(c.rank()) +
                             "\",op=\"all_reduce\",transport=\"cuda_ipc\"";
    size_t at = 0, counted = 0;
    while ((at = text.find(want, at)) != std::string::npos) {
      at = text.find('}', at);
      counted += static_cast<size_t>(std::stod(text.substr(at + 2)));
    }
    if (counted != 4) return "all_reduce counted " + std::to_string(counted) + " times under cuda_ipc, not 4:\n" + text;
    return "";
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// A large all-reduce alone: its device run time lies inside what the host measured around it, and is not nothing.
TEST(MonitorGpu, TheDeviceRunTimeFitsInsideTheHostsSpan) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto failures = run_on_gpu("mon-gpu-span", [&](int, Communicator& c, Rank& m) -> std::string {
    const Op op{OpKind::kAllReduce, 16 << 20, true};
    const uint64_t t0 = now_ns();
    auto w = issue(c, m, op);
    if (!w.ok()) return "issue: " + w.status().to_string();
    if (cudaStreamSynchronize(m.stream) != cudaSuccess || !w.value().wait().ok()) return "the all-reduce failed";
    const uint64_t t1 = now_ns();
    const auto& mon = c.impl().monitor();
    if (!mon || !all_finished(*mon)) return "no finished device record";
    std::vector<OpFields> recs = mon->device()->ring().snapshot();
    if (recs.size() != 1) return std::to_string(recs.size()) + " records";
    const uint64_t run = recs[0].end_ns - recs[0].start_ns;
    if (run < 5000 || run > t1 - t0)
      return "device run time " + std::to_string(run) + " ns for 64 MiB, host span " + std::to_string(t1 - t0) + " ns";
    return "";
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// Many small all-gathers: every one is counted with its bytes, one in ZW_MONITOR_DEVICE_SAMPLE has a run time (the
// latency histogram's count), and the bandwidth comes from the timed ones alone.
TEST(MonitorGpu, SmallOperationsAreCountedAllAndTimedOneInTheSample) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Op> ops(40, Op{OpKind::kAllGather, 512, false});  // 4 KiB gathered
  const std::vector<bool> timed = timed_ops(ops);
  const uint64_t want_timed = static_cast<uint64_t>(std::count(timed.begin(), timed.end(), true));
  auto failures = run_on_gpu("mon-gpu-sample", [&](int, Communicator& c, Rank& m) -> std::string {
    const uint64_t t0 = now_ns();
    for (const Op& op : ops)
      if (auto w = issue(c, m, op); !w.ok()) return "issue: " + w.status().to_string();
    if (cudaStreamSynchronize(m.stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    const uint64_t t1 = now_ns();
    const auto& mon = c.impl().monitor();
    if (!mon || !all_finished(*mon)) return "device records still in flight after 5 s";
    if (std::string err = check_records(*mon, ops, t0, t1); !err.empty()) return err;
    const auto& cell =
        mon->device()->stats().cell(static_cast<int>(OpKind::kAllGather), internal::monitor::size_bucket(4096));
    uint64_t observed = 0;
    for (uint64_t n : cell.latency.copy()) observed += n;
    if (cell.count.load() != ops.size() || cell.bytes.load() != ops.size() * 4096 || observed != want_timed ||
        cell.timed_bytes.load() != want_timed * 4096 || cell.time_ns.load() == 0)
      return "aggregates: count " + std::to_string(cell.count.load()) + ", bytes " + std::to_string(cell.bytes.load()) +
             ", timed " + std::to_string(observed) + " (want " + std::to_string(want_timed) + "), timed bytes " +
             std::to_string(cell.timed_bytes.load()) + ", time " + std::to_string(cell.time_ns.load()) + " ns";
    return "";
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// More operations than the ring holds, issued back to back (the stream drained every 256, so the GPU is never far
// behind): the monitor's thread finishes the device records every 5 ms, so (almost) none is left out.
TEST(MonitorGpu, OperationsIssuedFasterThanTheTickAreStillRecorded) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr uint64_t kOps = 6000;
  auto failures = run_on_gpu("mon-gpu-fast", [&](int, Communicator& c, Rank& m) -> std::string {
    const Op op{OpKind::kAllGather, 512, false};
    for (uint64_t i = 1; i <= kOps; ++i) {
      if (auto w = issue(c, m, op); !w.ok()) return "issue: " + w.status().to_string();
      if (i % 256 == 0 && cudaStreamSynchronize(m.stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    }
    if (cudaStreamSynchronize(m.stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    const auto& mon = c.impl().monitor();
    if (!mon || !all_finished(*mon)) return "device records still in flight after 5 s";
    const DeviceOps* d = mon->device();
    const uint64_t counted =
        d->stats().cell(static_cast<int>(OpKind::kAllGather), internal::monitor::size_bucket(4096)).count.load();
    if (d->untracked() > kOps / 100 || counted + d->untracked() != kOps)
      return std::to_string(counted) + " operations recorded and " + std::to_string(d->untracked()) + " left out of " +
             std::to_string(kOps) + " (ring of " + std::to_string(d->capacity()) + ")";
    return "";
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// At world size 1 nothing crosses a link (a local copy, or nothing in place): large operations are sampled like small
// ones, and one in place, which leaves the device nothing to run, is never timed (no two timing events for a no-op).
// Every one is still counted with its bytes.
TEST(MonitorGpu, AtWorldSizeOneEverySizeIsSampledAndNothingInPlaceTimed) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<Op> ops;
  for (int i = 0; i < 24; ++i)
    ops.push_back(Op{i % 2 ? OpKind::kAllReduce : OpKind::kAllGather, 1 << 20, i % 3 == 0, i % 4 < 2});
  const std::vector<bool> timed = timed_ops(ops, 1);
  ASSERT_FALSE(timed[0]) << "the first operation is in place: the check must see an in-place one untimed";
  ASSERT_TRUE(timed[2]) << "the first operation out of place is the sample's first";
  if (knobs().monitor_device_sample > 1) {
    ASSERT_LT(std::count(timed.begin(), timed.end(), true), 12);
  }
  auto failures = run_on_gpu(
      "mon-gpu-alone",
      [&](int, Communicator& c, Rank& m) -> std::string {
        std::vector<Work> kept;
        const uint64_t t0 = now_ns();
        for (const Op& op : ops) {
          auto w = issue(c, m, op);
          if (!w.ok()) return "issue: " + w.status().to_string();
          if (op.wait) kept.push_back(std::move(w.value()));
        }
        if (cudaStreamSynchronize(m.stream) != cudaSuccess) return "cudaStreamSynchronize failed";
        for (Work& w : kept)
          if (Status s = w.wait(std::chrono::seconds(20)); !s.ok()) return "wait: " + s.to_string();
        const uint64_t t1 = now_ns();
        const auto& mon = c.impl().monitor();
        if (!mon || !all_finished(*mon)) return "device records still in flight after 5 s";
        return check_records(*mon, ops, t0, t1, 1);
      },
      1);
  EXPECT_EQ(failures[0], "");
}

TEST(MonitorGpu, AnOperationTheRanksIssuedDifferentlyIsRecordedFailed) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto failures = run_on_gpu("mon-gpu-desync", [&](int r, Communicator& c, Rank& m) -> std::string {
    auto w = issue(c, m, Op{r == 0 ? OpKind::kAllGather : OpKind::kAllReduce, 1024, true});
    if (w.ok()) return "the desynchronized operation was accepted";
    const auto& mon = c.impl().monitor();
    if (!mon || !all_finished(*mon)) return "no finished device record";
    std::vector<OpFields> recs = mon->device()->ring().snapshot();
    if (recs.size() != 1 || recs[0].state != static_cast<uint8_t>(OpState::kFailed) ||
        recs[0].status != static_cast<uint16_t>(w.status().code()))
      return "records: " + (recs.empty() ? std::string("none") : internal::monitor::record_json(recs[0])) + " for " +
             w.status().to_string();
    if (mon->device()->ring().header().failed.load() != 1) return "the device records are not marked failed";
    return "";
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

}  // namespace
}  // namespace zw
