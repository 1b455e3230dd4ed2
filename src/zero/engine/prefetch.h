// zero/engine/prefetch.h — the ZeRO-3 prefetch scheduler: gathers units into a fixed pool of buffers ahead of use.
//
// The model asks for a unit (acquire), computes with it, and hands it back (release). The order of these uses
// in one training micro step (forward then backward) is either declared up front or recorded during the first
// micro step; either way it is fingerprinted (FNV-1a over unit ids and sizes) and compared across ranks with one
// all-gather, and a mismatch is a kDesync error naming which ranks hold which order. From then on, every acquire
// issues the all-gathers of the next units in the order (DeepSpeed's rule: units are added while fewer than
// stage3_prefetch_bucket_size elements were issued by this acquire, so the next unit goes even when it is larger than
// the bucket; and as many units as free gather buffers allow), so their communication runs while the model computes.
// Memory: K gather buffers of the largest non-persistent unit's padded size are allocated once (K from
// stage3_max_live_parameters, at least 2, at most the number of such units), over shm by zw::mem_alloc so that
// peers write into them with memcpy; a unit occupies one from gather to release. A unit whose next use is
// far away is released after its use (a block is released after forward and gathered again for backward). Reuse
// (stage3_max_reuse_distance, DeepSpeed's rule): after a use, the order is walked forward from the next use,
// summing the elements of each use passed, until the sum reaches max_reuse_distance; a unit met on that walk is
// kept gathered until that next use (0: every unit is released after each use). The pool
// (stage3_max_live_parameters) stays the cap: a unit is kept only when its next use is within the next K − 1
// uses, so the units needed in between still fit. Units of at most stage3_param_persistence_threshold
// elements are persistent: they have their own buffer, are gathered once after each optimizer step, and stay.
// Host memory: views are f32 (a 16-bit gather dtype is converted into an f32 buffer after the gather).
// Device memory (PrefetchOptions::device set, zero/engine/device.h): the pool is device memory and a view is the
// gathered buffer itself, in gather_dtype (the model's compute dtype on CUDA: nothing is converted). Gathers run on
// the device's communication stream: a gather into a buffer first waits for the event the compute stream recorded
// when the buffer's previous unit was released, and acquire() makes the compute stream wait for the gather's event
// instead of waiting on the host. The source shard space may be device memory (gathered from directly), the f32
// master on the device (round_source: each gather first rounds the rank's own shard to gather_dtype, nearest-even,
// into its place in the gather buffer on the communication stream, then gathers in place — no persistent 16-bit
// copy of the shard, as FSDP2 casts into its all-gather input) or page-locked host memory (offload_param: the rank's
// own shard is copied up into its place in the gather buffer, then gathered in place). The host waits for the
// gathers' Work handles only at end_pass() and invalidate() (errors, dead peers), by then long complete.
// begin_pass() orders the pass's gathers after everything queued on the compute stream before it (the optimizer's
// new weights).
// A unit may land in a different buffer each time it is gathered, so callers must not keep views across
// release (the model, model/gpt.h, re-points its recorded views instead).
// Threading: one thread drives a scheduler (the communicator's single-issuer rule); Work completes in the
// communicator's worker (host) or on the device. Non-goals: NVMe parameter offload, several devices.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/tensor.h"
#include "zero/engine/device.h"
#include "zero/engine/partition.h"
#include "zero/engine/stream_spans.h"
#include "zero/engine/timeline.h"
#include "zero/optim/pinned_buffer.h"
#include "zerowire/communicator.h"
#include "zerowire/memory.h"

namespace zw::zero {

struct PrefetchOptions {
  int64_t prefetch_bucket_numel = 50000000;     // stage3_prefetch_bucket_size: elements gathered ahead (0: none)
  int64_t max_live_numel = 1000000000;          // stage3_max_live_parameters: sizes the pool (>= 2 buffers)
  int64_t max_reuse_numel = 1000000000;         // stage3_max_reuse_distance: keep a unit reused this soon
  int64_t persistence_threshold = 100000;       // stage3_param_persistence_threshold: units this small persist
  int64_t model_persistence_numel = INT64_MAX;  // stage3_model_persistence_threshold: cap on persistent elements
  DataType gather_dtype = DataType::kFloat32;   // f32, f16 or bf16 (the dtype of the source shard space)
  bool round_source = false;  // device, f16/bf16 gathers: the source shard space is f32, rounded at each gather
  bool poison_released = false;  // test hook: fill a buffer with NaN when its unit leaves (catches stale views)
  EngineDevice* device = nullptr;  // set: the pool is device memory, gathers on its communication stream (not owned)
  Timeline* timeline = nullptr;    // records every gather and wait when set (must outlive the scheduler)
  StreamSpans* spans = nullptr;    // device: records stream spans of the gathers into `timeline` (not owned)
};

// One gather as seen by the overlap test: when it was issued relative to its use.
struct GatherEvent {
  int unit = 0;             // unit index
  int use_position = 0;     // position in the order at which it was first used (-1: never used)
  int issue_position = 0;   // use (position in the order) during which it was issued; == use_position: on demand
  bool prefetched = false;  // issued before the acquire that needed it
  int64_t issue_ns = 0;     // steady clock at issue
  int64_t ready_ns = 0;     // steady clock when its wait returned
};

struct PrefetchStats {
  int64_t gathers = 0;             // all-gathers issued (prefetched + on demand + persistent)
  int64_t prefetched = 0;          // issued ahead of use
  int64_t on_demand = 0;           // issued by the acquire that needed it
  int64_t persistent_gathers = 0;  // gathers of persistent units
  int64_t evicted = 0;             // prefetched units dropped before use to make room
  int64_t kept_for_reuse = 0;      // releases that kept the unit gathered for a use within max_reuse_distance
  int peak_in_use = 0;             // most shared gather buffers occupied at once (of pool_buffers())
  double wait_s = 0;               // time acquire spent waiting for gathers
};

class PrefetchScheduler {
 public:
  // `source` is this rank's shard space in options.gather_dtype (the all-gather input), or in f32 with
  // options.round_source; it must stay valid.
  static Result<std::unique_ptr<PrefetchScheduler>> create(Communicator& comm, const PartitionManager& pm,
                                                           MemRef source, const PrefetchOptions& options);
  ~PrefetchScheduler();

