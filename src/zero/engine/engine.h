// zero/engine/engine.h — the ZeRO-3 engine: sharded parameters, prefetched gathers, reduce-scattered gradients and a
// sharded (optionally offloaded) Adam step, driven by a DeepSpeed config, in host memory or on a CUDA device.
//
// DEVICE ENGINE (EngineOptions::cuda set; engine_device.cc). The model runs on CUDA and the engine's buffers move to
// the GPU: the gather source (below), the K gather buffers, the two f32 unit-gradient buffers, the buckets and the
// f32 gradient shard are device memory. fetch() returns the gathered unit in the model's compute dtype (no f32
// conversion) and an f32 device gradient buffer. Gathers and gradient reduction run on the engine's
// communication stream, ordered against the context's compute stream with events (prefetch.h, grad_reducer.h); the
// host waits only for the collectives' Work handles at end_micro_step (where the trainer reads the loss anyway) and
// once per step for the squared gradient norm (one f32 read, one f64 all-reduce: overflow and norm together).
// Placements, as DeepSpeed names them:
//   offload_optimizer none: fp32 master, Adam m and v on the GPU; the step is tensor::FlatAdamW's CUDA AdamW
//     (AdamW only: Adam with L2 weight decay is refused). No 16-bit copy of the shard is kept: each gather rounds
//     this rank's part of the master into its place in the gather buffer first (as FSDP2 casts its all-gather
//     input), 2 bytes per shard element less than DeepSpeed's persistent 16-bit partition, for one small kernel
//     per gather on the communication stream.
//   offload_optimizer cpu (pin_memory or not): master, m, v in host memory, the CPU Adam of the host engine run by
//     OffloadPipeline's tiled device path (gradient tiles copied down, 16-bit tiles copied up while tiles update).
//   offload_param cpu (needs offload_optimizer cpu): the 16-bit shard in page-locked host memory, written by the
//     CPU Adam directly; each gather copies this rank's shard up into its place in the gather buffer first.
// The checkpoint format is the same as the host engine's (state is copied down to save, up after loading), so a
// GPU run resumes on any rank count and on the CPU.
//
// HOST ENGINE (EngineOptions::cuda null): everything below.
//
// Each rank keeps only its shards (partition.h): fp32 master weights, Adam's m and v, and an fp32 gradient
// accumulator, all over its "shard space"; with fp16/bf16 also a 16-bit copy of the weights, which is what is
// all-gathered (half the bytes) and converted to f32 for compute. A training micro step is
//   begin_micro_step(); { fetch(u) ... release(u) }*; end_micro_step();
// (a model drives fetch and release through EngineParams, engine_params.h), where fetch returns f32 views of the
// gathered unit (and, in backward, its full gradient buffer) and release says when the unit's gradients are final: they
// are packed into a reduce_bucket_size bucket in the communication dtype (communication_data_type; by default the
// model's 16-bit dtype under fp16/bf16), pre-divided as DeepSpeed does (world_size · gradient_predivide_factor, or
// world_size with prescale_gradients), and a full bucket is reduce-scattered while backward continues (grad_reducer.h).
// After gradient_accumulation_steps micro steps, step() checks overflow across ranks (loss_scaler.h; a 16-bit sum that
// overflowed is inf in the f32 accumulator), updates the loss scale, computes the global norm with one all-reduce
// (grad_clip.h), and runs Adam/AdamW on the shard with grad_scale = predivide / (loss_scale · world_size · gas · clip):
// the gradient is averaged over ranks and micro steps there, not by rewriting it. An overflow skips the update (the
// step counter does not advance). Offload: with offload_optimizer.device = cpu the Adam step runs on a thread pool
// (EngineOptions::optimizer_threads); without it, on the calling thread. Either way master, m, v and the gradient
// shard live in pre-faulted huge-page host buffers (optim/pinned_buffer.h) and the step is the vectorized
// optim/cpu_adam.h kernel with fused 16-bit copy-out: this build has no device memory, so "offloaded" and "not
// offloaded" differ only in threading. offload_param "cpu" and "none" are the same here (shards and gather buffers are
// host memory by construction; pin_memory is satisfied by the huge-page buffers); "nvme" is refused by the parser.
// sub_group_size: the step runs over the shard space in sub-groups of at most that many elements, each updated and
// copied out to 16 bits in turn (optimizer_sub_groups()); the result is the same bits for any size. The step is
// zero/offload/offload_pipeline.h's OffloadPipeline over MemRefs of the gradient shard and the 16-bit weights: host
// memory (always, in this engine) takes its fused path, that sub-group loop with no copies; device memory would take
// its tiled path, which copies gradients down and 16-bit weights up in double-buffered tiles on copy streams ordered
// after EngineOptions::stream. The engine itself still allocates only host buffers (see non-goals).
// stage3_max_reuse_distance: see prefetch.h. Any other parsed key the engine does not act on is an error at create()
// (never silently ignored). Threading: one thread drives an engine. Non-goals: NVMe offload, stages 1 and 2, several
// devices per rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/adamw.h"
#include "tensor/cuda_context.h"
#include "zero/config/config.h"
#include "zero/engine/device.h"
#include "zero/engine/grad_reducer.h"
#include "zero/engine/loss_scaler.h"
#include "zero/engine/partition.h"
#include "zero/engine/prefetch.h"
#include "zero/engine/timeline.h"
#include "zero/offload/offload_pipeline.h"
#include "zero/optim/cpu_adam.h"

