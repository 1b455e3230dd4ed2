// collectives/monitor/comm_monitor.h — one communicator's monitoring: the always-on record ring, the aggregates,
// the operations in flight, and its part of straggler detection. The communicator calls the hooks; the process's
// monitor service (monitor_service.h) reads the state for the Prometheus endpoint and the JSON dump, and drives
// the straggler exchange from its own thread.
//
// Threading: on_start/on_finish are called by the holder of the communicator's run token (one at a time, ordered
// by the communicator's mutex); on_enqueue by any issuing thread; they allocate nothing and take no lock. They write
// the record only: the aggregates and the straggler capture are counted from the finished records by aggregate(),
// which the process's counting thread calls every 5 ms and readers call before they read (the path of a 4 KiB
// operation is ~2 µs: 1 % is 20 ns). Should the records not counted fill half the ring (looked at every 16 records),
// the writer counts them itself (writer_counts()); the counting thread never waits on a socket, so that this stays
// rare.
// Readers (snapshot functions) may run on any thread. service_tick() (the straggler exchange, which talks to the
// store) is called by the service thread only.
// Device-memory operations of the node-local GPU path have their own records and aggregates (device_ops.h): the
// engine attaches them at its creation and detaches them when it goes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/monitor/device_ops.h"
#include "collectives/monitor/op_stats.h"
#include "collectives/monitor/peer_links.h"
#include "collectives/monitor/record_ring.h"
#include "collectives/monitor/straggler.h"
#include "collectives/op_desc.h"
#include "zerowire/status.h"
#include "zerowire/store.h"

namespace zw::internal::monitor {

// What a communicator tells its monitor at creation.
struct MonitorSetup {
  int rank = 0;
  int size = 1;
  uint32_t generation = 0;         // communicators of one name, in creation order
  std::string comm;                // communicator name
  std::string transport;           // transport name
  std::vector<std::string> hosts;  // [rank] host
  std::vector<int> pids;           // [rank] pid
  std::shared_ptr<Store> store;    // the communicator's own (prefixed) store, for the straggler exchange
};

class CommMonitor {
 public:
  // The monitor of a new communicator, registered with the process's monitor service; null when the records cannot be
  // allocated (logged: the communicator works without them). Whether to monitor at all is the caller's (the
  // communicator's settings: CommConfig::monitor, else ZW_MONITOR).
  static std::shared_ptr<CommMonitor> create(MonitorSetup setup);
  ~CommMonitor();

  // Hot path (see the threading note above).
  void on_enqueue(uint64_t seq) { enqueued_->store(seq, std::memory_order_relaxed); }
  // Times are steady-clock (CLOCK_MONOTONIC) ns read by the caller, which needs them anyway (Work::timing()).
  // Inline (below): 6.4 ns per operation in zw_monitor_hook_bench's loop, against 11.2 ns as calls into another unit.
  inline void on_start(const OpDesc& desc, uint64_t seq, int64_t enqueue_ns, int64_t start_ns,
                       PathKind path = PathKind::kHost);
  inline void on_finish(const Status& status, int64_t end_ns);

  // The communicator is going away: a last dump, then unregistered from the service.
  void retire();

  // The device path (its engine's creation): records of `capacity` (0: ZW_MONITOR_RECORDS) operations whose
  // completions `source` reports. Returns the records for the issuing thread, or null (logged) when they cannot be
  // allocated. One device path per communicator.
  DeviceOps* attach_device(std::shared_ptr<DeviceOpSource> source, const std::string& transport, size_t capacity = 0);
  // The engine is going (its last operation finished or given up): finishes what completed, then forgets the source.
  void detach_device();
  // The device path's records, or null before attach_device (set once, before the first device operation).
  const DeviceOps* device() const { return device_.load(std::memory_order_acquire); }
  // Finishes the device records whose operations completed.
  void consume_device();
  // The counting thread, every 5 ms: aggregate(), and consume_device() when a device path is attached.
  void catch_up();

  const MonitorSetup& setup() const { return setup_; }
  const RecordRing& ring() const { return *ring_; }
  // The aggregates, brought up to date with the records finished so far.
  const OpStats& stats() const {
    aggregate();
    return stats_;
  }
  // Counts the records finished since the last call into the aggregates and the straggler window (any thread).
  void aggregate() const;
  // Records overwritten before they were counted: 0 (the writer counts them itself first); a check for tests.
  uint64_t records_lost() const { return lost_.load(std::memory_order_relaxed); }
  // Records counted so far (without counting more, unlike stats()).
  uint64_t records_counted() const { return counted_.load(std::memory_order_acquire); }
  // Times the writer found half the ring not yet counted and counted it on the operation's path (the counting thread
  // fell behind by ~half a ring's operations).
  uint64_t writer_counts() const { return writer_counts_.load(std::memory_order_relaxed); }
  // Per-peer counters, updated by the communicator's rendezvous (Rendezvous::set_peer_links).
  PeerLinks& links() { return links_; }
  const PeerLinks& links() const { return links_; }
  uint64_t in_flight() const;
  // A label that tells this communicator apart in the process: "name", or "name#generation" after the first.
  std::string label() const;
  // Rank 0: the last straggler window judged; the windows judged, and those asked for that could not be (a rank's
  // capture missed, or its window never came). Empty and 0 without the exchange (ZW_STRAGGLER_WINDOW=0, one rank).
  StragglerVerdict verdict() const;
  uint64_t windows_judged() const { return straggler_ ? straggler_->judged() : 0; }
  uint64_t windows_missed() const { return straggler_ ? straggler_->missed() : 0; }