  // Collective: fixes the order of unit uses of one training micro step and compares fingerprints across ranks.
  Status declare_order(std::vector<int> order);
  // Starts a pass: `scheduled` (training micro step) follows and prefetches along the order (recording it when
  // none is known yet); unscheduled passes (evaluation) gather on demand in any order.
  Status begin_pass(bool scheduled);
  // Returns the unit's gathered values (padded_numel elements: f32 on the host, gather_dtype on the device); waits
  // for its gather (host) or makes the compute stream wait for it (device).
  Result<MemRef> acquire(int unit);
  Status release(int unit);
  // Ends a pass; the first recorded pass fixes the order and checks the fingerprint (collective).
  Status end_pass();
  // After an optimizer step: every gathered copy is stale (waits for in-flight gathers first).
  Status invalidate();

  int pool_buffers() const { return shared_slots_; }  // shared gather buffers (persistent units have their own)
  bool persistent(int unit) const { return units_[unit].persistent; }
  bool order_known() const { return !order_.empty(); }
  uint64_t fingerprint() const { return fingerprint_; }
  const std::vector<int>& order() const { return order_; }
  const PrefetchStats& stats() const { return stats_; }
  const std::vector<GatherEvent>& last_pass_events() const { return events_; }
  size_t buffer_bytes() const { return pool_bytes_; }  // gather pool + persistent buffers
  bool pool_peer_mappable() const { return shared_pool_ != nullptr; }  // zw::mem_alloc memory (over shm)

 private:
  struct Slot {
    MemRef gather;   // gather_dtype, max padded numel
    MemRef compute;  // f32 view buffer (== gather when gather_dtype is f32 or the pool is device memory)
    int unit = -1;   // occupant, -1 = free
    DeviceEvent gathered = nullptr;  // device: recorded on the comm stream after the latest gather into it
    DeviceEvent released = nullptr;  // device: recorded on the compute stream when its last unit was released
    bool release_pending = false;    // device: `released` was recorded and no gather has waited for it yet
  };
  struct UnitState {
    bool persistent = false;  // own buffer, gathered once per optimizer step
    int slot = -1;            // index into slots_ (persistent units have their own slot too)
    bool in_flight = false;   // gather issued, not yet waited
    bool ready = false;       // gathered and converted: the view is valid
    bool held = false;        // between acquire and release
    Work work;                // the gather
    int event = -1;           // index into events_ for the current gather
    int span = -1;            // the current gather's span in options_.timeline
  };

  PrefetchScheduler(Communicator& comm, const PartitionManager& pm, MemRef source, const PrefetchOptions& options)
      : comm_(comm), pm_(pm), source_(source), options_(options) {}
  Status allocate();
  Status issue(int unit, bool prefetch);
  Status wait_ready(int unit);
  Status wait_gather(UnitState& st);
  int free_slot() const;
  Status make_room();
  Status prefetch_ahead();
  int next_use(int unit, int from) const;
  bool keep_for_reuse(int unit) const;
  Status check_fingerprint();
  Status drop(int unit);
  Status allocate_device(size_t total);
  Status issue_device(UnitState& st, const CollectiveOptions& o, int unit);
  Status check_device_works();

  Communicator& comm_;
  const PartitionManager& pm_;
  MemRef source_;
  PrefetchOptions options_;
  struct MemFree {
    void operator()(void* p) const { (void)mem_free(p); }  // fails only for a pointer mem_alloc did not return
  };
  // The gather pool: over shm from zw::mem_alloc, so peers write the gathered shards into it with memcpy instead
  // of process_vm_writev; otherwise a huge-page-advised private mapping.
  PinnedBuffer pool_;
  tensor::Buffer device_pool_;  // device memory (PrefetchOptions::device)
  std::vector<Work> device_works_;  // device: gathers the host has not waited for yet (checked at end_pass)
  DeviceEvent pass_start_ = nullptr;  // device: recorded on the compute stream at begin_pass
  std::unique_ptr<void, MemFree> shared_pool_;
  std::byte* pool_base_ = nullptr;
  size_t pool_bytes_ = 0;
  std::vector<Slot> slots_;  // the K shared buffers, then one per persistent unit
  int shared_slots_ = 0;     // K (0 when every unit is persistent)
  std::vector<UnitState> units_;
  std::vector<int> order_;     // unit uses of one training micro step (empty: not known yet)
  std::vector<int> recorded_;  // uses of the current pass while recording
  uint64_t fingerprint_ = 0;
  bool in_pass_ = false, scheduled_ = false, recording_ = false;
  int position_ = 0;  // uses of the current pass so far
  PrefetchStats stats_;
  std::vector<GatherEvent> events_;  // gathers of the current (or last) pass
};

}  // namespace zw::zero