namespace zw::zero {

struct EngineOptions {
  int64_t alignment = 16;           // elements; units are padded to world_size × alignment
  std::vector<int> declared_order;  // unit uses of one micro step; empty: recorded in the first micro step
  AdamParams adam;                  // hyperparameters when the config has no "optimizer" block (lr: step())
  int optimizer_threads = 0;        // offloaded Adam threads (0: hardware concurrency)
  bool poison_released = false;     // test hook: NaN-fill gather buffers when their unit leaves
  tensor::CudaContext* cuda = nullptr;  // set: the device engine on the context's device, ordered after its stream
  bool timeline = false;            // record collective and compute spans (timeline()); off: no cost
};

struct UnitView {
  MemRef values;  // padded_numel elements, gathered: f32 (host engine) or the model dtype (device engine)
  MemRef grads;   // f32, padded_numel elements (empty when not asked for); device memory on the device engine
};

struct StepResult {
  bool skipped = false;         // inf/nan gradients: no update this step
  double grad_norm = 0;         // global L2 norm of the averaged gradient, before clipping
  double loss_scale = 1;        // scale the backward passes of this step used
  int64_t optimizer_steps = 0;  // updates taken so far
};

// Bytes this rank holds, for the memory test and the log.
struct EngineMemory {
  size_t param_shard_bytes = 0;  // fp32 master shard + 16-bit copy (none with the optimizer on the GPU)
  size_t optimizer_bytes = 0;    // Adam m and v
  size_t grad_shard_bytes = 0;   // fp32 gradient accumulator
  size_t gather_pool_bytes = 0;  // prefetch buffers (incl. persistent units)
  size_t reduce_pool_bytes = 0;  // gradient buffers
  size_t device_bytes = 0;       // of all the above, what is device memory (device engine)
};

class Engine {
 public:
  // `layout`: the model's units and parameters (the model's own padding is ignored: the engine pads every unit to
  // world_size × EngineOptions::alignment, see partition()). The engine keeps no reference to it.
  static Result<std::unique_ptr<Engine>> create(Communicator& comm, const ZeroConfig& config,
                                                const tensor::ModelLayout& layout, const EngineOptions& options);
  ~Engine();

  // Fills this rank's shards: fill(u, values) writes unit u's full unpadded values (padding is preset to 0).
  Status init_params(const std::function<Status(int unit, float* values)>& fill);
  // Fills this rank's shards only: fill(u, begin, count, out) writes unit u's unpadded elements [begin, begin + count)
  // into out (this rank's part of the unit; padding is preset to 0). Every rank computes 1/world_size of the values.
  Status init_shards(const std::function<Status(int unit, int64_t begin, int64_t count, float* out)>& fill);

  Status begin_micro_step();
  Result<UnitView> fetch(int unit, bool with_grads);
  Status release(int unit, bool grads_final);
  Status end_micro_step();
  // The optimizer step after gradient_accumulation_steps micro steps; lr overrides the configured one when >= 0.
  Result<StepResult> step(double lr);

  // Unscheduled passes (evaluation, inspection): fetch in any order, gradients not allowed.
  Status begin_eval();
  Status end_eval();
  // Collective: the full, current values of unit u (numel elements, unpadded) into out.
  Status gather_unit(int unit, float* out);

  // Collective: saves this rank's master/m/v shards, the step and the loss scaler into `dir`
  // (zero/checkpoint/checkpoint.h) with the caller's opaque client_state (engine_checkpoint.cc). Call between optimizer
  // steps.
  Status save_checkpoint(const std::string& dir, const std::string& client_state);
  // Collective: loads a checkpoint saved by any world size into this engine's shards and returns this rank's
  // client_state (old rank 0's when the world size changed). The 16-bit copy is rebuilt from the master weights.
  Result<std::string> load_checkpoint(const std::string& dir);
  int64_t optimizer_steps() const { return steps_; }
  // Sub-groups of sub_group_size elements the last optimizer update visited: ceil(shard / sub_group_size).
  int64_t optimizer_sub_groups() const { return last_sub_groups_; }

