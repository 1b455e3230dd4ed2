// zero/engine/engine_device.cc — the device engine's buffers, its optimizer step and its state transfers (engine.h,
// "DEVICE ENGINE").
//
// Tensor-layer calls (convert, copy, reduce_sum, fill, FlatAdamW) run on the current CudaContext's stream, so each
// function here makes EngineOptions::cuda current for its duration (a CudaScope; scopes nest). The step reads one
// f32 back (the squared norm, which is also the overflow test: any inf/nan gradient makes it non-finite) and adds
// the ranks' values with one f64 all-reduce; everything else stays queued.
// Non-goals: see engine.h.
#include <cmath>
#include <optional>
#include <vector>

#include "common/log.h"
#include "tensor/ops.h"
#include "zero/engine/engine.h"
#include "zero/engine/grad_clip.h"

namespace zw::zero {
namespace {

using tensor::OwnedTensor;
using tensor::Shape;
using tensor::Tensor;

Tensor view(MemRef mem, DataType dtype, int64_t n) { return Tensor{mem, dtype, Shape{n}}; }

}  // namespace

Status Engine::allocate_device() {
  tensor::CudaContext& cuda = *options_.cuda;
  const tensor::CudaScope scope(cuda);
  ZW_ASSIGN_OR_RETURN(device_, EngineDevice::create(cuda.device(), cuda.stream()));
  const int64_t n = pm_.total_shard_numel();
  const size_t nb = size_t(n) * 4;
  const int dev = cuda.device();
  ZW_ASSIGN_OR_RETURN(d_grad_, OwnedTensor::zeros(DataType::kFloat32, Shape{n}, MemKind::kCudaDevice, dev));
  if (gpu_optimizer()) {
    ZW_ASSIGN_OR_RETURN(d_master_, OwnedTensor::zeros(DataType::kFloat32, Shape{n}, MemKind::kCudaDevice, dev));
  } else {
    ZW_ASSIGN_OR_RETURN(master_, alloc_pinned_hugepage(nb));
    ZW_ASSIGN_OR_RETURN(m_, alloc_pinned_hugepage(nb));
    ZW_ASSIGN_OR_RETURN(v_, alloc_pinned_hugepage(nb));
  }
  // With the optimizer on the GPU each gather rounds the f32 master into its buffer (PrefetchOptions::round_source):
  // no 16-bit copy of the shard is kept (2 bytes per shard element less, and the optimizer writes none).
  if (model_dtype_ != DataType::kFloat32 && !gpu_optimizer()) {
    if (config_.zero.offload_param.device == OffloadDevice::kCpu) {
      ZW_ASSIGN_OR_RETURN(pinned16_, device_->alloc_pinned(size_t(n) * 2));
    } else {
      ZW_ASSIGN_OR_RETURN(d_model16_, OwnedTensor::zeros(model_dtype_, Shape{n}, MemKind::kCudaDevice, dev));
    }
  }
  ZW_ASSIGN_OR_RETURN(d_sumsq_, OwnedTensor::zeros(DataType::kFloat32, Shape{1}, MemKind::kCudaDevice, dev));
  ZW_ASSIGN_OR_RETURN(d_factor_, OwnedTensor::zeros(DataType::kFloat32, Shape{1}, MemKind::kCudaDevice, dev));
  ZW_INFO(kZero, "zero-3 engine: device %d, optimizer %s, gathers from %s", dev,
          gpu_optimizer() ? "on the GPU" : "offloaded to the CPU",
          model_dtype_ == DataType::kFloat32 ? "the f32 master"
          : gpu_optimizer()                  ? "the f32 master, rounded at each gather"
          : pinned16_.ptr != nullptr         ? "a 16-bit shard in pinned host memory"
                                             : "a 16-bit shard in device memory");
  return Status();
}

Status Engine::create_device_optimizer() {
  const tensor::CudaScope scope(*options_.cuda);
  std::vector<tensor::DecaySegment> segments;
  for (const DecayRange& r : decay_ranges_) segments.push_back(tensor::DecaySegment{r.begin, r.numel, r.decay});
  ZW_ASSIGN_OR_RETURN(gpu_adam_, tensor::FlatAdamW::create(std::move(segments), pm_.total_shard_numel(),
                                                           MemKind::kCudaDevice, options_.cuda->device()));
  return Status();
}

Status Engine::upload_master(const float* host) {
  if (!gpu_optimizer()) return Status();  // the master is host memory and already holds the values
  const tensor::CudaScope scope(*options_.cuda);
  const int64_t n = pm_.total_shard_numel();
  ZW_TRY(tensor::copy(d_master_, Tensor::host(const_cast<float*>(host), Shape{n})));
  return options_.cuda->synchronize();  // `host` may go away when this returns
}

// The 16-bit shard (the gather source) from the master, rounded on the host and copied up (offloaded optimizer;
// offload_param: rounded straight into the pinned shard). The GPU optimizer's gathers read the master itself.
Status Engine::refresh_model16_device() {
  const tensor::CudaScope scope(*options_.cuda);
  const int64_t n = pm_.total_shard_numel();
  if (model_dtype_ != DataType::kFloat32 && !gpu_optimizer()) {
    if (pinned16_.ptr != nullptr) {
      ZW_TRY(tensor::convert(view(MemRef::host(master_.data(), master_.size()), DataType::kFloat32, n),
                             view(pinned16_, model_dtype_, n)));
    } else {
      std::vector<uint16_t> host16(static_cast<size_t>(n));
      const Tensor h16 = view(MemRef::host(host16.data(), host16.size() * 2), model_dtype_, n);
      ZW_TRY(tensor::convert(view(MemRef::host(master_.data(), master_.size()), DataType::kFloat32, n), h16));
      ZW_TRY(tensor::copy(d_model16_, h16));
      ZW_TRY(options_.cuda->synchronize());  // host16 goes away
    }
  }
  return prefetch_->invalidate();
}

Result<StepResult> Engine::step_device(double lr) {
  const tensor::CudaScope scope(*options_.cuda);
  StepResult r;
  r.loss_scale = step_loss_scale_;
  // One read and one all-reduce: the squared norm of this rank's accumulator (non-finite on any overflow).
  ZW_TRY(tensor::reduce_sum(d_sumsq_, d_grad_, /*squares=*/true));
  float local = 0;
  ZW_TRY(tensor::copy(Tensor::host(&local, Shape{1}), d_sumsq_));
  ZW_TRY(options_.cuda->synchronize());
  double total = double(local);
  CollectiveOptions o;
  o.input = o.output = MemRef::host(&total, sizeof total);
  o.count = 1;
  o.dtype = DataType::kFloat64;
  o.op = ReduceOp::kSum;
  ZW_ASSIGN_OR_RETURN(Work w, all_reduce(comm_, o));
  ZW_TRY(w.wait());
  ZW_ASSIGN_OR_RETURN(const bool skip, scaler_.update(!std::isfinite(total)));
  if (!skip) {
    const double divisor = step_loss_scale_ * double(pm_.world_size()) * double(gas_) / predivide_;
    const ClipResult clip = clip_from_norm(std::sqrt(total), divisor, config_.gradient_clipping);
    r.grad_norm = clip.norm;
    ++steps_;
    const AdamParams p = adam_params(lr, clip.grad_scale);
    if (gpu_optimizer()) {
      ZW_TRY(tensor::fill(d_factor_, double(clip.grad_scale)));
      tensor::AdamWConfig a;
      a.lr = p.lr;
      a.beta1 = p.beta1;
      a.beta2 = p.beta2;
      a.eps = p.eps;
      a.weight_decay = p.weight_decay;
      ZW_TRY(gpu_adam_.step(a, steps_, d_master_, d_grad_, Tensor{}, d_factor_));  // gathers round the master
      last_sub_groups_ = 1;
    } else {
      ZW_TRY(adam_sub_groups(p));
    }
  } else {
    ZW_INFO(kZero, "zero engine: gradient overflow at loss scale %g, step skipped; next scale %g", step_loss_scale_,
            scaler_.scale());
  }
  r.skipped = skip;
  r.optimizer_steps = steps_;
  ZW_TRY(d_grad_.zero());  // on the compute stream, after the optimizer read it
  ZW_TRY(prefetch_->invalidate());
  ZW_TRY(resolve_device_spans());
  return r;
}

// The timeline's device marks become times once both streams are idle (after a step, and after an evaluation pass,
// whose spans would otherwise wait for a step that may never come).
Status Engine::resolve_device_spans() {
  if (!spans_) return Status();
  ZW_TRY(device_->synchronize(device_->comm()));
  ZW_TRY(options_.cuda->synchronize());
  return spans_->resolve();
}

Status Engine::gather_unit_device(int unit, float* out) {
  const tensor::CudaScope scope(*options_.cuda);
  const bool own_pass = !in_eval_;
  if (own_pass) ZW_TRY(begin_eval());
  ZW_ASSIGN_OR_RETURN(const UnitView v, fetch(unit, false));
  const int64_t numel = pm_.unit(unit).numel;
  const size_t elem = dtype_size(model_dtype_);
  std::vector<std::byte> host(size_t(numel) * elem);
  ZW_TRY(tensor::copy(view(MemRef::host(host.data(), host.size()), model_dtype_, numel),
                      view(v.values.slice(0, host.size()), model_dtype_, numel)));
  ZW_TRY(options_.cuda->synchronize());
  ZW_TRY(tensor::convert(view(MemRef::host(host.data(), host.size()), model_dtype_, numel),
                         Tensor::host(out, Shape{numel})));
  ZW_TRY(release(unit, false));
  if (own_pass) ZW_TRY(end_eval());
  return Status();
}

// Checkpoints of the GPU optimizer: master, m and v copied down (save) or up (load) through host vectors.
Status Engine::device_state_to_host(std::vector<float>* master, std::vector<float>* m, std::vector<float>* v) {
  const tensor::CudaScope scope(*options_.cuda);
  const int64_t n = pm_.total_shard_numel();
  for (std::vector<float>* h : {master, m, v}) h->resize(size_t(n));
  ZW_TRY(tensor::copy(Tensor::host(master->data(), Shape{n}), d_master_));
  ZW_TRY(tensor::copy(Tensor::host(m->data(), Shape{n}), gpu_adam_.m()));
  ZW_TRY(tensor::copy(Tensor::host(v->data(), Shape{n}), gpu_adam_.v()));
  return options_.cuda->synchronize();
}

Status Engine::device_state_from_host(const float* master, const float* m, const float* v) {
  const tensor::CudaScope scope(*options_.cuda);
  const Shape flat{pm_.total_shard_numel()};
  ZW_TRY(tensor::copy(d_master_, Tensor::host(const_cast<float*>(master), flat)));
  ZW_TRY(tensor::copy(gpu_adam_.m(), Tensor::host(const_cast<float*>(m), flat)));
  ZW_TRY(tensor::copy(gpu_adam_.v(), Tensor::host(const_cast<float*>(v), flat)));
  return options_.cuda->synchronize();
}

}  // namespace zw::zero
