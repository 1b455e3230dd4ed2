// zero/engine/grad_reducer.h — ZeRO-3 gradient reduction: units' gradients are packed into buckets of
// reduce_bucket_size elements in the communication dtype, each bucket is reduce-scattered (sum) across ranks while
// backward goes on, and this rank's slice is converted to f32 and added into its gradient accumulator (so
// gradient_accumulation_steps micro steps sum up before the optimizer step).
//
// Buckets (DeepSpeed's reduce_bucket_size, in elements of all ranks together): a bucket holds capacity C =
// reduce_bucket_size / world_size elements per rank, packed rank-major: rank q's part of the bucket is, entry after
// entry, the slice of each unit's gradient that rank q owns, so one reduce-scatter leaves every rank its shard of
// every unit in the bucket, contiguous per unit. Consecutive units share a bucket while they fit; a unit that does
// not fit in what is left closes the bucket first; a unit larger than a bucket is split into pieces of C elements
// per rank (its shard is cut at the same shard offsets on every rank). A bucket is issued when it is full or at
// flush() (end of backward); a partial bucket is compacted before it is issued.
// Dtype and scaling (DeepSpeed's __avg_scatter_grads): while packing, every element is multiplied by 1/predivide and
// rounded to comm_dtype (f32, f16 or bf16; round to nearest-even); the reduced slice is widened back to f32 when it
// is added to the accumulator. An inf/nan of the 16-bit sum (overflow) therefore reaches the accumulator, where the
// loss scaler's check sees it. The caller divides by world_size × gradient_accumulation_steps / predivide (the
// engine folds that into the optimizer's grad_scale).
// Memory, allocated once: two f32 unit-sized buffers the model accumulates into (a tied embedding and a block may
// accumulate at once; a unit gives its buffer back when reduce() has packed it), and max_in_flight + 1 buckets of
// W·C elements (C capped at this rank's whole shard space, so a 5e8 default costs no more than the model).
// With overlap_comm, up to reduce_bucket_size elements of issued buckets stay in flight (at least one bucket) and
// complete while later units compute; without it each reduce-scatter is waited for when it is issued.
// Device memory (GradReducerOptions::device, zero/engine/device.h): the unit buffers, the buckets and the accumulator
// are device memory, and everything after the model's backward runs on the device's communication stream: reduce()
// records an event on the compute stream, the communication stream waits for it and packs (the same narrowing
// kernel math as the host: engine/cuda/device_cuda.cu), a bucket is reduce-scattered there and its slice widened
// into the accumulator right behind it, so a bucket is free again in stream order (no host wait; a partial bucket is
// compacted into the second bucket buffer with one 2D copy). A unit buffer handed out again is zeroed on the compute
// stream after an event says its last packing is done. flush() makes the compute stream wait for the last
// accumulation, then the host checks the reduce-scatters' Work handles (errors and dead peers; by then complete).
// Threading: one thread drives a reducer (the communicator's single-issuer rule).
// Non-goals: per-parameter buckets (units are the grain), a bucket's 16-bit accumulation across micro steps (the
// sum over micro steps is f32).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "tensor/tensor.h"
#include "zero/engine/device.h"
#include "zero/engine/partition.h"
#include "zero/engine/stream_spans.h"
#include "zero/engine/timeline.h"
#include "zero/optim/pinned_buffer.h"
#include "zerowire/communicator.h"

namespace zw::zero {

struct GradReducerOptions {
  int64_t reduce_bucket_numel = 500000000;   // reduce_bucket_size: elements per reduce-scatter, all ranks together
  bool overlap_comm = true;                  // leave reduce-scatters running while backward continues
  DataType comm_dtype = DataType::kFloat32;  // what is reduce-scattered: kFloat32, kFloat16 or kBFloat16
  double predivide = 1.0;                    // gradients are multiplied by 1/predivide before the sum (> 0)
  EngineDevice* device = nullptr;            // set: device memory, work on its communication stream (not owned)
  Timeline* timeline = nullptr;              // records every reduce-scatter and wait when set (must outlive it)
  StreamSpans* spans = nullptr;              // device: stream spans of the reduce-scatters (not owned)
};

struct GradReducerStats {
  int64_t reduces = 0;        // reduce-scatters issued
  int64_t reduced_bytes = 0;  // their input bytes (all ranks' parts of each bucket)
  int64_t split_units = 0;    // units whose gradient went out in more than one reduce-scatter
  int64_t overlapped = 0;     // host: still pending when the model asked for the next unit's gradients; device:
                              // issued on the communication stream while backward went on (all but the flush's)
  int max_in_flight = 0;      // most reduce-scatters left running while the model went on (0: no overlap)
  double wait_s = 0;          // time spent waiting for reduce-scatters
};

class GradReducer {
 public:
  // `accum` is this rank's f32 gradient accumulator over its shard space (the engine zeroes it per step).
  static Result<std::unique_ptr<GradReducer>> create(Communicator& comm, const PartitionManager& pm, MemRef accum,
                                                     const GradReducerOptions& options);
  ~GradReducer();