  // The store key (under the communicator's prefix "zw/NAME/GENERATION/") where rank `rank` publishes its metrics
  // endpoint as JSON {rank, size, comm, host, addr, port, pid} when ZW_METRICS_PORT is set (read by zwtop --store).
  static std::string endpoint_key(int rank);

  // Service thread, every 50 ms: one step of the straggler exchange (StragglerExchange::tick).
  void service_tick();

 private:
  explicit CommMonitor(MonitorSetup setup) : setup_(std::move(setup)), links_(setup_.size) {}
  void publish_endpoint();
  void help_aggregate();
  void note_failed(const Status& status);
  void aggregate_locked() const;
  void count(const OpFields& f) const;

  // Writer state (token holder): everything on_start and on_finish load, on one line of its own.
  struct alignas(64) Hot {
    RingWriter ring;          // where the records go
    uint64_t next = 0;        // records begun so far (the ring keeps no count: RecordRing::begun reads it back)
    uint64_t coll_index = 0;  // collectives started so far
    uint64_t packed = 0;      // the running operation's packed fields; 0: none running
    uint32_t help_at = 0;     // records not yet counted at which the writer counts them itself (half the ring),
                              // looked at every kCheckEvery records (counted_ lies on the counting thread's line)
  };
  static_assert(sizeof(Hot) == 64, "CommMonitor::Hot is one cache line");
  // At most help_at + kCheckEvery - 1 records wait uncounted: less than the smallest ring (kMinRecords).
  static constexpr uint64_t kCheckEvery = 16, kMinRecords = 64;
  static_assert(kMinRecords / 2 + kCheckEvery - 1 < kMinRecords);
  Hot hot_;
  MonitorSetup setup_;
  std::unique_ptr<RecordRing> ring_;
  std::atomic<uint64_t>* enqueued_ = nullptr;  // the ring header's last_enqueued (on_enqueue: any issuing thread)
  // Device path: records (kept after detach, for the dump) and their completion source (guarded by device_mutex_,
  // which only consumers take).
  std::unique_ptr<DeviceOps> device_ops_;
  std::atomic<DeviceOps*> device_{nullptr};
  std::mutex device_mutex_;
  std::shared_ptr<DeviceOpSource> device_source_;
  PeerLinks links_;
  bool failed_ = false;  // the ring is marked failed (writer)
  // Counting (aggregate(); under count_mutex_, whichever thread holds it), on lines of its own: the writer's line is
  // touched by every operation.
  alignas(64) mutable std::mutex count_mutex_;
  mutable OpStats stats_;
  mutable std::atomic<uint64_t> counted_{0};  // records counted (ring indices below it)
  mutable uint64_t last_end_ns_ = 0;          // end of the last record counted (0: unknown), for service times
  mutable std::atomic<uint64_t> lost_{0};
  mutable std::atomic<uint64_t> writer_counts_{0};
  // The straggler exchange (null without it): its capture is filled by count(), under count_mutex_.
  std::unique_ptr<StragglerExchange> straggler_;
};

// The two hooks run on every operation's path: they write the record and nothing else (see the threading note above).
inline void CommMonitor::on_start(const OpDesc& desc, uint64_t seq, int64_t enqueue_ns, int64_t start_ns,
                                  PathKind path) {
  Hot& h = hot_;
  OpFields f;
  f.seq = seq;
  f.coll_index = is_p2p(desc.kind) ? 0 : h.coll_index++;
  f.count = desc.count;
  f.enqueue_ns = static_cast<uint64_t>(enqueue_ns);
  f.start_ns = static_cast<uint64_t>(start_ns);
  f.kind = static_cast<uint8_t>(desc.kind);
  f.algo = static_cast<uint8_t>(desc.algo);
  f.dtype = static_cast<uint8_t>(desc.dtype);
  f.redop = static_cast<uint8_t>(desc.op);
  f.path = static_cast<uint8_t>(path);
  f.root = desc.root;
  h.packed = h.ring.begin(h.next++, f);  // never 0: its state is kRunning
}

inline void CommMonitor::on_finish(const Status& status, int64_t end_ns) {
  Hot& h = hot_;
  if (h.packed == 0) return;
  const bool failed = !status.ok();
  h.ring.finish(h.next - 1, h.packed, static_cast<uint64_t>(end_ns), failed ? OpState::kFailed : OpState::kDone,
                static_cast<uint16_t>(status.code()));
  h.packed = 0;
  if (failed && !failed_) note_failed(status);
  if (h.next % kCheckEvery == 0 && h.next - counted_.load(std::memory_order_relaxed) >= h.help_at) help_aggregate();
}

}  // namespace zw::internal::monitor
