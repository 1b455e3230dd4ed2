// collectives/gpu/gpu_monitor.h — the monitoring records of the node-local device path (gpu_comm.h): every
// operation GpuComm::run is given leaves a record in the communicator's device records (monitor/device_ops.h) with
// its op, bytes, algorithm, sequence number, enqueue time, the start and end of its kernels on the GPU, and status.
//
// Start and end come from two CUDA events per record slot (created when the engine is set up, timing enabled), one
// recorded before the operation's kernels and one after; the monitor's consumer (its service thread) reads them once
// the end event completed: the run time is the events' elapsed time, and both are placed on this host's
// CLOCK_MONOTONIC through an anchor — an event recorded on a private stream and seen complete by a short poll (within
// 100 µs; the anchor is the middle of that window and renewed every second, so that the float milliseconds CUDA
// reports keep sub-µs resolution). Without an anchor the end is the time the completion was seen. Status: a failure
// the kernels reported (a peer that never arrived, an abort) for this or an earlier operation, or an error the event
// reports, else done.
//
// Sampling: recording a timing-enabled event costs ~1.8 µs of host time on an H200 host (0.34 µs without timing;
// docs/PERF.md, zw_cuda_issue_cost), two per operation, against 5-8 µs for the whole call at world size 1. So only
// operations of 1 MiB or more between two or more ranks, and one in every ZW_MONITOR_DEVICE_SAMPLE (16) others, are
// timed (at world size 1 nothing crosses a link: an operation is a local copy or, in place, nothing, which is never
// timed); the others record no event of their own: their completion is the Work's completion event, which the record
// holds until the consumer sees it complete, and they are counted (bytes, status, completion) without a run time
// (kRecordUntimed).
//
// Issuing path: one clock read, the record's fields, two cudaEventRecord calls (timed) or a shared_ptr copy (not); no
// lock, no allocation.
// Consumer: the engine runs its operations in order (device_ops.h), so a pass asks CUDA about a few events (the
// newest, then a bisection) and none about the records before the last one reached, instead of one query per record
// (~1,000 per 5 ms pass at back-to-back small operations; with them the records cost the issuing thread 1-2 µs per
// small call at the default sampling, without them 0.1-0.3 µs: docs/PERF.md, "the device records' cost").
// Threading: begin/mark/commit on the issuing thread; DeviceOpSource calls on the monitor's consumer.
// Non-goals: per-kernel breakdown (one span per operation), the staged path (its host chunks are host records).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/monitor/device_ops.h"
#include "zerowire/status.h"

namespace zw::internal {
class CommImpl;
namespace monitor {
class CommMonitor;
}
}  // namespace zw::internal

namespace zw::internal::gpu {

struct GpuShared;  // gpu_comm.h

// The CUDA side: events per slot, the clock anchor, completion and status of a slot's operation.
class GpuOpTimer final : public monitor::DeviceOpSource {
 public:
  GpuOpTimer(int device, std::shared_ptr<GpuShared> shared) : device_(device), shared_(std::move(shared)) {}
  ~GpuOpTimer() override;
  // Creates the events of `slots` records and the anchor's stream (the engine's creation, on its device).
  Status init(size_t slots);

  // Issuer, before the record is committed: whether `slot`'s operation is timed; its start and end (no-ops when not);
  // the operation's completion event (kept only when not timed: it tells the consumer the operation is done).
  void set_timed(size_t slot, bool timed) { timed_[slot] = timed ? 1 : 0; }
  Status mark_start(size_t slot, cudaStream_t stream) { return timed_[slot] ? mark(start_[slot], stream) : Status(); }
  Status mark_end(size_t slot, cudaStream_t stream) { return timed_[slot] ? mark(end_[slot], stream) : Status(); }
  void set_done(size_t slot, const std::shared_ptr<cudaEvent_t>& done) {
    if (!timed_[slot]) done_[slot] = done;
  }

  void refresh() override;
  bool reached(size_t slot, uint64_t seq) override;
  monitor::DeviceCompletion completion(size_t slot, uint64_t seq) override;

