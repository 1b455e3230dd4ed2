// zw_train/trainer.cc — the training loop: init/resume, steps, evaluation, checkpoints, metrics.
//
// Non-goals: see trainer.h.
#include "zw_train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "tensor/gpt.h"
#include "zw_train/checkpoint.h"
#include "zw_train/data.h"
#include "zw_train/metrics.h"
#include "zw_train/optim.h"

namespace zw::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Trainer {
 public:
  explicit Trainer(const TrainConfig& c) : c_(c) {}
  Status init();
  Result<TrainReport> run();

 private:
  Status resume_from_checkpoint();
  Result<StepRecord> train_step(int64_t step);
  Result<double> evaluate();
  Status checkpoint(int64_t steps_taken);
  float* params() const { return params_.data<float>(); }
  float* grads() const { return grads_.data<float>(); }
  std::string ckpt_dir() const { return c_.out_dir + "/ckpt"; }

  TrainConfig c_;
  tensor::GptLayout layout_;
  Dataset data_;
  std::unique_ptr<tensor::GptModel> model_;
  tensor::OwnedTensor params_, grads_;
  OptimizerState opt_;
  SplitMix rng_;
  LrSchedule schedule_;
  MetricsLog metrics_;
  std::vector<int32_t> inputs_, targets_;
  double elapsed_base_ = 0;  // training time of earlier runs (resume)
  Clock::time_point start_;
  bool fault_armed_ = false;
};

Status Trainer::init() {
  ZW_TRY(validate(c_));
  set_blas_threads(c_.threads);
  std::string what;
  ZW_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, load_tokens(c_, &what));
  ZW_ASSIGN_OR_RETURN(data_, Dataset::create(std::move(tokens), c_.model.max_seq_len, c_.model.vocab_size));
  ZW_ASSIGN_OR_RETURN(layout_, tensor::make_gpt_layout(c_.model));
  ZW_ASSIGN_OR_RETURN(model_, tensor::GptModel::create(layout_, c_.batch, c_.model.max_seq_len));
  const tensor::Shape flat{int64_t(layout_.total_numel)};
  ZW_ASSIGN_OR_RETURN(params_, tensor::OwnedTensor::zeros(DataType::kFloat32, flat));
  ZW_ASSIGN_OR_RETURN(grads_, tensor::OwnedTensor::zeros(DataType::kFloat32, flat));
  ZW_TRY(model_->bind_flat(params_.tensor().mem, grads_.tensor().mem));
  opt_.reset(layout_.total_numel);
  rng_ = SplitMix(c_.seed ^ 0xda7a5eedull);
  schedule_ = LrSchedule{c_.lr, c_.min_lr, c_.warmup_steps, c_.steps};
  inputs_.resize(size_t(c_.batch) * c_.model.max_seq_len);
  targets_.resize(inputs_.size());
  fault_armed_ = c_.fault_ckpt_abort_bytes >= 0;
  int64_t keep_metrics = -1;
  if (c_.resume && checkpoint_exists(ckpt_dir())) {
    ZW_TRY(resume_from_checkpoint());
    keep_metrics = opt_.step;
  } else {
    if (c_.resume)
      std::printf("zw_train: --resume: no checkpoint in %s yet, starting from step 0\n", ckpt_dir().c_str());
    ZW_TRY(tensor::init_gpt_params(layout_, c_.seed, params_));
  }
  std::error_code ec;
  std::filesystem::create_directories(c_.out_dir, ec);
  if (ec) return Status(Code::kSystem, "cannot create --out-dir " + c_.out_dir + ": " + ec.message());
  ZW_TRY(metrics_.open(c_.out_dir + "/metrics.jsonl", keep_metrics));
  if (!c_.quiet)
    std::printf(
        "zw_train: %zu parameters (%d layers, d_model %d, %d heads, T %d, V %d), batch %d; data: %s, "
        "%zu train / %zu val tokens; %d BLAS thread(s)\n",
        layout_.num_params, c_.model.num_layers, c_.model.d_model, c_.model.num_heads, c_.model.max_seq_len,
        c_.model.vocab_size, c_.batch, what.c_str(), data_.train_tokens(), data_.val_tokens(), c_.threads);
  return Status();
}

Status Trainer::resume_from_checkpoint() {
  ZW_ASSIGN_OR_RETURN(LoadedCheckpoint ck, load_checkpoint(ckpt_dir()));
  ZW_ASSIGN_OR_RETURN(tensor::GptConfig model, model_from_json(ck.meta.model));
  if (model_to_json(model) != model_to_json(c_.model))
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + ckpt_dir() + " has model " +
                                              ck.meta.model.dump() + " but the flags give " +
                                              model_to_json(c_.model).dump() + "; pass the same model flags");
  if (ck.meta.data_fingerprint != data_.fingerprint())
    return Status(Code::kInvalidArgument, "resume: the checkpoint in " + ckpt_dir() +
                                              " was trained on different data; pass the same --data/--data-bin");
  if (ck.params.size() != layout_.total_numel)
    return Status(Code::kInvalidArgument, "resume: checkpoint parameter count does not match the layout");
  std::copy(ck.params.begin(), ck.params.end(), params());
  opt_ = std::move(ck.opt);
  rng_.set_state(ck.meta.data_rng);
  elapsed_base_ = ck.meta.elapsed_s;
  if (!c_.quiet) std::printf("zw_train: resumed from %s at step %lld\n", ckpt_dir().c_str(), (long long)opt_.step);
  return Status();
}

