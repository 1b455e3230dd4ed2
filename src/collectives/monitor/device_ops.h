// collectives/monitor/device_ops.h — the records and aggregates of a communicator's device-memory operations on the
// node-local GPU path (collectives/gpu/gpu_comm.h), which never pass through the communicator's queue: the issuing
// thread enqueues kernels on the caller's stream and returns, and the operation finishes later on the GPU.
//
// The issuing thread begins a record when the call enters (state running, so a rank blocked in the descriptor exchange
// shows which operation it is in) and commits it once the kernels are enqueued, or with the error when the call
// failed. Its times come from the device: the engine records a CUDA event before and after the kernels
// (DeviceOpSource, implemented in gpu/gpu_monitor.cc; of small operations only a sample is timed, the others are
// counted with their bytes and completion but no run time: kRecordUntimed), and the consumer — the monitor's counting
// thread every 5 ms, and the engine once more when it goes — finishes the records whose operation completed, in issue
// order, with the start and end converted to this host's CLOCK_MONOTONIC, and updates the aggregates. Neither side
// allocates or locks on the issuing path; consumers are serialized by a mutex the issuer never takes.
//
// The pending records are the ring's own slots: while `capacity` device operations are issued and not finished (the
// GPU that far behind the host, or more issued between two passes of the consumer than the ring holds), a further one
// finds no free slot; it is counted (untracked()) and left out.
// Non-goals: the straggler windows (host collectives only), device-side per-peer counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/monitor/op_stats.h"
#include "collectives/monitor/record_ring.h"
#include "collectives/op_desc.h"
#include "zerowire/status.h"

namespace zw::internal::monitor {

// How the device path ran an operation (the record's `algo` field when its path is kDevice).
enum class DeviceAlgo : uint8_t { kDirect = 0, kRing = 1, kCopyEngine = 2 };
const char* device_algo_name(uint8_t algo);

// The completion of one device operation, as the device reports it.
struct DeviceCompletion {
  enum class State : uint8_t { kPending, kDone, kFailed } state = State::kPending;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC when the stream reached the operation's kernels
  uint64_t end_ns = 0;    // ... and when they had finished
  uint16_t code = 0;      // zw::Code when failed
  bool timed = true;      // false: the run was not timed (start = end = when the completion was seen)
};

// What the device engine provides: completions of the operations it was told about (slot = ring index modulo the
// capacity). Called by the consumer only (one at a time). The engine runs its operations in issue order (each is
// ordered after the one before, whatever the stream), so when the device has reached the end of one it has reached
// the end of every earlier one: the consumer asks `reached` of a few records (the newest first, then a bisection)
// rather than one query per record, and asks the completions of the ones before the last reached knowing that.
class DeviceOpSource {
 public:
  virtual ~DeviceOpSource() = default;
  // Once per consumer pass, before the completions (the CUDA source re-anchors its clock here).
  virtual void refresh() {}
  // Whether the device has reached the end of operation `seq` in `slot` (or failed trying): a query, nothing else.
  virtual bool reached(size_t slot, uint64_t seq) = 0;
  // Operation `seq` in `slot`, whose end the device reached (reached() said so of it or of a later operation): its
  // times and status. kPending only from a source that breaks the order (the consumer then asks again later).
  virtual DeviceCompletion completion(size_t slot, uint64_t seq) = 0;
};

class DeviceOps {
 public:
  static constexpr size_t kNoSlot = SIZE_MAX;

  // A ring of `capacity` records (rounded up to a power of two) with the identity `who` (its transport names the
  // device path); `file` as for RecordRing (flight recorder).
  static Result<std::unique_ptr<DeviceOps>> create(size_t capacity, const RingIdentity& who, const std::string& file);

  // Issuer: begins the record of operation `seq` (the device path's own numbering, the same on every rank), entered
  // at `enqueue_ns`; returns its slot, or kNoSlot when every slot holds an unfinished operation.
  size_t begin(const OpDesc& desc, DeviceAlgo algo, uint64_t seq, int world_size, int64_t enqueue_ns);
  // Issuer: the operation of `slot` was enqueued on the device (its events are recorded: `status` ok), or failed
  // before that (`status` says why; it is recorded as failed at `now_ns`). Publishes it to the consumer.
  void commit(size_t slot, const Status& status, int64_t now_ns);

  // Consumer: finishes, in issue order, every committed record whose completion `source` reports; returns how many.
  // Asks `source.reached` about O(log pending) records per call.
  size_t consume(DeviceOpSource& source);

  const RecordRing& ring() const { return *ring_; }
  const OpStats& stats() const { return stats_; }
  size_t capacity() const { return ring_->capacity(); }
  uint64_t issued() const { return ring_->header().last_enqueued.load(std::memory_order_relaxed); }
  uint64_t in_flight() const;                                                        // begun, not finished
  uint64_t untracked() const { return untracked_.load(std::memory_order_relaxed); }  // left out (no free slot)

 private:
  // What the issuer tells the consumer about a slot (besides the ring record).
  struct Pending {
    uint64_t seq = 0;
    uint64_t bytes = 0;
    int64_t enqueue_ns = 0;
    int64_t failed_ns = 0;    // failed at issue: when
    uint16_t issue_code = 0;  // failed at issue: its code (0: enqueued on the device)
    OpKind kind = OpKind::kAllGather;
    uint8_t algo = 0;
  };
  DeviceOps() = default;
  void finish(uint64_t index, const Pending& p, uint64_t start_ns, uint64_t end_ns, OpState state, uint16_t code,
              bool timed = true);
  // The end of the committed records [from, committed) that the device has reached: the index after the last one
  // whose end it reached (records refused at issue have no device side and count as reached).
  uint64_t reached_until(DeviceOpSource& source, uint64_t from, uint64_t committed) const;

  std::unique_ptr<RecordRing> ring_;
  std::unique_ptr<Pending[]> pending_;  // [capacity]
  OpStats stats_;                       // written by the consumer only
  std::atomic<uint64_t> committed_{0};  // records committed by the issuer (ring indices below are published)
  std::atomic<uint64_t> finished_{0};   // records finished by the consumer
  std::atomic<uint64_t> untracked_{0};  // operations left out for want of a slot (issuer)
  uint64_t begun_ = 0;                  // issuer: ring index of the next record
};

}  // namespace zw::internal::monitor