  double loss_scale() const { return scaler_.scale(); }
  // This rank's gradient accumulator (f32 over its shard space): the sums over ranks of gradients divided by
  // grad_predivide() and over micro steps, still multiplied by the loss scale. Valid between the last micro step
  // and step(), which zeroes it. Host engine only (null on the device engine: see grad_shard_ref()).
  const float* grad_shard() const { return device_ ? nullptr : grad_acc_.as<float>(); }
  MemRef grad_shard_ref() const;  // the accumulator wherever it lives
  bool on_device() const { return device_ != nullptr; }
  // world_size · gradient_predivide_factor (world_size with prescale_gradients): DeepSpeed's pre-division.
  double grad_predivide() const { return predivide_; }
  DataType grad_comm_dtype() const { return comm_dtype_; }
  int micro_steps_per_step() const { return gas_; }
  const PartitionManager& partition() const { return pm_; }
  const PrefetchScheduler& prefetch() const { return *prefetch_; }
  const GradReducer& reducer() const { return *reducer_; }
  EngineMemory memory() const;
  // The recorded spans (zero/engine/timeline.h) when EngineOptions::timeline is on, else null.
  const Timeline* timeline() const { return timeline_.get(); }

 private:
  Engine(Communicator& comm, const ZeroConfig& config, const EngineOptions& options, LossScaler scaler)
      : comm_(comm), config_(config), options_(options), scaler_(std::move(scaler)) {}
  Status allocate();
  Status refresh_model16();
  AdamParams adam_params(double lr, float grad_scale) const;
  Status adam_sub_groups(const AdamParams& base);
  // Device engine (engine_device.cc).
  bool gpu_optimizer() const { return device_ && config_.zero.offload_optimizer.device != OffloadDevice::kCpu; }
  Status allocate_device();
  Status create_device_optimizer();
  Status upload_master(const float* host);  // host f32 shard → the master (device: copy up; host: memcpy)
  Status refresh_model16_device();
  Result<StepResult> step_device(double lr);
  Result<StepResult> step_host(double lr);
  // The engine's figures as gauges of the monitoring endpoint (zerowire/metrics.h; engine_metrics.cc), per step.
  void publish_metrics() const;
  Status resolve_device_spans();  // the timeline's device marks into times (no-op without device spans)
  Status gather_unit_device(int unit, float* out);
  Status device_state_to_host(std::vector<float>* master, std::vector<float>* m, std::vector<float>* v);
  Status device_state_from_host(const float* master, const float* m, const float* v);
  float* host_master();  // the host f32 master (host engine, or offload_optimizer on the device engine), else null

  Communicator& comm_;
  ZeroConfig config_;
  EngineOptions options_;
  LossScaler scaler_;
  PartitionManager pm_;
  DataType model_dtype_ = DataType::kFloat32;  // what is gathered: f32, f16 or bf16
  DataType comm_dtype_ = DataType::kFloat32;   // what gradients are reduce-scattered in
  double predivide_ = 1;                       // gradients are divided by this before the reduce-scatter
  PinnedBuffer master_, model16_, m_, v_, grad_acc_;
  // Device engine: where the shards live, and the GPU optimizer.
  std::unique_ptr<EngineDevice> device_;
  std::unique_ptr<StreamSpans> spans_;
  tensor::OwnedTensor d_master_, d_model16_, d_grad_, d_sumsq_, d_factor_;
  MemRef pinned16_;  // offload_param cpu: the 16-bit shard in page-locked host memory (owned by device_)
  tensor::FlatAdamW gpu_adam_;
  std::vector<int> fetched_mark_;  // device timeline: per unit, the compute-stream mark at fetch
  std::unique_ptr<ThreadPool> threads_;
  std::unique_ptr<OffloadPipeline> optimizer_;  // the sharded Adam step (fused host path here)
  std::vector<DecayRange> decay_ranges_;        // the shard pieces, with their weight-decay flag
  std::unique_ptr<Timeline> timeline_;  // before prefetch_ and reducer_, which record into it (outlives them)
  std::vector<int64_t> fetched_ns_;     // timeline: per unit, when fetch returned it (0: not held)
  std::vector<bool> fetched_grads_;     // timeline: per unit, fetched with gradients (a backward span)
  std::unique_ptr<PrefetchScheduler> prefetch_;
  std::unique_ptr<GradReducer> reducer_;
  int gas_ = 1;                  // gradient_accumulation_steps
  int micro_ = 0;                // micro steps since the last optimizer step
  bool in_micro_ = false;        // between begin_micro_step and end_micro_step
  bool in_eval_ = false;         // between begin_eval and end_eval
  int64_t steps_ = 0;            // optimizer updates taken
  double step_loss_scale_ = 1;   // the scale used by this step's micro steps
  int64_t last_sub_groups_ = 0;  // sub-groups the last optimizer update visited
};

}  // namespace zw::zero
