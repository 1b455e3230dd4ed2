// collectives/monitor/op_stats.h — the aggregates of one communicator: per operation kind × size bucket, the count,
// bytes, time, errors, a latency histogram and the last algorithm used; and the nccl-tests conventions that turn a
// description into bytes and bus bandwidth.
//
// Threading: one writer (the communicator's run-token holder) updates cells with relaxed loads and stores; any
// thread may read (values of one cell may be a few operations apart; nothing tears). Non-goals: per-algorithm cells
// (the size decides the algorithm; the last one used is kept), sizes above 1 TiB (they share the last bucket).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "collectives/monitor/histogram.h"
#include "collectives/op_desc.h"

namespace zw::internal::monitor {

inline constexpr int kNumKinds = 8;      // OpKind values
inline constexpr int kSizeBuckets = 41;  // bucket b holds sizes in (2^(b-1), 2^b]; bucket 0 holds 0 and 1

// The size bucket of an operation moving `bytes`.
inline int size_bucket(uint64_t bytes) {
  if (bytes <= 1) return 0;
  int b = 64 - __builtin_clzll(bytes - 1);
  return b < kSizeBuckets ? b : kSizeBuckets - 1;
}
// The largest size of bucket b (the label of its cell).
inline uint64_t size_bucket_bound(int b) { return uint64_t{1} << b; }

// Bytes of an operation in nccl-tests' terms: the whole gathered/scattered buffer for all_gather, reduce_scatter
// and all_to_all, the buffer for all_reduce, broadcast and reduce; 0 for barriers and send/recv batches.
inline uint64_t op_bytes(const OpDesc& desc, int world_size);
// nccl-tests' bus-bandwidth factor: busbw = algbw × factor.
double bus_factor(OpKind kind, int world_size);

// One cell: operations of one kind in one size bucket. Times are those of the timed operations: every host
// operation, a sample of the device path's small ones (gpu/gpu_monitor.h). Bandwidth is timed_bytes over service_ns:
// a host operation's time from its issue, or from the end of the operation ahead of it if that ended later, to its
// end (CommMonitor::count: the claim and the hand-off between back-to-back operations count, as in nccl-tests' loop,
// and the wait behind earlier operations does not); a device operation's run time on the GPU. The latency histogram
// holds run times (start to end).
struct StatCell {
  std::atomic<uint64_t> count{0};        // operations finished
  std::atomic<uint64_t> bytes{0};        // their bytes (op_bytes)
  std::atomic<uint64_t> timed_bytes{0};  // bytes of the timed ones
  std::atomic<uint64_t> time_ns{0};      // run time (start to end) of the timed ones
  std::atomic<uint64_t> service_ns{0};   // service time of the timed ones (≥ time_ns; see above)
  std::atomic<uint64_t> errors{0};       // of them, failed
  std::atomic<uint8_t> algo{0};          // algorithm of the last one
  LatencyHistogram latency;              // run times (timed ones; its total is their count)
};

// Algorithm bandwidth of a cell in bytes/s: its timed bytes over their service time (0 before any timed operation).
inline double algbw_Bps(const StatCell& c) {
  const uint64_t ns = c.service_ns.load(std::memory_order_relaxed);
  return ns > 0 ? static_cast<double>(c.timed_bytes.load(std::memory_order_relaxed)) * 1e9 / static_cast<double>(ns)
                : 0.0;
}

class OpStats {
 public:
  // Writer: one finished operation that ran `ns` and was served in `service_ns` (timed), or whose times are unknown
  // (`timed` false: both unused).
  void add(OpKind kind, Algo algo, uint64_t bytes, uint64_t ns, uint64_t service_ns, bool failed, bool timed = true) {
    StatCell& c = cells_[static_cast<size_t>(kind) % kNumKinds][static_cast<size_t>(size_bucket(bytes))];
    bump(c.count, 1);
    bump(c.bytes, bytes);
    if (failed) bump(c.errors, 1);
    c.algo.store(static_cast<uint8_t>(algo), std::memory_order_relaxed);
    if (!timed) return;
    bump(c.timed_bytes, bytes);
    bump(c.time_ns, ns);
    bump(c.service_ns, service_ns);
    c.latency.add(ns);
  }
  const StatCell& cell(int kind, int bucket) const {
    return cells_[static_cast<size_t>(kind)][static_cast<size_t>(bucket)];
  }

 private:
  static void bump(std::atomic<uint64_t>& a, uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  std::array<std::array<StatCell, kSizeBuckets>, kNumKinds> cells_{};
};

// On every operation's path: inline. Also how a reader of a record (which holds no byte count) finds its bytes.
inline uint64_t op_bytes(OpKind kind, DataType dtype, uint64_t count, int n) {
  const uint64_t buffer = count * dtype_size(dtype);
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
      return buffer * static_cast<uint64_t>(n);  // count is per rank
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return buffer;
    case OpKind::kBarrier:
    case OpKind::kSendRecv:
      return 0;  // a batch's count is its number of transfers
  }
  return 0;
}
inline uint64_t op_bytes(const OpDesc& d, int n) { return op_bytes(d.kind, d.dtype, d.count, n); }

}  // namespace zw::internal::monitor
