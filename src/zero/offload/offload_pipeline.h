// zero/offload/offload_pipeline.h — the offloaded optimizer step over a rank's shard, pipelined by sub-group and tile
// when the gradient or the 16-bit weights live in device memory (DeepSpeed's ds_adam_step_plus_copy).
//
// The fp32 master weights and Adam's m and v always live in host memory. The gradient shard (f32, or f16/bf16 as
// reduce-scattered) and the 16-bit copy of the weights may each be host or device memory (MemRef::kind):
//   - both on the host: the fused path, exactly the loop the engine always ran: for each sub-group of at most
//     sub_group_size elements, adam_step over each decay range in it, with the 16-bit copy-out fused into the
//     update. No staging, no copies. (A 16-bit gradient must be device memory: it is widened while staged.)
//   - otherwise: the tiled path. The shard is cut into sub-groups of sub_group_size elements and each sub-group into
//     tiles of tile_elems (a tile never crosses a sub-group boundary, so sub-groups are still stepped one after
//     another). Per tile k: the gradient slice is copied down (device → pinned staging, asynchronous on a copy
//     stream, an event after it), the host threads wait for it, widen a 16-bit gradient to f32 and run adam_step on
//     the tile writing the new 16-bit weights into a pinned staging tile, which is then copied up (host → device)
//     asynchronously on a second stream. With B = `buffers` staging slots (2: double, 3: triple buffering) the
//     copies down of tiles k+1 .. k+B-1 and the copies up of tiles k-B+1 .. k-1 run while tile k is updated; the
//     copy down of tile k+B is queued as soon as tile k's update is done, and a slot's staging tile is written only
//     after its previous copy up has finished. Only the elements of the decay ranges are copied (one copy per run
//     of adjacent ranges in the tile), so padding between ranges stays untouched in device memory too.
// Both paths run the same per-element math (cpu_adam.h), so their results are identical bit for bit for any
// sub_group_size, tile_elems and buffer count (widening f16/bf16 to f32 is exact).
//
// Stream order (device memory): the copies start after the work queued so far on the compute stream
// (OffloadPipelineOptions::stream, the stream that produced the gradient), and at the end of step() the compute
// stream is made to wait for every copy: kernels queued on it afterwards see the new weights and may overwrite the
// gradient. step() itself returns once the last tile is updated and its copy is queued; synchronize() waits for the
// copies. The host arrays are final when step() returns. A failed step() may have updated part of the shard; the
// copies it issued are still waited for (compute stream, destructor).
// Copies go through a TileCopier: the CUDA one (streams, events, cudaHostAlloc staging; built only with CUDA), or
// one a test supplies (create_with_copier) to check the tiling and the waits without a GPU.
// Threading: one thread drives a pipeline; the update of a tile runs on OffloadPipelineOptions::threads.
// Non-goals: NVMe, overlapping the fused host path with anything, CUDA graph capture, device-side Adam.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "zero/optim/cpu_adam.h"
#include "zerowire/types.h"

