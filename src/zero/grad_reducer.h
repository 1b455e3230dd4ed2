// zero/grad_reducer.h — ZeRO-3 gradient reduction: each unit's full gradient is reduce-scattered (sum) across
// ranks as soon as the model says it is final, while backward goes on, and this rank's slice is added into its
// fp32 gradient accumulator (so gradient_accumulation_steps micro steps sum up before the optimizer step).
//
// Memory: a fixed pool of unit-sized f32 gradient buffers, allocated once. A unit takes a buffer at its first
// grads() call of a micro step (zeroed, then the model accumulates into it) and gives it back when its
// reduce-scatter completed. The reduce-scatter runs in place (this rank's slice ends up at rank·S inside the
// buffer). With overlap_comm, up to reduce_bucket_size elements of reduce-scatters stay in flight and complete
// while later units compute; without it each reduce-scatter is waited for at once. The caller divides by
// world_size × gradient_accumulation_steps (the engine folds that into the optimizer's grad_scale).
// Threading: one thread drives a reducer (the communicator's single-issuer rule).
// Non-goals: splitting one unit into several reduce-scatters, 16-bit gradient communication, device memory.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "zero/optim/pinned_buffer.h"
#include "zero/partition.h"
#include "zerowire/communicator.h"

namespace zw::zero {

struct GradReducerOptions {
  int64_t reduce_bucket_numel = 500000000;  // reduce_bucket_size: elements of reduce-scatters in flight
  bool overlap_comm = true;                 // leave reduce-scatters running while backward continues
  void* stream = nullptr;                   // cudaStream_t the reduce-scatters are ordered on (device memory only)
};

struct GradReducerStats {
  int64_t reduces = 0;     // reduce-scatters issued
  int64_t overlapped = 0;  // reduce-scatters still pending when the model asked for the next unit's gradients
  int max_in_flight = 0;   // most reduce-scatters left running while the model went on (0: no overlap)
  double wait_s = 0;       // time spent waiting for reduce-scatters
};

class GradReducer {
 public:
  // `accum` is this rank's f32 gradient accumulator over its shard space (the engine zeroes it per step).
  static Result<std::unique_ptr<GradReducer>> create(Communicator& comm, const PartitionManager& pm, MemRef accum,
                                                     const GradReducerOptions& options);
  ~GradReducer();

  // The unit's full f32 gradient buffer (padded_numel elements); zeroed when the unit first asks in a micro step.
  Result<MemRef> grads(int unit);
  // The unit's gradients are final for this micro step: reduce-scatter them (the buffer returns to the pool).
  Status reduce(int unit);
  // Waits for every pending reduce-scatter and adds the results into the accumulator.
  Status flush();

  int pool_buffers() const { return static_cast<int>(buffers_.size()); }
  const GradReducerStats& stats() const { return stats_; }
  size_t buffer_bytes() const { return pool_.mapped_bytes(); }

 private:
  struct Pending {
    int unit = 0;          // whose gradients
    int buffer = 0;        // index into buffers_
    Work work;             // the reduce-scatter
    bool counted = false;  // already counted as overlapped
  };
  GradReducer(Communicator& comm, const PartitionManager& pm, MemRef accum, const GradReducerOptions& options)
      : comm_(comm), pm_(pm), accum_(accum), options_(options) {}
  Status complete_front();
  Status poll();

  Communicator& comm_;
  const PartitionManager& pm_;
  MemRef accum_;
  GradReducerOptions options_;
  PinnedBuffer pool_;
  std::vector<MemRef> buffers_;
  std::vector<int> owner_;        // per buffer: unit, or -1 when free
  std::vector<int> unit_buffer_;  // per unit: buffer, or -1
  std::deque<Pending> pending_;   // issue order
  int max_pending_ = 1;           // from reduce_bucket_numel
  GradReducerStats stats_;
};

}  // namespace zw::zero