  // The unit's full f32 gradient buffer (padded_numel elements); zeroed when the unit first asks in a micro step.
  Result<MemRef> grads(int unit);
  // The unit's gradients are final for this micro step: pack them into the open bucket (issuing every bucket that
  // fills up) and give the unit's buffer back to the pool.
  Status reduce(int unit);
  // Issues the open bucket, waits for every pending reduce-scatter and adds the results into the accumulator.
  Status flush();

  int pool_buffers() const { return static_cast<int>(unit_buffers_.size()); }  // f32 unit buffers
  int64_t bucket_capacity() const { return capacity_; }                        // elements per rank in one bucket (C)
  int max_in_flight() const { return max_pending_; }                           // issued buckets allowed to run on
  const GradReducerStats& stats() const { return stats_; }
  size_t buffer_bytes() const {
    return unit_pool_.mapped_bytes() + bucket_pool_.mapped_bytes() + device_units_.bytes() + device_buckets_.bytes();
  }

 private:
  struct Entry {
    int unit = 0;          // whose gradients
    int64_t begin = 0;     // first element, as an offset into the unit's shard (same on every rank)
    int64_t numel = 0;     // elements per rank
    int64_t position = 0;  // offset of this entry inside each rank's part of the bucket
  };
  struct Bucket {
    MemRef buffer;               // world_size · capacity_ elements of comm_dtype
    std::vector<Entry> entries;  // packed in this order in every rank's part
    int64_t filled = 0;          // elements per rank packed so far
    Work work;                   // the reduce-scatter, once issued
    bool counted = false;        // already counted as overlapped
    int span = -1;               // the reduce-scatter's span in options_.timeline
  };
  GradReducer(Communicator& comm, const PartitionManager& pm, MemRef accum, const GradReducerOptions& options)
      : comm_(comm), pm_(pm), accum_(accum), options_(options) {}
  void pack(int unit, const float* grads, int64_t begin, int64_t numel);
  Status issue();
  Status complete_front(bool blocking = true);  // blocking: the caller waits (not known complete)
  Status poll();
  Status allocate_device(size_t unit_bytes, size_t bucket_bytes);
  Status issue_device(Bucket& k);
  Status pack_device(int unit, int b);

  Communicator& comm_;
  const PartitionManager& pm_;
  MemRef accum_;
  GradReducerOptions options_;
  size_t elem_ = 4;       // bytes of one comm_dtype element
  int64_t capacity_ = 1;  // C: elements per rank in one bucket
  PinnedBuffer unit_pool_, bucket_pool_;
  tensor::Buffer device_units_, device_buckets_;  // device memory (GradReducerOptions::device)
  std::vector<DeviceEvent> unit_final_;           // device, per unit buffer: compute recorded "gradients final"
  std::vector<DeviceEvent> unit_packed_;          // device, per unit buffer: comm recorded "packed, reusable"
  std::vector<bool> packed_pending_;              // device: unit_packed_ recorded, not yet waited for by compute
  DeviceEvent reduced_ = nullptr;                 // device: comm recorded "every accumulation so far is done"
  std::vector<Work> device_works_;                // device: reduce-scatters not yet checked by the host
  std::vector<MemRef> unit_buffers_;  // f32, max_padded_numel each
  std::vector<int> owner_;            // per unit buffer: unit, or -1 when free
  std::vector<int> unit_buffer_;      // per unit: unit buffer, or -1
  std::vector<Bucket> buckets_;       // max_pending_ + 1
  int open_ = 0;                      // the bucket being packed
  std::deque<int> pending_;           // issued buckets, in issue order
  int max_pending_ = 1;               // issued buckets left running (0: waited for at once)
  GradReducerStats stats_;
};

}  // namespace zw::zero