namespace zw::zero {

// Elements [begin, begin + numel) of the shard space take the step; decay says whether weight_decay applies.
// Elements in no range (padding) are left untouched.
struct DecayRange {
  int64_t begin = 0;   // shard-space offset
  int64_t numel = 0;   // elements
  bool decay = false;  // weight decay applies
};

// One rank's optimizer state and the buffers the step reads and writes, all over the same n-element shard space.
struct OptimizerShard {
  int64_t numel = 0;                            // n
  float* master = nullptr;                      // host f32, n
  float* m = nullptr;                           // host f32, n
  float* v = nullptr;                           // host f32, n
  MemRef grad;                                  // n elements of grad_dtype, host or device
  DataType grad_dtype = DataType::kFloat32;     // f32; f16/bf16 only in device memory
  MemRef weights16;                             // n elements of weights_dtype, host or device; empty when f32
  DataType weights_dtype = DataType::kFloat32;  // kFloat32: no 16-bit copy; else f16 or bf16
};

// tile_elems: on an H200 host (16 threads, bf16 or fp16 gradient and weights, 100M parameters) tiles of 2–8 Mi
// elements hid all of the copy time, 1 Mi hid 29% (a fixed cost per tile), 16 Mi 82% (staging no longer in cache).
struct OffloadPipelineOptions {
  int64_t tile_elems = int64_t{1} << 22;  // elements per tile of the tiled path (4 Mi)
  int buffers = 2;                        // staging slots: 2 (double) or 3 (triple buffering)
  bool serialize = false;                 // benchmark baseline: copy down, update, copy up one after another
  ThreadPool* threads = nullptr;          // update threads (null: the calling thread); not owned
  void* stream = nullptr;                 // cudaStream_t of the compute (null: the legacy default stream)
};

// How tiles move between device memory and pinned staging. Copies are asynchronous: a copy on slot s is complete
// once wait_*(s) returns, and the memory it reads must not change before that.
class TileCopier {
 public:
  virtual ~TileCopier() = default;
  virtual Result<void*> alloc_staging(size_t bytes) = 0;  // pinned host memory, freed by free_staging
  virtual void free_staging(void* p) = 0;
  virtual Status begin() = 0;  // later copies are ordered after the compute stream's work so far
  virtual Status copy_down(int slot, void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual Status wait_down(int slot) = 0;
  virtual Status copy_up(int slot, void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual Status wait_up(int slot) = 0;
  virtual Status end() = 0;          // the compute stream waits for every copy issued so far
  virtual Status synchronize() = 0;  // the host waits for every copy issued so far
};

// Counters of the last step() (tests and the benchmark).
struct OffloadStepStats {
  int64_t sub_groups = 0;  // sub-groups visited
  int64_t tiles = 0;       // tiles of the tiled path (0 on the fused path)
  size_t bytes_down = 0;   // bytes copied device → host
  size_t bytes_up = 0;     // bytes copied host → device
};

class OffloadPipeline {
 public:
  // The CUDA copier is created at the first step() that needs it, on the device of that step's device MemRefs.
  static Result<std::unique_ptr<OffloadPipeline>> create(const OffloadPipelineOptions& options);
  static Result<std::unique_ptr<OffloadPipeline>> create_with_copier(const OffloadPipelineOptions& options,
                                                                     std::unique_ptr<TileCopier> copier);
  ~OffloadPipeline();
  OffloadPipeline(const OffloadPipeline&) = delete;
  OffloadPipeline& operator=(const OffloadPipeline&) = delete;

  // One optimizer step (1-based `step`) over the decay ranges (sorted, not overlapping, inside the shard) in
  // sub-groups of sub_group_size elements. base.weight_decay applies to ranges with decay, 0 to the others.
  Status step(const AdamParams& base, int step, const OptimizerShard& shard, std::span<const DecayRange> ranges,
              int64_t sub_group_size);
  Status synchronize();  // waits for the copies of earlier steps (no-op without a copier)
  const OffloadStepStats& last_stats() const { return stats_; }
  const OffloadPipelineOptions& options() const { return options_; }

 private:
  struct Staging;
  explicit OffloadPipeline(const OffloadPipelineOptions& options);
  Status fused_step(const AdamParams& base, int step, const OptimizerShard& shard, std::span<const DecayRange> ranges,
                    int64_t sub_group_size);
  Status tiled_step(const AdamParams& base, int step, const OptimizerShard& shard, std::span<const DecayRange> ranges,
                    int64_t sub_group_size);
  Status ensure_copier(const OptimizerShard& shard);
  Status ensure_staging(const OptimizerShard& shard);

  OffloadPipelineOptions options_;
  std::unique_ptr<TileCopier> copier_;
  int copier_device_ = -1;  // device of the CUDA copier (-1: none yet, or a test's copier)
  std::unique_ptr<Staging> staging_;
  OffloadStepStats stats_;
};

// The CUDA copier for `device` ordered after `stream` (offload_pipeline_cuda.cc); kUnsupported without CUDA.
Result<std::unique_ptr<TileCopier>> make_cuda_tile_copier(int device, void* stream);

}  // namespace zw::zero