Result<StepRecord> Trainer::train_step(int64_t step) {
  const Clock::time_point t0 = Clock::now();
  data_.train_batch(rng_, c_.batch, inputs_.data(), targets_.data());
  std::memset(grads(), 0, layout_.total_numel * sizeof(float));
  ZW_ASSIGN_OR_RETURN(const float loss, model_->forward(inputs_.data(), targets_.data()));
  ZW_TRY(model_->backward());
  StepRecord r;
  r.grad_norm = global_norm(grads(), layout_.total_numel);
  clip_by_global_norm(grads(), layout_.total_numel, r.grad_norm, c_.grad_clip);
  r.lr = schedule_.at(step);
  tensor::AdamWConfig adam;
  adam.beta1 = 0.9f;
  adam.beta2 = 0.95f;
  adam.eps = 1e-8f;
  adam.weight_decay = static_cast<float>(c_.weight_decay);
  opt_.update(adam, r.lr, layout_, params(), grads());
  r.step = step + 1;
  r.loss = loss;
  r.tokens_per_s = double(inputs_.size()) / seconds_since(t0);
  r.elapsed_s = elapsed_base_ + seconds_since(start_);
  return r;
}

Result<double> Trainer::evaluate() {
  double sum = 0;
  for (int i = 0; i < c_.eval_batches; ++i) {
    data_.val_batch(i, c_.batch, inputs_.data(), targets_.data());
    ZW_ASSIGN_OR_RETURN(const float loss, model_->forward(inputs_.data(), targets_.data()));
    sum += loss;
  }
  return sum / c_.eval_batches;
}

Status Trainer::checkpoint(int64_t steps_taken) {
  CheckpointMeta meta;
  meta.model = model_to_json(c_.model);
  meta.train = train_to_json(c_);
  meta.step = steps_taken;
  meta.data_rng = rng_.state();
  meta.data_fingerprint = data_.fingerprint();
  meta.elapsed_s = elapsed_base_ + seconds_since(start_);
  CheckpointFault fault;
  if (fault_armed_) fault.abort_after_bytes = c_.fault_ckpt_abort_bytes;
  ZW_TRY(save_checkpoint(ckpt_dir(), meta, params(), opt_, layout_.total_numel, fault));
  if (!c_.quiet) std::printf("zw_train: checkpoint at step %lld -> %s\n", (long long)steps_taken, ckpt_dir().c_str());
  return Status();
}

Result<TrainReport> Trainer::run() {
  TrainReport report;
  report.first_step = opt_.step;
  start_ = Clock::now();
  int64_t end = c_.steps;
  if (c_.stop_after > 0) end = std::min<int64_t>(end, opt_.step + c_.stop_after);
  std::vector<double> rates;
  for (int64_t step = opt_.step; step < end; ++step) {
    ZW_ASSIGN_OR_RETURN(const StepRecord r, train_step(step));
    report.losses.push_back(float(r.loss));
    rates.push_back(r.tokens_per_s);
    metrics_.step(r);
    const double per_step = seconds_since(start_) / double(step + 1 - report.first_step);
    if (!c_.quiet && (r.step % c_.log_every == 0 || r.step == end))
      std::printf("%s\n", progress_line(r, c_.steps, per_step * double(c_.steps - r.step)).c_str());
    if ((c_.eval_every > 0 && r.step % c_.eval_every == 0) || r.step == c_.steps) {
      ZW_ASSIGN_OR_RETURN(const double val, evaluate());
      report.val_losses.emplace_back(r.step, val);
      metrics_.val(r.step, val, r.elapsed_s);
      if (!c_.quiet) std::printf("step %lld | val_loss %.4f\n", (long long)r.step, val);
    }
    if ((c_.ckpt_every > 0 && r.step % c_.ckpt_every == 0) || r.step == end) ZW_TRY(checkpoint(r.step));
    std::fflush(stdout);
  }
  if (!rates.empty()) {
    std::sort(rates.begin(), rates.end());
    report.tokens_per_s = rates[rates.size() / 2];
  }
  return report;
}

}  // namespace

Result<TrainReport> run_training(const TrainConfig& config) {
  Trainer trainer(config);
  ZW_TRY(trainer.init());
  return trainer.run();
}

}  // namespace zw::train