 private:
  static Status mark(cudaEvent_t e, cudaStream_t stream);
  bool try_anchor();

  int device_;
  std::shared_ptr<GpuShared> shared_;               // the kernels' failure word
  std::vector<cudaEvent_t> start_, end_;            // per slot, timing enabled
  std::vector<uint8_t> timed_;                      // per slot: 1 when its operation is timed
  std::vector<std::shared_ptr<cudaEvent_t>> done_;  // per slot not timed: the Work's completion event
  cudaStream_t anchor_stream_ = nullptr;
  cudaEvent_t anchor_[2] = {nullptr, nullptr};  // the current anchor and the one being taken
  int current_ = -1;                            // index of the valid anchor (-1: none yet)
  uint64_t anchor_ns_ = 0;                      // its CLOCK_MONOTONIC time
  uint64_t anchored_at_ns_ = 0;                 // when it was taken
  cudaError_t device_error_ = cudaSuccess;      // the first error reached() saw (CUDA's errors are sticky)
};

// What GpuComm holds: the records, and the timer that completes them.
class GpuOpRecorder {
 public:
  GpuOpRecorder() = default;
  GpuOpRecorder(const GpuOpRecorder&) = delete;
  GpuOpRecorder& operator=(const GpuOpRecorder&) = delete;
  ~GpuOpRecorder() { detach(); }

  // Attaches the device records to the communicator's monitor (nothing when monitoring is off; a failure to set up
  // the events is logged and leaves monitoring of the device path off).
  void attach(CommImpl& impl, int device, std::shared_ptr<GpuShared> shared);
  // The engine's operations are finished (or given up): the records finish what completed.
  void detach();

  // Issuing thread (no-ops when off; kNoSlot when no record slot is free).
  // `timeable`: false for an operation that leaves the device nothing to run (never timed, nor counted for sampling).
  size_t begin(const OpDesc& desc, monitor::DeviceAlgo algo, uint64_t seq, int world_size, int64_t enqueue_ns,
               bool timeable) {
    if (!ops_) return monitor::DeviceOps::kNoSlot;
    const size_t slot = ops_->begin(desc, algo, seq, world_size, enqueue_ns);
    if (slot != monitor::DeviceOps::kNoSlot)
      timer_->set_timed(slot, timeable && sampled(world_size > 1 ? monitor::op_bytes(desc, world_size) : 0));
    return slot;
  }
  Status mark_start(size_t slot, cudaStream_t stream) {
    return slot == monitor::DeviceOps::kNoSlot ? Status() : timer_->mark_start(slot, stream);
  }
  Status mark_end(size_t slot, cudaStream_t stream) {
    return slot == monitor::DeviceOps::kNoSlot ? Status() : timer_->mark_end(slot, stream);
  }
  void set_done(size_t slot, const std::shared_ptr<cudaEvent_t>& done) {
    if (slot != monitor::DeviceOps::kNoSlot) timer_->set_done(slot, done);
  }
  void commit(size_t slot, const Status& status, int64_t now_ns) {
    if (ops_) ops_->commit(slot, status, now_ns);
  }

  static constexpr uint64_t kAlwaysTimedBytes = 1 << 20;

 private:
  // Whether an operation of `bytes` is timed: from kAlwaysTimedBytes always, below that the first of every sample_
  // (world size 1 passes 0: every size is sampled).
  bool sampled(uint64_t bytes) {
    if (bytes >= kAlwaysTimedBytes) return true;
    const bool timed = small_ == 0;
    small_ = small_ + 1 >= sample_ ? 0 : small_ + 1;
    return timed;
  }

  std::shared_ptr<monitor::CommMonitor> monitor_;
  std::shared_ptr<GpuOpTimer> timer_;
  monitor::DeviceOps* ops_ = nullptr;
  uint64_t sample_ = 1;  // ZW_MONITOR_DEVICE_SAMPLE
  uint64_t small_ = 0;   // operations under kAlwaysTimedBytes since the last timed one
};

}  // namespace zw::internal::gpu
