// zw_train/strategy_flat.cc — the single-process strategy: flat f32 master weights, f32 gradients and AdamW
// moments on the model's device, the compute copy the model reads (bf16/fp16 on CUDA, the master itself in f32),
// and fp16 dynamic loss scaling (zero::LossScaler with DeepSpeed's defaults).
//
// The optimizer step never waits for the device before its last line: the squared gradient norm (reduce_sum),
// the gradient factor (unscale × clip, grad_factor) and the AdamW update with its 16-bit copy-out are queued on
// the stream, then one copy reads the norm and the factor back (an overflow shows as a non-finite factor, and the
// update has already skipped itself on the device).
// Non-goals: gradient accumulation across calls other than the trainer's micro steps, sharding.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "model/gpt_layout.h"
#include "model/param_provider.h"
#include "tensor/adamw.h"
#include "tensor/ops.h"
#include "zero/engine/loss_scaler.h"
#include "zw_train/checkpoint.h"
#include "zw_train/strategy.h"

namespace zw::train {
namespace {

using tensor::OwnedTensor;
using tensor::Shape;
using tensor::Tensor;

class FlatStrategy final : public Strategy {
 public:
  FlatStrategy(const TrainConfig& c, const model::GptLayout& layout, const Placement& p, tensor::CudaContext* cuda)
      : c_(c), layout_(layout), place_(p), cuda_(cuda) {}
  Status create();

  model::ParamProvider& params() override { return *provider_; }
  int micro_batch() const override { return c_.batch; }
  int accumulation_steps() const override { return 1; }
  Status init_params(uint64_t seed) override;
  Status begin_micro_step() override;
  Status end_micro_step() override { return Status(); }
  Result<StepOutcome> step(double lr) override;
  Status save(const std::string& out_dir, int64_t step, const nlohmann::json& client) override;
  Result<std::optional<nlohmann::json>> load(const std::string& out_dir,
                                             const std::function<Status(const nlohmann::json&)>& check) override;
  std::string describe() const override;

 private:
  // Host f32 values into the master weights (and the compute copy).
  Status set_master(const std::vector<float>& values);
  Status refresh_compute_copy();
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  std::string ckpt_dir(const std::string& out_dir) const { return out_dir + "/ckpt"; }

