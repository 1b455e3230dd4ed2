// zero/engine/engine.cc — shard buffers, the micro-step protocol and the sharded optimizer step.
//
// Non-goals: see engine.h.
#include "zero/engine/engine.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "tensor/tensor.h"
#include "zero/engine/grad_clip.h"

namespace zw::zero {
namespace {

// Switches the engine has one behaviour for. The parser accepts DeepSpeed's other values with a note and leaves these
// fields at the engine's behaviour (zero/config/config_policy.cc), so only a config built in code trips this.
// offload_param and offload_optimizer need no check: the parser refuses "nvme", and "cpu" and "none" both mean
// host memory here (engine.h).
Status check_implemented(const ZeroConfig& config) {
  const ZeroOptimizationConfig& z = config.zero;
  auto refuse = [](const std::string& key, const std::string& why) {
    return Status(Code::kUnsupported, "zero_optimization." + key + " is parsed but not implemented by the ZeRO-3 "
                                          "engine (" + why + "); remove it from the config");
  };
  if (!z.allgather_partitions) return refuse("allgather_partitions = false", "partitions are all-gathered");
  if (!z.reduce_scatter) return refuse("reduce_scatter = false", "gradients are reduce-scattered");
  if (!z.contiguous_gradients) return refuse("contiguous_gradients = false", "gradients are contiguous per unit");
  return Status();
}

// The device engine's placements (engine.h): what it cannot do is refused by name.
Status check_device_placement(const ZeroConfig& config) {
  const ZeroOptimizationConfig& z = config.zero;
  const bool offload_opt = z.offload_optimizer.device == OffloadDevice::kCpu;
  if (z.offload_param.device == OffloadDevice::kCpu && !offload_opt)
    return Status(Code::kUnsupported,
                  "zero engine (GPU): offload_param.device \"cpu\" needs offload_optimizer.device \"cpu\" too (the "
                  "GPU optimizer writes the 16-bit weights in device memory); offload both or neither");
  const OptimizerConfig& o = config.optimizer;
  if (!offload_opt && o.type != OptimizerType::kNone && !o.adam_w_mode && o.weight_decay != 0)
    return Status(Code::kUnsupported,
                  "zero engine (GPU): the optimizer on the GPU is AdamW (tensor::FlatAdamW); Adam with L2 weight decay "
                  "(adam_w_mode false) runs only offloaded: set offload_optimizer.device \"cpu\" or use AdamW");
  return Status();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(Communicator& comm, const ZeroConfig& config,
                                               const tensor::ModelLayout& layout, const EngineOptions& options) {
  if (config.zero.stage != 3)
    return Status(Code::kUnsupported, "zero engine: zero_optimization.stage is " + std::to_string(config.zero.stage) +
                                          "; the engine implements stage 3 (set \"stage\": 3)");
  ZW_TRY(check_implemented(config));
  if (config.batch.world_size != comm.size())
    return Status(Code::kInvalidArgument, "zero engine: the config was parsed for world size " +
                                              std::to_string(config.batch.world_size) + " but the communicator has " +
                                              std::to_string(comm.size()) + " ranks; parse it with comm.size()");
  Fp16Config fp16 = config.fp16;
  ZW_ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::create(fp16));
  std::unique_ptr<Engine> e(new Engine(comm, config, options, std::move(scaler)));
  ZW_ASSIGN_OR_RETURN(e->pm_, PartitionManager::create(layout, comm.rank(), comm.size(), options.alignment));
  e->model_dtype_ = config.fp16.enabled   ? DataType::kFloat16
                    : config.bf16.enabled ? DataType::kBFloat16
                                          : DataType::kFloat32;
  e->gas_ = int(std::max<int64_t>(1, config.batch.gradient_accumulation_steps));
  const GradScalingConfig& g = config.grad_comm;
  switch (g.comm_dtype) {
    case CommDataType::kModel:
      e->comm_dtype_ = e->model_dtype_;
      break;
    case CommDataType::kFp16:
      e->comm_dtype_ = DataType::kFloat16;
      break;
    case CommDataType::kBf16:
      e->comm_dtype_ = DataType::kBFloat16;
      break;
    case CommDataType::kFp32:
      e->comm_dtype_ = DataType::kFloat32;
      break;
  }
  // DeepSpeed's ZeRO-3 divides by the world size before the sum, and by gradient_predivide_factor unless
  // prescale_gradients (the parser refuses both at once); the engine undoes it in the optimizer's grad_scale.
  e->predivide_ = double(comm.size()) * (g.prescale_gradients ? 1.0 : g.gradient_predivide_factor);
  if (options.cuda != nullptr) ZW_TRY(check_device_placement(config));
  ZW_TRY(e->allocate());
  if (!options.declared_order.empty()) ZW_TRY(e->prefetch_->declare_order(options.declared_order));
  return e;
}

Engine::~Engine() = default;

MemRef Engine::grad_shard_ref() const {
  const size_t n = size_t(pm_.total_shard_numel());
  return device_ ? d_grad_.tensor().mem : MemRef::host(grad_acc_.data(), n * 4);
}

float* Engine::host_master() { return master_.size() > 0 ? master_.as<float>() : nullptr; }

Status Engine::allocate() {
  const size_t n = size_t(pm_.total_shard_numel());
  MemRef source;  // what is gathered: the f32 master (the GPU optimizer's, or without fp16/bf16), or the 16-bit shard
  if (options_.cuda != nullptr) {
    ZW_TRY(allocate_device());
    if (gpu_optimizer())
      source = d_master_.tensor().mem;  // rounded at each gather under fp16/bf16 (round_source below)
    else if (model_dtype_ == DataType::kFloat32)
      source = MemRef::host(master_.data(), n * 4);
    else
      source = pinned16_.ptr != nullptr ? pinned16_ : d_model16_.tensor().mem;
  } else {
    ZW_ASSIGN_OR_RETURN(master_, alloc_pinned_hugepage(n * 4));
    ZW_ASSIGN_OR_RETURN(m_, alloc_pinned_hugepage(n * 4));
    ZW_ASSIGN_OR_RETURN(v_, alloc_pinned_hugepage(n * 4));
    ZW_ASSIGN_OR_RETURN(grad_acc_, alloc_pinned_hugepage(n * 4));
    source = MemRef::host(master_.data(), n * 4);
    if (model_dtype_ != DataType::kFloat32) {
      ZW_ASSIGN_OR_RETURN(model16_, alloc_pinned_hugepage(n * 2));
      source = MemRef::host(model16_.data(), n * 2);
    }
  }
  const ZeroOptimizationConfig& z = config_.zero;
  if (z.offload_optimizer.device == OffloadDevice::kCpu) {
    ZW_ASSIGN_OR_RETURN(threads_, ThreadPool::create(options_.optimizer_threads));
  }
  OffloadPipelineOptions oo;
  oo.threads = threads_.get();
  oo.stream = options_.cuda != nullptr ? options_.cuda->stream() : nullptr;
  ZW_ASSIGN_OR_RETURN(optimizer_, OffloadPipeline::create(oo));
  for (const ShardPiece& piece : pm_.pieces())
    decay_ranges_.push_back(DecayRange{piece.shard_offset, piece.numel, piece.weight_decay});
  PrefetchOptions po;
  po.prefetch_bucket_numel = z.prefetch_bucket_size;
  po.max_live_numel = z.max_live_parameters;
  po.max_reuse_numel = z.max_reuse_distance;
  po.persistence_threshold = z.param_persistence_threshold;
  po.model_persistence_numel = z.model_persistence_threshold;
  po.gather_dtype = model_dtype_;
  po.round_source = gpu_optimizer() && model_dtype_ != DataType::kFloat32;
  po.poison_released = options_.poison_released;
  po.device = device_.get();
  if (options_.timeline) {
    timeline_ = std::make_unique<Timeline>(pm_.rank());
    fetched_ns_.assign(size_t(pm_.num_units()), 0);
    fetched_grads_.assign(size_t(pm_.num_units()), false);
    fetched_mark_.assign(size_t(pm_.num_units()), -1);
    if (device_) spans_ = std::make_unique<StreamSpans>(*device_, *timeline_);
  }
  po.timeline = timeline_.get();
  po.spans = spans_.get();
  ZW_ASSIGN_OR_RETURN(prefetch_, PrefetchScheduler::create(comm_, pm_, source, po));
  GradReducerOptions ro;
  ro.reduce_bucket_numel = z.reduce_bucket_size;
  ro.overlap_comm = z.overlap_comm;
  ro.comm_dtype = comm_dtype_;
  ro.predivide = predivide_;
  ro.device = device_.get();
  ro.timeline = timeline_.get();
  ro.spans = spans_.get();
  ZW_ASSIGN_OR_RETURN(reducer_, GradReducer::create(comm_, pm_, grad_shard_ref(), ro));
  if (gpu_optimizer()) ZW_TRY(create_device_optimizer());
  const EngineMemory mem = memory();
  ZW_INFO(kZero,
          "zero-3 engine: rank %d of %d, %d units, shard %zu elements; params %zu B, adam %zu B, grads %zu B, "
          "gather pool %zu B (%d buffers), reduce pool %zu B; %zu B of it device memory",
          pm_.rank(), pm_.world_size(), pm_.num_units(), n, mem.param_shard_bytes, mem.optimizer_bytes,
          mem.grad_shard_bytes, mem.gather_pool_bytes, prefetch_->pool_buffers(), mem.reduce_pool_bytes,
          mem.device_bytes);
  return Status();
}

EngineMemory Engine::memory() const {
  EngineMemory m;
  const size_t d_params = d_master_.tensor().bytes() + d_model16_.tensor().bytes();
  const size_t d_adam = gpu_optimizer() ? 2 * d_master_.tensor().bytes() : 0;
  m.param_shard_bytes = master_.size() + model16_.size() + pinned16_.bytes + d_params;
  m.optimizer_bytes = m_.size() + v_.size() + d_adam;
  m.grad_shard_bytes = grad_acc_.size() + d_grad_.tensor().bytes();
  m.gather_pool_bytes = prefetch_ ? prefetch_->buffer_bytes() : 0;
  m.reduce_pool_bytes = reducer_ ? reducer_->buffer_bytes() : 0;
  if (device_)
    m.device_bytes = d_params + d_adam + d_grad_.tensor().bytes() + m.gather_pool_bytes + m.reduce_pool_bytes;
  return m;
}

Status Engine::init_params(const std::function<Status(int unit, float* values)>& fill) {
  std::vector<float> full(size_t(pm_.max_padded_numel()));
  std::vector<float> staged(host_master() == nullptr ? size_t(pm_.total_shard_numel()) : 0);
  float* master = host_master() != nullptr ? host_master() : staged.data();
  for (int u = 0; u < pm_.num_units(); ++u) {
    std::fill(full.begin(), full.end(), 0.0f);
    ZW_TRY(fill(u, full.data()));
    const int64_t S = pm_.shard_numel(u);
    std::memcpy(master + pm_.shard_offset(u), full.data() + int64_t(pm_.rank()) * S, size_t(S) * 4);
  }
  ZW_TRY(upload_master(master));
  return refresh_model16();
}

Status Engine::init_shards(const std::function<Status(int unit, int64_t begin, int64_t count, float* out)>& fill) {
  std::vector<float> staged(host_master() == nullptr ? size_t(pm_.total_shard_numel()) : 0);
  float* master = host_master() != nullptr ? host_master() : staged.data();
  for (int u = 0; u < pm_.num_units(); ++u) {
    const int64_t S = pm_.shard_numel(u), first = int64_t(pm_.rank()) * S;
    const int64_t count = std::clamp<int64_t>(pm_.unit(u).numel - first, 0, S);
    std::fill(master + pm_.shard_offset(u), master + pm_.shard_offset(u) + S, 0.0f);
    if (count > 0) ZW_TRY(fill(u, first, count, master + pm_.shard_offset(u)));
  }
  ZW_TRY(upload_master(master));
  return refresh_model16();
}

Status Engine::refresh_model16() {
  if (device_) return refresh_model16_device();
  if (model_dtype_ != DataType::kFloat32) {
    const tensor::Shape shape{pm_.total_shard_numel()};
    ZW_TRY(tensor::convert(tensor::Tensor{MemRef::host(master_.data(), master_.size()), DataType::kFloat32, shape},
                           tensor::Tensor{MemRef::host(model16_.data(), model16_.size()), model_dtype_, shape}));
  }
  return prefetch_->invalidate();
}

Status Engine::begin_micro_step() {
  if (in_micro_ || in_eval_)
    return Status(Code::kInvalidArgument, "zero engine: begin_micro_step inside another pass; end it first");
  if (micro_ == gas_)
    return Status(Code::kInvalidArgument, "zero engine: " + std::to_string(gas_) +
                                              " micro steps (gradient_accumulation_steps) are done; call step()");
  if (micro_ == 0) step_loss_scale_ = scaler_.scale();
  in_micro_ = true;
  return prefetch_->begin_pass(true);
}

Result<UnitView> Engine::fetch(int unit, bool with_grads) {
  if (!in_micro_ && !in_eval_) return Status(Code::kInvalidArgument, "zero engine: fetch outside a pass");
  if (with_grads && !in_micro_)
    return Status(Code::kInvalidArgument, "zero engine: gradients are only available in a training micro step");
  UnitView v;
  ZW_ASSIGN_OR_RETURN(v.values, prefetch_->acquire(unit));
  if (with_grads) {
    ZW_ASSIGN_OR_RETURN(v.grads, reducer_->grads(unit));
  }
  if (spans_) {  // device: the unit's compute span starts on the compute stream here
    ZW_ASSIGN_OR_RETURN(fetched_mark_[size_t(unit)], spans_->mark(device_->compute()));
    fetched_grads_[size_t(unit)] = with_grads;
  } else if (timeline_) {
    fetched_ns_[size_t(unit)] = Timeline::now_ns();
    fetched_grads_[size_t(unit)] = with_grads;
  }
  return v;
}

Status Engine::release(int unit, bool grads_final) {
  if (spans_ && unit >= 0 && unit < pm_.num_units() && fetched_mark_[size_t(unit)] >= 0) {
    ZW_ASSIGN_OR_RETURN(const int end, spans_->mark(device_->compute()));
    spans_->compute(unit, fetched_grads_[size_t(unit)], fetched_mark_[size_t(unit)], end);
    fetched_mark_[size_t(unit)] = -1;
  } else if (timeline_ && unit >= 0 && unit < pm_.num_units() && fetched_ns_[size_t(unit)] > 0) {
    timeline_->compute(unit, fetched_grads_[size_t(unit)], fetched_ns_[size_t(unit)], Timeline::now_ns());
    fetched_ns_[size_t(unit)] = 0;
  }
  ZW_TRY(prefetch_->release(unit));
  if (grads_final) ZW_TRY(reducer_->reduce(unit));
  return Status();
}

Status Engine::end_micro_step() {
  if (!in_micro_) return Status(Code::kInvalidArgument, "zero engine: end_micro_step without begin_micro_step");
  in_micro_ = false;
  ZW_TRY(prefetch_->end_pass());
  ZW_TRY(reducer_->flush());
  ++micro_;
  return Status();
}

AdamParams Engine::adam_params(double lr, float grad_scale) const {
  AdamParams p = options_.adam;
  const OptimizerConfig& o = config_.optimizer;
  if (o.type != OptimizerType::kNone) {
    p.lr = float(o.lr);
    p.beta1 = float(o.beta1);
    p.beta2 = float(o.beta2);
    p.eps = float(o.eps);
    p.weight_decay = float(o.weight_decay);
    p.adam_w_mode = o.adam_w_mode;
  }
  if (lr >= 0) p.lr = float(lr);  // a schedule's 0 (DeepSpeed's warmup start) is a rate, not "unset"
  p.grad_scale = grad_scale;
  return p;
}

Result<StepResult> Engine::step(double lr) {
  if (in_micro_ || micro_ != gas_)
    return Status(Code::kInvalidArgument, "zero engine: step() after " + std::to_string(micro_) + " of " +
                                              std::to_string(gas_) + " micro steps; run all of them first");
  micro_ = 0;
  Result<StepResult> r = device_ ? step_device(lr) : step_host(lr);
  if (r.ok()) publish_metrics();
  return r;
}

Result<StepResult> Engine::step_host(double lr) {
  StepResult r;
  r.loss_scale = step_loss_scale_;
  const size_t n = size_t(pm_.total_shard_numel());
  float* grads = grad_acc_.as<float>();
  const GradSpan span{grads, n, DataType::kFloat32};
  ZW_ASSIGN_OR_RETURN(const bool overflow, global_overflow(comm_, std::span<const GradSpan>(&span, 1)));
  ZW_ASSIGN_OR_RETURN(const bool skip, scaler_.update(overflow));
  if (!skip) {
    // The accumulated gradient is a sum over ranks (each pre-divided) and micro steps: divide it out with the loss
    // scale (DeepSpeed's post-scaling by gradient_predivide_factor is the predivide_ / world_size here).
    const double divisor = step_loss_scale_ * double(pm_.world_size()) * double(gas_) / predivide_;
    ZW_ASSIGN_OR_RETURN(const ClipResult clip, clip_grad_scale(comm_, std::span<const GradSpan>(&span, 1), divisor,
                                                               config_.gradient_clipping));
    r.grad_norm = clip.norm;
    ++steps_;
    ZW_TRY(adam_sub_groups(adam_params(lr, clip.grad_scale)));
  } else {
    ZW_INFO(kZero, "zero engine: gradient overflow at loss scale %g, step skipped; next scale %g", step_loss_scale_,
            scaler_.scale());
  }
  r.skipped = skip;
  r.optimizer_steps = steps_;
  std::memset(grads, 0, n * 4);
  ZW_TRY(prefetch_->invalidate());
  return r;
}

// The Adam step over this rank's shard space in sub-groups of at most sub_group_size elements, in turn: each
// sub-group's f32 master/m/v is updated and copied out to the 16-bit weights before the next one starts. The math
// is per element, so any grouping gives the same bits as one group. Every buffer is host memory here, so the
// pipeline takes its fused path (offload_pipeline.h).
Status Engine::adam_sub_groups(const AdamParams& base) {
  const int64_t n = pm_.total_shard_numel();
  OptimizerShard shard;
  shard.numel = n;
  shard.master = master_.as<float>();
  shard.m = m_.as<float>();
  shard.v = v_.as<float>();
  shard.grad = grad_shard_ref();
  shard.weights_dtype = model_dtype_;
  if (model_dtype_ != DataType::kFloat32)
    shard.weights16 = !device_ ? MemRef::host(model16_.data(), size_t(n) * 2)
                      : pinned16_.ptr != nullptr ? pinned16_
                                                 : d_model16_.tensor().mem;
  ZW_TRY(optimizer_->step(base, int(steps_), shard, decay_ranges_, config_.zero.sub_group_size));
  last_sub_groups_ = optimizer_->last_stats().sub_groups;
  return Status();
}

Status Engine::begin_eval() {
  if (in_micro_ || in_eval_) return Status(Code::kInvalidArgument, "zero engine: begin_eval inside another pass");
  in_eval_ = true;
  return prefetch_->begin_pass(false);
}

Status Engine::end_eval() {
  if (!in_eval_) return Status(Code::kInvalidArgument, "zero engine: end_eval without begin_eval");
  in_eval_ = false;
  ZW_TRY(prefetch_->end_pass());
  return resolve_device_spans();
}

Status Engine::gather_unit(int unit, float* out) {
  if (device_) return gather_unit_device(unit, out);
  const bool own_pass = !in_eval_;
  if (own_pass) ZW_TRY(begin_eval());
  ZW_ASSIGN_OR_RETURN(const UnitView v, fetch(unit, false));
  std::memcpy(out, v.values.data(), size_t(pm_.unit(unit).numel) * 4);
  ZW_TRY(release(unit, false));
  if (own_pass) ZW_TRY(end_eval());
  return Status();
}

}  // namespace zw::zero