  TrainConfig c_;
  const model::GptLayout& layout_;
  Placement place_;
  tensor::CudaContext* cuda_;
  int device_ = 0;
  OwnedTensor master_, compute_, grads_, sumsq_, factor_;
  tensor::FlatAdamW adam_;
  std::optional<zero::LossScaler> scaler_;
  std::unique_ptr<model::FlatParams> provider_;
  int64_t updates_ = 0;  // AdamW steps taken
  int micro_ = 0;        // micro steps since the last optimizer step
  bool fault_armed_ = false;
};

Status FlatStrategy::create() {
  const MemKind kind = place_.device;
  device_ = cuda_ != nullptr ? cuda_->device() : 0;
  const Shape flat{layout_.total_numel};
  ZW_ASSIGN_OR_RETURN(master_, OwnedTensor::zeros(DataType::kFloat32, flat, kind, device_));
  if (place_.dtype != DataType::kFloat32) {
    ZW_ASSIGN_OR_RETURN(compute_, OwnedTensor::zeros(place_.dtype, flat, kind, device_));
  }
  ZW_ASSIGN_OR_RETURN(grads_, OwnedTensor::zeros(DataType::kFloat32, flat, kind, device_));
  ZW_ASSIGN_OR_RETURN(sumsq_, OwnedTensor::zeros(DataType::kFloat32, Shape{1}, kind, device_));
  ZW_ASSIGN_OR_RETURN(factor_, OwnedTensor::zeros(DataType::kFloat32, Shape{1}, kind, device_));
  ZW_ASSIGN_OR_RETURN(adam_, tensor::FlatAdamW::create(tensor::decay_segments(layout_), layout_.total_numel, kind,
                                                       device_));
  if (place_.loss_scaling) {
    zero::Fp16Config fp16;  // DeepSpeed's defaults: 2^16 initial, window 1000, hysteresis 2, min 1
    fp16.enabled = true;
    ZW_ASSIGN_OR_RETURN(zero::LossScaler s, zero::LossScaler::create(fp16));
    scaler_.emplace(std::move(s));
  }
  const Tensor& values = compute_.tensor().defined() ? compute_.tensor() : master_.tensor();
  provider_ = std::make_unique<model::FlatParams>(layout_, values.mem, values.dtype, grads_.tensor().mem,
                                                  DataType::kFloat32, loss_scale());
  ZW_TRY(provider_->validate());
  fault_armed_ = c_.fault_ckpt_abort_bytes >= 0;
  return Status();
}

std::string FlatStrategy::describe() const {
  const double gib = double(1 << 30);
  const size_t n = size_t(layout_.total_numel);
  const size_t bytes = n * (4 * 4 + (compute_.tensor().defined() ? dtype_size(place_.dtype) : 0));
  char buf[256];
  std::snprintf(buf, sizeof buf, "one process on %s: f32 master weights, gradients and AdamW moments%s, %.2f GiB%s",
                place_.device == MemKind::kCudaDevice ? "the GPU" : "the CPU",
                compute_.tensor().defined() ? " + a 16-bit compute copy" : "", double(bytes) / gib,
                scaler_ ? "; fp16 dynamic loss scaling" : "");
  return buf;
}

Status FlatStrategy::refresh_compute_copy() {
  if (!compute_.tensor().defined()) return Status();
  return tensor::convert(master_, compute_);
}

Status FlatStrategy::set_master(const std::vector<float>& values) {
  ZW_TRY(tensor::copy(master_, Tensor::host(const_cast<float*>(values.data()), Shape{layout_.total_numel})));
  return refresh_compute_copy();
}

Status FlatStrategy::init_params(uint64_t seed) {
  std::vector<float> host(size_t(layout_.total_numel));
  ZW_TRY(model::init_gpt_params(layout_, seed, Tensor::host(host.data(), Shape{layout_.total_numel})));
  return set_master(host);
}

Status FlatStrategy::begin_micro_step() {
  if (micro_++ == 0) {
    const tensor::ProfileRange profile("zero gradients");
    ZW_TRY(grads_.zero());
    provider_->set_loss_scale(loss_scale());
  }
  return Status();
}

Result<StepOutcome> FlatStrategy::step(double lr) {
  StepOutcome out;
  out.loss_scale = loss_scale();
  const double inv = 1.0 / (out.loss_scale * std::max(micro_, 1));  // the mean over micro steps, unscaled
  micro_ = 0;
  {
    const tensor::ProfileRange profile("optimizer (norm, clip, adamw)");
    ZW_TRY(tensor::reduce_sum(sumsq_, grads_, true));
    ZW_TRY(tensor::grad_factor(factor_, sumsq_, c_.grad_clip, inv));
    tensor::AdamWConfig a;
    a.lr = float(lr);
    a.beta1 = 0.9f;
    a.beta2 = 0.95f;
    a.eps = 1e-8f;
    a.weight_decay = float(c_.weight_decay);
    ZW_TRY(adam_.step(a, updates_ + 1, master_, grads_, compute_, factor_));
  }
  float host[2] = {0, 0};
  ZW_TRY(tensor::copy(Tensor::host(&host[0], Shape{1}), sumsq_));
  ZW_TRY(tensor::copy(Tensor::host(&host[1], Shape{1}), factor_));
  if (cuda_ != nullptr) ZW_TRY(cuda_->synchronize());
  out.grad_norm = std::sqrt(double(host[0])) * inv;
  out.skipped = !std::isfinite(host[1]);
  if (scaler_) {
    const Result<bool> updated = scaler_->update(out.skipped);  // fails when a dynamic scale at its floor overflows
    ZW_TRY(updated);
  }
  if (!out.skipped) ++updates_;
  return out;
}

Status FlatStrategy::save(const std::string& out_dir, int64_t step, const nlohmann::json& client) {
  const size_t n = size_t(layout_.total_numel);
  std::vector<float> p(n), m(n), v(n);
  const Shape flat{layout_.total_numel};
  ZW_TRY(tensor::copy(Tensor::host(p.data(), flat), master_));
  ZW_TRY(tensor::copy(Tensor::host(m.data(), flat), adam_.m()));
  ZW_TRY(tensor::copy(Tensor::host(v.data(), flat), adam_.v()));
  CheckpointMeta meta;
  meta.model = client.at("model");
  meta.train = client.at("train");
  meta.step = step;
  meta.data_rng = client.at("data_rng").get<uint64_t>();
  meta.data_fingerprint = client.at("data_fingerprint").get<uint64_t>();
  meta.elapsed_s = client.at("elapsed_s").get<double>();
  meta.loss_scaler = scaler_ ? scaler_->to_json() : std::string();
  meta.optimizer_steps = updates_;
  CheckpointFault fault;
  if (fault_armed_) fault.abort_after_bytes = c_.fault_ckpt_abort_bytes;
  return save_checkpoint(ckpt_dir(out_dir), meta, p.data(), m.data(), v.data(), n, fault);
}

Result<std::optional<nlohmann::json>> FlatStrategy::load(const std::string& out_dir,
                                                         const std::function<Status(const nlohmann::json&)>& check) {
  if (!checkpoint_exists(ckpt_dir(out_dir))) return std::optional<nlohmann::json>();
  ZW_ASSIGN_OR_RETURN(LoadedCheckpoint ck, load_checkpoint(ckpt_dir(out_dir)));
  const nlohmann::json client = {{"train_step", ck.meta.step},
                                 {"data_rng", ck.meta.data_rng},
                                 {"data_fingerprint", ck.meta.data_fingerprint},
                                 {"elapsed_s", ck.meta.elapsed_s},
                                 {"model", ck.meta.model}};
  ZW_TRY(check(client));
  if (ck.params.size() != size_t(layout_.total_numel))
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + ckpt_dir(out_dir) + " holds " +
                                              std::to_string(ck.params.size()) + " values, the model " +
                                              std::to_string(layout_.total_numel));
  ZW_TRY(set_master(ck.params));
  const Shape flat{layout_.total_numel};
  ZW_TRY(tensor::copy(adam_.m(), Tensor::host(ck.opt.m.data(), flat)));
  ZW_TRY(tensor::copy(adam_.v(), Tensor::host(ck.opt.v.data(), flat)));
  if (scaler_ && !ck.meta.loss_scaler.empty()) ZW_TRY(scaler_->restore_json(ck.meta.loss_scaler));
  updates_ = ck.meta.optimizer_steps >= 0 ? ck.meta.optimizer_steps : ck.meta.step;
  if (cuda_ != nullptr) ZW_TRY(cuda_->synchronize());
  return std::optional<nlohmann::json>(client);
}

}  // namespace

Result<std::unique_ptr<Strategy>> make_flat_strategy(const TrainConfig& config, const model::GptLayout& layout,
                                                     const Placement& placement, tensor::CudaContext* cuda) {
  auto s = std::make_unique<FlatStrategy>(config, layout, placement, cuda);
  ZW_TRY(s->create());
  return std::unique_ptr<Strategy>(std::move(s));
}

}  // namespace zw::train
